"""Subword tokenizers for translation: train BPE or Unigram on a corpus with 🤗 tokenizers, wrap them as
``PreTrainedTokenizerFast`` (so ``save_pretrained`` / ``AutoTokenizer.from_pretrained`` and
``tokenizer(text, text_target=...)`` work), and check a tokenizer against a model config before training.

Conventions every tokenizer trained here follows:
- special tokens ``<pad>``, ``<s>``, ``</s>``, ``<unk>`` at ids 0, 1, 2, 3 (as in :mod:`hf_s2s.data.synthetic`);
- every encoded sequence ends with ``</s>`` (post-processor ``$A </s>``); no ``<s>`` is prepended, the
  decoder start token is the model config's business;
- text is normalized by the tokenizer itself (:func:`normalize_text`: NFKC, every run of whitespace to one
  space, no leading/trailing space), so ``decode(encode(s), skip_special_tokens=True) == normalize_text(s)``;
- spaces survive through a Metaspace pre-tokenizer and its matching decoder, and characters never seen in
  training survive through byte fallback (``<0x00>`` ... ``<0xFF>`` tokens, as in SentencePiece/Llama)
  instead of turning into ``<unk>``.

``library="sentencepiece"`` trains the BPE or Unigram model with the sentencepiece library instead, with the same
special ids and byte fallback (:mod:`hf_s2s.data.sentencepiece_models`; its normalization is sentencepiece's
nmt_nfkc), and a SentencePiece ``.model`` the user brings becomes a fast tokenizer with its own ids
(:func:`load_given_tokenizer`).

Joint or separate vocabularies: :func:`train_translation_tokenizers` returns a :class:`TranslationTokenizers`
pair. With a joint vocabulary both members are the same object and the pair saves as one ordinary tokenizer
folder; with separate vocabularies it saves one :class:`SeparateVocabTokenizer` folder (source and target
vocabularies, MarianMT-style ``text_target=``), the encoder's vocabulary is ``len(pair.source)`` and the
decoder's ``len(pair.target)``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..models.loading import load_tokenizer, refusing_folder_code
from ..models.tokenization_separate_vocab import SeparateVocabTokenizer
from .sentencepiece_models import import_sentencepiece, sentencepiece_tokenizer, train_sentencepiece_model
from .synthetic import BOS_ID, EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<s>", "</s>", "<unk>"
# Order = ids: the trainers give special tokens the first ids in the order listed.
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
BYTE_TOKENS = tuple(f"<0x{byte:02X}>" for byte in range(256))
MODEL_TYPES = ("bpe", "unigram")
LIBRARIES = ("tokenizers", "sentencepiece")  # what trains the subword model
SENTENCEPIECE_SUFFIX = ".model"
METASPACE = "▁"  # U+2581, the SentencePiece word-boundary marker


def build_normalizer() -> normalizers.Normalizer:
    """NFKC, then every run of whitespace (tabs, newlines, non-breaking spaces...) to one space, then strip."""
    return normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()])


_NORMALIZER = build_normalizer()


def normalize_text(text: str) -> str:
    """The normalization every tokenizer trained here applies; decoding gives back exactly this text."""
    return _NORMALIZER.normalize_str(text)


def _empty_tokenizer(model_type: str, byte_fallback: bool) -> Tokenizer:
    if model_type == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=UNK_TOKEN, byte_fallback=byte_fallback))
    else:
        tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = build_normalizer()
    # Punctuation is split off words ("▁dog." -> "▁dog", ".") so that BPE does not spend its vocabulary on
    # every word-plus-punctuation pair; splitting never changes characters, so decoding stays exact.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always"), pre_tokenizers.Punctuation()]
    )
    # ByteFallback first turns runs of <0x..> tokens back into characters; no Fuse step, because the Metaspace
    # decoder only drops the leading space of the *first* token and Fuse would glue all tokens into one.
    tokenizer.decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")]
    )
    return tokenizer


def _add_byte_fallback(tokenizer: Tokenizer, model_type: str) -> None:
    """Rebuild the trained model with the 256 byte tokens appended to its vocabulary and byte fallback on.

    The trainers cannot add them as ordinary (non-special) tokens themselves; as special tokens they would be
    dropped by ``decode(skip_special_tokens=True)``.
    """
    state = json.loads(tokenizer.to_str())["model"]
    if model_type == "bpe":
        vocab: dict[str, int] = state["vocab"]
        for token in BYTE_TOKENS:
            vocab.setdefault(token, len(vocab))
        merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
        tokenizer.model = models.BPE(vocab=vocab, merges=merges, unk_token=UNK_TOKEN, byte_fallback=True)
    else:
        pieces: list[tuple[str, float]] = [tuple(p) for p in state["vocab"]]
        known = {piece for piece, _ in pieces}
        # Lowest score: a byte token is only used where no trained piece covers the character.
        floor = min(score for _, score in pieces) - 10.0
        pieces += [(token, floor) for token in BYTE_TOKENS if token not in known]
        tokenizer.model = models.Unigram(pieces, unk_id=UNK_ID, byte_fallback=True)


def check_vocab_size(vocab_size: Any, byte_fallback: bool = True, name: str = "`vocab_size`") -> None:
    """Refuse a vocabulary size that leaves no room for a trained token: the final size counts the special tokens
    and, with byte fallback, the 256 byte tokens. ``name`` is how the error names it (a command-line flag)."""
    reserved = len(SPECIAL_TOKENS) + (len(BYTE_TOKENS) if byte_fallback else 0)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= reserved:
        raise ValueError(
            f"{name} must be an integer > {reserved} (the special tokens"
            f"{' and the 256 byte-fallback tokens' if byte_fallback else ''}), got {vocab_size!r}"
        )


def check_training_arguments(vocab_size: Any, model_type: str = "bpe", joint: bool = True,
                             target_vocab_size: Any = None, byte_fallback: bool = True,
                             flags: tuple[str, ...] = ("`vocab_size`", "`target_vocab_size`", "`model_type`",
                                                       "`library`"),
                             library: str = "tokenizers") -> None:
    """Everything :func:`train_translation_tokenizers` refuses about its arguments, checked before any text is read:
    ``flags`` name the vocabulary sizes, the model type and the library in the errors (a command line passes its
    flags). A ``target_vocab_size`` goes with separate vocabularies only, and is checked like ``vocab_size``. The
    sentencepiece library must be installed to train with it."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{flags[2]} must be one of {list(MODEL_TYPES)}, got {model_type!r}")
    if library not in LIBRARIES:
        raise ValueError(f"{flags[3]} must be one of {list(LIBRARIES)}, got {library!r}")
    if library == "sentencepiece":
        import_sentencepiece(f"{flags[3]} sentencepiece")
    check_vocab_size(vocab_size, byte_fallback, flags[0])
    if target_vocab_size is not None:
        if joint:
            raise ValueError(f"{flags[1]} is only for joint=False (separate vocabularies)")
        check_vocab_size(target_vocab_size, byte_fallback, flags[1])


