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

**Building one** (:func:`shortlist_from_texts`): p(t | s) comes from IBM Model 1 (Brown et al. 1993, "The Mathematics
of Statistical Machine Translation: Parameter Estimation", Computational Linguistics 19(2), section 4.1) trained by
EM on the subword tokens of the model's own tokenizer, so no aligner is needed (Marian reads it from fast_align's
word alignments and its ``extract_lex.py``):

    E-step: for each target token t_j of a pair, the posterior of each source position i (and of NULL, the empty
            word) having produced it: p(a_j = i) = p(t_j | s_i) / sum_k p(t_j | s_k);
    M-step: p(t | s) = the expected count of (s, t) links / the expected count of links from s.

Five iterations from uniform probabilities (the first iteration is then co-occurrence counts spread evenly over each
target token's source positions). Special tokens (padding, </s>, ...) are left out of the counts.

**Its file** is read whole (never memory-mapped, so a file rewritten or truncated while a server runs cannot take the
process down) and checked before use: its safetensors header, its sizes, its vocabulary (a fingerprint of the
tokenizer it was built with) and its direction (the languages it was built for) against the folder's
(:meth:`VocabularyShortlist.check_folder`).

Copied beside the modeling files into every saved model folder (``save_pretrained`` follows single-dot relative
imports), so it imports nothing from hf_s2s: a user without hf_s2s builds, saves and loads a shortlist with the
folder's own copy (docs/inference.md). The shortlist itself is data (safetensors), never code.
"""

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file

from .output_vocabulary import SPECIAL_TOKEN_FIELDS, OutputVocabulary

# The shortlist's file in a model folder.
SHORTLIST_FILE = "shortlist.safetensors"
SHORTLIST_FORMAT = "hf_s2s-shortlist-1"

# The header fields a shortlist file holds besides its tensors, and the tensors.
_SIZE_FIELDS = ("source_vocab_size", "target_vocab_size")
_TENSORS = {"offsets", "targets", "always"}
# The languages a shortlist was built for, in its metadata (hf-s2s build-shortlist writes them).
LANGUAGE_FIELDS = ("source_lang", "target_lang")

DEFAULT_FIRST = 100  # the most frequent target tokens every batch keeps (Marian's FIRST)
DEFAULT_BEST = 50  # target tokens kept per source token (Marian's BEST)
DEFAULT_ITERATIONS = 5  # EM iterations of IBM Model 1


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

    def check_folder(self, tokenizer, languages: tuple[str, str] | None = None, name: str = "the model",
                     folder: str = "FOLDER") -> None:
        """A ValueError where the shortlist was built for another model than ``name`` (its ``folder``), whose
        ``tokenizer`` it is checked against by the vocabulary fingerprint it records (:func:`vocabulary_fingerprint`),
        and whose direction ``languages`` (source, target; None: not known) by the languages it records: a shortlist
        of the reverse direction holds the target language's tokens' translations, not the source's."""
        recorded = self.metadata.get("vocabulary")
        if recorded is not None and recorded != vocabulary_fingerprint(tokenizer):
            raise ValueError(f"the shortlist was built with another tokenizer than {name}'s (their vocabularies "
                             f"differ): build it again with hf-s2s build-shortlist {folder}")
        built = tuple(self.metadata.get(field) for field in LANGUAGE_FIELDS)
        if languages is not None and None not in built and built != tuple(languages):
            reverse = " (the reverse direction)" if built == tuple(reversed(languages)) else ""
            raise ValueError(f"the shortlist was built for {built[0]} -> {built[1]}{reverse}, and {name} translates "
                             f"{languages[0]} -> {languages[1]}: build one for this direction with hf-s2s "
                             f"build-shortlist {folder} --source_lang {languages[0]} --target_lang {languages[1]}")

    # files --------------------------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the shortlist as a safetensors file (int32 ids, the sizes and ``metadata`` in its header)."""
        header = {"format": SHORTLIST_FORMAT, "source_vocab_size": str(self.source_vocab_size),
                  "target_vocab_size": str(self.target_vocab_size), "info": json.dumps(self.metadata, sort_keys=True)}
        save_file({"offsets": self.offsets.to(torch.int64), "targets": self.targets.to(torch.int32),
                   "always": self.always.to(torch.int32)}, str(path), metadata=header)

    @classmethod
    def load(cls, path: str | Path) -> "VocabularyShortlist":
        """Read a file written by :meth:`save`, whole (see the module docstring); another file is a ValueError naming
        it and what it is not."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"no shortlist file {path}: build one with hf-s2s build-shortlist")
        try:
            data = path.read_bytes()
        except OSError as error:
            raise ValueError(f"{path} cannot be read: {error.strerror or error}") from None
        return cls.from_bytes(data, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "the shortlist") -> "VocabularyShortlist":
        """A shortlist from the bytes of its file (``name`` names it in the errors), every part checked: the
        safetensors header, the format, the sizes (whole numbers), the build information (JSON) and the tensors'
        shapes and ids."""
        header = _safetensors_header(data, name)
        metadata = header.get("__metadata__") or {}
        if metadata.get("format") != SHORTLIST_FORMAT or set(header) - {"__metadata__"} != _TENSORS:
            raise ValueError(f"{name} is not an hf_s2s shortlist (format {metadata.get('format')!r}, tensors "
                             f"{sorted(set(header) - {'__metadata__'})}): build one with hf-s2s build-shortlist")
        sizes = {}
        for field in _SIZE_FIELDS:
            value = metadata.get(field)
            if not isinstance(value, str) or not value.isdigit() or not value.isascii():
                raise ValueError(f"{name}: its header's field {field!r} is {value!r}, not a whole number: the file is "
                                 "damaged; build it again with hf-s2s build-shortlist")
            sizes[field] = int(value)
        try:
            info = json.loads(metadata.get("info", "{}"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{name}: its header's field 'info' is not JSON ({error}): the file is damaged; build it "
                             "again with hf-s2s build-shortlist") from None
        if not isinstance(info, dict) or not all(isinstance(value, str) for value in info.values()):
            raise ValueError(f"{name}: its header's field 'info' is not an object of strings: the file is damaged; "
                             "build it again with hf-s2s build-shortlist")
        try:
            tensors = load_safetensors(data)
        except Exception as error:  # safetensors' own errors: offsets past the data, an unknown dtype
            raise ValueError(f"{name} is not a readable safetensors file ({type(error).__name__}: {error})") from None
        try:
            return cls(tensors["offsets"], tensors["targets"], tensors["always"], metadata=info, **sizes)
        except ValueError as error:
            raise ValueError(f"{name}: {error}: the file is damaged; build it again with hf-s2s build-shortlist"
                             ) from None

    def save_pretrained(self, folder: str | Path) -> Path:
        """Save as ``folder/shortlist.safetensors``; returns the path."""
        path = Path(folder) / SHORTLIST_FILE
        self.save(path)
        return path

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "VocabularyShortlist":
        """The shortlist saved in a model folder (``shortlist.safetensors``)."""
        return cls.load(Path(folder) / SHORTLIST_FILE)


def _safetensors_header(data: bytes, name: str) -> dict:
    """The JSON header of a safetensors file's bytes: an 8-byte little-endian length, then that many bytes of JSON."""
    if len(data) < 8:
        raise ValueError(f"{name} is not a readable safetensors file ({len(data)} bytes, shorter than its header)")
    length = int.from_bytes(data[:8], "little")
    if length > len(data) - 8:
        raise ValueError(f"{name} is not a readable safetensors file (its header says {length:,} bytes, and "
                         f"{len(data) - 8:,} follow: truncated?)")
    try:
        header = json.loads(data[8 : 8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{name} is not a readable safetensors file (its header is not JSON: {error})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{name} is not a readable safetensors file (its header is not a JSON object)")
    return header


def _target_side(tokenizer):
    """The tokenizer of the target vocabulary (a separate-vocabulary tokenizer's ``target_tokenizer``), else the
    tokenizer itself."""
    return getattr(tokenizer, "target_tokenizer", tokenizer)


def vocabulary_fingerprint(tokenizer) -> str:
    """sha256 of the tokenizer's source and target vocabularies (every token and its id): what a shortlist records of
    the tokenizer it was built with, equal only for tokenizers that give the same ids."""
    digest = hashlib.sha256()
    for side in (tokenizer, _target_side(tokenizer)):
        for token, index in sorted(side.get_vocab().items(), key=lambda item: item[1]):
            digest.update(f"{index}\t{token}\n".encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


# ------------------------------------------------------------------------------------- building one from a corpus


def ibm1_translation_table(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], source_vocab_size: int,
                           iterations: int = DEFAULT_ITERATIONS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """IBM Model 1's p(t | s) over the token pairs that co-occur in some sentence pair (the only ones EM gives a
    probability above 0), from ``sources[n]`` / ``targets[n]``, sentence n's token ids (special tokens removed).

    Returns (source ids (D,), target ids (D,), p(t | s) (D,)) for the D distinct co-occurring pairs; the NULL word
    (id ``source_vocab_size``) takes part in the estimate and is left out of the result."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source and {len(targets)} target sentences: the corpus must be aligned")
    null = source_vocab_size
    link_source, link_target, link_token = [], [], []  # one entry per (source position, target position) of a pair
    token = 0  # a running id for each target token occurrence: the E-step normalizes over its links
    for source, target in zip(sources, targets, strict=True):
        if not target:
            continue
        source = torch.tensor([*source, null], dtype=torch.long)  # (m + 1,)
        target = torch.tensor(target, dtype=torch.long)  # (n,)
        link_source.append(source.repeat(len(target)))  # (n x (m + 1),) source position varying fastest
        link_target.append(target.repeat_interleave(len(source)))
        link_token.append(torch.arange(token, token + len(target)).repeat_interleave(len(source)))
        token += len(target)
    if token == 0:
        raise ValueError("the corpus has no target tokens: nothing to estimate")
    link_source, link_target, link_token = torch.cat(link_source), torch.cat(link_target), torch.cat(link_token)
    target_vocab_size = int(link_target.max()) + 1
    pair_keys, link_pair = torch.unique(link_source * target_vocab_size + link_target, return_inverse=True)  # (D,), (E,)
    pair_source, pair_target = pair_keys // target_vocab_size, pair_keys % target_vocab_size
    probability = torch.ones(len(pair_keys), dtype=torch.float64)  # uniform start
    for _ in range(iterations):
        weight = probability[link_pair]  # (E,) p(t_j | s_i) of each link
        per_token = torch.zeros(token, dtype=torch.float64).index_add_(0, link_token, weight)  # (tokens,)
        posterior = weight / per_token[link_token]  # E-step, (E,)
        counts = torch.zeros(len(pair_keys), dtype=torch.float64).index_add_(0, link_pair, posterior)  # (D,)
        per_source = torch.zeros(null + 1, dtype=torch.float64).index_add_(0, pair_source, counts)  # (S + 1,)
        probability = counts / per_source[pair_source]  # M-step
    real = pair_source != null
    return pair_source[real], pair_target[real], probability[real]


def build_shortlist(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], *, source_vocab_size: int,
                    target_vocab_size: int, special_target_ids: Iterable[int], first: int = DEFAULT_FIRST,
                    best: int = DEFAULT_BEST, iterations: int = DEFAULT_ITERATIONS,
                    metadata: dict[str, str] | None = None) -> VocabularyShortlist:
    """The shortlist of a tokenized corpus (token ids, special tokens removed): each source token's ``best`` target
    tokens by IBM Model 1's p(t | s) (:func:`ibm1_translation_table`), best first, and the ``first`` most frequent
    target tokens with ``special_target_ids`` kept for every batch."""
    for name, value in (("first", first), ("best", best), ("iterations", iterations)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    if first == 0 and best == 0:
        raise ValueError("first and best are both 0: the shortlist would hold only the special tokens")
    largest = max((max(ids) for ids in sources if ids), default=-1)
    if largest >= source_vocab_size:
        raise ValueError(f"the corpus holds source token id {largest}, outside the source vocabulary of "
                         f"{source_vocab_size}")
    pair_source, pair_target, probability = ibm1_translation_table(sources, targets, source_vocab_size, iterations)
    if int(pair_target.max()) >= target_vocab_size:
        raise ValueError(f"the corpus holds target token id {int(pair_target.max())}, outside the target vocabulary "
                         f"of {target_vocab_size}")
    # group by source token, most probable first (ties: the lower target id), and keep the first `best` of each
    order = torch.argsort(pair_target, stable=True)
    order = order[torch.argsort(-probability[order], stable=True)]
    order = order[torch.argsort(pair_source[order], stable=True)]
    grouped_source, grouped_target = pair_source[order], pair_target[order]
    per_source = torch.bincount(grouped_source, minlength=source_vocab_size)  # (S,)
    group_start = (per_source.cumsum(0) - per_source).repeat_interleave(per_source)  # (D,)
    kept = torch.arange(len(order)) - group_start < best
    kept_per_source = torch.bincount(grouped_source[kept], minlength=source_vocab_size)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), kept_per_source.cumsum(0)])
    frequency = Counter(token for target in targets for token in target)
    frequent = [token for token, _ in sorted(frequency.items(), key=lambda item: (-item[1], item[0]))[:first]]
    always = torch.tensor(sorted(set(frequent) | set(special_target_ids)), dtype=torch.long)
    info = {"method": "ibm1", "iterations": iterations, "first": first, "best": best, "sentence_pairs": len(sources),
            **(metadata or {})}
    return VocabularyShortlist(offsets, grouped_target[kept], always, source_vocab_size, target_vocab_size,
                               {key: str(value) for key, value in info.items()})


def shortlist_from_texts(tokenizer, sources: Sequence[str], targets: Sequence[str], *, source_vocab_size: int,
                         target_vocab_size: int, first: int = DEFAULT_FIRST, best: int = DEFAULT_BEST,
                         iterations: int = DEFAULT_ITERATIONS, metadata: dict[str, str] | None = None
                         ) -> VocabularyShortlist:
    """:func:`build_shortlist` of sentence pairs tokenized by a model's ``tokenizer`` (its target side for the
    targets); every special token of either side is left out of the counts and kept for every batch. The shortlist
    records the tokenizer's :func:`vocabulary_fingerprint` (and ``metadata``: the corpus and its languages,
    ``source_lang`` and ``target_lang``), which :meth:`VocabularyShortlist.check_folder` checks."""
    target_tokenizer = _target_side(tokenizer)
    special_source, special_target = set(tokenizer.all_special_ids), set(target_tokenizer.all_special_ids)
    source_ids = [[token for token in ids if token not in special_source]
                  for ids in tokenizer(list(sources))["input_ids"]]
    target_ids = [[token for token in ids if token not in special_target]
                  for ids in target_tokenizer(list(targets))["input_ids"]]
    return build_shortlist(source_ids, target_ids, source_vocab_size=source_vocab_size,
                           target_vocab_size=target_vocab_size, special_target_ids=special_target, first=first,
                           best=best, iterations=iterations,
                           metadata={**(metadata or {}), "vocabulary": vocabulary_fingerprint(tokenizer)})


__all__ = ["DEFAULT_BEST", "DEFAULT_FIRST", "DEFAULT_ITERATIONS", "LANGUAGE_FIELDS", "SHORTLIST_FILE",
           "SPECIAL_TOKEN_FIELDS", "OutputVocabulary", "VocabularyShortlist", "build_shortlist",
           "ibm1_translation_table", "shortlist_from_texts", "vocabulary_fingerprint"]
