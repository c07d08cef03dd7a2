"""Terminology for ``generate()``: glossaries (which target terms a sentence's translation must contain) and the
constraint that makes every hypothesis contain them.

**Glossaries.** A glossary file is UTF-8 text, one entry per line, ``source term<TAB>target term``; blank lines and
lines starting with ``#`` are skipped. :meth:`Glossary.target_terms` finds the entries a batch of sources needs and
gives ``generate(target_terms=...)`` their target terms as token ids. How a source term is found in a sentence:

- on the text the model reads: the source token ids decoded back (after the tokenizer's normalization, and after a
  cut to the source limit: a term in the cut part is not required);
- by whole words: both are split into runs of letters and digits (``\\w+``), so punctuation and spacing do not
  matter (``T-Shirt`` matches ``T-Shirt``, ``T Shirt`` and ``t-shirt``) but a term never matches part of a word
  (``Hund`` does not match ``Hunde`` or ``Hundeleine``);
- ignoring case (Unicode case folding) and Unicode's normalization forms: both sides are read in NFKC, so a term
  written decomposed (NFD, as macOS file names and some editors write it) matches the composed text, and the other
  way round;
- overlapping entries: the longest match wins, left to right, and matches do not overlap (``New York`` takes a
  source ``New York City`` before ``York`` could);
- inflection is not modelled: each form to match is its own entry (``Hund``, ``Hunde``, ``Hundes``), and the target
  term is written exactly as the glossary gives it, whatever case or number the sentence needs.

A target term is required once per sentence, however often its source term occurs. Entries are checked when the
glossary is made (text that is no Unicode, a source term of no letters or digits, a blank target, one source with two
targets) and against the model before anything is decoded (:meth:`Glossary.check`): a term that spells a special
token (``</s>``, ``<pad>``), a source term the model's tokenizer reads otherwise (characters its vocabulary lacks), a
target term the target vocabulary cannot write or that is longer than the model may write. Each refusal names the
entry (its line in the file, or its number from 1) and what is allowed, and quotes that entry only.

**The constraint.** ``generate(..., target_terms=terms)``: ``terms[b]`` lists sentence b's required target terms, each
a list of target token ids (a glossary's target term, tokenized alone). Every hypothesis (greedy row, beam, sample) is
steered by :class:`TargetTermsLogitsProcessor`, which reads its state from the hypothesis' own tokens at every step,
so it follows beam search's reordering with no bookkeeping of its own:

1. a term is *met* once its token sequence occurs in the hypothesis; while one is not, the hypothesis cannot end:
   </s> is closed, and its probability goes to the first token of the first term not met, so a hypothesis that
   would end writes the term instead;
2. a hypothesis whose last tokens are the beginning of a term not met (it started the term) continues that term:
   its next token is forced;
3. the first token of every term not met gets ``bonus`` added to its score (log-probability under beam search, a
   logit under greedy search: alike, ``bonus`` nats more odds), so a term starts where the model finds it plausible;
4. a hypothesis whose remaining length (its source-relative bound or ``max_length``) only just holds the terms not
   met starts the first of them now.

Sentences without terms are not touched: their scores pass unchanged, so they decode exactly as without constraints.
This is a greedy, per-hypothesis steering, not the reserved beams of Post & Vilar's dynamic beam allocation (NAACL
2018, arXiv:1804.06609; fairseq's ``--constraints``): under beam search a hypothesis without the term may still lose
its place to those that have started it, and a started term is completed even where it later turns out to fit
badly.

Copied beside the modeling files into every saved model folder (``save_pretrained`` follows single-dot relative
imports), so it imports nothing from hf_s2s: a user without hf_s2s matches glossary terms with the folder's own copy
(docs/inference.md).
"""

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch
from transformers import LogitsProcessor

# The score added to the first token of each term not yet met, in nats (see the module docstring, rule 3).
DEFAULT_TERM_BONUS = 2.0
# Entries a refusal names one by one; the count says how many more.
SHOWN_ENTRIES = 3

_WORD = re.compile(r"\w+")


