"""Pieces shared by the hf_s2s modeling files: the label shift, the padding-free token packing, the output layer
and its (label-smoothed, optionally R-Drop-regularised) token-sum loss, clear errors for bad token ids, and the parts
of the pretrained classes that both families share.

Copied beside the modeling files into every saved model folder (``save_pretrained`` follows single-dot
relative imports), so it must import nothing from hf_s2s.
"""

import math
from functools import partial
from numbers import Real

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LogitsProcessor
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import logging

from .output_vocabulary import (
    SPECIAL_TOKEN_FIELDS,
    FullIdsCriteria,
    FullVocabularyView,
    OutputVocabulary,
    compact_processors,
    map_generation_config,
    user_processors,
)
from .pipeline_seq2seq import Seq2SeqText2TextPipeline, Seq2SeqTranslationPipeline
from .shortlist import VocabularyShortlist
from .term_constraints import DEFAULT_TERM_BONUS, TargetTermsLogitsProcessor, check_target_terms
from .transformers_compat import (
    GenerationHooks,
    SavingHooks,
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
    return per_label_token(loss, labels, num_items_in_batch)


def per_label_token(loss_sum: torch.Tensor, labels: torch.Tensor,
                    num_items_in_batch: int | torch.Tensor | None) -> torch.Tensor:
    """A loss summed over label tokens, divided by ``num_items_in_batch`` (Trainer's count of the label tokens in the
    whole accumulated, all-process batch), or without it by this batch's label tokens (labels != -100)."""
    if num_items_in_batch is None:
        num_items_in_batch = (labels != -100).sum()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss_sum.device)
    return loss_sum / num_items_in_batch


def repeat_batch(encoder_outputs, cache, *tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """R-Drop's two passes as one forward (as the paper's fairseq code does): each of a training forward's batch-major
    inputs twice, (B, ...) -> (2B, ...), rows B..2B-1 the second copy; None stays None. Dropout draws its masks per
    element, so the two copies of a sentence go through independently dropped-out sub-models. Encoder outputs or a
    cache, computed once for one copy, are refused: the encoder must run on both."""
    if encoder_outputs is not None or cache is not None:
        given = "encoder_outputs" if encoder_outputs is not None else "a cache"
        raise ValueError(f"R-Drop (config.rdrop_alpha > 0) runs a training forward with labels twice, encoder "
                         f"included, but it was given {given}; pass input_ids instead, or set config.rdrop_alpha = 0")
    return tuple(None if tensor is None else torch.cat([tensor, tensor]) for tensor in tensors)


def rdrop_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None,
    label_smoothing: float,
    rdrop_alpha: float,
) -> torch.Tensor:
    """R-Drop, Liang et al. 2021 (arXiv:2106.14448), on a batch repeated by :func:`repeat_batch`. Per label token,
    with P1 and P2 the two passes' output distributions:

        L = 1/2 [CE(P1) + CE(P2) + alpha * 1/2 (KL(P1 || P2) + KL(P2 || P1))]

    The paper's training objective (the bracket: L_NLL + alpha L_KL) halved, so that the cross-entropy part is the
    mean of the two passes (label-smoothed as :func:`seq2seq_loss`), on the scale of an ordinary run's loss (the
    logged loss, and the gradient that ``max_grad_norm`` clips), while alpha keeps the paper's meaning (the KL
    term's weight against the cross-entropy). Summed over the label tokens of both copies, divided by twice
    ``num_items_in_batch`` (which counts one copy), so accumulation and several processes give one big batch's
    loss, as for :func:`seq2seq_loss`.

    logits: (2N, V) packed or (2B, T, V), the first half the first pass; labels: (2N,) or (2B, T), -100 ignored.
    """
    num_items = 2 * num_items_in_batch if num_items_in_batch is not None else None  # both copies' label tokens
    cross_entropy = seq2seq_loss(logits, labels, num_items, label_smoothing)  # the mean of the two passes' CE
    log_p1, log_p2 = logits.float().log_softmax(dim=-1).chunk(2)  # (N, V) or (B, T, V) each
    # the paper's L_KL = 1/2 (KL(P1 || P2) + KL(P2 || P1)) = 1/2 sum_v (p1 - p2)(log p1 - log p2): one product
    kl = 0.5 * ((log_p1.exp() - log_p2.exp()) * (log_p1 - log_p2)).sum(dim=-1)  # (N,) or (B, T)
    kl_sum = kl.masked_fill(labels.chunk(2)[0].to(kl.device) == -100, 0.0).sum()  # over one copy's label tokens
    # divided by both copies' count: the leading 1/2
    return cross_entropy + rdrop_alpha * per_label_token(kl_sum, labels, num_items)


