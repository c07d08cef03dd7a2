"""A toolkit's SentencePiece model carried into the converted tokenizer: raw text in, the toolkit's ids out.

OpenNMT-py (``-transforms sentencepiece``), Joey NMT (``tokenizer_type: sentencepiece``) and fairseq
(``--bpe sentencepiece``) segment a raw line with ``SentencePieceProcessor.encode(line, out_type=str)`` and look each
piece up in their own vocabulary (built from the segmented corpus: their specials, their order), a piece they lack
becoming their ``<unk>``. On the way out they join the pieces back (``▁`` to spaces).

The tokenizer here is the SentencePiece model (:mod:`hf_s2s.data.sentencepiece_models`: its normalizer, its
unigram or BPE segmentation, the Metaspace-style decoder) whose vocabulary is the toolkit's, in the toolkit's order:
piece p gets the toolkit's id of p. A piece has one id in a ``tokenizer.json``, so the pieces the toolkit lacks are
handled where they matter:

- source side: they stay in the segmentation at ids after the toolkit's vocabulary, and the model's encoder reads
  those ids as ``<unk>`` (``source_unk_aliases``, :func:`alias_unknown_pieces`): it computes what the toolkit
  computes, for a token table of its own or one shared with the decoder alike, and nothing can generate them (the
  output layer has the vocabulary's rows only). A ``tokenizer.json`` cannot map a piece to ``<unk>``'s id itself:
  a Unigram model's ids are its pieces' positions, and a BPE model's merges are keyed by the ids of their parts.
  Joey NMT restricts the model to its vocabulary (``SetVocabulary``): the segmentation then goes without them, as
  here;
- target side: decoding reads the vocabulary's own pieces; ``text_target=`` (fine-tuning labels) segments without
  the missing pieces, which ``conversion.json`` states (:func:`target_note`);
- the toolkit's tokens that are not pieces are its specials (and the fillers that pad its vocabulary to a multiple
  of 8, which get a score no segmentation into pieces falls below). A token holding a character the model does not know is the run of
  unknown characters sentencepiece emitted whole while the toolkit built its vocabulary; the toolkit looks such a run
  up whole at translation time, which a unigram lattice cannot reproduce: refused. Any other token says that the
  model is not the one the toolkit segmented its corpus with: refused.

How often the toolkit lacks pieces is in docs/importers.md ("Subword models").
"""

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, processors

from ..data.sentencepiece_models import (
    BYTE,
    NORMAL,
    SentencePieceModel,
    bpe_merges,
    read_model,
    segmentation_problems,
    sentencepiece_decoder,
    sentencepiece_normalizer,
)

# the score of a toolkit token that is not a piece (fairseq's fillers): below any segmentation of its characters
UNREACHABLE_SCORE = -1e6
# the tokens that pad a vocabulary up to a multiple of 8, never produced: fairseq's (Dictionary.pad_to_multiple_) and
# OpenNMT-py's (DefaultTokens.VOCAB_PAD, -vocab_size_multiple)
FILLER = re.compile(r"madeupword\d{4}|averyunlikelytoken\d+")


@dataclass(frozen=True)
class Subwords:
    """A toolkit's SentencePiece model for one side, and how the user would name it in an error."""

    model: SentencePieceModel
    where: str  # e.g. "-src_subword_model /data/spm.model"
    lowercase: bool = False  # the toolkit lowercased the text before segmenting it (Joey NMT's lowercase)
    # the toolkit restricted the model to its vocabulary (Joey NMT: SentencePieceProcessor.SetVocabulary), so
    # sentencepiece segments without the pieces the vocabulary lacks
    restricted: bool = False

    def record(self) -> dict:
        """What conversion.json says about it: where it was read, its SHA-256, its type and size."""
        return {"read_from": self.where, "sha256": hashlib.sha256(self.model.serialized).hexdigest(),
                "model_type": self.model.type_name, "pieces": len(self.model.pieces), "lowercase": self.lowercase,
                "restricted_to_vocabulary": self.restricted}

    @property
    def key(self) -> tuple[bytes, bool, bool]:
        """Equal for two sides that segment text the same way (one tokenizer can then serve both)."""
        return self.model.serialized, self.lowercase, self.restricted