def train_tokenizer_from_texts(
    texts: Iterable[str],
    vocab_size: int,
    model_type: str = "bpe",
    byte_fallback: bool = True,
    min_frequency: int = 2,
    library: str = "tokenizers",
    name: str = "`vocab_size`",
) -> PreTrainedTokenizerFast:
    """Train one subword tokenizer on ``texts`` and wrap it as a ``PreTrainedTokenizerFast``.

    ``vocab_size`` is the final size, special and byte tokens included (``len(tokenizer) <= vocab_size``; a
    small corpus may give fewer); errors name it ``name``. ``model_type`` is "bpe" or "unigram"; ``library`` trains
    it with 🤗 tokenizers or with sentencepiece (whose ``min_frequency`` is its own: pieces of any count may be kept,
    and every character of the corpus needs one).
    """
    check_training_arguments(vocab_size, model_type, byte_fallback=byte_fallback, library=library,
                             flags=(name, "`target_vocab_size`", "`model_type`", "`library`"))
    if library == "sentencepiece":
        return sentencepiece_tokenizer(train_sentencepiece_model(texts, vocab_size, model_type, byte_fallback,
                                                                 name=name))
    tokenizer = _empty_tokenizer(model_type, byte_fallback)
    trained_size = vocab_size - (len(BYTE_TOKENS) if byte_fallback else 0)
    if model_type == "bpe":
        trainer = trainers.BpeTrainer(
            vocab_size=trained_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
            show_progress=False,
        )
    else:
        trainer = trainers.UnigramTrainer(
            vocab_size=trained_size, special_tokens=list(SPECIAL_TOKENS), unk_token=UNK_TOKEN, show_progress=False
        )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    if byte_fallback:
        _add_byte_fallback(tokenizer, model_type)
    for token_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != token_id:
            raise RuntimeError(f"trained tokenizer put {token} at id {tokenizer.token_to_id(token)}, not {token_id}")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A {EOS_TOKEN} $B {EOS_TOKEN}", special_tokens=[(EOS_TOKEN, EOS_ID)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        # Spaces are exactly what the Metaspace decoder gives back; "a ." must not become "a.".
        clean_up_tokenization_spaces=False,
    )


