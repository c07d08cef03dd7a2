"""What a finished training run reports, read from its results.json: the one-line summary the training command
prints, and the markdown table that compares runs (``hf-s2s results-table``)."""

import math

from .hub import family_defaults


def summary_line(results: dict) -> str:
    parts = []
    for key, scores in results.get("test", {}).items():
        parts.append(f"{key}: BLEU {scores['bleu']:.2f} (lowercased {scores['bleu_lowercase']:.2f}), "
                     f"chrF {scores['chrf']:.2f}")
    minutes = results.get("train_seconds", math.nan) / 60
    return f"test {' | '.join(parts)}; trained in {minutes:.1f} min; {results.get('num_parameters', 0):,} parameters"


def _family_label(results: dict) -> str:
    """"Transformer", or the RNN's cell and attention ("GRU + Bahdanau"), from a results.json dict."""
    model_type = results.get("model_type")
    if model_type != "rnn_seq2seq":
        return {"transformer_seq2seq": "Transformer"}.get(model_type, str(model_type))
    config = {**family_defaults(model_type), **results.get("model_config", {})}
    attention = config["attention_type"]
    label = {"bahdanau": "Bahdanau", "none": "no attention", "scaled_dot": "scaled dot"}.get(
        attention, f"Luong {attention.removeprefix('luong_')}")
    if config.get("attention_heads", 1) > 1:
        label += f", {config['attention_heads']} heads"
    return f"{config['cell_type'].upper()} + {label}"


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


__all__ = ["results_table", "summary_line"]
