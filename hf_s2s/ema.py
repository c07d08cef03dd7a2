"""Exponential moving average (EMA) of the weights during training, as fairseq ``--ema-decay``, OpenNMT-py
``-average_decay`` and Marian ``--exponential-smoothing`` keep one: after every optimizer step

    ema <- decay * ema + (1 - decay) * weights,        ema = the initial weights before the first step,

(Polyak averaging with exponential weights; no warm-up of the decay, as fairseq). The average usually validates
better than the raw weights late in training, at no cost in steps. The training job (``--ema_decay``) saves it
beside the raw weights: ``checkpoint-N/ema/`` in every checkpoint (so a resumed run continues the same average) and
``<output_dir>/ema/`` at the end, each a model folder that loads like any other; then it validates the EMA and
keeps it as the run's model only when it scores better (``hf_s2s.model_selection``, as with averaging).
"""

import copy
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

EMA_FOLDER = "ema"  # inside each checkpoint and the output folder


def check_ema_decay(decay: float) -> None:
    if not 0.0 < decay < 1.0:
        raise ValueError(f"--ema_decay must be between 0 and 1 (exclusive), e.g. 0.999; got {decay}")


class EMACallback(TrainerCallback):
    """Keeps ``ema_model``, a copy of the trained model holding the moving average, and saves it with every
    checkpoint and at the end of training. ``resume_from``: the checkpoint a resumed run starts from, whose
    ``ema/`` weights it continues."""

    def __init__(self, decay: float, resume_from: str | Path | None = None):
        check_ema_decay(decay)
        self.decay = decay
        self.resume_from = Path(resume_from) if resume_from is not None else None
        self.ema_model = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.ema_model = copy.deepcopy(model).eval().requires_grad_(False)
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

    def on_save(self, args, state, control, processing_class=None, **kwargs):
        if state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            self._save(checkpoint / EMA_FOLDER, processing_class)

    def on_train_end(self, args, state, control, processing_class=None, **kwargs):
        if state.is_world_process_zero:
            self._save(Path(args.output_dir) / EMA_FOLDER, processing_class)

    def _save(self, folder: Path, processing_class) -> None:
        """A model folder like the checkpoints': weights, config, generation config and the tokenizer, so that
        ``hf-s2s translate <folder>`` decodes with the EMA as with any saved model."""
        self.ema_model.save_pretrained(folder)
        if processing_class is not None:
            processing_class.save_pretrained(folder)


def _tied_keys(model) -> set[str]:
    """The weights save_pretrained leaves out because they are tied to another (``lm_head.weight``)."""
    return set(getattr(model, "all_tied_weights_keys", {}) or {})


__all__ = ["EMA_FOLDER", "EMACallback", "check_ema_decay"]