def output_layer_and_loss(
    lm_head: nn.Module,
    hidden_states: torch.Tensor,
    labels: torch.Tensor | None,
    packing: TokenPacking | None,
    num_items_in_batch: int | torch.Tensor | None,
    label_smoothing: float,
    rdrop_alpha: float = 0.0,
    output_vocabulary: OutputVocabulary | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The output layer and the loss, shared by both families; returns (logits, loss).

    hidden_states: (B, T, H). With ``packing`` (``TokenPacking.through_last_label(labels)``: a training forward, the
    padding-free path) the output layer and the loss run on the packed positions only, and no logits are returned
    (None: nothing else would be ordinary (B, T, V) logits); otherwise logits are (B, T, V). ``rdrop_alpha`` > 0:
    the batch holds its sentences twice (:func:`repeat_batch`) and the loss is :func:`rdrop_loss`; the packed
    positions of the two copies then fall in the same order into the two halves of (N, V). With
    ``output_vocabulary`` (a vocabulary shortlist, decoding only) the layer computes its K rows and the tokens a row
    may not generate get -inf: logits (B, T, V)."""
    if output_vocabulary is not None:
        if labels is not None:
            raise ValueError("a vocabulary shortlist is for decoding: a loss over the shortlisted tokens is not the "
                             "model's loss; pass labels without it")
        return output_vocabulary.logits(lm_head, hidden_states), None
    loss_function = seq2seq_loss if not rdrop_alpha else partial(rdrop_loss, rdrop_alpha=rdrop_alpha)
    if packing is not None:
        logits = lm_head(packing.pack(hidden_states))  # (N, V)
        return None, loss_function(logits, packing.pack(labels), num_items_in_batch, label_smoothing)
    logits = lm_head(hidden_states)  # (B, T, V)
    loss = loss_function(logits, labels, num_items_in_batch, label_smoothing) if labels is not None else None
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


def embed_source(embedding: nn.Embedding, input_ids: torch.Tensor, config) -> torch.Tensor:
    """The encoder's ``embed``: ids ``vocab_size`` .. ``vocab_size + config.source_unk_aliases - 1`` (pieces the
    source vocabulary lacks, after it in a converted toolkit's tokenizer) are looked up as ``config.unk_token_id``,
    as the toolkit reads them as <unk>. (B, T) -> (B, T, D)"""
    if config.source_unk_aliases:
        first = config.vocab_size
        aliased = (input_ids >= first) & (input_ids < first + config.source_unk_aliases)  # (B, T)
        input_ids = input_ids.masked_fill(aliased, config.unk_token_id)
    return embed(embedding, input_ids, "input_ids")


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


class Seq2SeqPreTrainedMixin(SavingHooks):
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

    - ``max_length=DEFAULT_GENERATION_MAX_LENGTH`` in a new model's generation config, and in a call
      where neither the call nor the model's generation config sets a length (a folder without
      generation_config.json, which transformers rebuilds from config.json without one; said in one warning
      line when it loads), instead of generate()'s generic 20 tokens; a length the user passes replaces it
      without a warning. transformers treats a ``max_length`` in the model's generation config as set by the
      user, so ``generate(max_new_tokens=n)`` would warn on every call that both are set; here the shipped
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

    def on_generation_config_loaded(self, name_or_path) -> None:
        """One warning line when the generation config loaded from ``name_or_path`` sets no length (the folder
        has no generation_config.json, so transformers built one from config.json; or its file sets neither
        max_length nor max_new_tokens): the model decodes it with the family's lengths
        (:meth:`finish_generation_config`), where transformers' generic 20 tokens cut longer translations
        without a word."""
        config = self.generation_config
        if config.max_length is None and config.max_new_tokens is None:
            max_len_a, max_len_b = (getattr(config, name, default) for name, default in zip(
                LENGTH_BOUND_FIELDS, (DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B), strict=True))
            bound = "no source-relative bound" if max_len_a is None and max_len_b is None else \
                f"at most {max_len_a or 0} x source tokens + {max_len_b or 0}"
            logger.warning(f"{name_or_path} has no generation_config.json with a length limit: decoding "
                           f"with the {self.config.model_type} defaults, max_length "
                           f"{DEFAULT_GENERATION_MAX_LENGTH} and {bound}, not transformers' generic 20 "
                           "tokens; save a generation config in the folder to decode otherwise")

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
        if options["user_max_length"] is None:  # the call sets no max_length
            if generation_config.max_new_tokens is not None:  # the call's or the config's decides the length
                generation_config.max_length = None
            elif self.generation_config.max_length is None:  # nor does the model's generation config
                # the family's max_length, not generate()'s generic 20, as the new tokens after the start token:
                # generate() would add the prompt to a max_length it treats as its default, and warn on every call
                positions = getattr(self.config, "max_position_embeddings", None) or math.inf
                generation_config.max_new_tokens = min(DEFAULT_GENERATION_MAX_LENGTH, positions) - 1
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
        # the source's padding id: a call decoding over compact target ids (output_vocabulary.py) keeps the full one
        pad_token_id = getattr(generation_config, "source_pad_token_id", None)
        if pad_token_id is None:
            pad_token_id = pad_token_tensor(generation_config)
        real = encoder_input_ids != pad_token_id if pad_token_id is not None else torch.ones_like(encoder_input_ids)
        expand = max(generation_config.num_beams or 1, generation_config.num_return_sequences or 1)
        return real.sum(dim=1).repeat_interleave(expand)


class Seq2SeqGeneration(GenerationLengthDefault):
    """Mixed into both generation models and the ensemble (before ``GenerationMixin``): ``GenerationLengthDefault``'s
    lengths, and the decoding options hf_s2s adds to ``generate()``:

    - ``shortlist=`` a :class:`~.shortlist.VocabularyShortlist` (or any object with its ``check_fits`` and
      ``allowed``: the class of hf_s2s and the copy in a model folder alike): each sentence generates only its source's
      shortlist (with the special tokens and its target terms), and the output layer computes only the rows the batch
      needs (``shortlist.py``);
    - ``target_terms=`` per sentence, the target terms (lists of token ids) its translation must contain, and
      ``term_bonus=`` (nats, default ``DEFAULT_TERM_BONUS``): :class:`~.term_constraints.TargetTermsLogitsProcessor`
      steers every hypothesis of a sentence with terms; the length bound of such a row is raised to hold its terms.
    """

    def generate(self, *args, shortlist: VocabularyShortlist | None = None, **kwargs):
        """transformers' ``generate``, plus ``shortlist`` and ``target_terms`` (see the class docstring)."""
        vocabulary = kwargs.pop("output_vocabulary", None)
        if shortlist is not None:
            if vocabulary is not None:
                raise ValueError("give shortlist or output_vocabulary, not both")
            vocabulary = self._shortlist_vocabulary(shortlist, args, kwargs)
        if vocabulary is None:
            return super().generate(*args, **kwargs)
        if not isinstance(vocabulary, OutputVocabulary):
            raise ValueError(f"output_vocabulary must be an OutputVocabulary, got {type(vocabulary).__name__}")
        if not vocabulary.compact:  # the reference path: full ids everywhere
            return super().generate(*args, output_vocabulary=vocabulary, **kwargs)
        refused = [name for name in ("assistant_model", "prompt_lookup_num_tokens", "stop_strings", "custom_generate")
                   if kwargs.get(name) is not None]
        if refused:
            raise ValueError(f"a vocabulary shortlist decodes over its own compact token ids, which {refused[0]} does "
                             "not read: decode without one of them")
        if kwargs.get("decoder_input_ids") is not None:
            kwargs["decoder_input_ids"] = vocabulary.compact_ids(kwargs["decoder_input_ids"], "decoder_input_ids")
        kwargs["logits_processor"] = user_processors(kwargs.get("logits_processor"), vocabulary, FullVocabularyView)
        kwargs["stopping_criteria"] = user_processors(kwargs.get("stopping_criteria"), vocabulary, FullIdsCriteria)
        return vocabulary.full_output(super().generate(*args, output_vocabulary=vocabulary, **kwargs))

    def _shortlist_vocabulary(self, shortlist: VocabularyShortlist, args: tuple, kwargs: dict) -> OutputVocabulary:
        """The output vocabulary of a call with ``shortlist``: each sentence's tokens, the special ones and its terms,
        and a decoder prompt's tokens representable."""
        if not all(callable(getattr(shortlist, method, None)) for method in ("check_fits", "allowed")):
            raise ValueError(f"shortlist must be a vocabulary shortlist, an object with check_fits() and allowed() "
                             f"(VocabularyShortlist.from_pretrained(folder)), got {type(shortlist).__name__}")
        source = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs"))
        if not torch.is_tensor(source) or source.dim() != 2:
            raise ValueError("a vocabulary shortlist reads the source token ids: pass input_ids as a (batch, length) "
                             "tensor")
        shortlist.check_fits(*self.shortlist_vocab_sizes(), type(self).__name__)
        terms = [[token for term in sentence for token in term] for sentence in kwargs.get("target_terms") or []]
        allowed = shortlist.allowed(source, kwargs.get("attention_mask"), self._special_target_tokens(args, kwargs),
                                    terms)
        prompt = kwargs.get("decoder_input_ids")
        return OutputVocabulary(allowed, extra_ids=[] if prompt is None else torch.as_tensor(prompt).unique().tolist())

    def shortlist_vocab_sizes(self) -> tuple[int, int]:
        """The source and target vocabulary sizes a shortlist must map between."""
        return self.config.vocab_size, getattr(self.config, "target_vocab_size", self.config.vocab_size)

    def _special_target_tokens(self, args: tuple, kwargs: dict) -> list[int]:
        """The special tokens of a call (its keywords, else the generation config it passes, else the model's):
        every sentence may generate them whatever its shortlist."""
        configs = [config for config in (args[1] if len(args) > 1 else kwargs.get("generation_config"),
                                         self.generation_config) if config is not None]
        tokens = []
        for name in SPECIAL_TOKEN_FIELDS:
            value = kwargs.get(name)
            if value is None:
                value = next((getattr(c, name) for c in configs if getattr(c, name, None) is not None), None)
            if value is not None:
                tokens.extend(int(token) for token in (value if isinstance(value, list | tuple) else [value]))
        return tokens

    def generation_options(self, generation_config, kwargs: dict) -> dict:
        """The length options (``GenerationLengthDefault``), and the target terms and their bonus, popped."""
        options = super().generation_options(generation_config, kwargs)
        options["output_vocabulary"] = kwargs.get("output_vocabulary")  # forward reads it too: not popped
        options["target_terms"] = kwargs.pop("target_terms", None)
        options["term_bonus"] = kwargs.pop("term_bonus", DEFAULT_TERM_BONUS)
        return options

    def finish_generation_config(self, generation_config, options: dict) -> None:
        """The call's terms and bonus, carried to the processors on this call's own copy of the config."""
        super().finish_generation_config(generation_config, options)
        bonus = options["term_bonus"]
        if isinstance(bonus, bool) or not isinstance(bonus, Real) or not math.isfinite(bonus):
            raise ValueError(f"term_bonus (nats added to a missing term's first token) must be a finite number, got "
                             f"{bonus!r}")
        generation_config.target_terms = options["target_terms"]
        generation_config.term_bonus = float(bonus)
        vocabulary = options["output_vocabulary"]
        if vocabulary is not None and vocabulary.compact:  # the search reads compact ids (output_vocabulary.py)
            pad_token_id = generation_config.pad_token_id
            generation_config.source_pad_token_id = pad_token_id[0] if isinstance(pad_token_id, list) else pad_token_id
            map_generation_config(generation_config, vocabulary)

    def finish_logits_processors(self, processors, model_kwargs: dict):
        """transformers' processors, for a call decoding over compact ids adapted to them (``compact_processors``)."""
        vocabulary = model_kwargs.get("output_vocabulary")
        if vocabulary is None or not vocabulary.compact:
            return processors
        return compact_processors(processors, vocabulary)

    def extra_logits_processors(self, generation_config, model_kwargs: dict, encoder_input_ids, prompt_length: int):
        """The length bound, and with target terms their processor, each row's bound raised to hold its terms."""
        target_terms = getattr(generation_config, "target_terms", None)
        if target_terms is None:
            return super().extra_logits_processors(generation_config, model_kwargs, encoder_input_ids, prompt_length)
        if encoder_input_ids is None or encoder_input_ids.dim() != 2:
            raise ValueError("target_terms are given per sentence: pass the sources as input_ids")
        terms = check_target_terms(target_terms, encoder_input_ids.shape[0],
                                   getattr(self.config, "target_vocab_size", self.config.vocab_size))
        vocabulary = model_kwargs.get("output_vocabulary")
        if vocabulary is not None and vocabulary.compact:  # the terms as the search reads them
            terms = [[vocabulary.compact_ids(term, "target_terms").tolist() for term in sentence] for sentence in terms]
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
