"""Checkpoint averaging: the element-wise mean of the weights of several checkpoints of one training run.

Averaging the last few checkpoints is a cheap, reliable gain for NMT models (Vaswani et al. 2017 average the
last 5 or 20); fairseq, Joey NMT and Marian ship it, transformers does not.

Resuming from a checkpoint (:func:`check_resume_checkpoint`): every file Trainer reads back is checked first, so
a truncated or damaged one is named, with the checkpoint to resume from instead, rather than failing inside
``torch.load`` or safetensors with an error that names no file.
"""

import json
import re
import shutil
import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ..data.vocabulary import check_same_vocabulary
from ..models.loading import TOKENIZER_FILES, load_config, load_model, load_tokenizer
from ..models.output_record import check_output_folder, clear_output, record_output

WEIGHTS_NAME = "model.safetensors"
# Files copied from the newest checkpoint so the averaged folder loads like any saved model.
_COPIED_SUFFIXES = (".json", ".py", ".txt", ".model", ".md")
_SKIPPED = {"trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"}
# The command whose output an averaged folder's record names, and its overwrite flag.
AVERAGE_COMMAND = "average-checkpoints"
AVERAGE_OVERWRITE_FLAG = "--overwrite_output_dir (overwrite=True)"
# Why averaged checkpoints must share one vocabulary, as the refusal says it.
AVERAGING_PURPOSE = ("averaging would add up the embeddings and output rows of different tokens: only checkpoints of "
                     "one vocabulary (of one run) can be averaged")
# config.json fields that record how a checkpoint was saved, not what the model is.
_CONFIG_BOOKKEEPING = {"transformers_version", "hf_s2s_version", "_name_or_path", "dtype", "torch_dtype"}
# config.json fields a training run writes from its training arguments or save_pretrained adds, not what the model
# is: Trainer sets ``use_cache`` from --use_cache, the job ``label_smoothing`` and ``rdrop_alpha`` from
# --label_smoothing_factor and --rdrop_alpha (a resume with other values trains on with those, as Trainer does).
_SET_BY_THE_RUN = {"use_cache", "label_smoothing", "rdrop_alpha", "architectures", "auto_map", "custom_pipelines"}


# In a checkpoint the training job wrote because --save_interval_minutes passed since the previous one, rather
# than at a point of its --save_strategy: a resume point, deleted once a later checkpoint is written, and never
# averaged. Written before the checkpoint's first file (hf_s2s.training.callbacks.TimedCheckpoints).
TIMED_CHECKPOINT_MARKER = "hf_s2s_timed_checkpoint.txt"


def is_timed_checkpoint(checkpoint: str | Path) -> bool:
    return (Path(checkpoint) / TIMED_CHECKPOINT_MARKER).is_file()


def checkpoint_step(checkpoint: str | Path) -> int:
    """The optimizer step of a ``checkpoint-<step>`` folder."""
    return int(Path(checkpoint).name.split("-")[1])


def list_checkpoints(run_dir: str | Path, timed: bool = True) -> list[Path]:
    """Every ``checkpoint-<step>`` folder of a Trainer output directory, oldest first; without the timed ones
    (:data:`TIMED_CHECKPOINT_MARKER`) unless ``timed``."""
    return sorted(
        (p for p in Path(run_dir).glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", p.name) and p.is_dir()
         and (timed or not is_timed_checkpoint(p))),
        key=checkpoint_step,
    )


def find_checkpoints(run_dir: str | Path, last: int) -> list[Path]:
    """The ``last`` newest ``checkpoint-<step>`` folders of a Trainer output directory, oldest first; the timed
    ones (resume points between the save strategy's checkpoints) are not averaged."""
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist" if not Path(run_dir).exists() else
                                f"{run_dir} is a file, not a run folder holding checkpoint-<step> folders")
    found = list_checkpoints(run_dir, timed=False)
    if not found:
        raise FileNotFoundError(f"no checkpoint-<step> folders in {run_dir}")
    if last <= 0 or last > len(found):
        raise ValueError(f"asked for the last {last} checkpoints, but {run_dir} holds {len(found)}")
    return found[-last:]


