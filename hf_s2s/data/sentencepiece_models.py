"""SentencePiece models (``.model`` files) as fast tokenizers: read a model the user brings, or train one with the
``sentencepiece`` library, and build the ``PreTrainedTokenizerFast`` that encodes text to the same ids as
``SentencePieceProcessor.encode`` and decodes them to the same text.

The saved tokenizer is a plain ``tokenizer.json``: it loads with ``AutoTokenizer`` where only transformers and
tokenizers are installed. Reading a ``.model`` needs nothing more either: the file is a protocol buffer whose few
fields used here are read by :func:`read_model` (the ``protobuf`` package and ``sentencepiece_model_pb2`` are not
needed, and their versions must match each other, which a user's environment often breaks). Training a model needs
the ``sentencepiece`` package (``pip install hf_s2s[sentencepiece]``).

Ids: the tokenizer keeps the model's own ids, so that ids match ``sentencepiece`` (and every toolkit that used the
model: OpenNMT-py, fairseq, Marian, Joey NMT). A model without a padding piece (SentencePiece's default,
``pad_id=-1``) gets ``<pad>`` appended after its last piece, as transformers' Marian tokenizers do. Models trained
here follow hf_s2s's own ids: ``<pad>``, ``<s>``, ``</s>``, ``<unk>`` at 0..3, byte fallback on. Every sentence
ends with ``</s>`` (post-processor ``$A </s>``), as the models expect.

Where the fast tokenizer and ``sentencepiece`` differ (measured by :func:`sentencepiece_differences`):
``decode(..., skip_special_tokens=True)`` drops ``<unk>`` where sentencepiece writes its ``unk_surface`` (" ⁇ "), and
text that spells a special token (``</s>``) is that token here, characters there.
"""

from __future__ import annotations

import io
import logging
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, processors
from transformers import PreTrainedTokenizerFast

from .synthetic import BOS_ID, EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'hf_s2s[sentencepiece]' (or pip install sentencepiece)"
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}  # TrainerSpec.ModelType
# ModelProto.SentencePiece.Type
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
METASPACE = "▁"
# sentencepiece's refusal of a vocabulary without a piece for every character of the corpus (trainer_interface.cc):
# "Vocabulary size is smaller than required_chars. 300 vs 331." (331: the characters, the special and byte pieces)
_TOO_FEW_PIECES = re.compile(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)")


# --------------------------------------------------------------------------------------------- reading a .model


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, Any]]:
    """``(field number, value)`` of each field of a protocol buffer message: varints as int, 32-bit values as the
    float they are here, length-delimited ones as bytes (strings, sub-messages)."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _varint(data, pos)
        elif wire_type == 1:
            value, pos = data[pos: pos + 8], pos + 8
        elif wire_type == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos: pos + size], pos + size
        elif wire_type == 5:
            value, pos = struct.unpack("<f", data[pos: pos + 4])[0], pos + 4
        else:
            raise ValueError(f"unsupported protocol buffer wire type {wire_type}")
        if pos > len(data):
            raise ValueError("truncated protocol buffer")
        yield number, value


def _int32(value: int) -> int:
    """A protocol buffer int32 read as a varint: negative values are 64-bit two's complement."""
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass
class SentencePieceModel:
    """The fields of a SentencePiece ``ModelProto`` that decide how it encodes and decodes (defaults: the proto's)."""

    pieces: list[tuple[str, float, int]]  # (piece, score, type) in id order
    model_type: int = 1  # 1 unigram, 2 bpe, 3 word, 4 char
    byte_fallback: bool = False
    treat_whitespace_as_suffix: bool = False
    unk_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = -1
    unk_piece: str = "<unk>"
    bos_piece: str = "<s>"
    eos_piece: str = "</s>"
    pad_piece: str = "<pad>"
    unk_surface: str = " \u2047 "  # how sentencepiece writes <unk> when decoding
    normalizer_name: str = ""
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True
    denormalizer_charsmap: bytes = b""
    serialized: bytes = field(default=b"", repr=False)  # the file itself

    @property
    def type_name(self) -> str:
        return MODEL_TYPES.get(self.model_type, str(self.model_type))


