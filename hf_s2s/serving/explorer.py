"""What the server does for the attention explorer beyond translating: the one attention map a view asks for
(``attention`` in ``POST /translate`` and ``POST /score``) instead of every layer and head, forced decoding
(``POST /score``: given translations read under teacher forcing, with their token log-probabilities), and the search
a request's translations came from (``search`` in the answer, which says what a score is).

A map is read from the hypothesis itself: each returned hypothesis (the n-best list's too) is read under teacher
forcing with the options that produced it (:meth:`hf_s2s.inference.engines.Engine.force_hypotheses`), so its map is
the attention that produced it, and the page can ask ``/score`` for another view of the same tokens
(``target_tokens``) when the user switches layer, head, kind or words.
"""

from ..data.tokenization import target_side
from ..inference.attention_maps import KINDS, attention_map, attention_shape, check_view
from ..inference.decoding import DecodingOptions
from ..inference.engines import Engine
from ..inference.forced import ForcedTranslation
from . import schemas


def check_view_request(engine: Engine, view: schemas.AttentionView | None) -> None:
    """A ValueError where ``engine`` cannot give ``view`` (before anything is queued): no attention from the engine or
    the model, a kind the model lacks, a layer or head out of range."""
    if view is None:
        return
    engine.check_alignment()
    engine.check_forced()
    check_view(engine.config, view.kind, view.layer, view.head)


def attention_shapes(engine: Engine) -> dict[str, list[int]]:
    """The maps a view of ``engine``'s translations can show: kind -> [layers, heads]; none where the engine or its
    model gives no attention weights."""
    try:
        engine.check_alignment()
        engine.check_forced()
    except ValueError:
        return {}
    return {kind: list(shape) for kind in KINDS if (shape := attention_shape(engine.config, kind)) is not None}


def map_answer(forced: ForcedTranslation, view: schemas.AttentionView, tokenizer) -> schemas.AttentionMap:
    found = attention_map(forced, tokenizer, kind=view.kind, layer=view.layer, head=view.head,
                          word_level=view.word_level)
    return schemas.AttentionMap(**found.to_dict())


def with_attention(answer: schemas.Hypothesis, forced: ForcedTranslation, view: schemas.AttentionView,
                   tokenizer) -> None:
    """Add to ``answer`` the tokens of its hypothesis, their log-probabilities and the map of ``view``."""
    answer.tokens = forced.target_tokens
    answer.token_log_probs = forced.token_log_probs
    answer.attention = map_answer(forced, view, tokenizer)


def search_answer(options: DecodingOptions) -> schemas.Search:
    """The search ``options`` describe, and what its scores are."""
    if options.num_beams == 1:
        score = "greedy search: the sum of the token log-probabilities (natural log), </s> included"
    else:
        score = (f"beam search: the sum of the token log-probabilities divided by length ** {options.length_penalty:g} "
                 "(length_penalty; the length counts the generated tokens), as generate() ranks finished beams")
    return schemas.Search(num_beams=options.num_beams, num_return_sequences=options.num_return_sequences,
                          length_penalty=options.length_penalty, max_len_a=options.max_len_a,
                          max_len_b=options.max_len_b, max_new_tokens=options.max_new_tokens, score=score)


def score_targets(engine: Engine, body: schemas.ScoreRequest, limit: int) -> tuple[list, list[int]]:
    """The targets of ``body`` as ``force_decode`` takes them (texts, or token ids), checked: one per sentence, known
    tokens, none longer than ``limit`` tokens; a ValueError names what is wrong. With their lengths in tokens."""
    if (body.targets is None) == (body.target_tokens is None):
        raise ValueError("give the translations as targets (texts) or as target_tokens (token lists), one of the two")
    given = body.targets if body.targets is not None else body.target_tokens
    if len(given) != len(body.sentences):
        raise ValueError(f"{len(body.sentences)} sentences and {len(given)} translations: give one translation per "
                         "sentence")
    target = target_side(engine.tokenizer)
    if body.targets is not None:
        targets = list(body.targets)
        lengths = [len(ids) for ids in target(targets)["input_ids"]] if targets else []
    else:
        vocabulary = target.get_vocab()
        targets = []
        for index, tokens in enumerate(body.target_tokens):
            unknown = [token for token in tokens if token not in vocabulary]
            if unknown or not tokens:
                raise ValueError(f"translation {index + 1} (counted from 1): "
                                 + (f"{unknown[0]!r} is not a token of the target vocabulary" if unknown
                                    else "no tokens; give at least </s>"))
            targets.append([vocabulary[token] for token in tokens])
        lengths = list(map(len, targets))
    over = [(index, length) for index, length in enumerate(lengths) if length > limit]
    if over:
        index, length = over[0]
        raise ValueError(f"translation {index + 1} (counted from 1) has {length} tokens; this server reads at most "
                         f"{limit} (</s> included)")
    return targets, lengths


def scored_answer(forced: ForcedTranslation, view: schemas.AttentionView | None, tokenizer) -> schemas.Scored:
    return schemas.Scored(source_tokens=forced.source_tokens, target_tokens=forced.target_tokens,
                          token_log_probs=forced.token_log_probs, score=forced.score,
                          attention=None if view is None else map_answer(forced, view, tokenizer))


__all__ = ["attention_shapes", "check_view_request", "map_answer", "score_targets", "scored_answer", "search_answer", "with_attention"]