def words(text: str) -> tuple[str, ...]:
    """The runs of letters and digits of ``text`` in Unicode's NFKC form, case-folded: what a glossary matches on."""
    return tuple(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def not_text(text: str) -> str | None:
    """Why ``text`` cannot be encoded (a lone UTF-16 surrogate, which a JSON string may escape as ``"\\ud800"`` but
    which is no text), or None where it is text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (f"a lone surrogate U+{ord(text[error.start]):04X} at character {error.start}, which is not text (a "
                "\\uD800-\\uDFFF escape is half of a pair)")
    return None


def _target_side(tokenizer):
    """The tokenizer of the target vocabulary (a separate-vocabulary tokenizer's ``target_tokenizer``), else the
    tokenizer itself."""
    return getattr(tokenizer, "target_tokenizer", tokenizer)


@dataclass(frozen=True)
class Glossary:
    """Entries ``(source term, target term)``, in file order, checked as the module docstring says. Equal glossaries
    compare equal (a server batches the requests of one glossary together). ``origin`` names where the entries come
    from and ``lines`` their line numbers there (None: entries numbered from 1), for the refusals."""

    entries: tuple[tuple[str, str], ...]
    origin: str = field(default="glossary", compare=False)
    lines: tuple[int, ...] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        seen: dict[tuple[str, ...], str] = {}
        for index, (source, target) in enumerate(self.entries):
            for side, term in (("source", source), ("target", target)):
                if not isinstance(term, str):
                    raise ValueError(f"{self.where(index)}: the {side} term is a {type(term).__name__}, not a string")
                problem = not_text(term)
                if problem is not None:
                    raise ValueError(f"{self.where(index)}: the {side} term holds {problem}")
            key = words(source)
            if not key:
                raise ValueError(f"{self.where(index)}: the source term {_quote(source)} has no letters or digits to "
                                 "match")
            if not target.strip():
                raise ValueError(f"{self.where(index)}: the target term for {_quote(source)} is blank")
            if key in seen and seen[key] != target:
                raise ValueError(f"{self.where(index)}: {_quote(source)} is given two target terms, "
                                 f"{_quote(seen[key])} and {_quote(target)}; keep one")
            seen[key] = target

    def where(self, index: int) -> str:
        """Entry ``index`` (from 0) as a refusal names it: its file and line, or its number from 1."""
        if self.lines is not None:
            return f"{self.origin}, line {self.lines[index]}"
        return f"{self.origin} entry {index + 1} (counted from 1)"

    def __repr__(self) -> str:
        shown = ", ".join(f"{_quote(source)}: {_quote(target)}" for source, target in self.entries[:SHOWN_ENTRIES])
        more = f", ... {len(self.entries) - SHOWN_ENTRIES} more" if len(self.entries) > SHOWN_ENTRIES else ""
        return f"Glossary({len(self.entries)} entries: {shown}{more})"

    @classmethod
    def from_pairs(cls, pairs, origin: str = "glossary") -> "Glossary":
        """From ``(source, target)`` pairs or a ``{source: target}`` dict."""
        items = pairs.items() if isinstance(pairs, dict) else pairs
        return cls(tuple((source, target) for source, target in items), origin)

    @classmethod
    def from_tsv(cls, path: str | Path) -> "Glossary":
        """Read a glossary file (see the module docstring); a line without exactly one tab, a blank side or a file
        that is not UTF-8 is a ValueError naming the file and the line."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as error:
            line = path.read_bytes()[: error.start].count(b"\n") + 1
            raise ValueError(f"glossary {path}, line {line}: not UTF-8 text ({error.reason} at byte {error.start})"
                             ) from None
        except OSError as error:
            raise ValueError(f"glossary {path} cannot be read: {error.strerror or error}") from None
        entries, lines = [], []
        for number, line in enumerate(text.split("\n"), start=1):
            line = line.removesuffix("\r")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise ValueError(f"glossary {path}, line {number}: expected 'source term<TAB>target term', got "
                                 f"{_quote(line)}")
            entries.append((fields[0].strip(), fields[1].strip()))
            lines.append(number)
        if not entries:
            raise ValueError(f"glossary {path} holds no entries (one 'source term<TAB>target term' per line)")
        return cls(tuple(entries), f"glossary {path}", tuple(lines))

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

    def target_terms(self, source_ids: Sequence[Sequence[int]], tokenizer, max_new_tokens: int | None = None,
                     first: int = 0) -> list[list[list[int]]]:
        """``generate(target_terms=...)`` for a batch: per source (token ids, as the model reads them), the token ids
        of each target term it needs (the target vocabulary's, without special tokens). With ``max_new_tokens``, a
        source whose terms together (and </s>) are longer than that is a ValueError naming it (numbered from
        ``first``) and its terms."""
        texts = tokenizer.batch_decode([list(ids) for ids in source_ids], skip_special_tokens=True)
        needed = []
        for number, text in enumerate(texts, start=first):
            terms = self.matches(text)
            ids = [self.target_ids(term, tokenizer) for term in terms]
            tokens = sum(map(len, ids)) + 1
            if max_new_tokens is not None and tokens > max_new_tokens:
                shown = [*map(_quote, terms[:SHOWN_ENTRIES])]
                if len(terms) > SHOWN_ENTRIES:
                    shown.append(f"{len(terms) - SHOWN_ENTRIES} more")
                named = ", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0]
                raise ValueError(f"sentence {number} (counted from {first}) needs the target terms {named} of the "
                                 f"{self.origin}: {tokens} tokens with </s>, and the model writes at most "
                                 f"{max_new_tokens} (max_new_tokens): split the sentence, or raise max_new_tokens")
            needed.append(ids)
        return needed

    def target_ids(self, term: str, tokenizer) -> list[int]:
        """A target term's token ids, tokenized alone (a word-initial piece first, as inside a sentence)."""
        return _target_side(tokenizer)(term, add_special_tokens=False)["input_ids"]

    def check(self, tokenizer, max_new_tokens: int | None = None) -> None:
        """A ValueError for the first entry the model cannot use as written, before anything is decoded: a term that
        spells one of the tokenizers' special tokens, a source term the source tokenizer reads otherwise (so it
        could never match: characters the vocabulary lacks, or a normalization of its own), a target term the target
        vocabulary cannot write (the unknown token), or one longer than ``max_new_tokens`` (</s> included)."""
        target_tokenizer = _target_side(tokenizer)
        specials = sorted({*tokenizer.all_special_tokens, *target_tokenizer.all_special_tokens}, key=len,
                          reverse=True)
        special_ids = {*tokenizer.all_special_ids, *target_tokenizer.all_special_ids}
        for index, (source, target) in enumerate(self.entries):
            for side, term in (("source", source), ("target", target)):
                spelled = next((special for special in specials if special and special in term), None)
                if spelled is not None:
                    raise ValueError(f"{self.where(index)}: the {side} term {_quote(term)} spells the special token "
                                     f"{spelled!r}, which the model reads as a control token, not text: write the "
                                     "term without it")
            read = tokenizer.decode(tokenizer(source, add_special_tokens=False)["input_ids"], skip_special_tokens=True)
            if words(read) != words(source):
                raise ValueError(f"{self.where(index)}: the model's tokenizer reads the source term {_quote(source)} "
                                 f"as {_quote(read)} (characters its vocabulary lacks, or its own normalization), "
                                 "so it could never match: write it as the model reads it")
            ids = self.target_ids(target, tokenizer)
            if not ids or target_tokenizer.unk_token_id in ids or special_ids.intersection(ids):
                raise ValueError(f"{self.where(index)}: the target term {_quote(target)} holds characters the target "
                                 "vocabulary cannot write (it tokenizes to the unknown token)")
            if max_new_tokens is not None and len(ids) + 1 > max_new_tokens:
                raise ValueError(f"{self.where(index)}: the target term {_quote(target)} is {len(ids)} tokens, and "
                                 f"the model writes at most {max_new_tokens} tokens, </s> included (max_new_tokens): "
                                 "shorten the term, or raise max_new_tokens")


def _quote(text: str, limit: int = 60) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters (a refusal never repeats a whole file)."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def check_target_terms(target_terms, batch_size: int, vocab_size: int) -> list[list[list[int]]]:
    """``target_terms`` as lists, deduplicated per sentence, or a ValueError naming what is wrong: one list per
    sentence of the batch (``batch_size``), each term a non-empty list of target token ids in [0, ``vocab_size``)."""
    if not isinstance(target_terms, list | tuple) or len(target_terms) != batch_size:
        given = f"{len(target_terms)} entries" if isinstance(target_terms, list | tuple) else type(target_terms).__name__
        raise ValueError(f"target_terms must hold one list of terms per sentence of the batch ({batch_size}), got "
                         f"{given}")
    checked = []
    for index, terms in enumerate(target_terms):
        if not isinstance(terms, list | tuple):
            raise ValueError(f"target_terms[{index}] must be a list of terms (lists of token ids), got "
                             f"{type(terms).__name__}")
        unique = []
        for term in terms:
            ids = [int(token) for token in term] if isinstance(term, list | tuple | torch.Tensor) else None
            if not ids or any(not 0 <= token < vocab_size for token in ids):
                raise ValueError(f"target_terms[{index}] holds {term!r}: each term must be a non-empty list of "
                                 f"target token ids in [0, {vocab_size})")
            if ids not in unique:
                unique.append(ids)
        checked.append(unique)
    return checked


class TargetTermsLogitsProcessor(LogitsProcessor):
    """Steers each hypothesis towards its sentence's target terms (the module docstring's rules 1-4).

    target_terms: per sentence, its terms (lists of token ids, in the ids the scores are indexed by); rows_per_sentence:
    the hypotheses of one sentence (beams or returned sequences), consecutive rows as generate() lays them out;
    max_new_tokens: (rows,) the most tokens each row may generate, </s> included; prompt_length: the decoder positions
    before the first generated token; eos_token_id: the end token(s); bonus: rule 3's score, in nats."""

    def __init__(self, target_terms: list[list[list[int]]], rows_per_sentence: int, max_new_tokens: torch.Tensor,
                 prompt_length: int, eos_token_id: torch.Tensor, bonus: float = DEFAULT_TERM_BONUS):
        pairs = [(sentence * rows_per_sentence + beam, term) for sentence, terms in enumerate(target_terms)
                 for beam in range(rows_per_sentence) for term in terms]
        device = max_new_tokens.device
        self.prompt_length = prompt_length
        self.max_new_tokens = max_new_tokens  # (rows,)
        self.eos_token_id = eos_token_id.reshape(-1).to(device)  # (n_eos,)
        self.bonus = bonus
        self.longest = max((len(term) for _, term in pairs), default=0)  # L
        # one entry per (row, term) pair: P pairs
        self.pair_row = torch.tensor([row for row, _ in pairs], dtype=torch.long, device=device)  # (P,)
        self.pair_length = torch.tensor([len(term) for _, term in pairs], dtype=torch.long, device=device)  # (P,)
        self.pair_terms = torch.full((len(pairs), max(self.longest, 1)), -1, dtype=torch.long, device=device)  # (P, L)
        for index, (_, term) in enumerate(pairs):
            self.pair_terms[index, : len(term)] = torch.tensor(term, dtype=torch.long)

    def term_state(self, generated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per pair: whether its row's tokens hold the term (met, (P,) bool), and how many of its first tokens the
        row ends with, below the whole term (progress, (P,) long, 0 when it has not started it).
        generated: (rows, g) the tokens generated so far."""
        pairs, longest = len(self.pair_row), self.longest
        fill = -2  # matches no token and no padding of pair_terms
        # each pair's row with room on both sides, so every window of L tokens and every suffix can be compared
        tokens = generated[self.pair_row]  # (P, g)
        padded = torch.cat([tokens.new_full((pairs, longest), fill), tokens, tokens.new_full((pairs, longest), fill)],
                           dim=1)  # (P, g + 2L)
        wildcard = self.pair_terms < 0  # (P, L): positions past a shorter term's end
        windows = padded.unfold(1, longest, 1)  # (P, g + L + 1, L)
        met = ((windows == self.pair_terms[:, None, :]) | wildcard[:, None, :]).all(dim=-1).any(dim=1)  # (P,)
        progress = torch.zeros(pairs, dtype=torch.long, device=generated.device)
        end = padded.shape[1] - longest  # the position after the last generated token
        for length in range(1, longest):
            suffix = padded[:, end - length : end]  # (P, length)
            started = (suffix == self.pair_terms[:, :length]).all(dim=1) & (length < self.pair_length)
            progress = torch.where(started, length, progress)
        return met, progress

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """input_ids: (rows, cur_len); scores: (rows, V) -> (rows, V)"""
        if len(self.pair_row) == 0:
            return scores
        rows = scores.shape[0]
        generated = input_ids[:, self.prompt_length :]  # (rows, g)
        met, progress = self.term_state(generated)
        unmet = ~met  # (P,)
        if not unmet.any():
            return scores
        scores = scores.clone()
        slots = self.max_new_tokens - generated.shape[1]  # (rows,) tokens this row may still generate, this one too
        # a row at its last token keeps </s> (a bound too short for its terms, which generate() raises when it can)
        row_unmet = torch.zeros(rows, dtype=torch.bool, device=scores.device).index_fill(0, self.pair_row[unmet], True)
        row_unmet &= slots > 1
        first_tokens = self.pair_terms[:, 0]  # (P,)
        # the first term not met of each row (the lowest pair index): rules 1 and 4
        pair_index = torch.arange(len(self.pair_row), device=scores.device)
        first_unmet = torch.full((rows,), len(self.pair_row), dtype=torch.long, device=scores.device).scatter_reduce(
            0, self.pair_row[unmet], pair_index[unmet], reduce="amin")  # (rows,), P where none
        has_unmet = (first_unmet < len(self.pair_row)) & row_unmet
        opening = first_tokens[first_unmet.clamp(max=len(self.pair_row) - 1)]  # (rows,) first token to write
        # rule 3: the bonus on the first token of every term not met and not started
        fresh = unmet & (progress == 0)
        scores[self.pair_row[fresh], first_tokens[fresh]] += self.bonus
        # rule 1: </s> closed; its probability goes to the first term's opening token
        eos_scores = scores[:, self.eos_token_id].logsumexp(dim=1)  # (rows,)
        opening_scores = scores.gather(1, opening[:, None]).squeeze(1)
        handed = torch.logaddexp(opening_scores, eos_scores)
        scores[has_unmet, opening[has_unmet]] = handed[has_unmet]
        scores[:, self.eos_token_id] = scores[:, self.eos_token_id].masked_fill(row_unmet[:, None], -math.inf)
        # rule 2: a started term continues (the longest start of a row wins); rule 4: out of room, open the first term
        started = unmet & (progress > 0)
        key = torch.where(started, progress * len(self.pair_row) + pair_index, -1)  # (P,)
        best = torch.full((rows,), -1, dtype=torch.long, device=scores.device).scatter_reduce(
            0, self.pair_row, key, reduce="amax")  # (rows,)
        chosen = best.clamp(min=0) % len(self.pair_row)  # (rows,) the pair each continuing row follows
        forced = torch.where((best >= 0) & row_unmet, self.pair_terms[chosen, progress[chosen]], -1)  # -1: none
        needed = torch.zeros(rows, dtype=torch.long, device=scores.device).index_add_(
            0, self.pair_row[unmet], (self.pair_length - progress)[unmet])  # tokens still to write, per row
        out_of_room = has_unmet & (best < 0) & (slots <= needed + 1)
        forced = torch.where(out_of_room, opening, forced)
        force = forced >= 0
        if force.any():
            kept = scores[force].gather(1, forced[force][:, None])  # (n, 1)
            kept = kept.masked_fill(kept.isneginf(), 0.0)  # a token another processor removed comes back
            scores[force] = torch.full_like(scores[force], -math.inf).scatter_(1, forced[force][:, None], kept)
        return scores


__all__ = ["DEFAULT_TERM_BONUS", "Glossary", "TargetTermsLogitsProcessor", "check_target_terms", "not_text", "words"]