_TRAINER_FIELDS = {3: "model_type", 24: "treat_whitespace_as_suffix", 35: "byte_fallback", 40: "unk_id",
                   41: "bos_id", 42: "eos_id", 43: "pad_id", 44: "unk_surface", 45: "unk_piece", 46: "bos_piece",
                   47: "eos_piece", 48: "pad_piece"}
_NORMALIZER_FIELDS = {1: "normalizer_name", 2: "precompiled_charsmap", 3: "add_dummy_prefix",
                      4: "remove_extra_whitespaces", 5: "escape_whitespaces"}


def parse_model(data: bytes) -> SentencePieceModel:
    """The :class:`SentencePieceModel` of a serialized ``ModelProto`` (the bytes of a ``.model`` file)."""
    model = SentencePieceModel(pieces=[], serialized=data)
    for number, value in _fields(data):
        if number == 1:  # repeated SentencePiece {1: piece, 2: score, 3: type}
            piece = dict(_fields(value))
            model.pieces.append((piece.get(1, b"").decode("utf-8"), float(piece.get(2, 0.0)), piece.get(3, NORMAL)))
        elif number in (2, 3):  # TrainerSpec, NormalizerSpec
            names = _TRAINER_FIELDS if number == 2 else _NORMALIZER_FIELDS
            for sub, sub_value in _fields(value):
                if sub in names:
                    default = getattr(model, names[sub])
                    if isinstance(default, bool):
                        sub_value = bool(sub_value)
                    elif isinstance(default, int):
                        sub_value = _int32(sub_value)
                    elif isinstance(default, str):
                        sub_value = sub_value.decode("utf-8")
                    setattr(model, names[sub], sub_value)
        elif number == 5:  # denormalizer NormalizerSpec
            model.denormalizer_charsmap = dict(_fields(value)).get(2, b"")
    return model


def read_model(path: str | Path, flag: str = "the SentencePiece model") -> SentencePieceModel:
    """Read a ``.model`` file; a missing file or one that is not a SentencePiece model is a ValueError naming ``flag``
    and the path."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{flag} {path} does not exist (expected a SentencePiece .model file)")
    try:
        model = parse_model(path.read_bytes())
    except (ValueError, IndexError, UnicodeDecodeError, struct.error) as error:
        raise ValueError(f"{flag} {path} is not a SentencePiece model ({error})") from None
    if not model.pieces:
        raise ValueError(f"{flag} {path} is not a SentencePiece model (it holds no pieces)")
    return model


# --------------------------------------------------------------------------------------------- the fast tokenizer


def segmentation_problems(model: SentencePieceModel) -> list[str]:
    """What keeps the fast tokenizer from segmenting and joining text exactly as ``model`` does, each naming the
    setting."""
    problems = []
    if model.model_type not in (1, 2):
        problems.append(f"it is a {model.type_name} model; unigram and bpe models are supported")
    if model.treat_whitespace_as_suffix:
        problems.append("it marks word ends (treat_whitespace_as_suffix=true); word starts are supported")
    if not model.escape_whitespaces:
        problems.append("it keeps spaces unescaped (escape_whitespaces=false)")
    if model.denormalizer_charsmap:
        problems.append("it has denormalization rules (denormalizer_spec), which decoding here does not apply")
    user_defined = [piece for piece, _, kind in model.pieces if kind == USER_DEFINED]
    if user_defined:
        problems.append(f"it has {len(user_defined)} user-defined symbol(s) ({', '.join(user_defined[:3])}), which "
                        "sentencepiece matches before segmenting; retrain without --user_defined_symbols")
    return problems


def model_problems(model: SentencePieceModel) -> list[str]:
    """What keeps ``model`` from becoming a tokenizer of a translation model here, each naming the setting."""
    problems = segmentation_problems(model)
    if not 0 <= model.eos_id < len(model.pieces):
        problems.append(f"it has no end-of-sentence piece (eos_id={model.eos_id}); the models learn to stop from the "
                        "</s> that ends every sentence: train it with --eos_id (sentencepiece's default is 2)")
    if not 0 <= model.unk_id < len(model.pieces):
        problems.append(f"its unk_id {model.unk_id} is not a piece")
    if model.pad_id < 0 and any(piece == model.pad_piece for piece, _, _ in model.pieces):
        problems.append(f"it has no padding id (pad_id=-1) but a piece named {model.pad_piece}")
    return problems


def sentencepiece_normalizer(model: SentencePieceModel) -> normalizers.Normalizer:
    """SentencePiece's normalization, in its order: the precompiled character map (nmt_nfkc, ...), spaces stripped
    at both ends and runs of spaces made one, the dummy prefix space, spaces to ``▁``."""
    steps = [normalizers.Precompiled(model.precompiled_charsmap)] if model.precompiled_charsmap else []
    if model.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(r"^ +| +$"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    if model.add_dummy_prefix:
        steps.append(normalizers.Prepend(" "))  # nothing is prepended to an empty text, as in sentencepiece
    steps.append(normalizers.Replace(" ", METASPACE))
    return normalizers.Sequence(steps)


def sentencepiece_decoder(model: SentencePieceModel) -> decoders.Decoder:
    """``▁`` back to spaces, byte pieces back to characters, the dummy prefix space dropped."""
    steps = [decoders.Replace(METASPACE, " ")]
    if model.byte_fallback:
        steps.append(decoders.ByteFallback())
    steps.append(decoders.Fuse())
    if model.add_dummy_prefix:
        steps.append(decoders.Strip(content=" ", left=1))
    return decoders.Sequence(steps)


def bpe_merges(pieces: list[tuple[str, float, int]]) -> list[tuple[str, str]]:
    """Merge rules that reproduce sentencepiece's BPE encoding: it merges, again and again, the adjacent pair whose
    concatenation is the normal piece of highest score (ties: the leftmost pair). Each way of cutting a normal piece
    into two normal pieces is a rule, ranked by the whole piece's score, then its id."""
    normal = {piece: (score, index) for index, (piece, score, kind) in enumerate(pieces) if kind == NORMAL}
    ranked = []
    for piece, (score, index) in normal.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in normal and right in normal:
                ranked.append((-score, index, left, right))
    return [(left, right) for _, _, left, right in sorted(ranked)]


