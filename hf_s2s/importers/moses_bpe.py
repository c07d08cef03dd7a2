"""Moses tokenization and subword-nmt BPE, carried over as transformers' own ``FSMTTokenizer``.

fairseq's translation recipes (IWSLT, WMT) read raw text through ``--tokenizer moses --bpe subword_nmt``:
sacremoses' ``MosesTokenizer(source_lang).tokenize(line, aggressive_dash_splits=True, escape=True)``, then
subword-nmt's ``BPE(codes, separator="@@").process_line``, each piece looked up in fairseq's dictionary (a piece it
lacks is its ``<unk>``); on the way out the ``@@ `` continuations are joined and ``MosesDetokenizer(target_lang)``
detokenizes. transformers ships that pipeline for fairseq's WMT19 models: ``FSMTTokenizer`` (the same sacremoses
calls with the same two flags, subword-nmt 0.2's merge rule with ``</w>`` ending a word, an unknown piece read as
``<unk>``, ``</s>`` after every source). The folder then holds ``vocab-src.json``, ``vocab-tgt.json`` and
``merges.txt``, and ``AutoTokenizer.from_pretrained(folder)`` needs transformers and sacremoses only.

Where FSMTTokenizer and fairseq part: FSMTTokenizer first normalizes punctuation as Moses' scripts do
(``replace-unicode-punctuation``, ``normalize-punctuation``, ``remove-non-printing-char``), which fairseq does not;
a line holding such characters (typographic quotes, dashes, non-breaking spaces, ...) can be tokenized otherwise.
:func:`punctuation_note` says so in ``conversion.json``. Settings FSMTTokenizer has no switch for are refused by
name: ``--moses-no-dash-splits``, ``--moses-no-escape``, a ``--bpe-separator`` other than ``@@``, and codes of
subword-nmt before 0.2 (another end-of-word rule).
"""

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from transformers import FSMTTokenizer

from .checkpoints import CheckpointError, read_text_file

SEPARATOR = "@@"  # subword-nmt's continuation mark, the only one FSMTTokenizer reads
END_OF_WORD = "</w>"  # FSMTTokenizer's mark on a word's last piece (subword-nmt 0.2 codes)
CODES_HEADER = "#version: 0.2"  # subword-nmt's learn_bpe writes it first; 0.1 codes have no header


@dataclass(frozen=True)
class MosesBPE:
    """What the toolkit did to the text: Moses for ``languages`` (source, target), then the BPE ``codes``."""

    codes: Path
    where: str  # how the user named the codes (the option or flag, and the path)
    languages: tuple[str, str]

    def record(self) -> dict:
        """What conversion.json says about it."""
        return {"read_from": self.where, "sha256": hashlib.sha256(self.codes.read_bytes()).hexdigest(),
                "moses_languages": list(self.languages), "tokenizer": "transformers FSMTTokenizer"}


def merges(codes: Path, where: str) -> list[str]:
    """The merge lines of subword-nmt 0.2 ``codes`` (one ``left right`` pair a line, rank by order), without the
    version header; other codes are a CheckpointError naming ``where``."""
    lines = read_text_file(codes, "the subword-nmt BPE codes", "--source-subword-model").splitlines()
    if not lines or lines[0].strip() != CODES_HEADER:
        raise CheckpointError(f"{where} does not start with {CODES_HEADER!r}: codes of subword-nmt before 0.2 end a "
                              f"word with a separate {END_OF_WORD} symbol, which FSMTTokenizer does not; learn them "
                              "again with subword-nmt >= 0.2")
    pairs = [line for line in lines[1:] if line.strip()]
    bad = [line for line in pairs if len(line.split()) != 2]
    if bad:
        raise CheckpointError(f"{where} holds lines that are not 'left right' merges: {bad[:3]}")
    return pairs


def fsmt_tokens(tokens: list[str], specials: set[str]) -> dict[str, int]:
    """A toolkit's BPE vocabulary (``x@@`` inside a word, ``x`` ending it) in FSMTTokenizer's spelling (``x``
    inside a word, ``x</w>`` ending it), each at the toolkit's id; its specials as they are."""
    out = {}
    for index, token in enumerate(tokens):
        spelled = token if token in specials else (
            token[: -len(SEPARATOR)] if token.endswith(SEPARATOR) else token + END_OF_WORD)
        if spelled in out or not spelled:
            raise CheckpointError(f"the vocabulary's token {token!r} (id {index}) cannot be given its own id in "
                                  "FSMTTokenizer's spelling: it collides with another token")
        out[spelled] = index
    return out


def fsmt_tokenizer(moses_bpe: MosesBPE, source_tokens: list[str], target_tokens: list[str], unk: str, pad: str,
                   bos: str, eos: str) -> FSMTTokenizer:
    """transformers' FSMTTokenizer over the toolkit's vocabularies (each token at the toolkit's id) and BPE codes,
    Moses-tokenizing for ``moses_bpe.languages``. Needs sacremoses (an ImportError saying so otherwise)."""
    specials = {unk, pad, bos, eos}
    with tempfile.TemporaryDirectory() as folder:
        files = {"src_vocab_file": Path(folder) / "vocab-src.json", "tgt_vocab_file": Path(folder) / "vocab-tgt.json",
                 "merges_file": Path(folder) / "merges.txt"}
        files["src_vocab_file"].write_text(json.dumps(fsmt_tokens(source_tokens, specials), ensure_ascii=False))
        files["tgt_vocab_file"].write_text(json.dumps(fsmt_tokens(target_tokens, specials), ensure_ascii=False))
        files["merges_file"].write_text("".join(line + "\n" for line in merges(moses_bpe.codes, moses_bpe.where)))
        try:
            return FSMTTokenizer(langs=list(moses_bpe.languages), **{k: str(v) for k, v in files.items()},
                                 unk_token=unk, pad_token=pad, bos_token=bos, sep_token=eos, eos_token=eos)
        except ImportError as error:
            raise ImportError("carrying Moses tokenization over (FSMTTokenizer) needs sacremoses: pip install "
                              "'hf_s2s[moses]' (or sacremoses)") from error


def punctuation_note(toolkit: str) -> str:
    """The one difference from the toolkit that remains: FSMTTokenizer's punctuation normalization."""
    return (f"Moses (FSMTTokenizer): before tokenizing, the folder's tokenizer normalizes punctuation as Moses' "
            f"replace-unicode-punctuation and normalize-punctuation scripts do, which {toolkit} did not: a line with "
            "typographic quotes, dashes or other such characters may be tokenized differently")


__all__ = ["SEPARATOR", "MosesBPE", "fsmt_tokenizer", "punctuation_note"]
