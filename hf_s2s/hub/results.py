"""What a finished training run reports: :class:`RunResults`, the typed contents of the results.json the training job
writes. The model card (:mod:`hf_s2s.hub.card`), the markdown table that compares runs (``hf-s2s results-table``,
:func:`results_table`) and the one-line summary the training command prints (:func:`summary_line`) all read it.
:func:`read_results` reads the file for the commands, naming it and the problem when it is not one.

results.json keeps its keys, and their order, from release to release: :meth:`RunResults.to_dict` gives back the
dict a run wrote, key for key. A file from an earlier release reads too: a key it lacks is None (or empty), and a
key this release does not know is kept in ``extra`` and written back after the others.
"""

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..models.families import FAMILIES

# Where the training job writes results.json, relative to its --output_dir.
RESULTS_FILES = ("results.json", "model/results.json")


def _known_and_extra(cls, data: dict) -> tuple[dict, dict]:
    """``data`` split into the keys that are fields of the record ``cls`` and the others."""
    names = {f.name for f in fields(cls)} - {"extra"}
    return ({key: value for key, value in data.items() if key in names},
            {key: value for key, value in data.items() if key not in names})


class _Record:
    """A part of results.json: its keys are the dataclass's fields, and those of a later release go in ``extra``."""

    @classmethod
    def from_dict(cls, data: dict):
        known, extra = _known_and_extra(cls, data)
        return cls(**known, extra=extra)


@dataclass(kw_only=True)
class DecodingScores(_Record):
    """The scores of one decoding of the test set: sacreBLEU's corpus scores (:mod:`hf_s2s.metrics`) and how it was
    decoded. Keys that an earlier release did not write are None, and left out of :meth:`to_dict`."""

    bleu: float  # corpus BLEU, 0-100, cased
    bleu_lowercase: float | None = None  # corpus BLEU of the lowercased text, 0-100
    chrf: float  # chrF, 0-100
    bleu_precisions: list[float] | None = None  # 1- to 4-gram precisions, %
    bleu_bp: float | None = None  # brevity penalty
    bleu_sys_len: int | None = None  # tokens in the translations (BLEU's tokenization)
    bleu_ref_len: int | None = None  # tokens in the references
    bleu_signature: str | None = None  # sacreBLEU's signature of each score
    bleu_lowercase_signature: str | None = None
    chrf_signature: str | None = None
    decode_seconds: float | None = None  # wall time of translating the test set, s
    decoding: dict[str, Any] | None = None  # the arguments of inference.translate the test set was decoded with
    extra: dict[str, Any] = field(default_factory=dict)  # keys of a later release

    def to_dict(self) -> dict:
        written = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**{key: value for key, value in written.items() if value is not None}, **self.extra}


@dataclass(kw_only=True)
class CheckpointAveraging(_Record):
    """``--average_last_checkpoints``: the checkpoints averaged, and whether the average became the model."""

    checkpoints: list[str]  # checkpoint folder names, oldest first
    validation_bleu: float | None = None  # the average's; None: fewer than 2 checkpoints, nothing was averaged
    best_single_validation_bleu: float | None = None  # the best checkpoint's, which the average had to beat
    used: bool  # the average is the saved model
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def validated(self) -> bool:
        return self.validation_bleu is not None

    def to_dict(self) -> dict:
        scores = {"validation_bleu": self.validation_bleu,
                  "best_single_validation_bleu": self.best_single_validation_bleu} if self.validated else {}
        return {"checkpoints": self.checkpoints, **scores, "used": self.used, **self.extra}


@dataclass(kw_only=True)
class EMASelection(_Record):
    """``--ema_decay``: the exponential moving average of the weights, and whether it became the model."""

    decay: float | None = None  # per optimizer step
    validation_bleu: float | None = None  # the EMA's
    baseline_validation_bleu: float | None = None  # the raw weights' (best or averaged) it had to beat; None: none
    used: bool  # the EMA is the saved model
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def validated(self) -> bool:
        return self.validation_bleu is not None

    def to_dict(self) -> dict:
        return {"decay": self.decay, "validation_bleu": self.validation_bleu,
                "baseline_validation_bleu": self.baseline_validation_bleu, "used": self.used, **self.extra}