def sentencepiece_tokenizer(model: SentencePieceModel | str | Path, flag: str = "the SentencePiece model"
                            ) -> PreTrainedTokenizerFast:
    """The fast tokenizer of a SentencePiece model (a :class:`SentencePieceModel` or the path of a ``.model``): the
    model's ids, ``<pad>`` appended when it has none, ``</s>`` ending every sentence. A model that cannot serve
    (:func:`model_problems`) is a ValueError naming ``flag`` and each problem."""
    where = f"{flag} {model}" if not isinstance(model, SentencePieceModel) else flag
    if not isinstance(model, SentencePieceModel):
        model = read_model(model, flag)
    problems = model_problems(model)
    if problems:
        raise ValueError(f"{where} cannot be used: {'; '.join(problems)}")
    pieces = list(model.pieces)
    pad_id = model.pad_id
    if pad_id < 0:  # appended after the last piece; never produced by encoding
        pad_id = len(pieces)
        pieces.append((model.pad_piece, 0.0, CONTROL))
    if model.model_type == 1:
        backend = Tokenizer(models.Unigram([(piece, score) for piece, score, _ in pieces], unk_id=model.unk_id,
                                           byte_fallback=model.byte_fallback))
    else:
        vocab = {piece: index for index, (piece, _, _) in enumerate(pieces)}
        backend = Tokenizer(models.BPE(vocab=vocab, merges=bpe_merges(pieces), unk_token=model.unk_piece,
                                       fuse_unk=True, byte_fallback=model.byte_fallback))
    backend.normalizer = sentencepiece_normalizer(model)
    backend.decoder = sentencepiece_decoder(model)
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {model.eos_piece}", pair=f"$A {model.eos_piece} $B {model.eos_piece}",
        special_tokens=[(model.eos_piece, model.eos_id)])
    has_bos = 0 <= model.bos_id < len(model.pieces)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token=model.unk_piece, eos_token=model.eos_piece,
        pad_token=pieces[pad_id][0], bos_token=model.bos_piece if has_bos else None,
        # spaces are exactly what the decoder gives back, as sentencepiece's decode
        clean_up_tokenization_spaces=False,
    )
    for name, expected in (("unk", model.unk_id), ("eos", model.eos_id), ("pad", pad_id),
                           ("bos", model.bos_id if has_bos else None)):
        if getattr(tokenizer, f"{name}_token_id") != expected:
            raise RuntimeError(f"the {name} token got id {getattr(tokenizer, f'{name}_token_id')}, not {expected}")
    return tokenizer


