"""Exponential moving average (EMA) of the weights during training, as fairseq ``--ema-decay``, OpenNMT-py
``-average_decay`` and Marian ``--exponential-smoothing`` keep one: after every optimizer step

    ema <- decay * ema + (1 - decay) * weights,        ema = the initial weights before the first step,

(Polyak averaging with exponential weights; no warm-up of the decay, as fairseq). The average usually validates
better than the raw weights late in training, at no cost in steps. The training job (``--ema_decay``) saves it
beside the raw weights: ``checkpoint-N/ema/`` in every checkpoint (so a resumed run continues the same average) and
``<output_dir>/ema/`` at the end, each a model folder that loads like any other; then it validates the EMA and
keeps it as the run's model only when it scores better (``hf_s2s.training.selection``, as with averaging).
"""

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .checkpoints import TRAINER_STATE, resume_instead

EMA_FOLDER = "ema"  # inside each checkpoint and the output folder


def check_ema_decay(decay: float) -> None:
    if not 0.0 < decay < 1.0:
        raise ValueError(f"--ema_decay must be between 0 and 1 (exclusive), e.g. 0.999; got {decay}")


class EMACallback(TrainerCallback, ExportableState):
    """Keeps ``ema_model``, a copy of the trained model holding the moving average, and saves it with every
    checkpoint and at the end of training. ``resume_from``: the checkpoint a resumed run starts from, whose
    ``ema/`` weights it continues (default: the training arguments' ``resume_from_checkpoint``).

    Its :meth:`state` (the decay) goes into each checkpoint's trainer_state.json, which Trainer writes before
    ``on_save`` writes ``ema/``: a resumed run tells a checkpoint of a run without EMA from one whose ``ema/`` was
    never written (:func:`check_ema_resume`)."""

    def __init__(self, decay: float, resume_from: str | Path | None = None):
        check_ema_decay(decay)
        self.decay = decay
        self.resume_from = Path(resume_from) if resume_from is not None else None
        self.ema_model = None

    def state(self) -> dict:
        return {"args": {"decay": self.decay}, "attributes": {}}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.ema_model = copy.deepcopy(model).eval().requires_grad_(False)
        if self.resume_from is None and args.resume_from_checkpoint:
            self.resume_from = Path(args.resume_from_checkpoint)
        if self.resume_from is None and state.global_step > 0:
            raise ValueError(f"EMACallback: training resumes at step {state.global_step}, but no checkpoint to "
                             f"continue the average from was given (resume_from)")
        if self.resume_from is not None:
            weights = load_file(self.resume_from / EMA_FOLDER / "model.safetensors")
            missing, unexpected = self.ema_model.load_state_dict(weights, strict=False)
            if unexpected or [key for key in missing if key not in _tied_keys(self.ema_model)]:
                raise ValueError(f"{self.resume_from / EMA_FOLDER} does not hold this model's EMA weights "
                                 f"(missing {missing}, unexpected {unexpected})")

    @torch.no_grad()
    def on_step_end(self, args, state, control, model=None, **kwargs):
        for average, weight in zip(self.ema_model.parameters(), model.parameters(), strict=True):
            average.lerp_(weight.detach().to(average.dtype), 1.0 - self.decay)  # d * ema + (1 - d) * weight

    # Written where Trainer writes checkpoints (``should_save``: process 0, or the first process of each machine with
    # --save_on_each_node): every process of a launch reads ema/ back after training, and a resumed run each
    # checkpoint's.
    def on_save(self, args, state, control, processing_class=None, **kwargs):
        if args.should_save:
            checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            self._save(checkpoint / EMA_FOLDER, processing_class)

    def on_train_end(self, args, state, control, processing_class=None, **kwargs):
        if args.should_save:
            self._save(Path(args.output_dir) / EMA_FOLDER, processing_class)

    def _save(self, folder: Path, processing_class) -> None:
        """A model folder like the checkpoints': weights, config, generation config and the tokenizer, so that
        ``hf-s2s translate <folder>`` decodes with the EMA as with any saved model."""
        self.ema_model.save_pretrained(folder)
        if processing_class is not None:
            processing_class.save_pretrained(folder)


def recorded_ema_decay(checkpoint: str | Path) -> float | None:
    """The ``--ema_decay`` that the run saving ``checkpoint`` kept an EMA with, as its trainer_state.json records
    it (:meth:`EMACallback.state`); None when it records none (a run without EMA, or one saved before the record)."""
    state = json.loads((Path(checkpoint) / TRAINER_STATE).read_text())
    recorded = (state.get("stateful_callbacks") or {}).get(EMACallback.__name__)
    if isinstance(recorded, list):  # Trainer lists the states of several callbacks of one class
        recorded = recorded[-1] if recorded else None
    return recorded.get("args", {}).get("decay") if isinstance(recorded, dict) else None


def check_ema_resume(checkpoint: str | Path, decay: float | None) -> None:
    """Refuse to resume from ``checkpoint`` with ``decay`` (``--ema_decay``, None: no EMA) unless that continues
    the checkpoint's own average: the same decay, and its ``ema/`` weights there. A run resumed with another decay
    (or none) would report one decay for an average taken with two. Call it once the checkpoint's files are known
    to read (:func:`hf_s2s.training.checkpoints.check_resume_checkpoint`)."""
    checkpoint = Path(checkpoint)
    recorded = recorded_ema_decay(checkpoint)
    saved = (checkpoint / EMA_FOLDER / "model.safetensors").is_file()
    if decay is None:
        if recorded is not None or saved:
            kept = f" (--ema_decay {recorded})" if recorded is not None else ""
            raise ValueError(f"--resume_from_checkpoint {checkpoint} continues a run that kept an EMA of the "
                             f"weights{kept}: pass --ema_decay {recorded if recorded is not None else 'D'} "
                             f"with the decay it was started with, so the run continues its average")
        return
    if recorded is not None and recorded != decay:
        raise ValueError(f"--ema_decay {decay}: {checkpoint} was saved by a run with --ema_decay {recorded}, and the "
                         f"average so far was taken with that decay; resume with --ema_decay {recorded}")
    if saved:
        return
    if recorded is None:
        raise ValueError(f"--ema_decay: {checkpoint} holds no EMA weights ({EMA_FOLDER}/); it was saved by a run "
                         "without --ema_decay, so the average cannot be continued")
    raise ValueError(f"--ema_decay: {checkpoint} holds no EMA weights ({EMA_FOLDER}/) although its run kept an EMA "
                     f"(--ema_decay {recorded}): the run was stopped while this checkpoint was being saved, before "
                     f"{EMA_FOLDER}/ was written; {resume_instead(checkpoint, EMA_FOLDER)}")


def _tied_keys(model) -> set[str]:
    """The weights save_pretrained leaves out because they are tied to another (``lm_head.weight``)."""
    return set(getattr(model, "all_tied_weights_keys", {}) or {})


__all__ = ["EMA_FOLDER", "EMACallback", "check_ema_decay", "check_ema_resume", "recorded_ema_decay"]
