"""Vocabulary shortlists: ``generate()`` over the few target tokens a sentence's source can plausibly need.

Marian's lexical shortlist (``--shortlist FILE FIRST BEST``, Junczys-Dowmunt et al. 2018, "Marian: Cost-effective
High-Quality Neural Machine Translation in C++", arXiv:1805.12096) and CTranslate2's ``use_vmap`` give each source
token its BEST most probable translations and add the FIRST most frequent target tokens; the output layer computes
only those rows of its weight instead of all V.

Here ``generate(..., shortlist=shortlist)`` (a :class:`VocabularyShortlist`, saved in a model folder as
``shortlist.safetensors``) lets each sentence generate only its own shortlist: the tokens of its source's lists, the
tokens kept always, the generation config's special tokens and the call's target terms. The call decodes over the K
tokens of the union over the batch, in compact ids of their own (``output_vocabulary.py``): each decoding step, the
output layer multiplies the K rows of its weight (gathered once per call), each row's logits outside its own
sentence's list are set to -inf, and the search (logits processors, the softmax, beam search's top-k, the ensemble's
mean) runs over those K columns, not the V; the returned ids (and scores) are mapped back to the full vocabulary.

Unlike Marian's, whose batch decodes over the union of its sentences' lists, a sentence's translation does not depend
on the sentences decoded beside it. The softmax is over the sentence's tokens (the others' logits are -inf): greedy
search picks what the full vocabulary would wherever that token is in the list; beam search equals the full
vocabulary's where the tokens left out carry no probability mass to speak of.

Copied beside the modeling files into every saved model folder (``save_pretrained`` follows single-dot relative
imports), so it imports nothing from hf_s2s; the shortlist itself is data (safetensors), never code.
"""

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .output_vocabulary import SPECIAL_TOKEN_FIELDS, OutputVocabulary

# The shortlist's file in a model folder.
SHORTLIST_FILE = "shortlist.safetensors"
SHORTLIST_FORMAT = "hf_s2s-shortlist-1"


