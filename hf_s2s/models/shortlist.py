"""Vocabulary shortlists: ``generate()`` over the few target tokens a batch's sources can plausibly need.

Marian's lexical shortlist (``--shortlist FILE FIRST BEST``, Junczys-Dowmunt et al. 2018, "Marian: Cost-effective
High-Quality Neural Machine Translation in C++", arXiv:1805.12096) and CTranslate2's ``use_vmap`` give each source
token its BEST most probable translations, add the FIRST most frequent target tokens, and decode every sentence of a
batch over the union: the output layer computes those K rows of its weight instead of all V, and beam search ranks
K candidates per hypothesis.

Here a ``generate()`` call with ``shortlist=`` (a :class:`VocabularyShortlist`, saved in a model folder as
``shortlist.safetensors``) or ``output_vocabulary=`` (an :class:`OutputVocabulary`, a fixed set of target tokens)
decodes in that reduced vocabulary from end to end, as Marian and CTranslate2 do: the decoder reads back reduced ids
(mapped to the full ones before its embedding), the output layer gives (rows, K) logits from its gathered weight rows,
the logits processors, the search and the special tokens of the generation config work on K columns, and the
sequences (and the scores, when returned) are mapped back to the full vocabulary at the end. The softmax is
normalized over the K tokens, as in both toolkits: the tokens kept get the probability the model gives them among
those K, so greedy search picks what the full vocabulary would whenever its choice is in the shortlist, and beam
search equals the full vocabulary's where the tokens left out carry no probability mass to speak of.

Copied beside the modeling files into every saved model folder (``save_pretrained`` follows single-dot relative
imports), so it imports nothing from hf_s2s; the shortlist itself is data (safetensors), never code.
"""

import json
from collections.abc import Iterable
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

# The shortlist's file in a model folder.
SHORTLIST_FILE = "shortlist.safetensors"
SHORTLIST_FORMAT = "hf_s2s-shortlist-1"

# The generation config's fields that hold target token ids: every one set joins the output vocabulary and is
# mapped to its reduced id.
SPECIAL_TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "forced_bos_token_id",
                        "forced_eos_token_id")
# Lists of target token ids that only ever remove tokens: those outside the shortlist cannot be generated anyway.
SUPPRESSED_TOKEN_FIELDS = ("suppress_tokens", "begin_suppress_tokens")
# Settings that read token ids in another vocabulary (the source's, a tokenizer's strings) or bias whole sequences: a
# shortlist would give them reduced ids they cannot read. Each with the value under which generate() does without it.
REFUSED_SETTINGS = {"encoder_repetition_penalty": 1.0, "encoder_no_repeat_ngram_size": 0, "sequence_bias": None,
                    "watermarking_config": None, "stop_strings": None, "guidance_scale": None,
                    "prompt_lookup_num_tokens": None, "token_healing": False}
# generate() arguments that hand token ids or scores to code that does not know the reduced vocabulary.
REFUSED_ARGUMENTS = ("logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "assistant_model",
                     "streamer", "negative_prompt_ids", "custom_generate", "inputs_embeds", "decoder_inputs_embeds")


