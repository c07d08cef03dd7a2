"""The generation config a training run decodes with and saves, settled before training starts.

A run decodes with its model's generation config three times: validation during training (``Seq2SeqTrainer``'s
``generate``), the test set after training, and whoever loads the saved folder (``hf-s2s translate``). It sets some
fields itself: ``--generation_max_length`` as ``max_length``, the length bound flags (``--max_len_a``, ...) and, in the
saved folder, the largest ``--test_num_beams`` as ``num_beams``. A folder brought for fine-tuning carries settings of
its own that may contradict these: a converted OpenNMT-py folder decodes with ``num_beams`` 5 and ``early_stopping``,
a Joey NMT one with ``max_new_tokens``, a hand-edited one with ``temperature`` but no sampling.

transformers refuses to save a generation config that was changed after loading and holds a flag that has no
effect (``GenerationConfig.save_pretrained`` validates strictly; ``early_stopping`` with one beam, say), and
``PreTrainedModel.save_pretrained`` writes the generation config before the weights: a contradiction found at the
final save lost the trained weights. :func:`settle_generation_configs` therefore works out, before training, both
configs the run will save (the checkpoints' and the final folder's), reconciles what the run's own settings make
contradictory, says what it changed, and refuses (naming the fields) whatever it cannot reconcile.
"""

import copy
from dataclasses import dataclass, field

from transformers import GenerationConfig

from .arguments import DecodingArguments, TrainingArguments

# Flags generate() uses only when sampling (do_sample true), with the value that means "off" (transformers'
# GenerationConfig.validate names them when set without sampling).
SAMPLING_ONLY = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None, "top_h": None, "typical_p": 1.0,
                 "epsilon_cutoff": 0.0, "eta_cutoff": 0.0}
# Flags generate() uses only in beam search (num_beams > 1), with their neutral values, as above.
BEAM_ONLY = {"early_stopping": False, "length_penalty": 1.0}


@dataclass
class GenerationSettings:
    """The generation configs of a run: ``training`` decodes validation and is saved in each checkpoint; ``saved``
    is the final folder's (``model/``, and ``averaged/`` and ``ema/``) and decodes the test set's largest beam.
    ``changes`` says, field by field, what the run changed in the config it was given, and why."""

    training: GenerationConfig
    saved: GenerationConfig
    changes: list[str] = field(default_factory=list)


def _shown(value) -> str:
    return "unset" if value is None else repr(value)


def _set(config: GenerationConfig, name: str, value, why: str, changes: list[str]) -> None:
    """Set ``config.<name>`` to ``value``, recording the change (and ``why``) when it is one."""
    old = getattr(config, name, None)
    if old != value:
        setattr(config, name, value)
        changes.append(f"{name} {_shown(old)} -> {_shown(value)} ({why})")


def _drop_flags_without_effect(config: GenerationConfig, changes: list[str]) -> None:
    """Unset the sampling flags of a config that does not sample and the beam flags of one that decodes greedily:
    generate() ignores them, so decoding is unchanged, and transformers would refuse to save them."""
    if config.do_sample is not True:
        for name, neutral in SAMPLING_ONLY.items():
            if getattr(config, name, None) not in (None, neutral):
                _set(config, name, None, "used only when sampling, and the run does not sample", changes)
    if (config.num_beams or 1) == 1:
        for name, neutral in BEAM_ONLY.items():
            if getattr(config, name, None) not in (None, neutral):
                _set(config, name, None, f"used only by beam search, and num_beams is {_shown(config.num_beams)}",
                     changes)


def _check_savable(config: GenerationConfig, which: str, source: str) -> None:
    """Refuse, naming the fields (transformers' own message), a config that ``save_pretrained`` would refuse."""
    try:
        config.validate(strict=True)
    except ValueError as error:
        raise ValueError(f"the generation config of {source} cannot be saved in {which} with this run's decoding "
                         f"settings: {' '.join(str(error).split())} Fix it in {source}/generation_config.json (or "
                         f"choose other decoding flags) and start the run again") from None


def settle_generation_configs(given: GenerationConfig, decoding_args: DecodingArguments,
                              training_args: TrainingArguments, source: str = "the new model") -> GenerationSettings:
    """The generation configs the run decodes with and saves, from the model's (``given``, left unchanged), each
    checked to save (refused otherwise, naming ``source`` and the fields):

    - the run decodes one greedy or beam-search translation per sentence (its scores are named so): a config that
      samples stops sampling, and one that returns several sequences returns one;
    - ``--generation_max_length`` is ``max_length`` of both; a ``max_new_tokens`` would override it, so it goes;
    - the length bound flags set ``max_len_a`` / ``max_len_b``;
    - the saved folder decodes with the largest ``--test_num_beams`` (1 without test beams);
    - flags without effect in the resulting mode (beam flags with one beam, sampling flags without sampling) go.
    """
    training = copy.deepcopy(given)
    changes = []
    if training.do_sample:
        _set(training, "do_sample", False, "the run validates and tests with greedy and beam search", changes)
    if (training.num_return_sequences or 1) != 1:
        _set(training, "num_return_sequences", None, "the run decodes one translation per sentence", changes)
    if training_args.generation_max_length is not None:
        _set(training, "max_length", training_args.generation_max_length, "--generation_max_length", changes)
        _set(training, "max_new_tokens", None, "it would override --generation_max_length", changes)
    for name, value in decoding_args.length_bound().items():
        _set(training, name, value, f"--{name}" if value is not None else "--no_length_bound", changes)
    _drop_flags_without_effect(training, changes)
    saved = copy.deepcopy(training)
    saved_changes = []
    _set(saved, "num_beams", max(decoding_args.test_beams(), default=1), "the largest --test_num_beams", saved_changes)
    _drop_flags_without_effect(saved, saved_changes)
    _check_savable(training, "the checkpoints", source)
    _check_savable(saved, "the saved model folder", source)
    return GenerationSettings(training, saved, changes + [f"in the saved folder: {change}" for change in saved_changes])


__all__ = ["GenerationSettings", "settle_generation_configs"]