class VocabularyShortlist:
    """A lexical shortlist: for each source token, its most probable target tokens (``candidates``), and the
    target tokens every batch gets (``always``: the most frequent ones and the special tokens).

    Stored compressed: ``offsets`` (S + 1,) and ``targets`` (nnz,), source token s having ``targets[offsets[s] :
    offsets[s + 1]]``, best first. ``metadata``: how it was built (strings), saved with it."""

    def __init__(self, offsets: torch.Tensor, targets: torch.Tensor, always: torch.Tensor, source_vocab_size: int,
                 target_vocab_size: int, metadata: dict[str, str] | None = None):
        offsets, targets, always = (torch.as_tensor(t, dtype=torch.long) for t in (offsets, targets, always))
        if offsets.shape != (source_vocab_size + 1,) or int(offsets[0]) != 0 or int(offsets[-1]) != len(targets) \
                or (offsets.diff() < 0).any():
            raise ValueError(f"a shortlist's offsets must be ({source_vocab_size + 1},), non-decreasing from 0 to "
                             f"the number of targets ({len(targets)})")
        for name, ids in (("targets", targets), ("always", always)):
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= target_vocab_size):
                raise ValueError(f"a shortlist's {name} must lie in the target vocabulary [0, {target_vocab_size})")
        self.offsets, self.targets, self.always = offsets, targets, always
        self.source_vocab_size, self.target_vocab_size = source_vocab_size, target_vocab_size
        self.metadata = dict(metadata or {})

    @classmethod
    def from_candidates(cls, candidates: list[list[int]], always: Iterable[int], target_vocab_size: int,
                        metadata: dict[str, str] | None = None) -> "VocabularyShortlist":
        """``candidates[s]``: source token s's target tokens, best first (one list per source token)."""
        lengths = torch.tensor([len(c) for c in candidates], dtype=torch.long)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
        targets = torch.tensor([t for c in candidates for t in c], dtype=torch.long)
        return cls(offsets, targets, torch.tensor(sorted(set(always)), dtype=torch.long), len(candidates),
                   target_vocab_size, metadata)

    def __repr__(self) -> str:
        return (f"VocabularyShortlist({self.source_vocab_size} source tokens -> {self.target_vocab_size} target "
                f"tokens, {len(self.always)} always kept, {len(self.targets)} candidates)")

    def candidates(self, source_token: int) -> list[int]:
        """Source token ``source_token``'s target tokens, best first."""
        return self.targets[self.offsets[source_token] : self.offsets[source_token + 1]].tolist()

    def allowed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                include: Iterable[int] = (), include_per_sentence: list[Iterable[int]] | None = None) -> torch.Tensor:
        """Per sentence, the target tokens it may generate: the candidates of each of its source tokens (input_ids
        (B, S); positions where ``attention_mask`` is 0 left out), the tokens kept always, ``include`` (every
        sentence) and ``include_per_sentence[b]``. Returns (B, V) bool."""
        input_ids = input_ids.cpu()
        real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.cpu().bool()
        sentence, position = real.nonzero(as_tuple=True)  # (n,) each real source position
        tokens = input_ids[sentence, position]  # (n,)
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.source_vocab_size):
            raise ValueError(f"the shortlist covers source token ids [0, {self.source_vocab_size}), and the input "
                             f"holds {int(tokens.min())} .. {int(tokens.max())}: it was built for another vocabulary")
        starts, lengths = self.offsets[tokens], self.offsets[tokens + 1] - self.offsets[tokens]  # (n,), (n,)
        # the flat position of each candidate: its source token's start plus its rank in that token's list
        first_of_each = (lengths.cumsum(0) - lengths).repeat_interleave(lengths)  # (m,)
        flat = starts.repeat_interleave(lengths) + torch.arange(int(lengths.sum())) - first_of_each  # (m,)
        allowed = torch.zeros(len(input_ids), self.target_vocab_size, dtype=torch.bool)  # (B, V)
        allowed[sentence.repeat_interleave(lengths), self.targets[flat]] = True
        allowed[:, self.always] = True
        allowed[:, torch.as_tensor(list(include), dtype=torch.long)] = True
        for row, extra in enumerate(include_per_sentence or []):
            allowed[row, torch.as_tensor(list(extra), dtype=torch.long)] = True
        return allowed

    def check_fits(self, source_vocab_size: int, target_vocab_size: int, name: str = "the model") -> None:
        """A ValueError where the shortlist was built for other vocabulary sizes than ``name``'s."""
        if (self.source_vocab_size, self.target_vocab_size) != (source_vocab_size, target_vocab_size):
            raise ValueError(f"the shortlist maps {self.source_vocab_size} source to {self.target_vocab_size} target "
                             f"tokens, but {name} has {source_vocab_size} and {target_vocab_size}: it was built for "
                             "another vocabulary")

    # files --------------------------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the shortlist as a safetensors file (int32 ids, the sizes and ``metadata`` in its header)."""
        header = {"format": SHORTLIST_FORMAT, "source_vocab_size": str(self.source_vocab_size),
                  "target_vocab_size": str(self.target_vocab_size), "info": json.dumps(self.metadata, sort_keys=True)}
        save_file({"offsets": self.offsets.to(torch.int64), "targets": self.targets.to(torch.int32),
                   "always": self.always.to(torch.int32)}, str(path), metadata=header)

    @classmethod
    def load(cls, path: str | Path) -> "VocabularyShortlist":
        """Read a file written by :meth:`save`; another file is a ValueError saying what it is not."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"no shortlist file {path}: build one with hf-s2s build-shortlist")
        try:
            with safe_open(str(path), framework="pt") as file:
                header = file.metadata() or {}
                tensors = {name: file.get_tensor(name) for name in file.keys()}
        except Exception as error:  # safetensors' own errors: a damaged or foreign file
            raise ValueError(f"{path} is not a readable safetensors file ({type(error).__name__}: {error})") from None
        if header.get("format") != SHORTLIST_FORMAT or set(tensors) != {"offsets", "targets", "always"}:
            raise ValueError(f"{path} is not an hf_s2s shortlist (format {header.get('format')!r}, tensors "
                             f"{sorted(tensors)}): build one with hf-s2s build-shortlist")
        return cls(tensors["offsets"], tensors["targets"], tensors["always"], int(header["source_vocab_size"]),
                   int(header["target_vocab_size"]), json.loads(header.get("info", "{}")))

    def save_pretrained(self, folder: str | Path) -> Path:
        """Save as ``folder/shortlist.safetensors``; returns the path."""
        path = Path(folder) / SHORTLIST_FILE
        self.save(path)
        return path

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "VocabularyShortlist":
        """The shortlist saved in a model folder (``shortlist.safetensors``)."""
        return cls.load(Path(folder) / SHORTLIST_FILE)


__all__ = ["SHORTLIST_FILE", "SPECIAL_TOKEN_FIELDS", "OutputVocabulary", "VocabularyShortlist"]
