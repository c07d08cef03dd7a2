"""Checkpoint ensembles at decoding time: several hf_s2s models of one vocabulary decoded as one by the stock
``generate()`` (greedy, beam search, sampling), as fairseq ``--path a.pt:b.pt``, OpenNMT-py ``-model m1 m2`` and
Marian ``--models`` do.

How the toolkits combine the members' next-token distributions, and the choice made here:

- fairseq (``EnsembleModel.forward_decoder``): the log of the mean of the probabilities,
  ``logsumexp_m(log p_m) - log M``;
- OpenNMT-py (``EnsembleGenerator``): the mean of the log-probabilities by default, the log of the mean of the
  probabilities with ``-avg_raw_probs``;
- Marian: a weighted sum of the log-probabilities (``--weights``, all 1 by default).

:class:`Seq2SeqEnsemble` takes fairseq's choice, the log of the mean probability: the result is itself a
distribution (its scores stay log-probabilities that beam search, ``compute_transition_scores`` and the length
penalty read as they read one model's), and one confident member cannot veto a token the others agree on. An
ensemble of one model, or of copies of one model, decodes exactly as that model does.

Members may be of either family and may mix them: what they must share is the vocabulary, source and target, and the
special token ids, in their tokenizers and configs (:func:`hf_s2s.data.vocabulary.check_same_vocabulary`, the check
checkpoint averaging makes too).
"""

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import (
    GenerationConfig,
    GenerationMixin,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.cache_utils import Cache
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput
from transformers.utils import can_return_tuple

from ..data.tokenization import check_tokenizer_fits_model, target_side
from ..data.vocabulary import VOCABULARY_FIELDS, check_same_vocabulary
from ..models.loading import load_config, load_generation_config, load_model, load_tokenizer
from ..models.modeling_common import Seq2SeqGeneration
from ..models.output_vocabulary import OutputVocabulary
from ..models.transformers_compat import cache_argument, cache_output, output_cache
from .attention import eager_attention

# Why ensemble members must share one vocabulary, as the refusal says it.
ENSEMBLE_PURPOSE = ("an ensemble averages the members' next-token distributions, so every member needs the same "
                    "source and target vocabularies and special token ids")


def _reorder_function(model: nn.Module) -> Callable[[Cache, torch.Tensor], None]:
    """How beam search reorders ``model``'s cache: as generate() does, its own ``reorder_beam_cache`` (both families
    have one), else the cache's ``reorder_cache``."""
    if hasattr(model, "reorder_beam_cache"):
        return model.reorder_beam_cache
    return lambda cache, beam_idx: cache.reorder_cache(beam_idx)


class EnsembleCache(Cache):
    """One cache per member (an ``EncoderDecoderCache`` for a Transformer, an ``RNNSeq2SeqCache`` for an RNN),
    reordered together for beam search, each the way its own model reorders it under ``generate()``."""

    is_compileable = False

    def __init__(self, caches: list[Cache], reorders: list[Callable[[Cache, torch.Tensor], None]]):
        super().__init__(layers=[])
        self.caches = caches
        self.reorders = reorders
        # While a coverage penalty is attached (hf_s2s.inference.penalties): the cross-attention summed over the steps so far
        # (N, S), and the real source tokens (N, S) bool.
        self.coverage = self.source_mask = None

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.caches[0].get_seq_length()  # every member has consumed the same decoder tokens

    @property
    def is_croppable(self) -> bool:
        return False  # assisted decoding would crop the members; the recurrent ones cannot be

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        for cache, reorder in zip(self.caches, self.reorders, strict=True):
            reorder(cache, beam_idx)
        if self.coverage is not None:  # the source mask rows are equal among the beams of a sentence
            self.coverage = self.coverage.index_select(0, beam_idx.to(self.coverage.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        for cache in self.caches:
            cache.batch_repeat_interleave(repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        for cache in self.caches:
            cache.batch_select_indices(indices)

    def reset(self) -> None:
        for cache in self.caches:
            cache.reset()


@dataclass
class EnsembleEncoderOutput(BaseModelOutput):
    """The members' encoder memories side by side: ``last_hidden_state`` (B, S, E_1 + ... + E_M), split again by
    ``widths`` (E_1, ..., E_M). One tensor, so that ``generate()`` repeats it for the beams as it does any
    encoder output (it repeats the tensors of an encoder output, not tensors nested deeper)."""

    widths: tuple[int, ...] | None = None
    # (B, S): the source mask the members attend with, the given attention_mask or one inferred from the pad id (the
    # decoding steps of generate(input_ids) without a mask get the encoder output, not the source)
    source_mask: torch.Tensor | None = None


class EnsembleEncoder(nn.Module):
    """Runs every member's encoder on the same source (the members share the tokenizer, so also S)."""

    main_input_name = "input_ids"

    def __init__(self, members: Sequence[nn.Module], pad_token_id: int | None):
        super().__init__()
        self._members = tuple(members)  # a tuple: the ensemble registers the members' parameters, not this
        self.pad_token_id = pad_token_id

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs) -> EnsembleEncoderOutput:
        """input_ids, attention_mask (B, S); without a mask, the padding is found from the pad id, as each family
        does. The output flags generate() passes are not used: the members' per-layer encoder states are not
        returned."""
        if attention_mask is None and self.pad_token_id is not None:
            attention_mask = input_ids.ne(self.pad_token_id).long()  # (B, S)
        memories = [member.get_encoder()(input_ids=input_ids, attention_mask=attention_mask,
                                         return_dict=True).last_hidden_state for member in self._members]
        return EnsembleEncoderOutput(last_hidden_state=torch.cat(memories, dim=-1),  # (B, S, sum E_m)
                                     widths=tuple(memory.shape[-1] for memory in memories),
                                     source_mask=attention_mask)


class Seq2SeqEnsemble(Seq2SeqGeneration, PreTrainedModel, GenerationMixin):
    """Several hf_s2s generation models of one vocabulary, decoded as one model by ``generate()``: each step's
    logits are the log of the mean of the members' next-token probabilities (fairseq's rule; see the module
    docstring). Its cache (:class:`EnsembleCache`) holds each member's. The generation config is the first
    member's. Decoding only: it has no loss and is not saved.

    ``Seq2SeqEnsemble([model_a, model_b]).generate(input_ids, attention_mask=mask, num_beams=5)``
    """

    config: PreTrainedConfig
    main_input_name = "input_ids"

    def __init__(self, models: Sequence[PreTrainedModel]):
        if not models:
            raise ValueError("an ensemble needs at least one model, got none")
        check_same_vocabulary([f"model {i}" for i in range(len(models))], configs=[model.config for model in models],
                              purpose=ENSEMBLE_PURPOSE)
        first = models[0].config
        config = PreTrainedConfig(
            is_encoder_decoder=True, vocab_size=first.target_vocab_size,
            **{field: getattr(first, field) for field in VOCABULARY_FIELDS if field.endswith("token_id")},
        )
        super().__init__(config)
        self.members = nn.ModuleList(models)
        # generate() refuses assisted decoding for a stateful model: any recurrent member makes the ensemble one
        self._is_stateful = any(getattr(model, "_is_stateful", False) for model in models)
        self.tracks_coverage = False  # set by tracking_coverage()
        self.coverage_state: EnsembleCache | None = None  # the cache of the generate() call under way, then
        self.post_init()
        self.generation_config = models[0].generation_config.__class__.from_dict(
            models[0].generation_config.to_dict())

    uses_default_cache = False  # forward builds an EnsembleCache of the members' own caches on the first step

    def _init_weights(self, module: nn.Module) -> None:
        """The members come trained: nothing here is initialised."""

    def shortlist_vocab_sizes(self) -> tuple[int, int]:
        """The members' source and target vocabulary sizes (one vocabulary: checked when the ensemble is made)."""
        return self.members[0].shortlist_vocab_sizes()

    def get_encoder(self, *args, **kwargs) -> EnsembleEncoder:
        return EnsembleEncoder(self.members, self.config.pad_token_id)

    @contextmanager
    def tracking_coverage(self) -> Iterator[None]:
        """Inside the block, each step also sums the members' cross-attention into the cache (the last decoder
        layer's, averaged over heads and members), for :class:`hf_s2s.inference.penalties.CoveragePenaltyLogitsProcessor`;
        the members run on the eager attention kernel, the only one that returns the weights."""
        self.tracks_coverage = True
        try:
            with eager_attention(list(self.members)):
                yield
        finally:
            self.tracks_coverage, self.coverage_state = False, None

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: EnsembleEncoderOutput | None = None,
        cache: EnsembleCache | None = None,
        use_cache: bool | None = None,
        output_vocabulary: OutputVocabulary | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """input_ids, attention_mask (B, S); decoder_input_ids (B, T) (the new tokens only once the cache holds the
        earlier ones). Returns logits (B, T, V): log of the mean of the members' probabilities, in float32 (one
        member's own logits for an ensemble of one: their log_softmax, which generate() takes, is the same).
        ``output_vocabulary`` (a shortlist's, which generate() passes): decoder ids and logits (B, T, K) in its compact
        ids, each member's softmax over the K tokens."""
        cache = cache_argument(cache, kwargs)
        if encoder_outputs is None:
            encoder_outputs = self.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        if attention_mask is None:
            attention_mask = encoder_outputs.source_mask
        memories = encoder_outputs.last_hidden_state.split(list(encoder_outputs.widths), dim=-1)  # each (B, S, E_m)
        caches = cache.caches if cache is not None else [None] * len(self.members)
        log_probs, new_caches, attentions = [], [], []
        for member, memory, member_cache in zip(self.members, memories, caches, strict=True):
            outputs = member(attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                             decoder_attention_mask=decoder_attention_mask,
                             encoder_outputs=BaseModelOutput(last_hidden_state=memory), cache=member_cache,
                             use_cache=use_cache, output_attentions=self.tracks_coverage or None, return_dict=True,
                             output_vocabulary=output_vocabulary, **kwargs)
            if len(self.members) > 1:
                log_probs.append(outputs.logits.float().log_softmax(dim=-1))  # (B, T, V)
            new_caches.append(output_cache(outputs))
            if self.tracks_coverage:
                if not outputs.cross_attentions:
                    raise ValueError(f"{type(member).__name__} returns no cross-attention (attention_type 'none'?): "
                                     "a coverage penalty needs it")
                attentions.append(outputs.cross_attentions[-1].float().mean(dim=1).sum(dim=1))  # (B, S)
        if len(self.members) == 1:  # generate() normalizes logits itself: one member's need no extra pass
            logits = outputs.logits
        else:
            logits = torch.logsumexp(torch.stack(log_probs), dim=0) - math.log(len(self.members))  # (B, T, V)
        if cache is None and new_caches[0] is not None:
            cache = EnsembleCache(new_caches, [_reorder_function(member) for member in self.members])
        if self.tracks_coverage:
            self._add_coverage(cache, torch.stack(attentions).mean(dim=0), attention_mask, memories[0])
        return Seq2SeqLMOutput(logits=logits, **cache_output(cache if use_cache is not False else None))

    def _add_coverage(self, cache: EnsembleCache | None, step: torch.Tensor, attention_mask: torch.Tensor | None,
                      memory: torch.Tensor) -> None:
        """Sum this step's attention ``step`` (B, S) into the cache's coverage; the processor reads it next."""
        if cache is None:
            raise ValueError("a coverage penalty needs the decoder cache (use_cache=True): the coverage lives there")
        if cache.coverage is None:
            cache.source_mask = (attention_mask.bool() if attention_mask is not None
                                 else torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device))
            cache.coverage = step
        else:
            cache.coverage = cache.coverage + step
        self.coverage_state = cache


def _dtype_name(config) -> str:
    """The dtype a folder's weights load in ("float32" where config.json records none, transformers' default)."""
    return str(getattr(config, "dtype", None) or "float32").removeprefix("torch.")


@dataclass
class DecodingFolders:
    """Model folders as decoding needs them before their weights are loaded, checked to decode together."""

    names: list[str]  # the folders, as given
    tokenizer: PreTrainedTokenizerBase  # the first folder's (the others' are the same vocabularies)
    configs: list[PreTrainedConfig]  # one per folder
    generation_config: GenerationConfig  # the first folder's, which an ensemble decodes with


def read_for_decoding(folders: Sequence[str | Path]) -> DecodingFolders:
    """The tokenizers, configs and (the first folder's) generation config of ``folders``, no weights, refused where they
    cannot decode together or at all: members of different vocabularies, source or target, or special token ids, in
    their tokenizers or their configs (:func:`hf_s2s.data.vocabulary.check_same_vocabulary`), a tokenizer that does
    not fit its model (more tokens than its embedding table has rows: a token id past the table would be a wrong
    lookup; special ids that differ; :func:`hf_s2s.data.tokenization.check_tokenizer_fits_model`), and members whose
    weights load in different dtypes."""
    names = [str(folder) for folder in folders]
    if not names:
        raise ValueError("decoding needs at least one model folder, got none")
    tokenizers = [load_tokenizer(folder) for folder in folders]
    configs = [load_config(folder) for folder in folders]
    check_same_vocabulary(names, tokenizers=tokenizers, configs=configs, purpose=ENSEMBLE_PURPOSE)
    for name, tokenizer, config in zip(names, tokenizers, configs, strict=True):
        try:
            check_tokenizer_fits_model(tokenizer, config, target_side(tokenizer))
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
    dtypes = [_dtype_name(config) for config in configs]
    if len(set(dtypes)) > 1:
        listed = ", ".join(f"{name} {dtype}" for name, dtype in zip(names, dtypes, strict=True))
        raise ValueError(f"the folders hold weights of different dtypes ({listed}): an ensemble computes in one dtype; "
                         "save the members in one (model.to(torch.float32).save_pretrained(folder))")
    return DecodingFolders(names, tokenizers[0], configs, load_generation_config(folders[0], configs[0]))


def load_for_decoding(folders: Sequence[str | Path], read: DecodingFolders | None = None):
    """``(model, tokenizer)`` to decode with: one folder's model, or the :class:`Seq2SeqEnsemble` of several (the
    tokenizer, and so the generation config, of the first). The folders are checked by :func:`read_for_decoding`
    (``read``: its result, when the caller already has it) before any weights are loaded, and every folder is then
    loaded strictly (:func:`hf_s2s.models.loading.load_model`) and read whole (never memory-mapped), the first with
    the generation config ``read`` holds (built again from config.json where the folder has no
    generation_config.json, as ``read`` built it)."""
    read = read if read is not None else read_for_decoding(folders)
    # Without a generation_config.json, from_pretrained builds the same config from config.json as read did, and
    # the family then says in one warning line that it decodes with its own lengths: given one, it would not.
    given = read.generation_config if (Path(folders[0]) / "generation_config.json").is_file() else None
    # read whole, not memory-mapped: a weights file rewritten or truncated while a server decodes would take the
    # process down (SIGBUS) at the next page it reads
    models = [load_model(folders[0], generation_config=given, disable_mmap=True),
              *(load_model(folder, disable_mmap=True) for folder in folders[1:])]
    if len(models) == 1:
        return models[0], read.tokenizer
    return Seq2SeqEnsemble(models), read.tokenizer


__all__ = ["DecodingFolders", "EnsembleCache", "Seq2SeqEnsemble", "load_config", "load_for_decoding",
           "read_for_decoding"]
