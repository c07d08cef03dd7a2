"""Importers: trained models of the old toolkits (OpenNMT-py, Joey NMT, fairseq) as hf_s2s folders.

:func:`convert` reads a toolkit's checkpoint safely (:mod:`.checkpoints`: no toolkit code runs, no arbitrary
object is unpickled), maps its weights onto the hf_s2s family whose math it matches, builds a tokenizer that gives
every token the toolkit's id (:mod:`.vocabulary`) and writes an ordinary model folder: ``from_pretrained``,
``hf-s2s translate``, the training job (fine-tuning) and ``hf-s2s push-to-hub`` take it as they take a trained one.
``conversion.json`` records where it came from. What a converter cannot express exactly is refused, naming the
option; nothing is approximated. What the toolkit did to the text around the model (subword segmentation,
lowercasing, ...) is the user's step: ``conversion.json`` lists it under ``not_carried_over``.
"""

import json
from pathlib import Path

from ..models.loading import check_writable
from ..models.output_record import check_output_folder, clear_output, record_output, sha256_file
from .base import CONVERTERS, Converted, register
from .checkpoints import CheckpointError

CONVERSION_FILE = "conversion.json"


def convert(toolkit: str, checkpoint: str | Path, output_dir: str | Path, *, overwrite: bool = False,
            **files: str | Path | None) -> Path:
    """Convert ``checkpoint`` of ``toolkit`` (one of :func:`toolkits`) into an hf_s2s folder at ``output_dir``.
    ``files`` name what the toolkit keeps outside the checkpoint (``config``, ``source_vocab``, ``target_vocab``);
    by default each converter looks for them where the toolkit writes them. Returns the folder.

    ``output_dir`` must be new or empty; with ``overwrite`` it may hold an earlier conversion, byte for byte as
    ``convert`` wrote it, which is then replaced whole (:mod:`hf_s2s.models.output_record`): a folder holding
    anything else (a trained model's results, card, training arguments, code or checkpoints) is refused."""
    if toolkit not in CONVERTERS:
        raise ValueError(f"--from must be one of {toolkits()}, got {toolkit!r}")
    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    check_output_folder(output_dir, "convert", "--overwrite", overwrite)
    check_writable(output_dir, "OUT_DIR")
    converted = CONVERTERS[toolkit](checkpoint, **{k: Path(v) for k, v in files.items() if v is not None})
    if overwrite:  # an earlier conversion, checked unchanged, goes whole: nothing of it is left beside this one
        clear_output(output_dir, "convert", "--overwrite")
    converted.model.save_pretrained(output_dir)
    converted.tokenizer.save_pretrained(output_dir)
    record = {"toolkit": converted.toolkit, "architecture": converted.architecture,
              "checkpoint": checkpoint.name, "checkpoint_sha256": sha256_file(checkpoint), **converted.details,
              "not_carried_over": converted.not_carried_over}
    (output_dir / CONVERSION_FILE).write_text(json.dumps(record, indent=2) + "\n")
    record_output(output_dir, "convert")
    return output_dir


def toolkits() -> list[str]:
    """The ``--from`` values: every toolkit with a converter."""
    return sorted(CONVERTERS)


__all__ = ["CONVERSION_FILE", "CheckpointError", "Converted", "convert", "register", "toolkits"]

from . import fairseq, joeynmt, opennmt  # noqa: E402,F401  (each registers its --from name)
