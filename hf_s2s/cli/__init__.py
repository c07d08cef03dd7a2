"""The ``hf-s2s`` command: one entry point (``[project.scripts]`` in pyproject.toml) with a subcommand per tool,
as fairseq, OpenNMT-py and Joey NMT ship theirs, so that an installed wheel needs no checkout.

    hf-s2s train --recipe transformer_small
    hf-s2s translate runs/transformer_small/model --input test.de
    hf-s2s push-to-hub runs/transformer_small/model me/transformer-small --dry-run --staging-dir hub/x
    hf-s2s verify hub/x

Each subcommand lives in its own module here (``hf_s2s.cli.<name>``) with a ``main(argv, prog)``;
``scripts/<name>.py`` are thin wrappers over the same functions. A subcommand's module is imported only when it
runs (bench, for one, imports MarianMT and the benchmark suites that the others never need).
"""

import argparse
import importlib
import sys

# subcommand -> (module in hf_s2s.cli, one-line summary for `hf-s2s --help`)
COMMANDS = {
    "train": ("train", "train and evaluate a translation model (the main job)"),
    "translate": ("translate", "translate a file or stdin with a trained model folder"),
    "score": ("score", "score given translations with a model folder (forced decoding: log-probabilities, alignments)"),
    "train-tokenizer": ("train_tokenizer", "train a BPE / Unigram tokenizer on a corpus"),
    "average-checkpoints": ("average_checkpoints", "average the weights of a run's last checkpoints"),
    "push-to-hub": ("push_to_hub", "share a trained model folder on the Hub (or --dry-run it)"),
    "verify": ("verify", "tell whether a model folder's code is an unmodified hf_s2s release, and which"),
    "make-model-card": ("make_model_card", "write a model card from a run's results.json"),
    "results-table": ("results_table", "print a markdown table comparing runs' results.json"),
    "bench": ("bench", "benchmark against MarianMT and a textbook RNN"),
    "export-ctranslate2": ("export_ctranslate2", "export a Transformer folder to a CTranslate2 model directory"),
    "export-onnx": ("export_onnx", "export a model folder (either family) to ONNX graphs and a runtime without torch"),
    "similarity": ("similarity", "cosine similarity of sentence pairs under a model's encoder"),
    "convert": ("convert", "convert an OpenNMT-py, Joey NMT or fairseq checkpoint into an hf_s2s folder"),
    "serve": ("serve", "serve model folders over HTTP with dynamic batching (the serve extra)"),
    "build-shortlist": ("build_shortlist", "build a vocabulary shortlist for a model folder from a training corpus"),
}


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` keeps the module docstring's line breaks (its examples) and shows every flag's default, except
    where the help text already says what the default means ("default: stdin") or the flag is required."""

    def _get_help_string(self, action):
        if action.required or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return "usage: hf-s2s COMMAND [ARGS...]   (hf-s2s COMMAND --help lists a command's flags)\n\ncommands:\n" + \
        "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"hf-s2s: unknown command {name!r}; commands: {', '.join(COMMANDS)}\n\n{usage()}", file=sys.stderr)
        return 2
    return run_command(name, rest, prog=f"hf-s2s {name}")


def run_command(name: str, argv: list[str], prog: str | None = None) -> int:
    """Run subcommand ``name`` with its arguments; returns the exit status (a ``main`` returning something
    other than an int, such as bench's report, succeeded)."""
    module = importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")
    result = module.main(argv, prog=prog)
    return result if isinstance(result, int) else 0