@dataclass
class TranslationTokenizers:
    """The tokenizer(s) of a translation model: ``source`` encodes the encoder input, ``target`` the labels
    and decodes generated ids. With a joint vocabulary they are the same object."""

    source: PreTrainedTokenizerBase
    target: PreTrainedTokenizerBase

    @property
    def is_joint(self) -> bool:
        return self.source is self.target

    def as_tokenizer(self) -> PreTrainedTokenizerBase:
        """One tokenizer for the model folder: the joint one, or a :class:`SeparateVocabTokenizer` encoding
        sources with ``source`` and ``text_target=`` with ``target`` (loads with ``AutoTokenizer``)."""
        if self.is_joint:
            return self.source
        return SeparateVocabTokenizer(
            tokenizer_object=self.source.backend_tokenizer, target_tokenizer_object=self.target.backend_tokenizer,
            clean_up_tokenization_spaces=False, **self.source.special_tokens_map,
        )

    def save_pretrained(self, save_directory: str | Path) -> None:
        """One tokenizer folder that loads with ``AutoTokenizer.from_pretrained(save_directory)`` (and so with
        the main job's ``--tokenizer_name_or_path``): the joint tokenizer, or :meth:`as_tokenizer`'s
        :class:`SeparateVocabTokenizer`."""
        self.as_tokenizer().save_pretrained(save_directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path, **kwargs: Any) -> TranslationTokenizers:
        """Load what :meth:`save_pretrained` wrote, or the older layout of separate vocabularies in ``source/``
        and ``target/`` subfolders (``kwargs`` go to ``AutoTokenizer.from_pretrained``)."""
        directory = Path(directory)
        if (directory / "tokenizer.json").is_file() or (directory / "tokenizer_config.json").is_file():
            with refusing_folder_code(directory):
                tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=False, **kwargs)
            return cls(tokenizer, target_side(tokenizer))
        if (directory / "source").is_dir() and (directory / "target").is_dir():
            with refusing_folder_code(directory):
                return cls(
                    AutoTokenizer.from_pretrained(directory / "source", trust_remote_code=False, **kwargs),
                    AutoTokenizer.from_pretrained(directory / "target", trust_remote_code=False, **kwargs),
                )
        raise FileNotFoundError(
            f"no tokenizer in {directory}: expected tokenizer.json (joint vocabulary) or the subfolders "
            f"source/ and target/ (separate vocabularies)"
        )


def _translations(split: Iterable[dict]) -> Iterator[dict]:
    """The ``translation`` dict of each example of a split; a datasets split is read a batch at a time (row by
    row it costs ~10 µs an example: 30 s of the tokenizer's training on 2.9 million pairs)."""
    if hasattr(split, "iter"):  # Dataset and IterableDataset
        for batch in split.iter(batch_size=1000):
            yield from batch["translation"]
    else:
        for example in split:
            yield example["translation"]


def _split_texts(split: Iterable[dict], lang: str) -> Iterator[str]:
    for translation in _translations(split):
        yield translation[lang]


