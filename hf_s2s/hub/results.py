"""What a finished training run reports, read from its results.json: the one-line summary the training command
prints, and the markdown table that compares runs (``hf-s2s results-table``). :func:`read_results` reads the file
for the commands, naming it and the problem when it is not one."""

import json
import math
from pathlib import Path

from ..models.families import FAMILIES

# Where the training job writes results.json, relative to its --output_dir.
RESULTS_FILES = ("results.json", "model/results.json")


def read_results(path: str | Path, required: tuple[str, ...] = ("model_type",)) -> dict:
    """The results.json dict a training run wrote, from ``path``; ``required``: the keys the caller reads, which every
    training run writes. A folder (with the results files it holds named), a missing file, text that is not JSON, JSON
    that is not an object, and an object without ``required`` are each a ValueError (FileNotFoundError when missing)
    naming the file and the problem."""
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
    missing = [key for key in required if key not in results]
    if missing:
        raise ValueError(f"{path} is not a training run's results.json: it has no {', '.join(map(repr, missing))} "
                         f"({written_by}, with these keys)")
    return results


def summary_line(results: dict) -> str:
    parts = []
    for key, scores in results.get("test", {}).items():
        parts.append(f"{key}: BLEU {scores['bleu']:.2f} (lowercased {scores['bleu_lowercase']:.2f}), "
                     f"chrF {scores['chrf']:.2f}")
    minutes = results.get("train_seconds", math.nan) / 60
    return f"test {' | '.join(parts)}; trained in {minutes:.1f} min; {results.get('num_parameters', 0):,} parameters"


def _family_label(results: dict) -> str:
    """The family's short name in the results table ("Transformer", "GRU + Bahdanau"), from a results.json dict."""
    family = FAMILIES.get(results.get("model_type"))
    if family is None:
        return str(results.get("model_type"))
    return family.label(family.full_config(results.get("model_config")))


def results_table(runs: list[dict]) -> str:
    """A markdown table comparing training runs, from their results.json dicts: test BLEU (cased and
    lowercased) and chrF for greedy and every beam size, parameters, epochs, training time and machine."""
    decodings = list(dict.fromkeys(key for results in runs for key in results.get("test", {})))
    header = ["family", "recipe", "params"]
    for key in decodings:
        label = "greedy" if key == "greedy" else key.replace("beam", "beam ")
        header += [f"{label} BLEU", f"{label} BLEU lc", f"{label} chrF"]
    header += ["epochs", "train + validation time", "machine"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for results in runs:
        row = [_family_label(results), f"`{results.get('recipe')}`", f"{results.get('num_parameters', 0) / 1e6:.1f}M"]
        for key in decodings:
            scores = results.get("test", {}).get(key)
            row += [f"{scores[name]:.2f}" for name in ("bleu", "bleu_lowercase", "chrf")] if scores else ["-"] * 3
        minutes = (results.get("train_seconds", 0) + results.get("validation_seconds", 0)) / 60
        row += [f"{results.get('epochs', 0):g}", f"{minutes:.0f} min",
                f"{results.get('machine') or results.get('device')}, {results.get('torch_threads')} thread(s)"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


__all__ = ["RESULTS_FILES", "read_results", "results_table", "summary_line"]
