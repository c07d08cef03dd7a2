"""Decoding an ONNX export (``hf-s2s export-onnx``) with onnxruntime and numpy: greedy and beam search over the
decoder-step graph, as ``generate()`` decodes, with the export's generation config; text in and out through the
``tokenizers`` package.

This module imports neither torch nor transformers nor hf_s2s: the export copies it into its folder, with
``decoding.py`` (:mod:`hf_s2s.inference.decoding`, what every engine shares), so a deployment needs numpy,
onnxruntime and tokenizers only::

    python OUT/onnx_runtime.py OUT < source.txt > translations.txt
    python OUT/onnx_runtime.py OUT --beams 5 --sentence "Ein Hund rennt."

    from onnx_runtime import OnnxSeq2Seq  # or: from hf_s2s.inference.onnx_runtime import OnnxSeq2Seq
    model = OnnxSeq2Seq("OUT")
    model.translate(["Ein Hund rennt."], num_beams=5)
    model.generate(input_ids, attention_mask)  # ids (rows, length) as generate() returns them

The options are completed from the export's generation config by the function every engine uses
(``DecodingOptions.resolve``), and text goes through its input lines as ``hf-s2s translate``'s do (blank lines stay
blank, sources longer than the limit are cut and named in a warning: ``decode_lines``). The loops reproduce
transformers' ``generate()`` (5.23 / 5.24) step for step, and tests/test_onnx.py checks the tokens equal on trained
models of both families:

- greedy: the argmax of the processed logits; a finished row gets the pad token; the loop ends when every row has
  produced an end token or ``max_length`` is reached;
- beam search: transformers' vectorised beam search, with its ``length_penalty`` (a finished hypothesis' summed
  log-probability over length ** length_penalty), ``early_stopping`` (True: a sentence ends once ``num_beams``
  hypotheses have finished; False: once the best running beam, scored at the current length, cannot beat the worst
  finished one; "never": the same, scored at ``max_length`` when length_penalty > 0) and ``num_return_sequences``;
- logits processors: the minimum length (``min_length`` / ``min_new_tokens``), ``suppress_tokens`` and hf_s2s's
  source-relative length bound (each row ends with </s> after at most ``floor(max_len_a x source tokens +
  max_len_b)`` tokens, hf_s2s.models.modeling_common's ``SourceLengthBoundLogitsProcessor``). Any other generation
  setting that changes the output (sampling, repetition penalties, forced tokens, ...) is refused with a ValueError
  naming it, never ignored.

Shapes: B sentences, K beams, R = B x K decoding rows, S source length, V target vocabulary.
"""

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if __package__:  # hf_s2s.inference.onnx_runtime
    from .decoding import DecodingOptions, decode_lines, encode_lines, length_bound_call, source_limit
else:  # an export's copy, beside its copy of decoding.py (``python OUT/onnx_runtime.py`` puts OUT on the path)
    from decoding import DecodingOptions, decode_lines, encode_lines, length_bound_call, source_limit

MANIFEST_FILE = "onnx_manifest.json"
MANIFEST_FORMAT = 1
DEFAULT_BATCH_SIZE = 64  # sentences per decoding call of translate(), as hf-s2s translate's

# The generation settings (decoding.SETTINGS) this runtime decodes, besides the options every engine decodes
ONNX_SETTINGS = ("suppress_tokens",)
ENGINE = "the ONNX runtime"
_NEG = np.float32(-1.0e9)  # transformers' "very large negative" beam score


@dataclass(frozen=True)
class SpecialTokens:
    """The ids decoding starts, ends and pads with, as generate() reads them from the generation config."""

    decoder_start_token_id: int
    eos_token_ids: list[int]
    pad_token_id: int

    @classmethod
    def from_config(cls, generation_config: dict) -> "SpecialTokens":
        def get(name, default=None):  # transformers writes None for "unset": its default then
            value = generation_config.get(name)
            return default if value is None else value

        eos = get("eos_token_id")
        eos_ids = [] if eos is None else [int(x) for x in (eos if isinstance(eos, list) else [eos])]
        start = get("decoder_start_token_id", get("bos_token_id"))
        if start is None:
            raise ValueError("the generation config names no decoder_start_token_id (nor bos_token_id)")
        pad = get("pad_token_id", eos_ids[0] if eos_ids else 0)  # as generate(): else the end token pads
        return cls(decoder_start_token_id=int(start), eos_token_ids=eos_ids, pad_token_id=int(pad))