def train_translation_tokenizers(
    dataset: Any,
    source_lang: str,
    target_lang: str,
    vocab_size: int,
    model_type: str = "bpe",
    joint: bool = True,
    target_vocab_size: int | None = None,
    byte_fallback: bool = True,
    min_frequency: int = 2,
    library: str = "tokenizers",
    flags: tuple[str, str] = ("`vocab_size`", "`target_vocab_size`"),
) -> TranslationTokenizers:
    """Train on the ``train`` split of a translation (Iterable)DatasetDict, or on a single split.

    ``joint=True``: one vocabulary of ``vocab_size`` over source and target text. ``joint=False``: a source
    tokenizer of ``vocab_size`` and a target tokenizer of ``target_vocab_size`` (default ``vocab_size``).
    ``library``: "tokenizers" or "sentencepiece" (:func:`train_tokenizer_from_texts`). ``flags`` name the two
    sizes in errors (a command line passes its flags).
    """
    check_training_arguments(vocab_size, model_type, joint, target_vocab_size, byte_fallback,
                             flags=(*flags, "`model_type`", "`library`"), library=library)
    if hasattr(dataset, "keys"):
        if "train" not in dataset:
            raise ValueError(f"the dataset has no 'train' split to train a tokenizer on; splits: {list(dataset)}")
        dataset = dataset["train"]
    kwargs = dict(model_type=model_type, byte_fallback=byte_fallback, min_frequency=min_frequency, library=library)
    if joint:

        def both_sides() -> Iterator[str]:
            for translation in _translations(dataset):
                yield translation[source_lang]
                yield translation[target_lang]

        shared = train_tokenizer_from_texts(both_sides(), vocab_size, name=flags[0], **kwargs)
        return TranslationTokenizers(shared, shared)
    source = train_tokenizer_from_texts(_split_texts(dataset, source_lang), vocab_size, name=flags[0], **kwargs)
    target_size, target_name = (vocab_size, flags[0]) if target_vocab_size is None else (target_vocab_size, flags[1])
    target = train_tokenizer_from_texts(_split_texts(dataset, target_lang), target_size, name=target_name, **kwargs)
    return TranslationTokenizers(source, target)


def train_tokenizer(
    dataset: Any,
    source_lang: str,
    target_lang: str,
    vocab_size: int,
    model_type: str = "bpe",
    byte_fallback: bool = True,
    min_frequency: int = 2,
    library: str = "tokenizers",
) -> PreTrainedTokenizerFast:
    """One tokenizer with a joint source + target vocabulary, trained on a translation split (or the
    ``train`` split of a DatasetDict). For separate vocabularies use :func:`train_translation_tokenizers`."""
    return train_translation_tokenizers(
        dataset, source_lang, target_lang, vocab_size, model_type=model_type, joint=True,
        byte_fallback=byte_fallback, min_frequency=min_frequency, library=library,
    ).target


def is_sentencepiece_model(name_or_path: str | Path) -> bool:
    """Whether ``name_or_path`` names a SentencePiece model file (``*.model``), not a tokenizer folder or Hub id."""
    return str(name_or_path).endswith(SENTENCEPIECE_SUFFIX)


def load_any_tokenizer(name_or_path: str | Path, flag: str) -> PreTrainedTokenizerBase:
    """A SentencePiece ``.model`` as a fast tokenizer (:func:`sentencepiece_tokenizer`), else a tokenizer folder or Hub
    id (:func:`hf_s2s.models.loading.load_tokenizer`); ``flag`` names the argument in errors."""
    if is_sentencepiece_model(name_or_path):
        return sentencepiece_tokenizer(name_or_path, flag)
    return load_tokenizer(name_or_path)