# --------------------------------------------------------------------------------------------- training


def import_sentencepiece(purpose: str):
    """The ``sentencepiece`` module; an ImportError saying what needs it and how to install it when missing."""
    try:
        import sentencepiece
    except ImportError:
        raise ImportError(f"{purpose} needs the sentencepiece package: {INSTALL_HINT}") from None
    return sentencepiece


def train_sentencepiece_model(texts: Iterable[str], vocab_size: int, model_type: str = "unigram",
                              byte_fallback: bool = True, seed_sentences: int | None = None,
                              name: str = "`vocab_size`") -> SentencePieceModel:
    """Train a SentencePiece model on ``texts`` with the sentencepiece library, with hf_s2s's special ids (``<pad>``,
    ``<s>``, ``</s>``, ``<unk>`` at 0..3) and byte fallback; ``vocab_size`` counts them and the 256 byte pieces, as
    :func:`hf_s2s.data.tokenization.train_tokenizer_from_texts` does. ``character_coverage`` is 1.0: every character
    of the corpus gets a piece (the byte pieces cover the rest), so a ``vocab_size`` without room for them is a
    ValueError naming it as ``name`` (a command-line flag) with the size that has room."""
    spm = import_sentencepiece("training a SentencePiece model (--tokenizer_library sentencepiece)")
    writer = io.BytesIO()
    options = dict(
        model_type=model_type, vocab_size=vocab_size, character_coverage=1.0, byte_fallback=byte_fallback,
        pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID, pad_piece="<pad>", bos_piece="<s>",
        eos_piece="</s>", unk_piece="<unk>", hard_vocab_limit=False, minloglevel=2, num_threads=1,
    )
    if seed_sentences is not None:
        options["input_sentence_size"] = seed_sentences
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=writer, **options)
    except RuntimeError as error:
        too_small = _TOO_FEW_PIECES.search(str(error))
        if too_small is None:
            raise
        needed = int(too_small.group(1))
        reserved = 4 + (256 if byte_fallback else 0)  # <pad>, <s>, </s>, <unk> and the byte pieces
        raise ValueError(
            f"{name} {vocab_size} is too small for a SentencePiece model of this corpus: each of its "
            f"{needed - reserved} characters needs a piece of its own (character_coverage 1.0) besides the 4 special"
            f"{' and 256 byte' if byte_fallback else ''} pieces, {needed} in all; raise {name} to {needed} or more"
        ) from None
    return parse_model(writer.getvalue())


# --------------------------------------------------------------------------------------------- the check


def sentencepiece_differences(tokenizer: PreTrainedTokenizerFast, model: SentencePieceModel,
                              texts: list[str]) -> dict[str, list[int]]:
    """Lines of ``texts`` where ``tokenizer`` and ``sentencepiece`` itself differ: ``"ids"`` (encoding, without the
    final ``</s>``) and ``"decode"`` (decoding sentencepiece's ids with ``skip_special_tokens=True``); ``"unk"`` lists
    the lines whose ids hold ``<unk>``, which that decoding drops where sentencepiece writes its ``unk_surface``
    (" ⁇ "): there the decoding counts as equal when writing ``<unk>`` as sentencepiece does gives its text."""
    spm = import_sentencepiece("checking a tokenizer against sentencepiece")
    processor = spm.SentencePieceProcessor(model_proto=model.serialized)
    expected = processor.encode(texts)
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    differences: dict[str, list[int]] = {"ids": [], "decode": [], "unk": []}
    for line, (mine, theirs) in enumerate(zip(ids, expected, strict=True)):
        if mine != theirs:
            differences["ids"].append(line)
        decoded = tokenizer.decode(theirs, skip_special_tokens=True)
        if model.unk_id in theirs:
            differences["unk"].append(line)
            decoded = tokenizer.decode(theirs).replace(model.unk_piece, model.unk_surface)
        if decoded != processor.decode(theirs):
            differences["decode"].append(line)
    return differences


__all__ = ["SentencePieceModel", "bpe_merges", "import_sentencepiece", "model_problems", "parse_model", "read_model",
           "segmentation_problems", "sentencepiece_decoder", "sentencepiece_differences", "sentencepiece_normalizer",
           "sentencepiece_tokenizer", "train_sentencepiece_model"]
