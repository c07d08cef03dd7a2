"""The one module that knows transformers' internals and the differences between its releases.

hf_s2s lives inside a host that releases every few weeks, and a saved model folder carries its code into whatever
transformers its user has. Everything below depends on something transformers does not promise to keep: when an
upstream release renames or moves it, this file is the one to edit. The rest of hf_s2s uses public API and the
names defined here. Copied beside the modeling files into every saved model folder (``save_pretrained`` follows
single-dot relative imports), so it imports nothing from hf_s2s.

Release differences handled here
- transformers 5.24 renamed the decoder cache ``past_key_values`` to ``cache``: in ``generate()``'s model inputs,
  in the model outputs it feeds back (``_update_model_kwargs_for_generation`` reads ``outputs["cache"]``) and in
  ``transformers.masking_utils``. ``CACHE_NAME`` is the name the installed release reads; forwards accept either
  (``cache_argument``), outputs are built with ``cache_output`` and read with ``output_cache``, and the causal mask
  is built through ``causal_mask``.
- The tested range (``MIN_TRANSFORMERS_VERSION`` up to ``TESTED_TRANSFORMERS_VERSIONS``'s newest):
  ``check_transformers_version`` refuses an older release and warns once on a newer major version.
- transformers imports torchao whenever it is installed, which logs lines no hf_s2s user can act on: that one import
  runs with those loggers held at ERROR.

Private hooks of ``GenerationMixin`` overridden (in ``GenerationHooks``), and why
- ``_prepare_generation_config``: takes the source-relative length bound (``max_len_a`` / ``max_len_b``) out of the
  call's keywords before transformers validates them as model inputs, and drops the shipped ``max_length`` when
  the call gives ``max_new_tokens``. The model implements ``generation_options`` / ``finish_generation_config``.
- ``_get_logits_processor``: lets the model adapt transformers' processors (``finish_logits_processors``; a
  shortlist's compact ids), then adds the model's own (``extra_logits_processors``; the length bound) before a final
  ``LogitNormalization``, which must stay last.
- ``_prepare_cache_for_generation``: a model whose cache is not transformers' (the RNN's recurrent state, an
  ensemble's caches) creates it itself (``cache_for_generation``) instead of receiving an ``EncoderDecoderCache``.
- ``_supports_default_dynamic_cache``: False for such a model (``uses_default_cache = False``).
- ``prepare_inputs_for_generation`` (public, but what it is handed changed in 5.24): transformers 5.24 cuts
  the tokens of a call continuing from a returned cache to those the cache has not consumed only for a cache
  with attention layers (``Cache.is_linear``), and a cache of the model's own has no layers, so the whole
  sequence would run again on top of the state; for such a cache the first step is cut here by 5.23's rule
  (the decoder mask as long as the tokens: the caller passed the whole sequence). Declaring the cache not
  linear instead would also make 5.24 build a causal mask on every step of a static (compiled) decoding that
  the RNN does not read.
- ``_reorder_cache``: beam search calls it when the model defines it; forwards to ``reorder_beam_cache``.
- ``adjust_generation_fn`` (public, undocumented): where ``from_pretrained`` reads the folder's generation
  config, or builds one from config.json when the folder has none; the model is told what was read
  (``on_generation_config_loaded``).

A hook of ``PreTrainedModel`` overridden (in ``SavingHooks``), and why
- ``should_save_on_this_rank`` (public, undocumented; 5.24): transformers writes a folder on global rank 0 only,
  whatever ``save_pretrained(is_main_process=...)`` says, which breaks Trainer's ``save_on_each_node`` (a folder
  per machine); a model that is not sharded writes where the caller says, as ``is_main_process`` documents.

Private attributes read
- ``GenerationConfig._eos_token_tensor`` / ``_pad_token_tensor`` (set by ``generate()`` from the special ids):
  ``eos_token_tensor`` / ``pad_token_tensor``.
- ``GenerationConfig._from_model_config``: ``mark_generation_config_own``.
- ``PreTrainedConfig._attn_implementation``: ``attention_implementation``.
- ``Pipeline._prepare_generate_kwargs``: ``pipeline_generate_kwargs``.

Private methods still overridden where their behaviour lives (each documented there; the test
``tests/test_transformers_compat.py`` lists every ``super()._name(...)`` call in hf_s2s, so a new one cannot slip in
unnoticed): ``Trainer._get_train_sampler`` / ``_run_epoch`` / ``_issue_warnings_after_load`` (training.py),
``PreTrainedModel._resize_token_embeddings`` (modeling_common.py), ``PreTrainedTokenizerFast._decode`` /
``_save_pretrained`` (tokenization_separate_vocab.py).
"""

