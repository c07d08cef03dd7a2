"""Lexical translation probabilities from a parallel corpus, and the vocabulary shortlist built from them.

The shortlist (:class:`hf_s2s.models.shortlist.VocabularyShortlist`) gives each source token its ``best`` most
probable target tokens by p(t | s) and keeps the ``first`` most frequent target tokens for every batch, as Marian's
lexical shortlist does (``--shortlist lex.s2t FIRST BEST``). Marian reads p(t | s) from word alignments (fast_align
and its ``extract_lex.py``); here it comes from IBM Model 1 (Brown et al. 1993, "The Mathematics of Statistical
Machine Translation: Parameter Estimation", Computational Linguistics 19(2), section 4.1) trained by EM on the
subword tokens of the model's own tokenizer, so no aligner is needed:

    E-step: for each target token t_j of a pair, the posterior of each source position i (and of NULL, the empty
            word) having produced it: p(a_j = i) = p(t_j | s_i) / sum_k p(t_j | s_k);
    M-step: p(t | s) = the expected count of (s, t) links / the expected count of links from s.

Five iterations from uniform probabilities (the first iteration is then co-occurrence counts spread evenly over each
target token's source positions). Special tokens (padding, </s>, ...) are left out of the counts.
"""

from collections import Counter
from collections.abc import Iterable, Sequence

import torch

from ..models.shortlist import VocabularyShortlist
from .tokenization import target_side

DEFAULT_FIRST = 100  # the most frequent target tokens every batch keeps (Marian's FIRST)
DEFAULT_BEST = 50  # target tokens kept per source token (Marian's BEST)
DEFAULT_ITERATIONS = 5  # EM iterations of IBM Model 1


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
    targets); every special token of either side is left out of the counts and kept for every batch."""
    target_tokenizer = target_side(tokenizer)
    special_source, special_target = set(tokenizer.all_special_ids), set(target_tokenizer.all_special_ids)
    source_ids = [[token for token in ids if token not in special_source]
                  for ids in tokenizer(list(sources))["input_ids"]]
    target_ids = [[token for token in ids if token not in special_target]
                  for ids in target_tokenizer(list(targets))["input_ids"]]
    return build_shortlist(source_ids, target_ids, source_vocab_size=source_vocab_size,
                           target_vocab_size=target_vocab_size, special_target_ids=special_target, first=first,
                           best=best, iterations=iterations, metadata=metadata)


__all__ = ["DEFAULT_BEST", "DEFAULT_FIRST", "DEFAULT_ITERATIONS", "build_shortlist", "ibm1_translation_table",
           "shortlist_from_texts"]