def load_given_tokenizer(source: str | Path, target: str | Path | None = None,
                         flags: tuple[str, str] = ("`source`", "`target`")) -> PreTrainedTokenizerBase:
    """The tokenizer a user gives: ``source`` alone (a folder, Hub id or ``.model``) for both sides (a folder of
    separate vocabularies keeps its two sides), or ``source`` and ``target`` for separate vocabularies, each its own
    folder or ``.model``, made one :class:`SeparateVocabTokenizer`. Separate vocabularies must put the special tokens
    at the same ids: two SentencePiece models without a padding piece (sentencepiece's default) only do when they
    have the same size, since ``<pad>`` is appended after the last piece."""
    tokenizer = load_any_tokenizer(source, flags[0])
    if target is None:
        return tokenizer
    if target_side(tokenizer) is not tokenizer:
        raise ValueError(f"{flags[0]} {source} already holds separate source and target vocabularies; leave out "
                         f"{flags[1]}")
    pair = TranslationTokenizers(tokenizer, load_any_tokenizer(target, flags[1]))
    source_ids, target_ids = special_token_ids(pair.source), special_token_ids(pair.target)
    differing = [f"{name} {source_ids[name]} vs {target_ids[name]}"
                 for name in ("pad_token_id", "bos_token_id", "eos_token_id") if source_ids[name] != target_ids[name]]
    if differing:
        raise ValueError(f"{flags[0]} {source} and {flags[1]} {target} put special tokens at different ids "
                         f"({', '.join(differing)}; source vs target), but the model shares them between its two "
                         "vocabularies. A SentencePiece model without a padding piece gets <pad> after its last "
                         "piece: train both with the same --pad_id (e.g. --pad_id=3), or with the same --vocab_size")
    return pair.as_tokenizer()