import inspect
import logging
import re
import warnings
from contextlib import contextmanager

import transformers
from torch.distributed.tensor import DTensor

# The releases the test suite runs on (CI: the oldest in a pinned environment, the newest in a fresh one).
MIN_TRANSFORMERS_VERSION = "5.23.0"
TESTED_TRANSFORMERS_VERSIONS = ("5.23.0", "5.24.0")


def release(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a version string such as "5.24.0" or "5.25.0.dev0" (the folder's code may import
    only transformers, torch and the standard library, so no ``packaging``)."""
    numbers = [int(part) for part in re.findall(r"\d+", version)[:3]]
    return tuple(numbers + [0] * (3 - len(numbers)))


def check_transformers_version(installed: str = transformers.__version__) -> None:
    """ImportError for a transformers older than hf_s2s supports; one warning for a newer major version than the
    tested range (minor releases of the tested major are expected to work and are tested as they come)."""
    tested = ", ".join(TESTED_TRANSFORMERS_VERSIONS)
    if release(installed) < release(MIN_TRANSFORMERS_VERSION):
        raise ImportError(
            f"hf_s2s needs transformers>={MIN_TRANSFORMERS_VERSION} (tested: {tested}), found {installed}; "
            f"upgrade it with: pip install 'transformers>={MIN_TRANSFORMERS_VERSION},<6'"
        )
    if release(installed)[0] > release(TESTED_TRANSFORMERS_VERSIONS[-1])[0]:
        warnings.warn(
            f"hf_s2s was tested with transformers {tested}; found {installed}, a newer major version: decoding or "
            "loading may fail",
            stacklevel=2,
        )


check_transformers_version()

# Imported after the check, so an unsupported transformers gets the message above instead of a missing name.
from transformers import GenerationMixin, masking_utils  # noqa: E402
from transformers.generation.logits_process import LogitNormalization  # noqa: E402
from transformers.modeling_outputs import Seq2SeqLMOutput  # noqa: E402


@contextmanager
def _loggers_held_at_error(names: tuple[str, ...]):
    """Within the block, the named loggers pass on errors only; their levels are restored after it."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# transformers.modeling_utils imports torchao whenever it is installed (transformers/quantizers/quantizer_torchao.py,
# 5.23 and 5.24; hf_s2s does not need torchao), and at that import torchao 0.18 logs a warning for each bundled kernel
# library this machine cannot load and torch one for each Enum torchao registers through the deprecated
# register_constant: four lines on every hf-s2s command that its user cannot act on. Those two loggers are held at
# ERROR for this one import.
with _loggers_held_at_error(("torchao", "torch.utils._pytree")):
    import transformers.modeling_utils  # noqa: E402, F401

# ------------------------------------------------------------------------------------------------------------
# The decoder cache's name
# ------------------------------------------------------------------------------------------------------------

# "cache" from transformers 5.24 on, "past_key_values" before: the keyword generate() passes to forward and the
# output field it reads the cache back from.
CACHE_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"
CACHE_NAMES = ("cache", "past_key_values")


def cache_argument(cache, kwargs: dict):
    """The cache a forward was given, under either name: ``cache`` (its parameter) or ``past_key_values`` (in its
    ``**kwargs``, as transformers before 5.24 passes it and as older user code does). Both at once is a
    ValueError, as in transformers."""
    legacy = kwargs.pop("past_key_values", None)
    if legacy is not None and cache is not None:
        raise ValueError("got both `cache` and `past_key_values`: pass the cache once, as `cache`")
    return cache if cache is not None else legacy


def cache_output(cache) -> dict:
    """The keyword a model output takes its cache under in the installed transformers: ``Seq2SeqLMOutput(...,
    **cache_output(cache))``."""
    return {CACHE_NAME: cache}


def output_cache(outputs):
    """The cache held by a model output, whichever transformers built it."""
    return outputs.get(CACHE_NAME)  # a ModelOutput is a dict of its fields that are not None


def generation_cache(model_kwargs: dict):
    """The cache generate() keeps in its model keywords (None before the first step)."""
    return next((model_kwargs[name] for name in CACHE_NAMES if model_kwargs.get(name) is not None), None)


def causal_mask(config, inputs_embeds, attention_mask, cache):
    """``transformers.masking_utils.create_causal_mask`` with the cache under the installed release's keyword."""
    return masking_utils.create_causal_mask(
        config=config, inputs_embeds=inputs_embeds, attention_mask=attention_mask, **{CACHE_NAME: cache}
    )


# ------------------------------------------------------------------------------------------------------------
# Private attributes
# ------------------------------------------------------------------------------------------------------------


def eos_token_tensor(generation_config):
    """The end-of-sequence ids as a tensor, which generate() sets on its generation config; None without one."""
    return generation_config._eos_token_tensor


def pad_token_tensor(generation_config):
    """The padding id as a tensor, which generate() sets on its generation config; None without one."""
    return generation_config._pad_token_tensor


def mark_generation_config_own(generation_config) -> None:
    """Mark a generation config as holding settings of its own, not only what transformers copied from the model
    config: a config marked as copied reloads without the fields GenerationConfig does not know (``max_len_a``)."""
    generation_config._from_model_config = False


def pipeline_generate_kwargs(pipeline, generate_kwargs: dict) -> dict:
    """A pipeline's generate() keywords completed as transformers' own pipelines complete them (its assistant model,
    generation config), through ``Pipeline._prepare_generate_kwargs``."""
    return pipeline._prepare_generate_kwargs(generate_kwargs)


def attention_implementation(config) -> str | None:
    """The attention kernel a config selects ("eager", "sdpa", ...)."""
    return getattr(config, "_attn_implementation", None)


# ------------------------------------------------------------------------------------------------------------
# Which processes save_pretrained writes on
# ------------------------------------------------------------------------------------------------------------


class SavingHooks:
    """Mixed in before ``PreTrainedModel``: which processes of a launch write a folder that ``save_pretrained``
    saves."""

    def should_save_on_this_rank(self, is_main_process: bool) -> bool:
        """The caller's ``is_main_process``, as ``save_pretrained`` documents it. transformers 5.24 also requires
        global rank 0 once torch.distributed is up, so Trainer's ``save_on_each_node`` (``is_main_process`` True
        on the first process of every machine) left the other machines' checkpoints without weights or config,
        which a resumed run, ``load_best_model_at_end`` and the checkpoint average read there. A model sharded
        across processes (transformers' ``distributed_config``, FSDP2's DTensor parameters) keeps transformers'
        rule: only rank 0 holds the gathered weights."""
        upstream = getattr(super(), "should_save_on_this_rank", None)  # absent before 5.24: no such rule
        sharded = getattr(self.config, "distributed_config", None) is not None or any(
            isinstance(parameter, DTensor) for parameter in self.parameters())
        return upstream(is_main_process) if sharded and upstream is not None else is_main_process


# ------------------------------------------------------------------------------------------------------------
# GenerationMixin's private hooks
# ------------------------------------------------------------------------------------------------------------


class GenerationHooks:
    """Mixed in before ``GenerationMixin``: its private hooks, each forwarding to a public method the model
    defines (see the module docstring). The defaults here change nothing."""

    # False: forward creates the model's own cache; generate() must not hand it an EncoderDecoderCache
    uses_default_cache = True

    # hooks the model implements --------------------------------------------------------------------------------

    def generation_options(self, generation_config, kwargs: dict) -> dict:
        """Take the model's own generate() options out of the call's keywords (before transformers validates the
        rest); returns them for ``finish_generation_config``. generation_config: the one the call passed, or None."""
        return {}

    def finish_generation_config(self, generation_config, options: dict) -> None:
        """Complete the call's generation config (transformers' own fields are merged already)."""

    def extra_logits_processors(self, generation_config, model_kwargs: dict, encoder_input_ids, prompt_length: int):
        """Logits processors the model adds to transformers' (before a final normalization)."""
        return []

    def finish_logits_processors(self, processors, model_kwargs: dict):
        """transformers' processors for this call (the call's own among them), before the model's own are added;
        returns the list to use."""
        return processors

    def cache_for_generation(self, generation_config):
        """A cache of the model's own for this generate() call, or None for transformers' choice."""
        return None

    def on_generation_config_loaded(self, name_or_path) -> None:
        """``from_pretrained`` has read the generation config of ``name_or_path`` (built it from its
        config.json where the folder has no generation_config.json)."""

    @staticmethod
    def reorder_beam_cache(cache, beam_idx):
        """Beam search: move the cache's rows to ``beam_idx`` (B x beams,); returns the cache."""
        cache.reorder_cache(beam_idx)
        return cache

    # transformers' private names ---------------------------------------------------------------------------------

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return cls.uses_default_cache and super()._supports_default_dynamic_cache()

    def _prepare_generation_config(self, generation_config, **kwargs):
        options = self.generation_options(generation_config, kwargs)
        generation_config, model_kwargs = super()._prepare_generation_config(generation_config, **kwargs)
        self.finish_generation_config(generation_config, options)
        return generation_config, model_kwargs

    def _get_logits_processor(self, generation_config, *args, **kwargs):
        processors = self.finish_logits_processors(super()._get_logits_processor(generation_config, *args, **kwargs),
                                                   kwargs.get("model_kwargs") or {})
        extra = self.extra_logits_processors(
            generation_config, kwargs.get("model_kwargs") or {}, kwargs.get("encoder_input_ids"),
            kwargs["input_ids_seq_length"],
        )
        last = len(processors) - (1 if processors and isinstance(processors[-1], LogitNormalization) else 0)
        for offset, processor in enumerate(extra):
            processors.insert(last + offset, processor)
        return processors

    def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None, **kwargs):
        if next_sequence_length is None and not self.uses_default_cache:
            cache, mask = generation_cache(kwargs), kwargs.get("decoder_attention_mask")
            if cache is not None and mask is not None and mask.shape[1] == input_ids.shape[1]:
                next_sequence_length = input_ids.shape[1] - cache.get_seq_length()
        return super().prepare_inputs_for_generation(
            input_ids, next_sequence_length=next_sequence_length, **kwargs
        )

    # generate() accepts only the keywords this signature (or forward's) names: keep the installed release's, where
    # 5.23 names the cache `past_key_values` and forward names it `cache`
    prepare_inputs_for_generation.__signature__ = inspect.signature(GenerationMixin.prepare_inputs_for_generation)

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        if generation_config.use_cache is not False and generation_cache(model_kwargs) is None:
            cache = self.cache_for_generation(generation_config)
            if cache is not None:
                model_kwargs[CACHE_NAME] = cache
                return
        return super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)

    def _reorder_cache(self, cache, beam_idx):
        return self.reorder_beam_cache(cache, beam_idx)

    def adjust_generation_fn(self, generation_config, from_auto_class, from_pipeline, name_or_path, *args,
                             **kwargs):
        super().adjust_generation_fn(generation_config, from_auto_class, from_pipeline, name_or_path, *args,
                                     **kwargs)
        if generation_config is None:  # none given to from_pretrained: the folder's decides
            self.on_generation_config_loaded(name_or_path)