def _config(checkpoint: Path) -> dict:
    path = checkpoint / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: {checkpoint} is not a saved checkpoint")
    try:
        config = json.loads(path.read_text())
    except ValueError as error:  # not JSON, or not UTF-8
        raise ValueError(f"{path} is not valid JSON ({error}): {checkpoint} is not a readable checkpoint") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} holds a JSON {type(config).__name__}, not a config object")
    return {k: v for k, v in config.items() if k not in _CONFIG_BOOKKEEPING}


def _check_same_vocabulary(checkpoints: list[Path]) -> None:
    """Refuse checkpoints whose tokenizers (those that hold one) or configs differ in their vocabularies, source or
    target, or special token ids: :func:`hf_s2s.data.vocabulary.check_same_vocabulary`, the check ensembles make."""
    for ckpt in checkpoints:
        _config(ckpt)  # a missing or unreadable config.json is named as such
    tokenizers = [load_tokenizer(ckpt) if any((ckpt / name).is_file() for name in TOKENIZER_FILES) else None
                  for ckpt in checkpoints]
    configs = [load_config(ckpt) for ckpt in checkpoints]
    check_same_vocabulary([str(ckpt) for ckpt in checkpoints], tokenizers=tokenizers, configs=configs,
                          purpose=AVERAGING_PURPOSE)


def _check_same_model(checkpoints: list[Path]) -> None:
    """Refuse checkpoints of different models: any config field that differs (an activation or an embedding
    scale changes what the weights mean even when every shape agrees), named with its values. A field one
    config.json does not hold reads as the value its config class gives it: a run resumed after an upgrade that
    added a field has checkpoints with and without it, and they are still one model."""
    written = [_config(ckpt) for ckpt in checkpoints]
    fields = set().union(*written)
    for ckpt, config in zip(checkpoints, written, strict=True):
        absent = fields - set(config)
        if absent:  # loaded once, only for a checkpoint that lacks a field another one holds
            loaded = load_config(ckpt)
            config.update({k: getattr(loaded, k) for k in absent if hasattr(loaded, k)})
    reference = written[0]
    for ckpt, config in zip(checkpoints[1:], written[1:], strict=True):
        differing = sorted(k for k in set(reference) | set(config) if reference.get(k) != config.get(k))
        if differing:
            details = ", ".join(f"{k} ({reference.get(k)!r} vs {config.get(k)!r})" for k in differing)
            raise ValueError(f"{ckpt} and {checkpoints[0]} are different models, their config.json differ in "
                             f"{details}: only checkpoints of one run can be averaged")