# Fields added after 0.2.0 that a run without them does not write, so that earlier results.json files read and
# write back byte for byte.
WRITTEN_WHEN_SET = ("corpus_filters", "resumed_from_step")


@dataclass(kw_only=True)
class RunResults:
    """A training run's results.json. The fields are in the order the file holds them."""

    model_type: str  # the family (models.families)
    dataset: str | None = None  # --dataset
    source_lang: str | None = None
    target_lang: str | None = None
    recipe: str | None = None  # --recipe; None: none
    max_tokens_per_batch: int | None = None  # None: batches of sentences
    # --filter_*: {"filters": {...}, "splits": {split: {"pairs", "kept", "removed": {filter: n},
    # "complete"}}}; None: off
    corpus_filters: dict[str, Any] | None = None
    num_parameters: int = 0
    train_seconds: float | None = None  # training steps only, validation excluded, s
    validation_seconds: float | None = None  # the validations during training, s
    train_tokens: int | None = None  # source + target tokens trained on, padding excluded, all processes
    train_tokens_per_second: float | None = None
    # the step the run's last session resumed from (--resume_from_checkpoint): the times and tokens above are that
    # session's; None: trained in one session
    resumed_from_step: int | None = None
    epochs: float | None = None  # epochs trained (fractional when stopped by --max_steps)
    train_loss: float | None = None  # mean training loss
    best_validation_bleu: float | None = None  # the saved model's validation BLEU
    checkpoint_averaging: CheckpointAveraging | None = None  # None: not asked for
    ema: EMASelection | None = None  # None: not asked for
    test: dict[str, DecodingScores] = field(default_factory=dict)  # per decoding: "greedy", "beam5", ...
    device: str | None = None  # torch's device of the main process ("cpu", "cuda:0")
    machine: str | None = None  # the accelerator or CPU, in words
    torch_threads: int | None = None
    world_size: int | None = None  # processes
    training_arguments: dict[str, Any] = field(default_factory=dict)  # the settings the card lists
    model_config: dict[str, Any] | None = None  # config fields that differ from the family's defaults
    extra: dict[str, Any] = field(default_factory=dict)  # keys this release does not know

    @classmethod
    def from_dict(cls, data: dict) -> "RunResults":
        """The results in a results.json dict; ValueError when it has no ``model_type``."""
        if "model_type" not in data:
            raise ValueError("results has no 'model_type': pass the results.json that the training job (hf-s2s "
                             "train) writes")
        known, extra = _known_and_extra(cls, data)
        if known.get("checkpoint_averaging") is not None:
            known["checkpoint_averaging"] = CheckpointAveraging.from_dict(known["checkpoint_averaging"])
        if known.get("ema") is not None:
            known["ema"] = EMASelection.from_dict(known["ema"])
        known["test"] = {key: DecodingScores.from_dict(scores) for key, scores in (known.get("test") or {}).items()}
        known["training_arguments"] = known.get("training_arguments") or {}
        return cls(**known, extra=extra)

    @classmethod
    def of(cls, results: "RunResults | dict") -> "RunResults":
        """``results`` itself, or the results in a results.json dict."""
        return results if isinstance(results, RunResults) else cls.from_dict(results)

    def to_dict(self) -> dict:
        """The results.json dict: every key a run writes, in the order it writes them."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"
                and not (f.name in WRITTEN_WHEN_SET and getattr(self, f.name) is None)}
        for name in ("checkpoint_averaging", "ema"):
            if data[name] is not None:
                data[name] = data[name].to_dict()
        data["test"] = {key: scores.to_dict() for key, scores in self.test.items()}
        return {**data, **self.extra}

    def to_json(self) -> str:
        """The text of results.json (``default=str``: a config value JSON has no type for is written as text)."""
        return json.dumps(self.to_dict(), indent=2, default=str)

    @property
    def hardware(self) -> str:
        """The machine in words, or the device where an earlier release did not record the machine."""
        return f"{self.machine or self.device}"

    @property
    def session_note(self) -> str:
        """What a resumed run's times and tokens cover, to follow them where they are shown; "" for a run trained in
        one session."""
        return "" if self.resumed_from_step is None else f" (the last session, resumed from step {self.resumed_from_step})"


def read_results(path: str | Path, required: tuple[str, ...] = ("model_type",)) -> RunResults:
    """The results a training run wrote in ``path``; ``required``: the keys the caller reads, which every training run
    writes. A folder (with the results files it holds named), a missing file, text that is not JSON, JSON that is
    not an object, and an object without ``required`` are each a ValueError (FileNotFoundError when missing) naming
    the file and the problem."""
    path = Path(path)
    written_by = "hf-s2s train writes <output_dir>/results.json and <output_dir>/model/results.json"
    if path.is_dir():
        inside = [str(path / name) for name in RESULTS_FILES if (path / name).is_file()]
        suggestion = " or ".join(inside or [str(path / name) for name in RESULTS_FILES])
        raise ValueError(f"{path} is a folder, not a results file: give {suggestion}"
                         + ("" if inside else f" (none is there; {written_by})"))
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist ({written_by})")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # not JSON (json.JSONDecodeError) or not UTF-8
        raise ValueError(f"{path} is not valid JSON ({error}): not a training run's results.json") from None
    if not isinstance(results, dict):
        raise ValueError(f"{path} holds a JSON {type(results).__name__}, not the object a training run's results.json "
                         "holds")
    missing = [key for key in dict.fromkeys((*required, "model_type")) if key not in results]
    if missing:
        raise ValueError(f"{path} is not a training run's results.json: it has no {', '.join(map(repr, missing))} "
                         f"({written_by}, with these keys)")
    return RunResults.from_dict(results)


def summary_line(results: RunResults | dict) -> str:
    """The line the training command prints at the end: test scores, training time and parameters."""
    results = RunResults.of(results)
    parts = [f"{key}: BLEU {scores.bleu:.2f} (lowercased {scores.bleu_lowercase:.2f}), chrF {scores.chrf:.2f}"
             for key, scores in results.test.items()]
    minutes = (math.nan if results.train_seconds is None else results.train_seconds) / 60
    return (f"test {' | '.join(parts)}; trained in {minutes:.1f} min{results.session_note}; "
            f"{results.num_parameters:,} parameters")


def _family_label(results: RunResults) -> str:
    """The family's short name in the results table ("Transformer", "GRU + Bahdanau")."""
    family = FAMILIES.get(results.model_type)
    if family is None:
        return str(results.model_type)
    return family.label(family.full_config(results.model_config))


