"""What a request will cost, predicted from its options before anything is decoded: the size of its answer (JSON
bytes) and the memory the server takes to decode and answer it.

:func:`predict` is the one place the prediction is made, from the sentences' source lengths, the complete decoding
options and the attention the answer carries (:func:`attention_blocks`); the service refuses a request whose answer
or memory would pass the server's limits (``--max-answer-bytes``, ``--max-request-memory``) with 413 before it is
queued (:meth:`RequestCosts.check`), and the batcher builds no engine call, and gathers no batch of answers, that
would take more memory than one request may (:meth:`RequestCosts.call_memory`, ``Batcher``).

Each term is a bound, not an estimate of the typical case: every sentence is taken to decode to its length bound
(``max_new_tokens``, or the source-relative bound ``max_len_a`` x source tokens + ``max_len_b`` where that is lower),
every number of an answer to take its longest JSON form, every token its vocabulary's longest text.

**Adding an option that changes what an answer holds** (a choice of attention layers, heads or kinds, say) means
describing it in :func:`attention_blocks`: one :class:`AttentionBlock` per kind of weights the answer will hold, with
the layers and heads chosen. :func:`predict` reads only the blocks, so the limits, the refusal's message and the
batcher follow without another change; a refusal's advice on asking for less is :func:`_ask_for_less`'s.
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..data.tokenization import target_side
from ..inference.decoding import DecodingOptions

FLOAT_BYTES = 4  # decoding computes in float32
# The JSON text of one attention weight, at most: a float32 in [0, 1] as Python writes the float it becomes (at most
# 22 characters: "1.2345678901234567e-05") and its comma.
WEIGHT_JSON_BYTES = 23
# The memory one attention weight takes while its answer is built and sent, at most: a Python float in a list (24 +
# 8 bytes) in the engine's answer, in the response model, in FastAPI's validated and serialized copies of it, and its
# JSON text in a str and in bytes. Measured here: 110-133 bytes (a server's peak growth over answers of 1.1M to 6.3M
# weights, docs/serving.md, "Bounded answers").
WEIGHT_MEMORY_BYTES = 200
# The memory of any other byte of an answer (texts and token names) while it is built and sent: copies as above.
TEXT_MEMORY_FACTOR = 8
# The JSON of everything in an answer but its texts, token names and weights, at most: per answer, per sentence, per
# hypothesis (its keys, its score as JSON, separators).
ANSWER_BYTES, SENTENCE_BYTES, HYPOTHESIS_BYTES = 256, 128, 64
# Tensors of the (rows, V) scores that a decoding step holds at once: the logits, their log-softmax, the beam scores
# added, the processors' copies and the top-k candidates (generate()'s beam search and greedy search). Measured here:
# about 16 (a server's peak growth decoding 64 one-word sentences with 16 beams, 1,024 rows of 8,000 scores).
STEP_COPIES = 20
# Copies of a step's scores generate() keeps per step when scores are asked for: one (output_scores); greedy search's
# score stacks them and takes their log-softmax (hf_s2s.inference.translate._greedy_scores): three.
KEPT_COPIES = {"beam": 1, "greedy": 3}
# Copies of the decoder cache at once: beam search reorders it into new tensors each step, and a step appends to it
# (measured here: a one-sentence call of 16 beams over 100 source tokens predicted within 1% with 3; 4 for a margin).
CACHE_COPIES = 4


@dataclass(frozen=True)
class AttentionBlock:
    """One kind of attention weights an answer holds for each decoded sentence: ``layers`` x ``heads`` matrices of
    (rows, source tokens), the rows being the translation's tokens (the decoder's attention over the source) or the
    source tokens (the encoder's self-attention). ``name``: the answer's field."""

    name: str
    layers: int
    heads: int
    rows: str  # "target" or "source"
    per_hypothesis: bool = False  # one per returned hypothesis (an explorer view), not one per sentence

    def weights(self, source_tokens: int, target_tokens: int, hypotheses: int = 1) -> int:
        """The numbers this block holds for one sentence of ``hypotheses`` hypotheses in its answer."""
        rows = target_tokens if self.rows == "target" else source_tokens
        return self.layers * self.heads * rows * source_tokens * (hypotheses if self.per_hypothesis else 1)


@dataclass(frozen=True)
class ModelShape:
    """What a served model's size means for a request's cost, read once from its config and tokenizer."""

    target_vocab_size: int  # V: the scores of one decoding row per step
    source_state: int  # floats a decoding row keeps per source token (cross-attention keys and values of every
    # decoder layer; an RNN: the encoder states and their projected keys)
    target_state: int  # floats a decoding row keeps per generated token (self-attention keys and values of every
    # decoder layer; an RNN: none, its state does not grow)
    cross_attention: tuple[int, int] | None  # (layers, heads) of the decoder's attention over the source; None: none
    encoder_attention: tuple[int, int] | None  # (layers, heads) of the encoder's self-attention; None: none (RNN)
    decoder_attention: tuple[int, int] | None  # (layers, heads) of the decoder's self-attention, which the pass that
    # reads an alignment computes too; None: none (RNN)
    token_text_bytes: int  # JSON bytes one generated token adds to a translation's text, at most
    token_name_bytes: int  # JSON bytes of one token's name in an alignment's token lists, at most (quotes, comma)

    @classmethod
    def of(cls, config, tokenizer) -> "ModelShape":
        """The shape of a model of ``config`` (None for an export that has none: its scores only) and
        ``tokenizer``."""
        target = target_side(tokenizer)
        vocabulary = len(target)
        names = [*tokenizer.get_vocab(), *(target.get_vocab() if target is not tokenizer else ())]
        name_bytes = max(len(_json(name)) for name in names) + 1
        texts = target.batch_decode([[token] for token in range(vocabulary)], skip_special_tokens=False)
        text_bytes = max(len(_json(text)) for text in texts) - 2 + 1  # without its quotes, with a space
        common = {"target_vocab_size": getattr(config, "target_vocab_size", vocabulary),
                  "token_text_bytes": text_bytes, "token_name_bytes": name_bytes}
        if config is None:
            return cls(source_state=0, target_state=0, cross_attention=None, encoder_attention=None,
                       decoder_attention=None, **common)
        if hasattr(config, "encoder_attention_heads"):  # the Transformer
            decoder = (config.decoder_layers, config.decoder_attention_heads)
            keys_and_values = 2 * config.decoder_layers * config.d_model
            return cls(source_state=keys_and_values, target_state=keys_and_values, cross_attention=decoder,
                       encoder_attention=(config.encoder_layers, config.encoder_attention_heads),
                       decoder_attention=decoder, **common)
        states = config.encoder_hidden_size * (2 if config.bidirectional else 1)
        keys = max(config.attention_size, config.decoder_hidden_size)
        attention = None if config.attention_type == "none" else (1, config.attention_heads)
        return cls(source_state=states + keys, target_state=0, cross_attention=attention, encoder_attention=None,
                   decoder_attention=None, **common)


def _json(text: str) -> bytes:
    """``text`` as the answer writes it: JSON, UTF-8, not escaped to ASCII (Starlette's JSONResponse)."""
    return json.dumps(text, ensure_ascii=False).encode("utf-8")


def attention_blocks(shape: ModelShape, *, alignment: bool, output_attentions: bool,
                     view=None) -> tuple[AttentionBlock, ...]:
    """The attention weights an answer holds per decoded sentence, as the request asks for them: with ``alignment``,
    one (target, source) matrix (``weights``: the last decoder layer averaged over heads); with
    ``output_attentions``, every layer's and head's cross-attention and encoder self-attention too; with ``view``
    (the explorer's :class:`hf_s2s.serving.schemas.AttentionView`), one map of its kind per hypothesis, read by a
    teacher-forced pass over every hypothesis (its token log-probabilities with it)."""
    blocks = []
    if view is not None:
        blocks.append(AttentionBlock("attention", 1, 1, "source" if view.kind == "encoder" else "target",
                                     per_hypothesis=True))
    if not (alignment or output_attentions):
        return tuple(blocks)
    blocks.append(AttentionBlock("weights", 1, 1, "target"))
    if output_attentions:
        if shape.cross_attention is not None:
            blocks.append(AttentionBlock("cross_attentions", *shape.cross_attention, "target"))
        if shape.encoder_attention is not None:
            blocks.append(AttentionBlock("encoder_attentions", *shape.encoder_attention, "source"))
    return tuple(blocks)


def target_tokens(source_tokens: int, options: DecodingOptions) -> int:
    """The most tokens a translation of a source of ``source_tokens`` tokens (</s> included) holds under
    ``options``, </s> included: ``max_new_tokens``, or the source-relative bound where that is lower (a glossary may
    raise that bound to hold its terms: then ``max_new_tokens``)."""
    bound = options.max_new_tokens
    if options.glossary is None and (options.max_len_a is not None or options.max_len_b is not None):
        relative = math.floor(source_tokens * (options.max_len_a or 0.0) + (options.max_len_b or 0) + 1e-9)
        bound = min(bound, max(relative, 1 + options.min_new_tokens, 1))
    return bound


@dataclass(frozen=True)
class Prediction:
    """What a request will cost, at most (:func:`predict`)."""

    sentences: int
    longest_translation: int  # target tokens, </s> included
    attention_weights: int  # numbers of attention in the answer
    answer_bytes: int  # the answer's JSON
    answer_memory: int  # bytes the answer takes while it is built and sent
    decoding_memory: int  # bytes decoding takes at once: its largest engine call, or the pass reading an alignment

    @property
    def memory(self) -> int:
        return self.answer_memory + self.decoding_memory


def call_memory(lengths: Sequence[int], options: DecodingOptions, shape: ModelShape, scores: bool) -> int:
    """The memory one engine call takes to decode sources of ``lengths`` tokens together (padded to the longest,
    each row decoding to the longest's bound), at most: the scores of each step's rows (and every step's, kept, with
    ``scores``) and the decoder cache."""
    rows = len(lengths) * options.num_beams
    longest_source = max(lengths)
    steps = target_tokens(longest_source, options)
    step = rows * shape.target_vocab_size * FLOAT_BYTES  # one step's (rows, V) scores
    kept = step * steps * KEPT_COPIES["beam" if options.num_beams > 1 else "greedy"] if scores else 0
    cache = rows * (longest_source * shape.source_state + steps * shape.target_state) * FLOAT_BYTES
    return STEP_COPIES * step + kept + CACHE_COPIES * cache


def forced_pass_memory(source_tokens: int, target: int, shape: ModelShape) -> int:
    """The memory of a teacher-forced pass over one translation of ``target`` tokens returning every layer's and
    head's weights of each kind the model has (cross-attention (T, S), encoder self-attention (S, S), decoder
    self-attention (T, T)) and their stacked copies, with its (T, V) logits and their log-softmax."""
    weights = 0
    for dims, rows, columns in ((shape.cross_attention, target, source_tokens),
                                (shape.encoder_attention, source_tokens, source_tokens),
                                (shape.decoder_attention, target, target)):
        if dims is not None:
            weights += dims[0] * dims[1] * rows * columns
    return (2 * weights + 2 * target * shape.target_vocab_size) * FLOAT_BYTES


def _alignment_pass_memory(source_tokens: int, target: int, options: DecodingOptions, shape: ModelShape) -> int:
    """The memory of reading one sentence's attention: decoding it alone (without scores), then a teacher-forced pass
    (:func:`forced_pass_memory`)."""
    return call_memory([source_tokens], options, shape, scores=False) + forced_pass_memory(source_tokens, target, shape)


def predict(lengths: Sequence[int], options: DecodingOptions, shape: ModelShape, *, scores: bool,
            blocks: tuple[AttentionBlock, ...]) -> Prediction:
    """What a request of sources of ``lengths`` tokens (</s> included) costs under ``options``, answered with scores
    if ``scores`` and with the attention ``blocks`` (:func:`attention_blocks`): its answer's JSON bytes and the memory
    it takes, at most. Its sentences are taken to decode one engine call each (the batcher cuts calls so that none
    takes more than one request may, :meth:`RequestCosts.call_memory`)."""
    targets = [target_tokens(length, options) for length in lengths]
    hypotheses = options.num_return_sequences * (2 if options.num_return_sequences > 1 else 1)  # n-best: the best too
    viewed = any(block.per_hypothesis for block in blocks)  # each hypothesis' tokens and log-probabilities too
    weights = sum(block.weights(source, target, hypotheses) for source, target in zip(lengths, targets, strict=True)
                  for block in blocks) + (hypotheses * sum(targets) if viewed else 0)
    texts = sum(hypotheses * (target * shape.token_text_bytes + HYPOTHESIS_BYTES) for target in targets)
    names = sum(source + target * (hypotheses if viewed else 1) for source, target in zip(lengths, targets, strict=True)
                ) * shape.token_name_bytes if blocks else 0
    answer_bytes = ANSWER_BYTES + SENTENCE_BYTES * len(lengths) + texts + names + WEIGHT_JSON_BYTES * weights
    answer_memory = WEIGHT_MEMORY_BYTES * weights + TEXT_MEMORY_FACTOR * (answer_bytes - WEIGHT_JSON_BYTES * weights)
    decoding = max(call_memory([length], options, shape, scores) for length in lengths)
    if blocks:
        decoding = max(decoding, max(_alignment_pass_memory(source, target, options, shape)
                                     for source, target in zip(lengths, targets, strict=True)))
    if viewed:  # the batcher reads every hypothesis of the request's sentences in one teacher-forced call
        decoding = max(decoding, sum(options.num_return_sequences * forced_pass_memory(source, target, shape)
                                     for source, target in zip(lengths, targets, strict=True)))
    return Prediction(len(lengths), max(targets), weights, answer_bytes, answer_memory, decoding)


class RequestTooLarge(ValueError):
    """A request whose answer or memory would pass the server's limits; the message says which, by how much, and how
    to ask for less."""


class RequestCosts:
    """The costs of the requests to one served model (its :class:`ModelShape`), against what one request may take:
    ``max_answer_bytes`` of answer and ``max_memory`` bytes of memory."""

    def __init__(self, shape: ModelShape, max_answer_bytes: int, max_memory: int):
        self.shape, self.max_answer_bytes, self.max_memory = shape, max_answer_bytes, max_memory

    @classmethod
    def of(cls, engine, max_answer_bytes: int, max_memory: int) -> "RequestCosts":
        """For an engine opened on a folder (its config and tokenizer; no weights needed)."""
        return cls(ModelShape.of(engine.config, engine.tokenizer), max_answer_bytes, max_memory)

    def check(self, lengths: Sequence[int], options: DecodingOptions, *, scores: bool, alignment: bool,
              output_attentions: bool, view=None) -> Prediction:
        """The request's :class:`Prediction`, or :class:`RequestTooLarge` where its answer or its memory would pass
        the limits (``view``: the explorer's attention view, :func:`attention_blocks`)."""
        blocks = attention_blocks(self.shape, alignment=alignment, output_attentions=output_attentions, view=view)
        prediction = predict(lengths, options, self.shape, scores=scores, blocks=blocks)
        what = (f"{prediction.sentences} sentence{'s' if prediction.sentences > 1 else ''}, translations of up to "
                f"{prediction.longest_translation} tokens"
                + (f", {prediction.attention_weights:,} attention weights" if blocks else ""))
        memory_what = (f"{what}, {options.num_beams} beam{'s' if options.num_beams > 1 else ''}"
                       + (", scores kept for every step" if scores else ""))
        advice = _ask_for_less(prediction, options, scores=scores, blocks=blocks, output_attentions=output_attentions)
        self._refuse_over_limits(prediction.answer_bytes, prediction.memory, what, memory_what, advice)
        return prediction

    def check_scored(self, lengths: Sequence[int], target_lengths: Sequence[int], view=None) -> int:
        """The memory of reading given translations of ``target_lengths`` tokens (``POST /score``, one
        teacher-forced call), with the map of ``view`` each, or :class:`RequestTooLarge` where its answer or its
        memory would pass the limits."""
        pairs = list(zip(lengths, target_lengths, strict=True))
        maps = None if view is None else AttentionBlock("attention", 1, 1, "source" if view.kind == "encoder"
                                                        else "target")
        weights = sum(target + (0 if maps is None else maps.weights(source, target))  # log-probabilities and maps
                      for source, target in pairs)
        names = sum(source + target for source, target in pairs) * self.shape.token_name_bytes
        answer_bytes = ANSWER_BYTES + SENTENCE_BYTES * len(pairs) + names + WEIGHT_JSON_BYTES * weights
        memory = WEIGHT_MEMORY_BYTES * weights + TEXT_MEMORY_FACTOR * (answer_bytes - WEIGHT_JSON_BYTES * weights) \
            + sum(forced_pass_memory(source, target, self.shape) for source, target in pairs)
        what = f"{len(pairs)} translation{'s' if len(pairs) > 1 else ''}, {weights:,} numbers"
        advice = "fewer or shorter translations per request" + (" (a map only for the ones you look at)"
                                                                if view is not None else "")
        self._refuse_over_limits(answer_bytes, memory, what, what, advice)
        return memory

    def _refuse_over_limits(self, answer_bytes: int, memory: int, what: str, memory_what: str, advice: str) -> None:
        """:class:`RequestTooLarge` where ``answer_bytes`` or ``memory`` passes the limits, saying what the request
        holds (``what``; ``memory_what`` for the memory) and what to ask for instead (``advice``)."""
        if answer_bytes > self.max_answer_bytes:
            raise RequestTooLarge(
                f"the answer to this request would be up to {_size(answer_bytes)} ({what}), and this server sends at "
                f"most {_size(self.max_answer_bytes)} (--max-answer-bytes): ask for less: {advice}")
        if memory > self.max_memory:
            raise RequestTooLarge(
                f"this request would take up to {_size(memory)} of memory ({memory_what}), and this server lets one "
                f"request take {_size(self.max_memory)} (--max-request-memory): ask for less: {advice}")

    def call_fits(self, lengths: Sequence[int], options: DecodingOptions, scores: bool) -> bool:
        """Whether one engine call may decode sources of ``lengths`` together: its memory (:func:`call_memory`)
        within what one request may take."""
        return call_memory(lengths, options, self.shape, scores) <= self.max_memory


def _ask_for_less(prediction: Prediction, options: DecodingOptions, *, scores: bool,
                  blocks: tuple[AttentionBlock, ...], output_attentions: bool) -> str:
    """The options of a request that would make it cost less, as a refusal lists them."""
    ways = []
    if output_attentions:
        ways.append("the alignment alone (alignment without output_attentions: the last decoder layer, averaged over "
                    "heads)")
    if blocks and prediction.sentences > 1:
        ways.append("attention for fewer sentences (a request for the ones you look at)")
    if prediction.sentences > 1:
        ways.append("fewer sentences per request")
    if options.num_return_sequences > 1:
        ways.append("fewer hypotheses (num_return_sequences)")
    if options.num_beams > 1:
        ways.append("fewer beams (num_beams)")
    if scores:
        ways.append("no scores (scores false)")
    if options.max_len_a is None and options.max_len_b is None:
        ways.append("the source-relative length bound (leave out no_length_bound)")
    else:
        ways.append("a shorter length bound (max_len_a, max_len_b)")
    return "; ".join(ways)


def _size(count: int) -> str:
    """Bytes in words: 1.5 kB, 73.4 MB, 2.1 GB (powers of 1,000, as the flags count)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


__all__ = ["AttentionBlock", "ModelShape", "Prediction", "RequestCosts", "RequestTooLarge", "attention_blocks",
           "call_memory", "forced_pass_memory", "predict", "target_tokens"]
