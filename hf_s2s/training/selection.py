"""After training, which weights the run keeps: the best checkpoint (Trainer's ``load_best_model_at_end``), the average
of the last checkpoints (``--average_last_checkpoints``) or the EMA of the weights (``--ema_decay``). Each candidate
is validated on the trainer and becomes the trainer's model only when its validation BLEU beats the model's."""

import logging
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM, EarlyStoppingCallback, Seq2SeqTrainer

from ..hub.results import CheckpointAveraging, EMASelection
from ..models.output_record import output_problem
from .arguments import SelectionArguments
from .checkpoints import AVERAGE_COMMAND, average_checkpoints, list_checkpoints
from .ema import EMA_FOLDER
from .run_dir import naming_a_full_disk

logger = logging.getLogger(__name__)

AVERAGED_FOLDER = "averaged"  # the checkpoint average, in the output folder


@dataclass
class Selection:
    """What the run did after training to choose its weights (for results.json)."""

    averaging: CheckpointAveraging | None  # None: --average_last_checkpoints not asked for
    ema: EMASelection | None  # None: no --ema_decay
    validation_bleu: float | None  # of the weights the run keeps; None: never validated


def select_weights(trainer: Seq2SeqTrainer, selection_args: SelectionArguments) -> Selection:
    """After training, with the best checkpoint restored (``load_best_model_at_end``): the average of the last
    checkpoints, then the EMA, each becomes the trainer's model only when its validation BLEU beats the model's."""
    last, decay = selection_args.average_last_checkpoints, selection_args.ema_decay
    with naming_a_full_disk(trainer.args.output_dir, selection_args.ema_folder):  # averaged/
        averaging = average_last_checkpoints(trainer, last) if last > 1 else None
    ema = validate_ema(trainer, decay, averaging) if decay is not None else None
    return Selection(averaging, ema, kept_validation_bleu(trainer.state.best_metric, averaging, ema))


def check_average_replaceable(output_dir: str | Path, last: int) -> None:
    """Before a resumed run reads anything: with ``--average_last_checkpoints`` ``last`` > 1, the run replaces
    ``<output_dir>/averaged`` after training, and only an average the run wrote there, unchanged
    (:mod:`hf_s2s.models.output_record`). Another one (written before 0.3.0, which kept no record of it, or
    changed since) is refused now, naming what is there, not after training; nothing is deleted."""
    averaged_dir = Path(output_dir) / AVERAGED_FOLDER
    if last < 2 or not averaged_dir.is_dir() or not any(averaged_dir.iterdir()):
        return
    problem = output_problem(averaged_dir, AVERAGE_COMMAND)
    if problem:
        raise ValueError(f"--average_last_checkpoints {last} writes the checkpoint average into "
                         f"{averaged_dir} after training, replacing only an average written there by hf-s2s, "
                         f"unchanged, and {problem}; nothing was deleted: move {averaged_dir} out of "
                         f"{output_dir} to resume with averaging, or leave out --average_last_checkpoints")


def average_last_checkpoints(trainer: Seq2SeqTrainer, last: int) -> CheckpointAveraging:
    """Average the last ``last`` checkpoints of the run into ``<output_dir>/averaged`` and validate the average.
    The trainer's model becomes the average when its validation BLEU beats the best single checkpoint's
    (``trainer.state.best_metric``); otherwise it keeps its weights. Returns what was done, for results.json."""
    output_dir = Path(trainer.args.output_dir)
    # fewer when training stopped early; a timed checkpoint is a resume point, not one of the run's checkpoints
    checkpoints = list_checkpoints(output_dir, timed=False)[-last:]
    if len(checkpoints) < 2:
        logger.warning("only %d checkpoint(s) in %s: nothing to average", len(checkpoints), output_dir)
        return CheckpointAveraging(checkpoints=[c.name for c in checkpoints], used=False)
    averaged_dir = output_dir / AVERAGED_FOLDER
    if trainer.args.should_save:  # where the checkpoints are written (each machine's own folder: every machine)
        average_checkpoints(checkpoints, averaged_dir, overwrite=True)  # this run's own folder: a rerun replaces it
    trainer.accelerator.wait_for_everyone()
    best_single = trainer.state.best_metric
    bleu, used = keep_if_better(trainer, averaged_dir, "averaged", best_single)
    logger.info("average of %d checkpoints: validation BLEU %.2f vs best single %s -> %s", len(checkpoints), bleu,
                best_single, "kept the average" if used else "kept the best single checkpoint")
    return CheckpointAveraging(checkpoints=[c.name for c in checkpoints], validation_bleu=bleu,
                               best_single_validation_bleu=best_single, used=used)


def keep_if_better(trainer: Seq2SeqTrainer, candidate_dir: Path, prefix: str, baseline: float | None
                   ) -> tuple[float, bool]:
    """Load the weights saved in ``candidate_dir`` (an average of checkpoints, the EMA) into the trainer's model
    and validate them (metrics logged under ``prefix``); keep them when their BLEU beats ``baseline`` (the current
    model's validation BLEU; None: no baseline, keep), else put the model's own weights back. Returns
    ``(bleu, kept)``."""
    model = trainer.model
    kept = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    candidate = AutoModelForSeq2SeqLM.from_pretrained(candidate_dir, dtype=next(model.parameters()).dtype,
                                                      trust_remote_code=False)  # the run's own folder: hf_s2s classes
    model.load_state_dict(candidate.state_dict())
    trainer.remove_callback(EarlyStoppingCallback)  # training is over; this evaluation must not count towards it
    bleu = trainer.evaluate(metric_key_prefix=prefix)[f"{prefix}_bleu"]
    used = is_better(bleu, baseline)
    if not used:
        model.load_state_dict(kept)
    return bleu, used


def is_better(bleu: float, baseline: float | None) -> bool:
    """Whether weights that validate at ``bleu`` replace the model's, which validated at ``baseline`` (None: never
    validated, so anything validated is better). A tie keeps the model's."""
    return baseline is None or bleu > baseline


def kept_validation_bleu(best_metric: float | None, averaging: CheckpointAveraging | None,
                         ema: EMASelection | None) -> float | None:
    """The validation BLEU of the model the run keeps: the EMA's or the average's when kept, else the best
    checkpoint's (``best_metric``)."""
    for candidate in (ema, averaging):
        if candidate and candidate.used:
            return candidate.validation_bleu
    return best_metric


def validate_ema(trainer: Seq2SeqTrainer, decay: float, averaging: CheckpointAveraging | None) -> EMASelection:
    """Validate the EMA weights the run saved in ``<output_dir>/ema`` and keep them when they beat the model the
    run has now (the best checkpoint, or the average when that was kept). Returns what was done, for results.json."""
    baseline = kept_validation_bleu(trainer.state.best_metric, averaging, None)
    trainer.accelerator.wait_for_everyone()  # ema/ is written by the saving processes at the end of training
    bleu, used = keep_if_better(trainer, Path(trainer.args.output_dir) / EMA_FOLDER, "ema", baseline)
    logger.info("EMA of the weights (decay %s): validation BLEU %.2f vs %s -> %s", decay, bleu, baseline,
                "kept the EMA" if used else "kept the raw weights")
    return EMASelection(decay=decay, validation_bleu=bleu, baseline_validation_bleu=baseline, used=used)


__all__ = ["AVERAGED_FOLDER", "Selection", "average_last_checkpoints", "check_average_replaceable",
           "is_better", "keep_if_better", "kept_validation_bleu", "select_weights", "validate_ema"]