# ---------------------------------------------------------------------------------------------------- processors


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(R, V) float32 -> (R, V) float32 log-probabilities."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def source_length_bound(source_lengths: np.ndarray, max_len_a: float | None, max_len_b: int | None) -> np.ndarray:
    """The most tokens each row may generate, </s> included: floor(max_len_a x source_len + max_len_b), at least 1
    (hf_s2s.models.modeling_common.source_length_bound, in float64 with the same allowance)."""
    scaled = source_lengths.astype(np.float64) * (max_len_a or 0.0) + (max_len_b or 0)
    return np.maximum(np.floor(scaled + 1e-9), 1).astype(np.int64)


class LogitsProcessors:
    """generate()'s logits processors for these options, in its order: the minimum length, suppress_tokens, then the
    source-relative bound. ``bound``: (R,) tokens each row may generate, or None without the bound."""

    def __init__(self, options: DecodingOptions, special: SpecialTokens, bound: np.ndarray | None):
        self.options, self.eos = options, np.asarray(special.eos_token_ids, dtype=np.int64)
        self.suppress = np.asarray(options.suppress_tokens, dtype=np.int64)
        if bound is not None:
            bound = np.maximum(bound, 1 + options.min_new_tokens)  # an explicit minimum wins
        self.bound = bound
        # the first length at which some row is forced: the steps before it skip the check
        self.first_bound_length = None if bound is None else int(bound.min())

    def __call__(self, length: int, scores: np.ndarray) -> np.ndarray:
        """length: decoder positions so far, the start token included (so length - 1 tokens generated);
        scores (R, V), changed in place."""
        options, eos = self.options, self.eos
        if eos.size and length - 1 < options.min_new_tokens:
            scores[:, eos] = -np.inf
        if self.suppress.size:
            scores[:, self.suppress] = -np.inf
        if self.bound is not None and length >= self.first_bound_length:
            at_bound = length >= self.bound  # (R,): the token chosen now is the row's last
            eos_scores = scores[:, eos]  # (R, n_eos)
            forced = np.where(np.isneginf(eos_scores), np.float32(0.0), eos_scores)  # </s> back where removed
            scores[at_bound] = -np.inf
            scores[:, eos] = np.where(at_bound[:, None], forced, eos_scores)
        return scores


# ---------------------------------------------------------------------------------------------------- searches