def average_checkpoints(checkpoints: list[str | Path], output_dir: str | Path, overwrite: bool = False) -> Path:
    """Average the safetensors weights of ``checkpoints`` into ``output_dir``; config, generation config,
    tokenizer and code files are copied from the last checkpoint. Integer tensors (none in these models)
    must agree exactly. Returns the output folder.

    Everything is checked before anything is written: the checkpoints must share one vocabulary, source and target,
    in their tokenizers and configs (as ensemble members must), one config (every field), and the first must load
    strictly (:func:`hf_s2s.models.loading.load_model`: its weights match its config). ``output_dir`` must be new
    or empty; with ``overwrite`` it may hold an earlier average, byte for byte as this function wrote it, which is
    then replaced whole (:mod:`hf_s2s.models.output_record`): a trained model's folder, whose results.json and
    card would describe other weights, is refused."""
    checkpoints = [Path(c) for c in checkpoints]
    output_dir = Path(output_dir)
    if not checkpoints:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    if output_dir.resolve() in {c.resolve() for c in checkpoints}:
        raise ValueError(f"the output folder {output_dir} is one of the checkpoints being averaged: choose another")
    check_output_folder(output_dir, AVERAGE_COMMAND, AVERAGE_OVERWRITE_FLAG, overwrite)
    for ckpt in checkpoints:
        if not ckpt.is_dir():
            raise FileNotFoundError(f"checkpoint folder {ckpt} does not exist" if not ckpt.exists() else
                                    f"{ckpt} is a file, not a checkpoint folder")
        if not (ckpt / WEIGHTS_NAME).is_file():
            raise FileNotFoundError(f"{ckpt / WEIGHTS_NAME} is missing (only safetensors checkpoints are averaged)")
    _check_same_vocabulary(checkpoints)
    _check_same_model(checkpoints)
    load_model(checkpoints[0])
    total = {k: v.double() if v.is_floating_point() else v for k, v in load_file(checkpoints[0] / WEIGHTS_NAME).items()}
    for ckpt in checkpoints[1:]:
        state = load_file(ckpt / WEIGHTS_NAME)
        if set(state) != set(total):
            diff = sorted(set(state) ^ set(total))[:5]
            raise ValueError(f"{ckpt} holds different weights from {checkpoints[0]} (e.g. {diff})")
        for key, value in state.items():
            if value.shape != total[key].shape:
                raise ValueError(f"{key} has shape {tuple(value.shape)} in {ckpt} but {tuple(total[key].shape)} in "
                                 f"{checkpoints[0]}: checkpoints of different sizes cannot be averaged")
            if value.is_floating_point():
                total[key] += value.double()
            elif not torch.equal(total[key], value):
                raise ValueError(f"integer tensor {key} differs between checkpoints; cannot average it")
    originals = load_file(checkpoints[-1] / WEIGHTS_NAME)
    averaged = {
        k: (v / len(checkpoints)).to(originals[k].dtype) if v.is_floating_point() else v for k, v in total.items()
    }
    if overwrite:
        clear_output(output_dir, AVERAGE_COMMAND, AVERAGE_OVERWRITE_FLAG)
    output_dir.mkdir(parents=True, exist_ok=True)
    for path in checkpoints[-1].iterdir():
        if path.is_file() and path.suffix in _COPIED_SUFFIXES and path.name not in _SKIPPED:
            shutil.copy2(path, output_dir / path.name)
    save_file({k: v.contiguous() for k, v in averaged.items()}, output_dir / WEIGHTS_NAME, metadata={"format": "pt"})
    record_output(output_dir, AVERAGE_COMMAND)
    return output_dir


# --- Resume: is every file a resumed run reads intact? ------------------------------------------------------------

# Files Trainer writes with torch.save (zip archives) and reads back on resume; each is checked when present
# (``--save_only_model`` leaves out the optimizer, scheduler and random states). rng_state_<rank>.pth: one per process.
TORCH_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "rng_state_*.pth", "training_args.bin")
TRAINER_STATE = "trainer_state.json"


def file_problem(path: str | Path) -> str | None:
    """What keeps a resumed run from reading ``path``, in a sentence naming it; None when it reads. By suffix:
    .json must parse to an object; .safetensors must have a header whose tensors cover the file exactly (so a
    truncated file fails); a torch.save file (.pt, .pth, .bin) must be a zip archive whose members all match their
    CRC. Nothing is unpickled."""
    path = Path(path)
    try:
        if path.suffix == ".json":
            loaded = json.loads(path.read_bytes())
            return None if isinstance(loaded, dict) else f"{path} holds a JSON {type(loaded).__name__}, not an object"
        if path.suffix == ".safetensors":
            with safe_open(path, framework="pt"):
                return None
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
        return f"{path} is damaged (its member {damaged} fails the archive's checksum)" if damaged else None
    except (ValueError, SafetensorError) as error:  # JSONDecodeError, UnicodeDecodeError
        return f"{path} is truncated or corrupt ({error})"
    except (zipfile.BadZipFile, EOFError) as error:
        return f"{path} is truncated or not a torch.save archive ({error})"
    except OSError as error:
        return f"{path} cannot be read ({error})"


def checkpoint_problem(checkpoint: str | Path, ema_folder: str | None = None) -> str | None:
    """The first file of ``checkpoint`` that a resumed run could not read, and what is wrong with it (a sentence
    naming the file); None when every file reads. ``ema_folder``: the EMA weights' subfolder, checked too when
    it is there (whether it must be is :func:`hf_s2s.training.ema.check_ema_resume`'s question)."""
    checkpoint = Path(checkpoint)
    if not (checkpoint / TRAINER_STATE).is_file():
        return f"{checkpoint / TRAINER_STATE} is missing"
    for path in checkpoint_files(checkpoint, ema_folder):
        problem = file_problem(path)
        if problem:
            return problem
    return None


