"""Checkpoint averaging: the element-wise mean of the weights of several checkpoints of one training run.

Averaging the last few checkpoints is a cheap, reliable gain for NMT models (Vaswani et al. 2017 average the
last 5 or 20); fairseq, Joey NMT and Marian ship it, transformers does not.
"""

import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHTS_NAME = "model.safetensors"
# Files copied from the newest checkpoint so the averaged folder loads like any saved model.
_COPIED_SUFFIXES = (".json", ".py", ".txt", ".model", ".md")
_SKIPPED = {"trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"}


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Every ``checkpoint-<step>`` folder of a Trainer output directory, oldest first."""
    return sorted(
        (p for p in Path(run_dir).glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", p.name) and p.is_dir()),
        key=lambda p: int(p.name.split("-")[1]),
    )


def find_checkpoints(run_dir: str | Path, last: int) -> list[Path]:
    """The ``last`` newest ``checkpoint-<step>`` folders of a Trainer output directory, oldest first."""
    found = list_checkpoints(run_dir)
    if not found:
        raise FileNotFoundError(f"no checkpoint-<step> folders in {run_dir}")
    if last <= 0 or last > len(found):
        raise ValueError(f"asked for the last {last} checkpoints, but {run_dir} holds {len(found)}")
    return found[-last:]


def average_checkpoints(checkpoints: list[str | Path], output_dir: str | Path) -> Path:
    """Average the safetensors weights of ``checkpoints`` into ``output_dir``; config, generation config,
    tokenizer and code files are copied from the last checkpoint. Integer tensors (none in these models)
    must agree exactly. Returns the output folder."""
    checkpoints = [Path(c) for c in checkpoints]
    if not checkpoints:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    for ckpt in checkpoints:
        if not (ckpt / WEIGHTS_NAME).is_file():
            raise FileNotFoundError(f"{ckpt / WEIGHTS_NAME} is missing (only safetensors checkpoints are averaged)")
    total = {k: v.double() if v.is_floating_point() else v for k, v in load_file(checkpoints[0] / WEIGHTS_NAME).items()}
    reference_keys = set(total)
    for ckpt in checkpoints[1:]:
        state = load_file(ckpt / WEIGHTS_NAME)
        if set(state) != reference_keys:
            diff = sorted(set(state) ^ reference_keys)[:5]
            raise ValueError(f"{ckpt} holds different weights from {checkpoints[0]} (e.g. {diff})")
        for key, value in state.items():
            if value.is_floating_point():
                total[key] += value.double()
            elif not torch.equal(total[key], value):
                raise ValueError(f"integer tensor {key} differs between checkpoints; cannot average it")
    originals = load_file(checkpoints[-1] / WEIGHTS_NAME)
    averaged = {
        k: (v / len(checkpoints)).to(originals[k].dtype) if v.is_floating_point() else v for k, v in total.items()
    }
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for path in checkpoints[-1].iterdir():
        if path.is_file() and path.suffix in _COPIED_SUFFIXES and path.name not in _SKIPPED:
            shutil.copy2(path, output_dir / path.name)
    save_file({k: v.contiguous() for k, v in averaged.items()}, output_dir / WEIGHTS_NAME, metadata={"format": "pt"})
    return output_dir