def target_side(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """The tokenizer of the target vocabulary: ``tokenizer.target_tokenizer`` for a
    :class:`SeparateVocabTokenizer` (also one loaded as remote code), else ``tokenizer`` itself (one vocabulary
    for both sides)."""
    return getattr(tokenizer, "target_tokenizer", tokenizer)


def special_token_ids(
    tokenizer: PreTrainedTokenizerBase, target_tokenizer: PreTrainedTokenizerBase | None = None
) -> dict[str, int]:
    """The model config fields that follow from the (target) tokenizer: pad, bos, eos ids and the decoder
    start token (``<s>``; ``<pad>`` for a tokenizer without ``<s>``, as MarianMT starts, e.g. a SentencePiece model
    trained with ``--bos_id=-1``), plus ``decoder_vocab_size`` when the target vocabulary is separate."""
    target = tokenizer if target_tokenizer is None else target_tokenizer
    ids = {
        "pad_token_id": target.pad_token_id,
        "bos_token_id": target.bos_token_id,
        "eos_token_id": target.eos_token_id,
        "decoder_start_token_id": target.bos_token_id if target.bos_token_id is not None else target.pad_token_id,
    }
    if target is not tokenizer:
        ids["decoder_vocab_size"] = len(target)
    return ids


def unknown_token_share(sequences: Iterable[list[int]], unk_token_id: int | None) -> float:
    """The share of ``unk_token_id`` among all tokens of ``sequences`` (0.0 for a tokenizer without one, or none)."""
    total = unknown = 0
    for ids in sequences:
        total += len(ids)
        unknown += ids.count(unk_token_id) if unk_token_id is not None else 0
    return unknown / total if total else 0.0


_SHOWN_TOKENS = 3  # tokens named per differing vocabulary; the count says how many differ


def subword_model_type(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The kind of subword model ``tokenizer`` (its source side) splits words with, as ``MODEL_TYPES``
    names the ones a run trains ("bpe", "unigram"; a converted toolkit's word-level vocabulary:
    "wordlevel"); None for a tokenizer without a tokenizers backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return type(backend.model).__name__.lower() if backend is not None else None


def vocabulary_differences(tokenizer: PreTrainedTokenizerBase, other: PreTrainedTokenizerBase) -> list[str]:
    """How ``tokenizer`` and ``other`` would map text to ids differently, side by side (source, target): tokens
    at other ids or missing, and special token ids. Empty when a model trained with one can use the other."""
    differences = []
    joint = target_side(tokenizer) is tokenizer and target_side(other) is other
    sides = [("", tokenizer, other)] if joint else \
        [("source ", tokenizer, other), ("target ", target_side(tokenizer), target_side(other))]
    for side, mine, theirs in sides:
        vocab, their_vocab = mine.get_vocab(), theirs.get_vocab()
        differing = sorted((token for token in vocab.keys() | their_vocab.keys()
                            if vocab.get(token) != their_vocab.get(token)), key=lambda t: (vocab.get(t, 1 << 62), t))
        if differing:
            shown = ", ".join(f"{token!r} {vocab.get(token)} vs {their_vocab.get(token)}"
                              for token in differing[:_SHOWN_TOKENS])
            differences.append(f"{side}vocabularies of {len(vocab)} and {len(their_vocab)} tokens: {len(differing)} "
                               f"token(s) at other ids or missing ({shown}{', ...' if len(differing) > _SHOWN_TOKENS else ''})")
    for field in ("pad_token_id", "bos_token_id", "eos_token_id", "unk_token_id"):
        if getattr(target_side(tokenizer), field) != getattr(target_side(other), field):
            differences.append(f"{field} {getattr(target_side(tokenizer), field)!r} vs "
                               f"{getattr(target_side(other), field)!r}")
    return differences


def tokenizer_digest(tokenizer: PreTrainedTokenizerBase) -> str:
    """A short digest of how ``tokenizer`` maps text to ids, both sides: equal for tokenizers loaded from the same
    files (a fast tokenizer's whole serialized pipeline; a slow one's vocabulary), and different for another
    vocabulary, merges or normalizer. For comparing copies across processes without sending them."""
    sides = [tokenizer] if target_side(tokenizer) is tokenizer else [tokenizer, target_side(tokenizer)]
    digest = hashlib.sha256()
    for side in sides:
        backend = getattr(side, "backend_tokenizer", None)
        digest.update((backend.to_str() if backend is not None else json.dumps(sorted(side.get_vocab().items()))
                       ).encode())
        digest.update(json.dumps(side.special_tokens_map, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


# Encoded to see what a tokenizer does to a sentence (its special tokens); any text would do.
PROBE_TEXT = "a"


def _encoding_problems(tokenizer: PreTrainedTokenizerBase, side: str, eos_token_id: Any) -> list[str]:
    """What is wrong with how ``tokenizer`` encodes a ``side`` ("source" or "target") sentence for the models:
    the sequence must end with the config's ``</s>`` (the decoder learns to stop from the labels' final
    ``</s>``, and the encoder was trained on sources that end with it), and padding must go on the right
    (``DataCollatorForSeq2Seq`` pads labels on the tokenizer's side, and left-padded labels would put padding
    between the decoder start token and the sentence)."""
    problems = []
    encoded = tokenizer(PROBE_TEXT) if side == "source" else tokenizer(text_target=PROBE_TEXT)
    ids = encoded["input_ids"]
    eos_ids = set(eos_token_id) if isinstance(eos_token_id, list | tuple) else {eos_token_id} - {None}
    if eos_ids and (not ids or ids[-1] not in eos_ids):
        problems.append(
            f"the {side} tokenizer does not end a sentence with </s> (config.eos_token_id {eos_token_id!r}): "
            f"{PROBE_TEXT!r} encodes to {ids}, so the model would never learn to stop: give it a post-processor "
            f"that appends </s>, e.g. tokenizers.processors.TemplateProcessing(single='$A </s>', ...), as the "
            f"tokenizers trained by hf_s2s have"
        )
    if tokenizer.padding_side != "right":
        problems.append(
            f"the {side} tokenizer pads on the {tokenizer.padding_side} (padding_side={tokenizer.padding_side!r}), "
            f"but the models need right padding: set tokenizer.padding_side = 'right'"
        )
    return problems


def check_tokenizer_fits_model(
    tokenizer: PreTrainedTokenizerBase, config: Any, target_tokenizer: PreTrainedTokenizerBase | None = None
) -> None:
    """Raise ``ValueError`` (listing every mismatch) unless the tokenizer(s) fit the model config.

    Reads ``config.vocab_size``, optional ``config.decoder_vocab_size`` (a separate decoder vocabulary;
    defaults to ``vocab_size``), ``pad_token_id``, ``eos_token_id``, optional ``bos_token_id`` and
    ``decoder_start_token_id``. ``target_tokenizer`` is the decoder-side tokenizer for separate vocabularies
    (default: ``tokenizer``). ``decoder_start_token_id`` must be the target tokenizer's ``<s>`` or ``<pad>``.
    Both sides must also encode a sentence the way the models rely on (:func:`_encoding_problems`): ending
    with ``config.eos_token_id``, padded on the right.
    """
    target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
    problems = []
    vocab_size = getattr(config, "vocab_size", None)
    decoder_vocab_size = getattr(config, "decoder_vocab_size", None) or vocab_size
    if vocab_size is None:
        problems.append("the config has no `vocab_size`")
    else:
        # a converted toolkit's source tokenizer ends with the pieces its vocabulary lacks, read as <unk>
        aliases = getattr(config, "source_unk_aliases", 0) or 0
        if len(tokenizer) > vocab_size + aliases:
            shown = f"{vocab_size} (+ {aliases} source_unk_aliases)" if aliases else f"{vocab_size}"
            problems.append(f"the source tokenizer has {len(tokenizer)} tokens but config.vocab_size is {shown}")
        # transformers' FSMTTokenizer (a converted fairseq Moses + BPE folder) is one object over two vocabularies:
        # its len() is the source one's, tgt_vocab_size the target one's
        target_size = getattr(target_tokenizer, "tgt_vocab_size", None) or len(target_tokenizer)
        if target_size > decoder_vocab_size:
            field = "decoder_vocab_size" if getattr(config, "decoder_vocab_size", None) else "vocab_size"
            problems.append(
                f"the target tokenizer has {target_size} tokens but config.{field} is {decoder_vocab_size}"
            )
    for field, required in (("pad_token_id", True), ("eos_token_id", True), ("bos_token_id", False)):
        expected = getattr(target_tokenizer, field)
        value = getattr(config, field, None)
        if value is None and not required:
            continue
        if value != expected:
            problems.append(f"config.{field} is {value!r} but the tokenizer's is {expected!r}")
    if tokenizer is not target_tokenizer:
        for field in ("pad_token_id", "eos_token_id"):
            if getattr(tokenizer, field) != getattr(target_tokenizer, field):
                problems.append(
                    f"source and target tokenizers disagree on {field}: "
                    f"{getattr(tokenizer, field)} vs {getattr(target_tokenizer, field)}"
                )
    start = getattr(config, "decoder_start_token_id", None)
    # <s> (hf_s2s, OpenNMT-py, Joey NMT), <pad> (Marian), </s> (fairseq: SequenceGenerator starts from eos)
    allowed_start = {target_tokenizer.bos_token_id, target_tokenizer.pad_token_id, target_tokenizer.eos_token_id} - {None}
    if start not in allowed_start:
        problems.append(
            f"config.decoder_start_token_id is {start!r}; it must be the tokenizer's <s>, <pad> or </s> id, "
            f"one of {sorted(allowed_start)}"
        )
    eos_token_id = getattr(config, "eos_token_id", None)
    # a model whose toolkit fed sources without </s> (config.source_eos False: OpenNMT-py 3.x) needs none there
    problems += _encoding_problems(tokenizer, "source", eos_token_id if getattr(config, "source_eos", True) else None)
    problems += _encoding_problems(target_tokenizer, "target", eos_token_id)
    if problems:
        raise ValueError("tokenizer does not fit the model config: " + "; ".join(problems))


__all__ = [
    "SPECIAL_TOKENS",
    "LIBRARIES",
    "TranslationTokenizers",
    "build_normalizer",
    "check_tokenizer_fits_model",
    "check_training_arguments",
    "check_vocab_size",
    "is_sentencepiece_model",
    "load_any_tokenizer",
    "load_given_tokenizer",
    "tokenizer_digest",
    "normalize_text",
    "special_token_ids",
    "subword_model_type",
    "target_side",
    "train_tokenizer",
    "train_tokenizer_from_texts",
    "train_translation_tokenizers",
    "vocabulary_differences",
]