def greedy_search(step, options: DecodingOptions, special: SpecialTokens, processors: LogitsProcessors,
                  rows: int, scores: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """transformers' greedy loop. step(tokens (R,)) -> logits (R, V), advancing the decoder state.
    Returns the sequences (R, length), start token first, pad after each row's end, and with ``scores`` each row's
    score (R,) as ``hf-s2s translate`` gives it: the sum of the log-probabilities of its tokens (after the logits
    processors) up to its first end token; else None."""
    sequences = np.full((rows, 1), special.decoder_start_token_id, dtype=np.int64)
    unfinished = np.ones(rows, dtype=bool)
    totals = np.zeros(rows, dtype=np.float32) if scores else None
    eos = np.asarray(special.eos_token_ids, dtype=np.int64)
    max_length = 1 + options.max_new_tokens  # decoder positions, the start token included
    while True:
        processed = processors(sequences.shape[1], np.asarray(step(sequences[:, -1]), dtype=np.float32))  # (R, V)
        tokens = processed.argmax(axis=-1)
        if scores:
            chosen = np.take_along_axis(log_softmax(processed), tokens[:, None], axis=1)[:, 0]  # (R,)
            totals += np.where(unfinished, chosen, np.float32(0.0))
        if eos.size:
            tokens = np.where(unfinished, tokens, special.pad_token_id)
        sequences = np.concatenate([sequences, tokens[:, None]], axis=1)
        unfinished &= ~np.isin(tokens, eos)
        if not unfinished.any() or sequences.shape[1] >= max_length:
            return sequences, totals


def _topk(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values of each row, largest first, equal values by index. values (rows, n) -> (rows, k).

    A partition finds them in O(n) (a full sort of beam search's (B, beams x V) scores took 85% of its time);
    where values equal to the k-th largest lie on both sides of the cut, the row is sorted whole instead, so which of
    them are kept never depends on the partition."""
    if k >= values.shape[-1]:
        return np.argsort(-values, axis=-1, kind="stable")[:, :k]
    top = np.argpartition(-values, k - 1, axis=-1)[:, :k]  # (rows, k), in no order
    top_values = np.take_along_axis(values, top, axis=-1)
    kth = top_values.min(axis=-1, keepdims=True)  # (rows, 1): the k-th largest value
    split = (values == kth).sum(axis=-1) != (top_values == kth).sum(axis=-1)  # (rows,): ties cut by the partition
    if split.any():
        top[split] = np.argsort(-values[split], axis=-1, kind="stable")[:, :k]
        top_values[split] = np.take_along_axis(values[split], top[split], axis=-1)
    order = np.lexsort((top, -top_values), axis=-1)  # by value, then by index
    return np.take_along_axis(top, order, axis=-1)


def _gather(tensor: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """tensor (B, K, ...) rows picked per sentence by indices (B, K') -> (B, K', ...)."""
    return np.take_along_axis(tensor, indices.reshape(*indices.shape, *[1] * (tensor.ndim - 2)), axis=1)


def beam_search(step, reorder, options: DecodingOptions, special: SpecialTokens, processors: LogitsProcessors,
                batch: int) -> tuple[np.ndarray, np.ndarray]:
    """transformers' vectorised beam search (GenerationMixin._beam_search), step for step. step(tokens (R,)) ->
    logits (R, V); reorder(rows (R,)) moves the decoder state's rows. Returns the best ``num_return_sequences``
    hypotheses per sentence (B x n, length), start token first, the fill token after each end, and their scores
    (B x n,): the summed log-probability over length ** length_penalty (generate()'s ``sequences_scores``)."""
    beams, eos = options.num_beams, np.asarray(special.eos_token_ids, dtype=np.int64)
    keep = max(2, 1 + eos.size) * beams  # candidates kept per sentence, so that num_beams can go on
    top_beams = np.arange(keep) < beams
    length_penalty, max_length = options.length_penalty, 1 + options.max_new_tokens  # the start token counts
    early_stopping = options.early_stopping or False  # unset: generate()'s False
    fill = (special.pad_token_id or special.eos_token_ids[0]) if eos.size else -1  # generate()'s fill value

    running = np.full((batch, beams, max_length), fill, dtype=np.int64)
    running[:, :, 0] = special.decoder_start_token_id
    finished = running.copy()
    running_scores = np.zeros((batch, beams), dtype=np.float32)
    running_scores[:, 1:] = _NEG  # only the first beam's continuations count at the first step
    finished_scores = np.full((batch, beams), _NEG, dtype=np.float32)
    is_finished = np.zeros((batch, beams), dtype=bool)
    improvable = np.ones((batch, 1), dtype=bool)
    running_origins = np.full((batch, beams, max_length - 1), -1, dtype=np.int64)  # beam index of each token
    finished_origins = running_origins.copy()
    length, rows = 1, np.arange(batch)[:, None]
    while True:
        logits = np.asarray(step(running[:, :, length - 1].reshape(-1)), dtype=np.float32)  # (R, V)
        log_probs = processors(length, log_softmax(logits))
        vocab = log_probs.shape[-1]
        log_probs = (log_probs.reshape(batch, beams, vocab) + running_scores[:, :, None]).reshape(batch, -1)

        # the top `keep` continuations over all beams of each sentence
        top = _topk(log_probs, keep)  # (B, keep)
        top_scores = np.take_along_axis(log_probs, top, axis=1)
        top_beam = top // vocab
        top_sequences = _gather(running, top_beam)
        top_sequences[:, :, length] = top % vocab
        top_origins = _gather(running_origins, top_beam)
        top_origins[:, :, length - 1] = top_beam + rows * beams
        hits = np.isin(top_sequences[:, :, length], eos) | (length + 1 >= max_length)  # (B, keep)

        # the best `num_beams` unfinished continuations go on
        go_on_scores = top_scores + hits.astype(np.float32) * _NEG
        go_on = _topk(go_on_scores, beams)
        running, running_scores = _gather(top_sequences, go_on), _gather(go_on_scores, go_on)
        running_origins = _gather(top_origins, go_on)

        # finished continuations among the top `num_beams` enter the finished set if they beat it
        just_finished = hits & top_beams[None, :]
        candidate_scores = top_scores / np.float32(length**length_penalty)  # length tokens generated
        sentence_full = is_finished.all(axis=-1, keepdims=True) & (early_stopping is True)
        candidate_scores = candidate_scores + sentence_full.astype(np.float32) * _NEG
        candidate_scores = candidate_scores + (~improvable).astype(np.float32) * _NEG
        candidate_scores = candidate_scores + (~just_finished).astype(np.float32) * _NEG
        merged_scores = np.concatenate([finished_scores, candidate_scores], axis=1)
        best = _topk(merged_scores, beams)
        finished = _gather(np.concatenate([finished, top_sequences], axis=1), best)
        finished_scores = _gather(merged_scores, best)
        finished_origins = _gather(np.concatenate([finished_origins, top_origins], axis=1), best)
        is_finished = _gather(np.concatenate([is_finished, just_finished], axis=1), best)

        reorder(running_origins[:, :, length - 1].reshape(-1))
        length += 1
        # can a running beam still beat the worst finished hypothesis?
        hypothetical = max_length - 1 if early_stopping == "never" and length_penalty > 0.0 else length - 1
        best_running = running_scores[:, :1] / np.float32(hypothetical ** length_penalty)
        worst_finished = np.where(is_finished, finished_scores.min(axis=1, keepdims=True), _NEG)
        improvable = improvable & (best_running > worst_finished).any(axis=-1, keepdims=True)
        if not (improvable.any() and not (is_finished.all() and early_stopping is True) and not hits.all()):
            break

    returned = options.num_return_sequences
    sequences = finished[:, :returned].reshape(batch * returned, max_length)
    generated = (finished_origins[:, :returned] != -1).reshape(batch * returned, -1).sum(axis=1).max()
    return sequences[:, : 1 + generated], finished_scores[:, :returned].reshape(-1)


# ---------------------------------------------------------------------------------------------------- the model


class OnnxSeq2Seq:
    """An exported folder (``hf-s2s export-onnx``): its two graphs in onnxruntime sessions, its generation config
    and (when the export had one) its tokenizer. ``providers`` / ``threads``: onnxruntime's execution providers and
    intra-op threads (None: onnxruntime's defaults)."""

    def __init__(self, folder: str | Path, providers: list[str] | None = None, threads: int | None = None):
        import onnxruntime

        self.folder = Path(folder)
        manifest_path = self.folder / MANIFEST_FILE
        if not manifest_path.is_file():
            raise FileNotFoundError(f"{self.folder} holds no {MANIFEST_FILE}: not an ONNX export (hf-s2s export-onnx)")
        self.manifest = json.loads(manifest_path.read_text())
        if self.manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"{manifest_path} has format {self.manifest.get('format')!r}; this runtime reads "
                             f"format {MANIFEST_FORMAT}: export the model again")
        self.generation_config = json.loads((self.folder / "generation_config.json").read_text())
        self.special_tokens = SpecialTokens.from_config(self.generation_config)
        session_options = onnxruntime.SessionOptions()
        if threads is not None:
            session_options.intra_op_num_threads = threads
            session_options.inter_op_num_threads = 1
        self.encoder, self.decoder_step = (
            onnxruntime.InferenceSession(str(self.folder / self.manifest[name]["file"]), session_options,
                                         providers=providers or onnxruntime.get_available_providers())
            for name in ("encoder", "decoder_step"))
        self.state = self.manifest["state"]  # step input -> the step output that replaces it
        self.step_inputs = [graph_input.name for graph_input in self.decoder_step.get_inputs()]
        self.step_outputs = [graph_output.name for graph_output in self.decoder_step.get_outputs()]
        self._tokenizers = None
        self._source_limit = self._read_source_limit()

    def options(self, **overrides) -> DecodingOptions:
        """The folder's generation config completed with the call's ``overrides`` (generate()'s names:
        ``decoding.OPTIONS``) as every engine completes them for translating text (``DecodingOptions.resolve``); what
        this runtime does not implement is refused by name, and so are more new tokens than a learned position table
        holds."""
        return self._options(overrides, self.manifest.get("position_limit"))

    def _options(self, overrides: dict, position_limit: int | None) -> DecodingOptions:
        options = DecodingOptions.resolve(self.generation_config, engine=ENGINE, implements=ONNX_SETTINGS,
                                          max_position_embeddings=self.manifest.get("max_position_embeddings"),
                                          position_limit=position_limit, **overrides)
        check_runtime_options(options, self.special_tokens)
        return options

    def _decoder(self, input_ids, attention_mask, beams: int):
        """Run the encoder graph; returns (step, reorder, source_lengths): step(tokens (R,)) -> logits (R, V) runs the
        decoder-step graph and advances the state, reorder(rows (R,)) moves the state's rows (beam search), and each
        row's real source tokens (R,). Every sentence has ``beams`` rows."""
        input_ids = np.asarray(input_ids, dtype=np.int64)
        attention_mask = (np.ones_like(input_ids) if attention_mask is None
                          else np.asarray(attention_mask, dtype=np.int64))
        if input_ids.ndim != 2 or attention_mask.shape != input_ids.shape:
            raise ValueError(f"input_ids must be (batch, length) and attention_mask the same shape, got "
                             f"{input_ids.shape} and {attention_mask.shape}")
        encoded = dict(zip((output.name for output in self.encoder.get_outputs()),
                           self.encoder.run(None, {"input_ids": input_ids, "attention_mask": attention_mask}),
                           strict=True))
        encoded["attention_mask"] = attention_mask
        # every row of a sentence's beams reads the same source side: repeated once, never reordered
        feeds = {name: np.repeat(encoded[name], beams, axis=0) if beams > 1 else encoded[name]
                 for name in self.step_inputs if name != "input_ids"}

        def step(tokens: np.ndarray) -> np.ndarray:
            outputs = dict(zip(self.step_outputs, self.decoder_step.run(
                self.step_outputs, {**feeds, "input_ids": tokens[:, None]}), strict=True))
            for past, present in self.state.items():
                feeds[past] = outputs[present]
            return outputs["logits"]  # (R, V)

        def reorder(rows: np.ndarray) -> None:
            for past in self.state:
                feeds[past] = feeds[past][rows]

        return step, reorder, np.repeat(attention_mask.sum(axis=1), beams)

    def generate(self, input_ids, attention_mask=None, **overrides) -> np.ndarray:
        """input_ids, attention_mask (B, S), right-padded (attention_mask: None = every position real) -> the decoded
        sequences as generate() returns them: (B x num_return_sequences, length) int64, the start token first. As
        generate(), a length a learned position table may not reach (the bound ends rows first) is not refused."""
        return self._generate(input_ids, attention_mask, self._options(overrides, None))[0]

    def _generate(self, input_ids, attention_mask, options: DecodingOptions,
                  scores: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """The sequences (B x num_return_sequences, length) and, with ``scores`` or under beam search, their scores."""
        step, reorder, source_lengths = self._decoder(input_ids, attention_mask, options.num_beams)
        bound = (None if options.max_len_a is None and options.max_len_b is None
                 else source_length_bound(source_lengths, options.max_len_a, options.max_len_b))
        processors = LogitsProcessors(options, self.special_tokens, bound)
        if options.num_beams == 1:
            return greedy_search(step, options, self.special_tokens, processors, len(source_lengths), scores)
        return beam_search(step, reorder, options, self.special_tokens, processors,
                           len(source_lengths) // options.num_beams)

    def forced_logits(self, input_ids, attention_mask, decoder_input_ids) -> np.ndarray:
        """Teacher forcing, one step graph call per target position: the logits (B, T, V) of the next token after
        each prefix of decoder_input_ids (B, T) (start token first), as the model's forward gives them; what scoring
        a given translation needs."""
        step, _, _ = self._decoder(input_ids, attention_mask, 1)
        decoder_input_ids = np.asarray(decoder_input_ids, dtype=np.int64)
        return np.stack([step(decoder_input_ids[:, t]) for t in range(decoder_input_ids.shape[1])], axis=1)

    # ------------------------------------------------------------------------------------------------ text

    @property
    def tokenizers(self):
        """(source, target) ``tokenizers.Tokenizer`` of the folder: tokenizer.json, and target_tokenizer.json for
        separate vocabularies."""
        if self._tokenizers is None:
            from tokenizers import Tokenizer

            source_file, target_file = self.folder / "tokenizer.json", self.folder / "target_tokenizer.json"
            if not source_file.is_file():
                raise FileNotFoundError(f"{self.folder} holds no tokenizer.json: export with the model's tokenizer to "
                                        "translate text, or call generate() with token ids")
            source = Tokenizer.from_file(str(source_file))
            target = Tokenizer.from_file(str(target_file)) if target_file.is_file() else source
            source = Tokenizer.from_str(source.to_str())  # a copy whose padding and truncation are ours:
            source.no_padding()  # a tokenizer.json may carry a padding setting (encode pads below, and masks it)
            self._tokenizers = (source, target)
        return self._tokenizers

    def source_limit(self) -> tuple[int | None, str]:
        """Where sources are cut, and why, as ``hf-s2s translate`` cuts them (``decoding.source_limit``): the
        tokenizer's ``model_max_length``, or the model's learned position table where that is shorter."""
        return self._source_limit

    def _read_source_limit(self) -> tuple[int | None, str]:
        config_file = self.folder / "tokenizer_config.json"
        limit = json.loads(config_file.read_text()).get("model_max_length") if config_file.is_file() else None
        limit = limit if isinstance(limit, int) and limit < 10**9 else None  # transformers' "no limit" is a huge number
        return source_limit(limit, None, self.manifest.get("position_limit"))

    def _encode(self, texts: list[str], max_length: int | None) -> list[list[int]]:
        """``decoding.Encode`` with the folder's source tokenizer: cut as the transformers tokenizer cuts."""
        source, _ = self.tokenizers
        if max_length is None:
            source.no_truncation()
        else:
            source.enable_truncation(max_length)
        return [encoding.ids for encoding in source.encode_batch(list(texts))]

    def _pad(self, sources: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids -> input_ids, attention_mask (B, S), right-padded with the pad token."""
        width = max((len(ids) for ids in sources), default=0)
        input_ids = np.full((len(sources), width), self.special_tokens.pad_token_id, dtype=np.int64)
        attention_mask = np.zeros((len(sources), width), dtype=np.int64)
        for row, ids in enumerate(sources):
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
        return input_ids, attention_mask

    def encode(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """sentences -> input_ids, attention_mask (B, S), right-padded with the pad token, cut to the source limit
        (:meth:`source_limit`) as the transformers tokenizer cuts them, the cut ones named in a warning."""
        return self._pad(encode_lines(sentences, range(len(sentences)), self._encode, *self.source_limit()))

    def translate(self, sentences: list[str], batch_size: int = DEFAULT_BATCH_SIZE, **overrides) -> list[str]:
        """Translations of ``sentences`` (num_return_sequences of each, in order), special tokens dropped, decoded in
        batches of ``batch_size`` sentences of similar length, with the options :meth:`options` completes from the
        call's ``overrides`` (:meth:`translate_with_options`)."""
        results = self.translate_with_options(sentences, self.options(**overrides), batch_size=batch_size)
        return [text for hypotheses in results for text, _ in hypotheses]

    def translate_with_options(self, sentences: list[str], options: DecodingOptions, *,
                               batch_size: int = DEFAULT_BATCH_SIZE, scores: bool = False,
                               encoded: list[list[int]] | None = None) -> list[list[tuple[str, float | None]]]:
        """Each sentence's ``options.num_return_sequences`` hypotheses, best first, as (text, score), with options
        already resolved (:meth:`options`, or the onnx engine's), which are not checked again. As ``hf-s2s
        translate``: a blank sentence is not decoded (its translations are empty, score 0), and a source longer than
        the limit is cut to it and named in a warning (``decoding.decode_lines``). ``scores``: greedy search's sum of
        token log-probabilities, beam search's length-normalized score (None without). ``encoded``: each sentence's
        source ids, when the caller has them already (``decoding.decode_lines``)."""
        _, target = self.tokenizers

        def decode(sources: list[list[int]]) -> list[list[tuple[str, float | None]]]:
            sequences, values = self._generate(*self._pad(sources), options, scores)
            texts = target.decode_batch(sequences.tolist(), skip_special_tokens=True)
            values = values.tolist() if scores else [None] * len(texts)
            n = options.num_return_sequences
            return [list(zip(texts[row * n : (row + 1) * n], values[row * n : (row + 1) * n], strict=True))
                    for row in range(len(sources))]

        limit, reason = self.source_limit()
        return decode_lines(sentences, self._encode, decode, limit=limit, reason=reason, batch_size=batch_size,
                            blank=[("", 0.0 if scores else None)] * options.num_return_sequences, encoded=encoded)


def check_runtime_options(options: DecodingOptions, special: SpecialTokens) -> None:
    """What this runtime refuses beyond the settings it does not implement: the length bound without an end token to
    end rows with."""
    if (options.max_len_a is not None or options.max_len_b is not None) and not special.eos_token_ids:
        raise ValueError("the source-relative length bound (max_len_a, max_len_b) ends rows with </s>, but the "
                         "generation config names no eos_token_id")


def read_lines(stream) -> list[str]:
    """The lines of a text stream as ``hf-s2s translate`` reads them: a line ends at ``\\n`` or ``\\r\\n``, and a
    byte-order mark at the start is dropped."""
    lines = [line.removesuffix("\n").removesuffix("\r") for line in stream]
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Translate stdin (one sentence a line) or --sentence with an ONNX "
                                                 "export; decoding options default to its generation config.")
    parser.add_argument("folder", help="the folder hf-s2s export-onnx wrote")
    parser.add_argument("--sentence", action="append", help="a sentence to translate (repeatable); default: stdin")
    parser.add_argument("--beams", type=int, default=None, help="num_beams (default: the generation config's)")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--length-penalty", type=float, default=None)
    parser.add_argument("--max-len-a", type=float, default=None, help="the length bound's A (default: the config's)")
    parser.add_argument("--max-len-b", type=int, default=None, help="the length bound's B (default: the config's)")
    parser.add_argument("--no-length-bound", action="store_true", help="no source-relative length bound")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences translated together")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    args = parser.parse_args(argv)
    try:
        bound = length_bound_call(args.max_len_a, args.max_len_b, args.no_length_bound,
                                  ("--max-len-a", "--max-len-b", "--no-length-bound"))
        model = OnnxSeq2Seq(args.folder, threads=args.threads)
        options = model.options(num_beams=args.beams, max_new_tokens=args.max_new_tokens,
                                length_penalty=args.length_penalty, **bound)  # refused before the input is read
        results = model.translate_with_options(args.sentence or read_lines(sys.stdin), options,
                                               batch_size=args.batch_size)
    except (OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    for hypotheses in results:
        for text, _ in hypotheses:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
