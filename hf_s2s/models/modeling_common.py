"""Pieces shared by the hf_s2s modeling files: the label shift, the padding-free token packing, the output layer
and its (label-smoothed) token-sum loss, clear errors for bad token ids, and the parts of the pretrained classes
that both families share.

Copied beside the modeling files into every saved model folder (``save_pretrained`` follows single-dot
relative imports), so it must import nothing from hf_s2s.
"""

import math
import os
from numbers import Real
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LogitsProcessor
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import logging

from .pipeline_seq2seq import Seq2SeqText2TextPipeline, Seq2SeqTranslationPipeline
from .shortlist import REFUSED_ARGUMENTS, SPECIAL_TOKEN_FIELDS, OutputVocabulary, VocabularyShortlist
from .term_constraints import DEFAULT_TERM_BONUS, TargetTermsLogitsProcessor, check_target_terms
from .transformers_compat import (
    GenerationHooks,
    attention_implementation,
    eos_token_tensor,
    mark_generation_config_own,
    pad_token_tensor,
)

logger = logging.get_logger(__name__)

# The pipelines every saved folder ships, named in its config.json (``Seq2SeqPreTrainedMixin.save_pretrained``).
# Imported, not found beside this file: transformers copies a module's single-dot imports, and only those, both when
# it saves a model's code and when it loads a folder's code into its module cache, so the pipeline's file is copied
# into every saved folder (hf_s2s installed or not) and is there when a folder loaded as remote code saves again.
CUSTOM_PIPELINES = {
    task: {"impl": f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}", "pt": ["AutoModelForSeq2SeqLM"]}
    for task, cls in (("translation", Seq2SeqTranslationPipeline), ("text2text-generation", Seq2SeqText2TextPipeline))
}


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing inputs from labels: prepend the start token, drop the last label, -100 -> pad.

    labels: (batch, tgt_len) -> (batch, tgt_len)
    """
    shifted = labels.new_empty(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class TokenPacking:
    """The needed tokens of a padded batch, so position-wise work skips the padding.

    Projections, feed-forward blocks, LayerNorm, dropout and the output layer treat every position alone, so they
    run on the N needed tokens of a (B, T) batch, packed into (N, D), instead of on all B x T positions; only the
    attention kernel needs the padded layout, and ``unpack`` restores it around the kernel. With Multi30k-like
    lengths about half of a shuffled batch is padding. keep: (B, T) bool, True where a token's output is needed.
    """

    def __init__(self, keep: torch.Tensor, index: torch.Tensor):
        self.shape = keep.shape  # (B, T)
        self.index = index  # (N,) flat positions of the kept tokens

    @classmethod
    def from_mask(cls, keep: torch.Tensor | None) -> "TokenPacking | None":
        """A packing for a (B, T) mask that leaves something out; None for no mask, a full one, or while a graph is
        captured (compile, export, ONNX: the packed length N is data-dependent).

        One device-to-host read, the ``nonzero`` that finds N; whether anything is left out is then known on the
        host (N < B x T) without reading the mask again, so callers can also skip building attention masks for a
        full batch. The padded path gives the same outputs at needed tokens."""
        if keep is None or keep.dim() != 2 or is_capturing_graph():
            return None
        index = keep.reshape(-1).nonzero().squeeze(1)  # (N,)
        return cls(keep, index) if index.numel() < keep.numel() else None

    @classmethod
    def through_last_label(cls, labels: torch.Tensor) -> "TokenPacking | None":
        """The decoder positions a teacher-forced loss needs: each row up to its last label (a prefix, so a
        causal decoder can drop the rest without changing what comes before). labels: (B, T), -100 ignored."""
        positions = torch.arange(labels.shape[1], device=labels.device)  # (T,)
        last = torch.where(labels != -100, positions, -1).amax(dim=1)  # (B,)
        return cls.from_mask(positions[None, :] <= last[:, None])  # keep: (B, T)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...)"""
        return x.reshape(-1, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros where nothing was kept."""
        full = x.new_zeros(self.shape[0] * self.shape[1], *x.shape[1:]).index_copy(0, self.index, x)
        return full.view(*self.shape, *x.shape[1:])


def seq2seq_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Token-level cross-entropy over positions whose label is not -100, label-smoothed by ``label_smoothing``
    as transformers' ``LabelSmoother`` does it: (1 - eps) * NLL + eps * the mean of -log p over the vocabulary.

    logits: (..., vocab); labels: (...), the same leading shape. With ``num_items_in_batch`` (what Trainer
    passes: the number of label tokens in the whole accumulated, all-process batch) the summed loss is divided
    by it, so gradient accumulation and several processes give the same gradient as one big batch; without it,
    the mean over this batch's label tokens. A label outside the vocabulary is a ValueError naming it.
    """
    flat_labels = labels.reshape(-1).to(logits.device)
    try:
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.size(-1)), flat_labels,
            ignore_index=-100, reduction="sum", label_smoothing=label_smoothing,
        )
    except IndexError:  # read the values only on the failure path: the forward stays free of host reads
        check_token_ids(flat_labels.masked_fill(flat_labels == -100, 0), logits.size(-1), "labels")
        raise
    if num_items_in_batch is None:
        num_items_in_batch = (labels != -100).sum()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def output_layer_and_loss(
    lm_head: nn.Module,
    hidden_states: torch.Tensor,
    labels: torch.Tensor | None,
    packing: TokenPacking | None,
    num_items_in_batch: int | torch.Tensor | None,
    label_smoothing: float,
    output_vocabulary: OutputVocabulary | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The output layer and the loss, shared by both families; returns (logits, loss).

    hidden_states: (B, T, H). With ``packing`` (``TokenPacking.through_last_label(labels)``: a training forward, the
    padding-free path) the output layer and the loss run on the packed positions only, and no logits are returned
    (None: nothing else would be ordinary (B, T, V) logits); otherwise logits are (B, T, V). With
    ``output_vocabulary`` (a shortlist's K tokens, decoding only) the layer computes those rows: (B, T, K)."""
    if output_vocabulary is not None:
        if labels is not None:
            raise ValueError("output_vocabulary (a vocabulary shortlist) is for decoding: a loss over K of the V "
                             "target tokens is not the model's loss; pass labels without it")
        return output_vocabulary.logits(lm_head, hidden_states), None  # (B, T, K)
    if packing is not None:
        logits = lm_head(packing.pack(hidden_states))  # (N, V)
        return None, seq2seq_loss(logits, packing.pack(labels), num_items_in_batch, label_smoothing)
    logits = lm_head(hidden_states)  # (B, T, V)
    loss = seq2seq_loss(logits, labels, num_items_in_batch, label_smoothing) if labels is not None else None
    return logits, loss


def output_flags(config, output_attentions: bool | None, output_hidden_states: bool | None) -> tuple[bool, bool]:
    """The call's output flags, else the config's, as transformers' models read them. Only the eager kernel returns
    attention weights: asked for them under another, transformers' sdpa integration warns and returns none, and so
    does this (the weights are then None)."""
    output_attentions = config.output_attentions if output_attentions is None else output_attentions
    output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
    if output_attentions and attention_implementation(config) not in (None, "eager"):
        logger.warning_once(
            f"`{attention_implementation(config)}` attention does not support `output_attentions=True`. "
            "Please set your attention to `eager` if you want any of these features."
        )
    return bool(output_attentions), bool(output_hidden_states)


def encoder_output(encoder_outputs: BaseModelOutput | tuple | list) -> BaseModelOutput:
    """``encoder_outputs`` as a model output, whatever the decoder cache holds. A model output (this family's
    own, with its source mask, or transformers') is returned as it is; a tuple or list is read as BART reads
    it: (last_hidden_state, hidden_states, attentions), the last two optional and anything after them ignored.
    A tuple carries no source mask: pass ``attention_mask`` with it, or the source is taken to have no
    padding."""
    if isinstance(encoder_outputs, BaseModelOutput):
        return encoder_outputs
    return BaseModelOutput(
        last_hidden_state=encoder_outputs[0],
        hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
        attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
    )


def is_capturing_graph() -> bool:
    """True while torch.compile, torch.export (and so the dynamo ONNX exporter) or torch.jit tracing (the
    TorchScript ONNX exporter) captures the model. Code that reads tensor values back into a Python branch must not
    run then: it is a graph break under compile, an error under export, and a branch baked into a trace."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing()


def embed(embedding: nn.Embedding, input_ids: torch.Tensor, name: str) -> torch.Tensor:
    """``embedding(input_ids)``, with a clear error naming ``name`` for ids outside the table. The ids are read back
    only when the lookup fails, so the forward makes no device-to-host read for the check (ids are validated where
    data enters: ``check_tokenizer_fits_model``). On a GPU an out-of-range id is a device-side assert instead."""
    if is_capturing_graph():
        return embedding(input_ids)
    try:
        return embedding(input_ids)
    except IndexError:
        check_token_ids(input_ids, embedding.num_embeddings, name)
        raise


def check_token_ids(input_ids: torch.Tensor | None, vocab_size: int, name: str) -> None:
    """Raise a clear error for ids outside [0, vocab_size) instead of a bare index error; reads the ids back."""
    if input_ids is None or is_capturing_graph():
        return  # reading the values back is a data-dependent branch
    if input_ids.numel() == 0:
        return
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"`{name}` holds token id {bad}, outside the model's vocabulary [0, {vocab_size}); "
            "check that the tokenizer matches the model (vocab_size in its config)"
        )


class Seq2SeqPreTrainedMixin:
    """What both families' ``PreTrainedModel`` bases add to transformers' own, written once. Classes are named
    ``<Family>Model`` and ``<Family>ForConditionalGeneration`` after their ``<Family>Config``; the base model
    (``self.base_model``) holds ``decoder.embed_tokens``, tied to the encoder's table when the vocabulary is shared."""

    def save_pretrained(self, save_directory, *args, **kwargs):
        """As transformers' save_pretrained; when the classes are registered for remote code, the folder loads where
        hf_s2s is not installed, through every door transformers offers:

        - config.json's ``auto_map`` names both auto classes (transformers writes only the saved class's own one), so
          ``AutoModel`` and ``AutoModelForSeq2SeqLM`` both load it with ``trust_remote_code=True``;
        - its ``custom_pipelines`` (``pipeline_seq2seq.py``, which this module imports, is among the code files
          transformers copies) make ``pipeline("translation", model=folder, trust_remote_code=True)`` work, since
          transformers 5 removed the built-in translation task: on every folder that a save writes, the training
          job's included, not only on the Hub's, and on what a folder loaded as remote code saves again."""
        registered = getattr(self, "_auto_class", None) is not None
        if registered:
            module = type(self).__module__.rsplit(".", 1)[-1]
            family = type(self.config).__name__.removesuffix("Config")
            auto_map = dict(getattr(self.config, "auto_map", None) or {})
            auto_map.setdefault("AutoModel", f"{module}.{family}Model")
            auto_map.setdefault("AutoModelForSeq2SeqLM", f"{module}.{family}ForConditionalGeneration")
            self.config.auto_map = auto_map
            self.config.custom_pipelines = CUSTOM_PIPELINES
        return super().save_pretrained(save_directory, *args, **kwargs)

    def tie_weights(self, missing_keys: set[str] | None = None, recompute_mapping: bool = True) -> None:
        """transformers' tie_weights. While loading (``missing_keys`` given), a tied weight that the checkpoint holds
        with another shape (a folder whose weights do not match its config) is left unloaded, on the meta device:
        it counts as missing and is tied like one, where transformers would compare it with its source and fail on
        the meta tensor. The loading report still names the mismatch."""
        if missing_keys is not None:
            missing_keys.update(name for name in self.all_tied_weights_keys if self.get_parameter(name).is_meta)
        super().tie_weights(missing_keys=missing_keys, recompute_mapping=recompute_mapping)

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True) -> nn.Embedding:
        """``resize_token_embeddings`` of the one vocabulary source and target share: transformers resizes the
        source table and the output layer; the decoder's own target table (when it has one) and
        ``decoder_vocab_size`` follow. Separate vocabularies of different sizes cannot be resized by one number."""
        decoder = self.base_model.decoder
        own_target_table = decoder.embed_tokens.weight is not self.get_input_embeddings().weight
        if decoder.embed_tokens.num_embeddings != self.config.vocab_size:
            raise ValueError(
                f"resize_token_embeddings resizes one vocabulary shared by source and target, but this model has "
                f"vocab_size={self.config.vocab_size} and decoder_vocab_size={decoder.embed_tokens.num_embeddings}"
            )
        embeddings = super()._resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if own_target_table:  # a shared table was resized with the source's (set_input_embeddings)
            decoder.embed_tokens = self._get_resized_embeddings(
                decoder.embed_tokens, embeddings.num_embeddings, mean_resizing=mean_resizing
            )
        if getattr(self.config, "decoder_vocab_size", None) is not None:
            self.config.decoder_vocab_size = embeddings.num_embeddings
        return embeddings


# Length limit both families ship in their generation config (generate()'s generic default, 20 tokens, cuts
# sentences): 128 decoder positions, the start token included.
DEFAULT_GENERATION_MAX_LENGTH = 128

# The output-length bound relative to the source, fairseq's ``max_len_a * source_len + max_len_b``: generation config
# fields (``generation_config.max_len_a``, ``.max_len_b``) with these defaults. Measured on Multi30k de-en train with
# the main job's tokenizer (both lengths count real tokens, </s> included): target/source ratio median 1.00, 99th
# percentile 1.46, 99.9th 1.80; (1.3, 5) cuts 22 of the 29,000 reference targets (0.076%), with a mean bound of 25.1
# tokens against a mean target of 15.3.
LENGTH_BOUND_FIELDS = ("max_len_a", "max_len_b")
DEFAULT_MAX_LEN_A = 1.3
DEFAULT_MAX_LEN_B = 5


# The largest values accepted, far above any real use: larger ones are typos (1e18 for 1.8) that would overflow or
# decode garbage. Output tokens per source token: subword fertility between languages stays below ~3 and a
# character-level target against a word-level source below ~10; 100 x the longest source stays far inside int64.
MAX_LEN_A_LIMIT = 100.0
# Tokens added to the length bound: past the absolute limit (max_length / max_new_tokens) a bound never binds.
MAX_LEN_B_LIMIT = 100_000


def check_length_bound(max_len_a, max_len_b, complete: bool = True,
                       names: tuple[str, str] = LENGTH_BOUND_FIELDS) -> None:
    """Raise a ValueError naming the field, the value and what is allowed for a bad ``max_len_a`` (a number in
    [0, MAX_LEN_A_LIMIT]) or ``max_len_b`` (a whole number in [0, MAX_LEN_B_LIMIT]); None for both turns the bound
    off, None for one counts as 0.
    ``complete=False`` checks only the values given: None is then "not given" (a command line's flags, which the
    model's generation config completes), and a bound of 0 tokens is found once the config is known."""
    if max_len_a is not None and (isinstance(max_len_a, bool) or not isinstance(max_len_a, Real)
                                  or not math.isfinite(max_len_a) or max_len_a < 0):
        raise ValueError(f"max_len_a (output tokens per source token) must be a number >= 0 (None: no "
                         f"source-relative length bound), got {max_len_a!r}")
    if max_len_b is not None and (isinstance(max_len_b, bool) or not isinstance(max_len_b, int) or max_len_b < 0):
        raise ValueError(f"max_len_b (output tokens added to max_len_a x source tokens) must be a whole number >= 0 "
                         f"(None: no source-relative length bound), got {max_len_b!r}")
    for name, value, limit, meaning in ((names[0], max_len_a, MAX_LEN_A_LIMIT, "output tokens per source token"),
                                        (names[1], max_len_b, MAX_LEN_B_LIMIT, "tokens added to the bound")):
        if value is not None and value > limit:
            raise ValueError(f"{name} must be <= {limit:g} ({meaning}), got {value!r}: so large a bound never binds "
                             "(the absolute limit, max_length or max_new_tokens, comes first); give a value up to "
                             f"{limit:g}, or decode without the bound")
    if complete and (max_len_a == 0 and max_len_b in (0, None) or max_len_a is None and max_len_b == 0):
        raise ValueError(f"max_len_a={max_len_a!r} with max_len_b={max_len_b!r} bounds every output to 0 tokens; "
                         "set max_len_a or max_len_b above 0, or both to None for no bound")


def source_length_bound(source_lengths: torch.Tensor, max_len_a: float | None, max_len_b: int | None) -> torch.Tensor:
    """The most tokens each row may generate, </s> included: ``floor(max_len_a * source_len + max_len_b)``, at least
    1 (room for </s>). source_lengths: (rows,) real source tokens, </s> included -> (rows,) long.

    Computed in float64 with a tiny allowance, so a product such as 1.3 x 10 that float arithmetic puts just below a
    whole number is not floored one token short."""
    scaled = source_lengths.double() * (max_len_a or 0.0) + (max_len_b or 0)
    return (scaled + 1e-9).floor().clamp(min=1).long()


class SourceLengthBoundLogitsProcessor(LogitsProcessor):
    """Forces </s> on each row once it has generated its bound of tokens (``source_length_bound``), so the output ends
    with </s> exactly at the bound, as fairseq's ``--max-len-a/--max-len-b`` and Marian's ``--max-length-factor``.

    A logits processor rather than a stopping criterion because beam search needs the hypothesis to end: forced
    </s> candidates enter beam search's finished hypotheses through its ordinary path (scored with the model's own
    </s> log-probability and length-normalized like any other), and a sentence whose beams all reach the bound is
    done. A stopping criterion only tells generate() when to stop the loop: greedy search would cut the row without
    </s>, and beam search keeps running beams it cannot finish. Works alike for greedy search and sampling.

    Every beam of a sentence has its length, so beam reordering does not move bounds between rows. The bound holds the
    model's score for </s> (the other tokens become -inf); where a processor before it removed </s> (top-k sampling,
    ``suppress_tokens``), </s> gets log-probability 0 so the row still ends."""

    def __init__(self, max_new_tokens: torch.Tensor, eos_token_id: int | list[int] | torch.Tensor, prompt_length: int):
        self.max_new_tokens = max_new_tokens  # (rows,) tokens each row may generate, </s> included
        self.eos_token_id = torch.as_tensor(eos_token_id, device=max_new_tokens.device).reshape(-1)  # (n_eos,)
        self.prompt_length = prompt_length  # decoder positions before the first generated token (the start token)
        # the decoder length at which the first row is forced, read back once per generate() call at the first step,
        # so the steps before it cost nothing
        self.first_bound_length = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """input_ids: (rows, cur_len); scores: (rows, V) -> (rows, V)"""
        if self.first_bound_length is None:
            self.first_bound_length = self.prompt_length + int(self.max_new_tokens.min()) - 1
        if input_ids.shape[1] < self.first_bound_length:
            return scores
        generated = input_ids.shape[1] - self.prompt_length  # tokens each row generated so far
        at_bound = (generated + 1 >= self.max_new_tokens)[:, None]  # (rows, 1): the token chosen now is the last
        eos_scores = scores[:, self.eos_token_id]  # (rows, n_eos)
        forced_eos_scores = eos_scores.masked_fill(eos_scores.isneginf(), 0.0)  # </s> back where it was removed
        # one pass over (rows, V) with the row mask broadcast, then the few </s> columns: a beam step's scores are
        # (batch x beams, vocabulary), and a per-element mask of that size would cost more passes
        scores = scores.masked_fill(at_bound, -math.inf)  # (rows, V)
        scores[:, self.eos_token_id] = torch.where(at_bound, forced_eos_scores, eos_scores)
        return scores


class GenerationLengthDefault(GenerationHooks):
    """Mixed into both generation models (before ``GenerationMixin``): the lengths a new model decodes with.

    - ``max_length=DEFAULT_GENERATION_MAX_LENGTH`` in a new model's generation config; a length the user passes
      replaces it without a warning. transformers treats a ``max_length`` in the model's generation config as set by
      the user, so ``generate(max_new_tokens=n)`` would warn on every call that both are set; here the shipped
      ``max_length`` is dropped when the call gives ``max_new_tokens`` and no ``max_length`` of its own.
    - the source-relative bound (``SourceLengthBoundLogitsProcessor``) from the generation config's ``max_len_a`` and
      ``max_len_b``: a new model's config carries the defaults; a generation config without the fields (a folder
      saved before they existed) decodes with the defaults too, as transformers fills fields a config lacks with its
      global defaults. ``generate(max_len_a=..., max_len_b=...)`` overrides them (None for both: no bound), on any
      model of both families. The absolute limit (max_length / max_new_tokens) still applies: the shorter one wins;
      an explicit minimum (min_new_tokens / min_length) raises the bound to it.

    generate() reaches these through the hooks of ``transformers_compat.GenerationHooks``.
    """

    def _set_default_generation_length(self) -> None:
        """Call at the end of ``__init__`` (a loaded generation_config.json replaces it afterwards)."""
        if self.generation_config.max_length in (None, 20):  # unset, or transformers' generic default
            self.generation_config.max_length = DEFAULT_GENERATION_MAX_LENGTH
        config = self.generation_config
        config.max_len_a = getattr(config, "max_len_a", DEFAULT_MAX_LEN_A)
        config.max_len_b = getattr(config, "max_len_b", DEFAULT_MAX_LEN_B)
        # as Seq2SeqTrainer also does: a config marked as copied from the model config would save without the bound
        mark_generation_config_own(config)

    def generation_options(self, generation_config, kwargs: dict) -> dict:
        """The call's length bound, popped (a generation config without the fields would hand them to forward), and
        whether the call (or the generation config it passed) set max_length itself."""
        options = {name: kwargs.pop(name) for name in LENGTH_BOUND_FIELDS if name in kwargs}
        user_max_length = kwargs.get("max_length")
        if user_max_length is None and generation_config is not None:
            user_max_length = generation_config.max_length
        options["user_max_length"] = user_max_length
        return options

    def finish_generation_config(self, generation_config, options: dict) -> None:
        if generation_config.max_new_tokens is not None and options["user_max_length"] is None:
            generation_config.max_length = None  # the call's max_new_tokens decides the length
        # the call's values, else the generation config's, else (a config saved without the fields) the defaults
        generation_config.max_len_a = options.get("max_len_a", getattr(generation_config, "max_len_a", DEFAULT_MAX_LEN_A))
        generation_config.max_len_b = options.get("max_len_b", getattr(generation_config, "max_len_b", DEFAULT_MAX_LEN_B))
        check_length_bound(generation_config.max_len_a, generation_config.max_len_b)

    def extra_logits_processors(self, generation_config, model_kwargs: dict, encoder_input_ids, prompt_length: int):
        """The source-relative bound when the generation config sets one."""
        max_new_tokens = self.row_length_bounds(generation_config, model_kwargs, encoder_input_ids, prompt_length)
        if max_new_tokens is None:
            return []
        return [SourceLengthBoundLogitsProcessor(max_new_tokens, eos_token_tensor(generation_config), prompt_length)]

    def row_length_bounds(self, generation_config, model_kwargs: dict, encoder_input_ids,
                          prompt_length: int) -> torch.Tensor | None:
        """The source-relative bound of each decoding row, (rows,) tokens with </s>; None when the call has none."""
        max_len_a, max_len_b = generation_config.max_len_a, generation_config.max_len_b
        if max_len_a is None and max_len_b is None:
            return None
        eos_token_id = eos_token_tensor(generation_config)
        source_lengths = self._source_lengths(generation_config, model_kwargs, encoder_input_ids)
        if source_lengths is None or eos_token_id is None:
            missing = "no attention_mask or input_ids" if source_lengths is None else "no eos_token_id"
            raise ValueError(f"the source-relative length bound (max_len_a={max_len_a}, max_len_b={max_len_b}) counts "
                             f"each row's source tokens and ends it with </s>, but generate() got {missing}; pass it, "
                             f"or max_len_a=None, max_len_b=None to decode without the bound")
        # an explicit minimum length wins over the bound: </s> may come after min_new_tokens tokens at the earliest
        # (transformers' MinNewTokensLengthLogitsProcessor), after min_length decoder positions
        earliest_eos = 1 + max(generation_config.min_new_tokens or 0, (generation_config.min_length or 0) - prompt_length)
        return source_length_bound(source_lengths, max_len_a, max_len_b).clamp(min=earliest_eos)

    @staticmethod
    def _source_lengths(generation_config, model_kwargs: dict, encoder_input_ids) -> torch.Tensor | None:
        """Real source tokens of each decoding row, (rows,): from the encoder's attention_mask, which generate() has
        expanded over beams / return sequences already, else from input_ids != pad (the models infer their mask so
        when none is given), expanded as generate() expands; None without either."""
        attention_mask = model_kwargs.get("attention_mask")
        if attention_mask is not None:
            return attention_mask.sum(dim=1)
        if encoder_input_ids is None or encoder_input_ids.dim() != 2:
            return None
        pad_token_id = pad_token_tensor(generation_config)
        real = encoder_input_ids != pad_token_id if pad_token_id is not None else torch.ones_like(encoder_input_ids)
        expand = max(generation_config.num_beams or 1, generation_config.num_return_sequences or 1)
        return real.sum(dim=1).repeat_interleave(expand)


class Seq2SeqGeneration(GenerationLengthDefault):
    """Mixed into both generation models (before ``GenerationMixin``): ``GenerationLengthDefault``'s lengths, and the
    decoding options hf_s2s adds to ``generate()``:

    - ``shortlist=`` a :class:`~.shortlist.VocabularyShortlist`: the batch decodes over the union of its sources'
      shortlists (with the special tokens, the call's target terms and decoder prompt), or ``output_vocabulary=`` an
      :class:`~.shortlist.OutputVocabulary`, a set of target tokens given outright (the special tokens, terms and
      prompt added): in both cases over K of the V
      target tokens, from the output layer to the search, mapped back to the full vocabulary at the end (see
      ``shortlist.py``);
    - ``target_terms=`` per sentence, the target terms (lists of token ids) its translation must contain, and
      ``term_bonus=`` (nats, default ``DEFAULT_TERM_BONUS``): :class:`~.term_constraints.TargetTermsLogitsProcessor`
      steers every hypothesis of a sentence with terms; the length bound of such a row is raised to hold its terms.
    """

    def generate(self, *args, shortlist: VocabularyShortlist | str | os.PathLike | None = None, **kwargs):
        """transformers' ``generate``, plus ``shortlist`` (see the class docstring; also the path of a model folder
        or of its ``shortlist.safetensors``, which a folder loaded as remote code can pass); without a shortlist or
        an output vocabulary, transformers' own call."""
        vocabulary = kwargs.get("output_vocabulary")
        if shortlist is None and vocabulary is None:
            return super().generate(*args, **kwargs)
        if isinstance(shortlist, str | os.PathLike):
            path = Path(shortlist)
            shortlist = VocabularyShortlist.from_pretrained(path) if path.is_dir() else VocabularyShortlist.load(path)
        refused = [name for name in REFUSED_ARGUMENTS if kwargs.get(name) is not None]
        if refused or len(args) > 2:
            named = ", ".join(refused) or "positional arguments after generation_config"
            raise ValueError(f"a vocabulary shortlist decodes in reduced token ids, which {named} would read as full "
                             "ones: decode without the shortlist to use them")
        target_vocab_size = getattr(self.config, "target_vocab_size", self.config.vocab_size)
        if vocabulary is None:
            source = args[0] if args else kwargs.get("inputs", kwargs.get("input_ids"))
            if not torch.is_tensor(source) or source.dim() != 2:
                raise ValueError("a vocabulary shortlist reads the source token ids: pass input_ids as a (batch, "
                                 "length) tensor")
            shortlist.check_fits(self.config.vocab_size, target_vocab_size, type(self).__name__)
            vocabulary = shortlist.output_vocabulary(source, kwargs.get("attention_mask"),
                                                     self._shortlist_extras(args, kwargs))
        elif shortlist is not None:
            raise ValueError("give shortlist or output_vocabulary, not both")
        elif vocabulary.vocab_size != target_vocab_size:
            raise ValueError(f"the output vocabulary is for {vocabulary.vocab_size} target tokens, and "
                             f"{type(self).__name__} has {target_vocab_size}")
        else:
            vocabulary = vocabulary.including(self._shortlist_extras(args, kwargs))
        kwargs["output_vocabulary"] = vocabulary
        if kwargs.get("decoder_input_ids") is not None:
            kwargs["decoder_input_ids"] = vocabulary.reduce(kwargs["decoder_input_ids"], "decoder_input_ids")
        return vocabulary.restore_output(super().generate(*args, **kwargs))

    def _shortlist_extras(self, args: tuple, kwargs: dict) -> list[int]:
        """The target tokens a call's output vocabulary must hold whatever its sources: the special tokens of the
        call (its keywords, else the generation config it passes, else the model's), its decoder prompt and its
        target terms."""
        configs = [config for config in (args[1] if len(args) > 1 else kwargs.get("generation_config"),
                                         self.generation_config) if config is not None]
        extras = []
        for name in SPECIAL_TOKEN_FIELDS:
            value = kwargs.get(name, next((getattr(c, name) for c in configs if getattr(c, name, None) is not None),
                                          None))
            if value is not None:
                extras.extend(value if isinstance(value, list | tuple) else [value])
        if kwargs.get("decoder_input_ids") is not None:
            extras.extend(kwargs["decoder_input_ids"].reshape(-1).tolist())
        for terms in kwargs.get("target_terms") or []:
            extras.extend(int(token) for term in terms for token in term)
        return extras

    def generation_options(self, generation_config, kwargs: dict) -> dict:
        """The length options (``GenerationLengthDefault``), the target terms and their bonus, popped, and the output
        vocabulary (left in the keywords: it reaches forward as a model input)."""
        options = super().generation_options(generation_config, kwargs)
        options["target_terms"] = kwargs.pop("target_terms", None)
        options["term_bonus"] = kwargs.pop("term_bonus", DEFAULT_TERM_BONUS)
        options["output_vocabulary"] = kwargs.get("output_vocabulary")
        return options

    def finish_generation_config(self, generation_config, options: dict) -> None:
        """The call's generation config in the reduced vocabulary, with its terms (carried to the processors on
        this call's own copy of the config)."""
        super().finish_generation_config(generation_config, options)
        if options["output_vocabulary"] is not None:
            options["output_vocabulary"].reduce_generation_config(generation_config)
        bonus = options["term_bonus"]
        if isinstance(bonus, bool) or not isinstance(bonus, Real) or not math.isfinite(bonus):
            raise ValueError(f"term_bonus (nats added to a missing term's first token) must be a finite number, got "
                             f"{bonus!r}")
        generation_config.target_terms = options["target_terms"]
        generation_config.term_bonus = float(bonus)

    def extra_logits_processors(self, generation_config, model_kwargs: dict, encoder_input_ids, prompt_length: int):
        """The length bound, and with target terms their processor, each row's bound raised to hold its terms."""
        target_terms = getattr(generation_config, "target_terms", None)
        if target_terms is None:
            return super().extra_logits_processors(generation_config, model_kwargs, encoder_input_ids, prompt_length)
        if encoder_input_ids is None or encoder_input_ids.dim() != 2:
            raise ValueError("target_terms are given per sentence: pass the sources as input_ids")
        vocabulary = model_kwargs.get("output_vocabulary")
        terms = check_target_terms(target_terms, encoder_input_ids.shape[0],
                                   getattr(self.config, "target_vocab_size", self.config.vocab_size))
        if vocabulary is not None:
            terms = [[vocabulary.reduce(term, "target_terms") for term in sentence] for sentence in terms]
        expand = max(generation_config.num_beams or 1, generation_config.num_return_sequences or 1)
        device = encoder_input_ids.device
        term_tokens = torch.tensor([sum(map(len, sentence)) for sentence in terms], device=device)
        needed = (term_tokens + 1).repeat_interleave(expand)  # (rows,) the terms and </s>
        bounds = self.row_length_bounds(generation_config, model_kwargs, encoder_input_ids, prompt_length)
        processors = []
        budget = torch.full_like(needed, generation_config.max_length - prompt_length)
        if bounds is not None:
            bounds = torch.maximum(bounds.to(device), needed)
            processors.append(SourceLengthBoundLogitsProcessor(bounds, eos_token_tensor(generation_config),
                                                               prompt_length))
            budget = torch.minimum(budget, bounds)
        processors.append(TargetTermsLogitsProcessor(terms, expand, budget, prompt_length,
                                                     eos_token_tensor(generation_config), generation_config.term_bonus))
        return processors