def checkpoint_files(checkpoint: str | Path, ema_folder: str | None = None) -> list[Path]:
    """The files of ``checkpoint`` (and of its ``ema_folder``) that a resumed run reads, as :func:`file_problem`
    checks them: JSON, safetensors, and torch.save archives."""
    checkpoint = Path(checkpoint)
    folders = [checkpoint] + ([checkpoint / ema_folder] if ema_folder is not None else [])
    paths = [path for folder in folders for suffix in ("json", "safetensors") for path in sorted(folder.glob(f"*.{suffix}"))]
    return paths + [path for pattern in TORCH_FILES for path in sorted(checkpoint.glob(pattern))]


def latest_intact_checkpoint(run_dir: str | Path, before: str | Path | None = None,
                             ema_folder: str | None = None) -> Path | None:
    """The newest checkpoint of ``run_dir`` (older than ``before`` when given) whose files all read, and that holds
    EMA weights in ``ema_folder`` when given; None when there is none."""
    found = list_checkpoints(run_dir)
    if before is not None:
        found = [c for c in found if checkpoint_step(c) < checkpoint_step(before)]
    for candidate in reversed(found):
        has_ema = ema_folder is None or (candidate / ema_folder / WEIGHTS_NAME).is_file()
        if has_ema and checkpoint_problem(candidate, ema_folder) is None:
            return candidate
    return None


def resume_instead(checkpoint: str | Path, ema_folder: str | None = None) -> str:
    """What to do when ``checkpoint`` cannot be resumed from: the run's previous intact checkpoint, if any."""
    checkpoint = Path(checkpoint)
    previous = latest_intact_checkpoint(checkpoint.parent, before=checkpoint, ema_folder=ema_folder)
    if previous is not None:
        return f"resume from the previous checkpoint instead: --resume_from_checkpoint {previous}"
    return (f"no earlier checkpoint of {checkpoint.parent} is intact: start the run again (--overwrite_output_dir "
            f"deletes this one)")


def model_config_differences(checkpoint: str | Path, config) -> list[str]:
    """How ``config`` (the model a resumed run builds) differs from the model ``checkpoint`` holds, field by field
    ("d_model 32 in the checkpoint, 64 in this run"), both read through the config class so that a field one of them
    leaves out counts at its default. Fields a run sets from its training arguments, and the bookkeeping of a save,
    are not compared. Empty when the checkpoint's weights fit the run's model."""
    saved = _config(Path(checkpoint))  # a missing or unreadable config.json is named as such
    if saved.get("model_type") != config.model_type:  # another family: every other field follows from that one
        return [f"model_type {saved.get('model_type')!r} in the checkpoint, {config.model_type!r} in this run"]
    saved, built = type(config).from_dict(saved).to_dict(), config.to_dict()
    skipped = _CONFIG_BOOKKEEPING | _SET_BY_THE_RUN
    return [f"{name} {saved.get(name)!r} in the checkpoint, {built.get(name)!r} in this run"
            for name in sorted((set(saved) | set(built)) - skipped) if saved.get(name) != built.get(name)]


def check_resume_checkpoint(checkpoint: str | Path, ema_folder: str | None = None) -> None:
    """Raise a ValueError naming the first file of ``checkpoint`` a resumed run could not read (truncated, not
    parseable, a damaged archive; in ``ema_folder`` too) and the checkpoint to resume from instead."""
    problem = checkpoint_problem(checkpoint, ema_folder)
    if problem:
        # a run that kept an EMA (the checkpoint holds one) resumes from a checkpoint that holds one too
        kept_ema = ema_folder if ema_folder is not None and (Path(checkpoint) / ema_folder).is_dir() else None
        raise ValueError(f"--resume_from_checkpoint {checkpoint}: {problem}; the run was probably stopped, or the "
                         f"disk filled, while it was written; {resume_instead(checkpoint, kept_ema)}")