class OutputVocabulary:
    """The target tokens one ``generate()`` call decodes over: ``token_ids`` (K,), sorted full-vocabulary ids, of a
    vocabulary of ``vocab_size`` (V) tokens. Reduced id k stands for full id ``token_ids[k]``.

    ``generate(..., output_vocabulary=vocabulary)`` decodes over these K tokens (see the module docstring); a model's
    forward given it reads its ``decoder_input_ids`` as reduced ids and returns (B, T, K) logits."""

    def __init__(self, token_ids: Iterable[int] | torch.Tensor, vocab_size: int):
        token_ids = torch.as_tensor(token_ids if torch.is_tensor(token_ids) else list(token_ids), dtype=torch.long)
        if token_ids.dim() != 1 or token_ids.numel() == 0:
            raise ValueError(f"an output vocabulary is a non-empty list of target token ids, got shape "
                             f"{tuple(token_ids.shape)}")
        token_ids = token_ids.unique()  # sorted
        if int(token_ids[0]) < 0 or int(token_ids[-1]) >= vocab_size:
            raise ValueError(f"output vocabulary ids must lie in the target vocabulary [0, {vocab_size}), got "
                             f"{int(token_ids[0])} .. {int(token_ids[-1])}")
        self.token_ids = token_ids  # (K,) full ids, sorted
        self.vocab_size = vocab_size  # V
        self.positions = torch.full((vocab_size,), -1, dtype=torch.long)  # (V,) reduced id of each full id, or -1
        self.positions[token_ids] = torch.arange(len(token_ids))
        self._on_device = {}  # device -> (token_ids, positions) there
        self._rows = None  # (key, weight (K, H), bias (K,) or None): the output layer's gathered rows, see logits()

    def __len__(self) -> int:
        return len(self.token_ids)

    def __repr__(self) -> str:
        return f"OutputVocabulary({len(self)} of {self.vocab_size} target tokens)"

    def including(self, token_ids: Iterable[int]) -> "OutputVocabulary":
        """This vocabulary, or where ``token_ids`` holds others, a new one with them too."""
        token_ids = torch.as_tensor(list(token_ids), dtype=torch.long)
        if token_ids.numel() == 0 or bool(self.contains(token_ids).all()):
            return self
        return OutputVocabulary(torch.cat([self.token_ids, token_ids]), self.vocab_size)

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._on_device:
            self._on_device[device] = (self.token_ids.to(device), self.positions.to(device))
        return self._on_device[device]

    def contains(self, full_ids: torch.Tensor) -> torch.Tensor:
        """Whether each full id is in the vocabulary; same shape, bool."""
        return self._tables(full_ids.device)[1][full_ids] >= 0

    def reduce(self, full_ids: torch.Tensor | int | list, name: str = "token ids"):
        """Full ids -> reduced ids (a tensor, an int or a list alike); an id outside the vocabulary is a ValueError
        naming ``name``."""
        if not torch.is_tensor(full_ids):
            reduced = self.reduce(torch.as_tensor(full_ids, dtype=torch.long), name)
            return reduced.tolist()
        reduced = self._tables(full_ids.device)[1][full_ids]
        if (reduced < 0).any():
            missing = sorted(set(full_ids[reduced < 0].tolist()))[:10]
            raise ValueError(f"{name} hold target token id(s) {missing} outside this call's output vocabulary of "
                             f"{len(self)} tokens: include them in it")
        return reduced

    def restore(self, reduced_ids: torch.Tensor) -> torch.Tensor:
        """Reduced ids -> full ids, any shape."""
        return self._tables(reduced_ids.device)[0][reduced_ids]

    def restore_scores(self, scores: torch.Tensor) -> torch.Tensor:
        """(..., K) scores -> (..., V): each at its full id, -inf at the tokens the call could not generate."""
        full = scores.new_full((*scores.shape[:-1], self.vocab_size), float("-inf"))
        return full.index_copy_(-1, self._tables(scores.device)[0], scores)

    def logits(self, lm_head: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
        """The output layer on the vocabulary's rows only: hidden_states (..., H) -> logits (..., K), as the full
        layer's would be at those ids. The gathered (K, H) rows are kept while the layer's weight is unchanged (a
        decoding call gathers them once); under autograd they are gathered on every call."""
        if not isinstance(lm_head, nn.Linear):
            raise ValueError(f"a shortlist gathers rows of the output layer's weight, which needs an nn.Linear output "
                             f"layer; this model's is {type(lm_head).__name__} (int8 weights?): decode it in float "
                             "precision, or without the shortlist")
        weight, bias = lm_head.weight, lm_head.bias
        if weight.shape[0] != self.vocab_size:
            raise ValueError(f"the output vocabulary is for {self.vocab_size} target tokens but the output layer has "
                             f"{weight.shape[0]}")
        token_ids = self._tables(weight.device)[0]
        if torch.is_grad_enabled() and weight.requires_grad:
            return F.linear(hidden_states, weight[token_ids], None if bias is None else bias[token_ids])
        key = (weight.data_ptr(), weight._version, weight.dtype, weight.device,
               None if bias is None else (bias.data_ptr(), bias._version))
        if self._rows is None or self._rows[0] != key:
            rows = weight.detach().index_select(0, token_ids)  # (K, H)
            self._rows = (key, rows, None if bias is None else bias.detach().index_select(0, token_ids))
        return F.linear(hidden_states, self._rows[1], self._rows[2])  # (..., K)

    # generate() glue --------------------------------------------------------------------------------------------

    def reduce_generation_config(self, generation_config) -> None:
        """Map a call's generation config (its own copy) into the reduced vocabulary: the special token ids (each
        must be in the vocabulary), the suppressed tokens (those outside it are dropped: they cannot be generated)
        and ``bad_words_ids`` (a sequence with a token outside it can never appear). A setting that reads ids in
        another vocabulary is a ValueError naming it."""
        for name, neutral in REFUSED_SETTINGS.items():
            value = getattr(generation_config, name, None)
            if value is not None and value != neutral and value not in ([], ()):
                raise ValueError(f"{name}={value!r} cannot decode with a vocabulary shortlist (it reads token ids "
                                 f"outside the shortlist's reduced ids): set it to {neutral!r}, or decode without "
                                 "the shortlist")
        for name in SPECIAL_TOKEN_FIELDS:
            value = getattr(generation_config, name, None)
            if value is not None:
                setattr(generation_config, name, self.reduce(value, f"the generation config's {name}"))
        for name in SUPPRESSED_TOKEN_FIELDS:
            value = getattr(generation_config, name, None)
            if value:
                kept = [token for token in value if 0 <= token < self.vocab_size and self.positions[token] >= 0]
                setattr(generation_config, name, self.reduce(kept) if kept else None)
        if generation_config.bad_words_ids:
            kept = [ids for ids in generation_config.bad_words_ids
                    if all(0 <= token < self.vocab_size and self.positions[token] >= 0 for token in ids)]
            generation_config.bad_words_ids = [self.reduce(ids) for ids in kept] or None

    def restore_output(self, output):
        """A ``generate()`` result in the reduced vocabulary -> in the full one: the sequences (a tensor, or a
        ``GenerateOutput``'s ``sequences``) and, when present, the per-step ``scores`` and ``logits`` (each (rows, K)
        -> (rows, V), -inf where the call could not generate)."""
        if torch.is_tensor(output):
            return self.restore(output)
        output.sequences = self.restore(output.sequences)
        for name in ("scores", "logits"):
            steps = getattr(output, name, None)
            if steps is not None:
                setattr(output, name, tuple(self.restore_scores(step) for step in steps))
        return output


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

    def target_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   include: Iterable[int] = ()) -> torch.Tensor:
        """The union over a batch: the candidates of every source token (input_ids (B, S); positions where
        ``attention_mask`` is 0 left out), the tokens kept always, and ``include``. Returns (K,) sorted ids."""
        tokens = input_ids if attention_mask is None else input_ids[attention_mask.bool()]
        tokens = tokens.reshape(-1).cpu().unique()  # (n,)
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.source_vocab_size):
            raise ValueError(f"the shortlist covers source token ids [0, {self.source_vocab_size}), and the input "
                             f"holds {int(tokens.min())} .. {int(tokens.max())}: it was built for another vocabulary")
        starts, lengths = self.offsets[tokens], self.offsets[tokens + 1] - self.offsets[tokens]  # (n,), (n,)
        # the flat position of each candidate: its source token's start plus its rank in that token's list
        first_of_each = (lengths.cumsum(0) - lengths).repeat_interleave(lengths)  # (nnz_batch,)
        flat = starts.repeat_interleave(lengths) + torch.arange(int(lengths.sum())) - first_of_each
        keep = torch.zeros(self.target_vocab_size, dtype=torch.bool)
        keep[self.targets[flat]] = True
        keep[self.always] = True
        include = torch.as_tensor(list(include), dtype=torch.long)
        if include.numel():
            keep[include] = True
        return keep.nonzero().squeeze(1)

    def output_vocabulary(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                          include: Iterable[int] = ()) -> OutputVocabulary:
        """The :class:`OutputVocabulary` a batch decodes over (:meth:`target_ids`)."""
        return OutputVocabulary(self.target_ids(input_ids, attention_mask, include), self.target_vocab_size)

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


__all__ = ["SHORTLIST_FILE", "OutputVocabulary", "VocabularyShortlist"]
