"""After training, which weights the run keeps: the best checkpoint (Trainer's ``load_best_model_at_end``), the average
of the last checkpoints (``--average_last_checkpoints``) or the EMA of the weights (``--ema_decay``). Each candidate
is validated on the trainer and becomes the trainer's model only when its validation BLEU beats the model's."""

import logging
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM, EarlyStoppingCallback, Seq2SeqTrainer

from .checkpoints import average_checkpoints, list_checkpoints
from .ema import EMA_FOLDER

logger = logging.getLogger(__name__)

AVERAGED_FOLDER = "averaged"  # the checkpoint average, in the output folder


def average_last_checkpoints(trainer: Seq2SeqTrainer, last: int) -> dict:
    """Average the last ``last`` checkpoints of the run into ``<output_dir>/averaged`` and validate the average.
    The trainer's model becomes the average when its validation BLEU beats the best single checkpoint's
    (``trainer.state.best_metric``); otherwise it keeps its weights. Returns what was done, for results.json."""
    output_dir = Path(trainer.args.output_dir)
    checkpoints = list_checkpoints(output_dir)[-last:]  # fewer when training stopped early
    if len(checkpoints) < 2:
        logger.warning("only %d checkpoint(s) in %s: nothing to average", len(checkpoints), output_dir)
        return {"checkpoints": [c.name for c in checkpoints], "used": False}
    averaged_dir = output_dir / AVERAGED_FOLDER
    if trainer.is_world_process_zero():
        average_checkpoints(checkpoints, averaged_dir, overwrite=True)  # this run's own folder: a rerun replaces it
    trainer.accelerator.wait_for_everyone()
    best_single = trainer.state.best_metric
    bleu, used = keep_if_better(trainer, averaged_dir, "averaged", best_single)
    logger.info("average of %d checkpoints: validation BLEU %.2f vs best single %s -> %s", len(checkpoints), bleu,
                best_single, "kept the average" if used else "kept the best single checkpoint")
    return {"checkpoints": [c.name for c in checkpoints], "validation_bleu": bleu,
            "best_single_validation_bleu": best_single, "used": used}


def keep_if_better(trainer: Seq2SeqTrainer, candidate_dir: Path, prefix: str, baseline: float | None
                   ) -> tuple[float, bool]:
    """Load the weights saved in ``candidate_dir`` (an average of checkpoints, the EMA) into the trainer's model
    and validate them (metrics logged under ``prefix``); keep them when their BLEU beats ``baseline`` (the current
    model's validation BLEU; None: no baseline, keep), else put the model's own weights back. Returns
    ``(bleu, kept)``."""
    model = trainer.model
    kept = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    candidate = AutoModelForSeq2SeqLM.from_pretrained(candidate_dir, dtype=next(model.parameters()).dtype)
    model.load_state_dict(candidate.state_dict())
    trainer.remove_callback(EarlyStoppingCallback)  # training is over; this evaluation must not count towards it
    bleu = trainer.evaluate(metric_key_prefix=prefix)[f"{prefix}_bleu"]
    used = baseline is None or bleu > baseline
    if not used:
        model.load_state_dict(kept)
    return bleu, used


def current_validation_bleu(trainer: Seq2SeqTrainer, averaging: dict | None, ema: dict | None) -> float | None:
    """The validation BLEU of the model the run keeps: the EMA's or the average's when kept, else the best
    checkpoint's."""
    for candidate in (ema, averaging):
        if candidate and candidate["used"]:
            return candidate["validation_bleu"]
    return trainer.state.best_metric


def validate_ema(trainer: Seq2SeqTrainer, decay: float, averaging: dict | None) -> dict:
    """Validate the EMA weights the run saved in ``<output_dir>/ema`` and keep them when they beat the model the
    run has now (the best checkpoint, or the average when that was kept). Returns what was done, for results.json."""
    baseline = current_validation_bleu(trainer, averaging, None)
    bleu, used = keep_if_better(trainer, Path(trainer.args.output_dir) / EMA_FOLDER, "ema", baseline)
    logger.info("EMA of the weights (decay %s): validation BLEU %.2f vs %s -> %s", decay, bleu, baseline,
                "kept the EMA" if used else "kept the raw weights")
    return {"decay": decay, "validation_bleu": bleu, "baseline_validation_bleu": baseline, "used": used}


__all__ = ["AVERAGED_FOLDER", "average_last_checkpoints", "current_validation_bleu", "keep_if_better", "validate_ema"]