def load_subwords(recorded: str | None, given: Path | None, option: str, flag: str, lowercase: bool = False,
                  restricted: bool = False) -> Subwords:
    """The SentencePiece model a converter carries over: ``given`` (the convert flag ``flag``) when passed, else the
    path the toolkit recorded under ``option``, named in errors by the flag or the option it came from. A recorded
    path that does not exist here is a FileNotFoundError saying to pass ``flag``."""
    if given is not None:
        return read_subwords(given, flag, lowercase, restricted)
    path = Path(str(recorded)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{option} {recorded} does not exist here (the path it had where the toolkit "
                                f"trained): pass the SentencePiece model with {flag}")
    return read_subwords(path, option, lowercase, restricted)


def read_subwords(path: Path, where: str, lowercase: bool = False, restricted: bool = False) -> Subwords:
    """Read the ``.model`` at ``path``; ``where`` names it in errors (the option or flag and the path)."""
    return Subwords(read_model(path, where), f"{where} {path}", lowercase, restricted)


def _refuse(subwords: Subwords, why: str) -> ValueError:
    return ValueError(f"the SentencePiece model {subwords.where} cannot be carried over: {why}")


def absent_pieces(subwords: Subwords | None, tokens: list[str]) -> list[str]:
    """The pieces sentencepiece can emit that ``tokens`` (a toolkit's vocabulary) lacks, in the model's order; none
    where the toolkit restricts the model to its vocabulary (it never emits them then)."""
    if subwords is None or subwords.restricted:
        return []
    present = set(tokens)
    return [piece for piece, _, kind in subwords.model.pieces if kind in (NORMAL, BYTE) and piece not in present]


def alias_unknown_pieces(config, aliases: list[str], unk_id: int) -> None:
    """Make the encoder read the source pieces the toolkit reads as <unk> (``aliases``, appended after its source
    vocabulary in the tokenizer) as ``unk_id``: ``config.source_unk_aliases`` and ``config.unk_token_id``, set in
    place. The token tables keep the toolkit's rows, shared or not."""
    if aliases:
        config.source_unk_aliases = len(aliases)
        config.unk_token_id = unk_id


def target_note(subwords: Subwords | None, tokens: list[str], toolkit: str) -> list[str]:
    """The note saying that the target tokenizer segments without the pieces the target vocabulary lacks (only
    ``text_target=``, the labels of fine-tuning, is concerned: decoding reads the vocabulary's own pieces)."""
    absent = absent_pieces(subwords, tokens)
    if not absent:
        return []
    return [f"{subwords.where}: {len(absent)} of its pieces ({', '.join(map(repr, absent[:3]))}) are not in the "
            f"target vocabulary; {toolkit} segmented training targets with them and read <unk>, the folder's "
            "tokenizer segments text_target= (fine-tuning labels) without them. Translations are unaffected"]


def subword_backend(subwords: Subwords, tokens: list[str], unk: str, specials: set[str],
                    leave_out_absent: bool = False) -> Tokenizer:
    """The ``tokenizers`` backend that segments text as ``subwords.model`` does and gives each piece its id in
    ``tokens`` (the toolkit's vocabulary, in its order; ``unk`` its unknown token, ``specials`` its special
    tokens). Pieces ``tokens`` lacks are refused unless the toolkit restricted the model to its vocabulary or
    ``leave_out_absent`` (the target side, where only labels are segmented, as :func:`target_note` says): then
    segmentation goes without them.
    Whatever it could not reproduce exactly is a ValueError naming the model file and why."""
    model = subwords.model
    problems = segmentation_problems(model)
    if problems:
        raise _refuse(subwords, "; ".join(problems))
    index = {token: i for i, token in enumerate(tokens)}
    scores = {piece: score for piece, score, kind in model.pieces if kind in (NORMAL, BYTE)}
    absent = [piece for piece in scores if piece not in index]
    if absent and (subwords.restricted or leave_out_absent):
        # on the target side only text_target= (labels) is segmented: decoding reads the vocabulary's own pieces
        kept_out = [] if leave_out_absent else restricted_problems(model, scores, absent)
        if kept_out:
            raise _refuse(subwords, f"segmenting without the pieces the vocabulary lacks, it would still lack "
                                    f"{len(kept_out)} piece(s) that segmentation here cannot simply leave out "
                                    f"({', '.join(map(repr, kept_out[:5]))}): "
                                    + ("sentencepiece re-segments a BPE merge it may not use into smaller "
                                       "pieces" if model.model_type != 1 else "sentencepiece weighs the unknown "
                                       "character against pieces that contain it with a score of its own"))
    elif absent:
        raise _refuse(subwords, f"the toolkit's vocabulary lacks {len(absent)} of its {len(scores)} pieces "
                                f"({', '.join(map(repr, absent[:5]))}): the toolkit segments with them and then "
                                f"reads each as {unk}, but in a tokenizer.json a piece has one id. Is it the model "
                                "the toolkit trained with?")
    characters = {piece for piece in scores if len(piece) == 1 and piece in index}
    others = [token for token in tokens if token not in scores and token not in specials and not FILLER.fullmatch(token)]
    unknown = [token for token in others if not set(token) <= characters]
    if unknown:
        raise _refuse(subwords, f"the toolkit's vocabulary holds {len(unknown)} token(s) with characters the model "
                                f"does not know ({', '.join(map(repr, unknown[:5]))}): sentencepiece emits a run of "
                                "unknown characters as one piece, which the toolkit looks up whole; a segmentation "
                                "into pieces cannot reproduce that (train the model with character_coverage=1.0)")
    if others:
        raise _refuse(subwords, f"the toolkit's vocabulary holds {len(others)} token(s) that are not pieces of it "
                                f"({', '.join(map(repr, others[:5]))}): it is not the model the toolkit segmented "
                                "its corpus with")
    if model.model_type == 1:
        vocab = [(token, scores.get(token, 0.0 if token in specials else UNREACHABLE_SCORE)) for token in tokens]
        backend = Tokenizer(models.Unigram(vocab, unk_id=index[unk], byte_fallback=model.byte_fallback))
    else:
        # merges only into pieces the vocabulary has: a tokenizers BPE refuses a merge whose result has no id, and
        # the pieces left out (leave_out_absent) are segmented without, as the docstring says
        merges = bpe_merges([piece for piece in model.pieces if piece[2] == NORMAL and piece[0] in index])
        backend = Tokenizer(models.BPE(vocab=index, merges=merges, unk_token=unk, fuse_unk=True,
                                       byte_fallback=model.byte_fallback))
    normalizer = sentencepiece_normalizer(model)
    backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizer]) if subwords.lowercase \
        else normalizer
    backend.decoder = sentencepiece_decoder(model)
    return backend


def restricted_problems(model: SentencePieceModel, scores: dict[str, float], absent: list[str]) -> list[str]:
    """The pieces of ``absent`` that a model restricted to the vocabulary (``SetVocabulary``) does not simply leave
    out: all of them for a BPE model (sentencepiece re-segments a merge it may not use into smaller pieces; the
    merges here cannot), and for a unigram model the characters left out of a piece still used (sentencepiece then
    weighs an unknown character against that piece with a score of its own that a tokenizer.json sets otherwise)."""
    if model.model_type != 1:
        return absent
    left_out = {piece for piece in absent if len(piece) == 1}
    used = [piece for piece in scores if piece not in set(absent)]
    return sorted(char for char in left_out if any(char in piece for piece in used))


def end_of_sentence(backend: Tokenizer, eos: str, eos_id: int) -> None:
    """Make ``backend`` end every encoded sequence with ``eos``."""
    backend.post_processor = processors.TemplateProcessing(single=f"$A {eos}", pair=f"$A {eos} $B {eos}",
                                                           special_tokens=[(eos, eos_id)])


__all__ = ["Subwords", "absent_pieces", "alias_unknown_pieces", "end_of_sentence", "load_subwords", "subword_backend",
           "target_note"]
