"""Glossaries: source terms and the target terms their translation must contain.

A glossary file is UTF-8 text, one entry per line, ``source term<TAB>target term``; blank lines and lines starting
with ``#`` are skipped. :meth:`Glossary.target_terms` finds the entries a batch of sources needs and gives
``generate(target_terms=...)`` their target terms as token ids (``hf_s2s.models.term_constraints`` enforces them).

How a source term is found in a sentence:

- on the text the model reads: the source token ids decoded back (after the tokenizer's normalization, and after a
  cut to the source limit: a term in the cut part is not required);
- by whole words: both are split into runs of letters and digits (``\\w+``), so punctuation and spacing do not
  matter (``T-Shirt`` matches ``T-Shirt``, ``T Shirt`` and ``t-shirt``) but a term never matches part of a word
  (``Hund`` does not match ``Hunde`` or ``Hundeleine``);
- ignoring case (Unicode case folding);
- overlapping entries: the longest match wins, left to right, and matches do not overlap (``New York`` takes a
  source ``New York City`` before ``York`` could);
- inflection is not modelled: each form to match is its own entry (``Hund``, ``Hunde``, ``Hundes``), and the target
  term is written exactly as the glossary gives it, whatever case or number the sentence needs.

A target term is required once per sentence, however often its source term occurs.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..data.tokenization import target_side

_WORD = re.compile(r"\w+")


def words(text: str) -> tuple[str, ...]:
    """The case-folded runs of letters and digits of ``text``: what a glossary matches on."""
    return tuple(_WORD.findall(text.casefold()))


@dataclass(frozen=True)
class Glossary:
    """Entries ``(source term, target term)``, in file order. Equal glossaries compare equal (a server batches the
    requests of one glossary together)."""

    entries: tuple[tuple[str, str], ...]

    def __post_init__(self):
        seen: dict[tuple[str, ...], str] = {}
        for number, (source, target) in enumerate(self.entries, start=1):
            key = words(source)
            if not key:
                raise ValueError(f"glossary entry {number}: the source term {source!r} has no letters or digits to "
                                 "match")
            if not target.strip():
                raise ValueError(f"glossary entry {number}: the target term for {source!r} is blank")
            if key in seen and seen[key] != target:
                raise ValueError(f"glossary entry {number}: {source!r} is given two target terms, {seen[key]!r} and "
                                 f"{target!r}; keep one")
            seen[key] = target

    @classmethod
    def from_pairs(cls, pairs) -> "Glossary":
        """From ``(source, target)`` pairs or a ``{source: target}`` dict."""
        items = pairs.items() if isinstance(pairs, dict) else pairs
        return cls(tuple((str(source), str(target)) for source, target in items))

    @classmethod
    def from_tsv(cls, path: str | Path) -> "Glossary":
        """Read a glossary file (see the module docstring); a line without exactly one tab, a blank side or a file
        that is not UTF-8 is a ValueError naming the file and the line."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as error:
            raise ValueError(f"glossary {path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
        except OSError as error:
            raise ValueError(f"glossary {path} cannot be read: {error.strerror or error}") from None
        entries = []
        for number, line in enumerate(text.split("\n"), start=1):
            line = line.removesuffix("\r")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise ValueError(f"glossary {path}, line {number}: expected 'source term<TAB>target term', got "
                                 f"{line!r}")
            entries.append((fields[0].strip(), fields[1].strip()))
        if not entries:
            raise ValueError(f"glossary {path} holds no entries (one 'source term<TAB>target term' per line)")
        try:
            return cls(tuple(entries))
        except ValueError as error:
            raise ValueError(f"glossary {path}: {error}") from None

    def __len__(self) -> int:
        return len(self.entries)

    @cached_property
    def _index(self) -> dict[tuple[str, ...], str]:
        return {words(source): target for source, target in self.entries}

    def matches(self, text: str) -> list[str]:
        """The target terms ``text`` needs, in the order their source terms occur, each once (see the module
        docstring for how terms are found)."""
        index = self._index
        longest = max(map(len, index))
        sentence = words(text)
        found, position = [], 0
        while position < len(sentence):
            for length in range(min(longest, len(sentence) - position), 0, -1):
                target = index.get(sentence[position : position + length])
                if target is not None:
                    if target not in found:
                        found.append(target)
                    position += length
                    break
            else:
                position += 1
        return found

    def target_terms(self, source_ids: Sequence[Sequence[int]], tokenizer) -> list[list[list[int]]]:
        """``generate(target_terms=...)`` for a batch: per source (token ids, as the model reads them), the token ids
        of each target term it needs (the target vocabulary's, without special tokens)."""
        texts = tokenizer.batch_decode([list(ids) for ids in source_ids], skip_special_tokens=True)
        return [[self.target_ids(term, tokenizer) for term in self.matches(text)] for text in texts]

    def target_ids(self, term: str, tokenizer) -> list[int]:
        """A target term's token ids, tokenized alone (a word-initial piece first, as inside a sentence)."""
        ids = target_side(tokenizer)(term, add_special_tokens=False)["input_ids"]
        unknown = target_side(tokenizer).unk_token_id
        if not ids or (unknown is not None and unknown in ids):
            raise ValueError(f"the target term {term!r} holds characters the target vocabulary cannot write (it "
                             "tokenizes to the unknown token)")
        return ids

    def check_target_terms(self, tokenizer) -> None:
        """A ValueError for a target term the target vocabulary cannot write, before any decoding starts."""
        for _, target in self.entries:
            self.target_ids(target, tokenizer)


__all__ = ["Glossary", "words"]