def results_table(runs: list[RunResults | dict]) -> str:
    """A markdown table comparing training runs, from their results: test BLEU (cased and lowercased) and chrF for
    greedy and every beam size, parameters, epochs, training time and machine."""
    runs = [RunResults.of(results) for results in runs]
    decodings = list(dict.fromkeys(key for results in runs for key in results.test))
    header = ["family", "recipe", "params"]
    for key in decodings:
        label = "greedy" if key == "greedy" else key.replace("beam", "beam ")
        header += [f"{label} BLEU", f"{label} BLEU lc", f"{label} chrF"]
    header += ["epochs", "train + validation time", "machine"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for results in runs:
        row = [_family_label(results), f"`{results.recipe}`", f"{results.num_parameters / 1e6:.1f}M"]
        for key in decodings:
            scores = results.test.get(key)
            row += [f"{value:.2f}" for value in (scores.bleu, scores.bleu_lowercase, scores.chrf)] if scores \
                else ["-"] * 3
        minutes = ((results.train_seconds or 0) + (results.validation_seconds or 0)) / 60
        row += [f"{results.epochs or 0:g}", f"{minutes:.0f} min{results.session_note}",
                f"{results.hardware}, {results.torch_threads} thread(s)"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


__all__ = ["RESULTS_FILES", "CheckpointAveraging", "EMASelection", "RunResults", "DecodingScores", "read_results",
           "results_table", "summary_line"]
