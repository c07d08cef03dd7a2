#!/usr/bin/env python3
"""Train tiny models with the real OpenNMT-py, Joey NMT and fairseq, and record their own translations.

The fixtures are what the converters of issue 27 are tested against: each folder under
tests/fixtures/toolkits/<toolkit>_<arch>/ holds a checkpoint as the toolkit saves (or releases) it,
its vocabulary files, the 100 tokenized test sources, the toolkit's greedy and beam outputs as
tokens, and provenance.json (versions, commands, options, seed, date).

Each toolkit lives in its own virtual environment under .toolkit_venvs/ (git-ignored), because each
pins its own torch; see INSTALL below for what each needed. Corpora are read by path from
/work/shared/data/multi30k and sliced into a temporary folder; nothing but the fixtures is written
into the repository.

    python scripts/toolkit_fixtures/make.py                 # every fixture
    python scripts/toolkit_fixtures/make.py --only opennmt_rnn_general
    python scripts/toolkit_fixtures/make.py --list
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("MULTI30K", "/work/shared/data/multi30k"))
VENVS = REPO / ".toolkit_venvs"
OUT = REPO / "tests" / "fixtures" / "toolkits"

# The slice: the first TRAIN_LINES training pairs, VALID_LINES validation pairs and the first
# TEST_LINES sentences of test_2016_flickr. Small enough for a few hundred CPU steps.
TRAIN_LINES = 6000
VALID_LINES = 100
TEST_LINES = 100
VOCAB_SIZE = 500  # per side, before each toolkit adds its special tokens
SEED = 1234
BEAM = 5
MAX_LENGTH = 50  # decoding cap on output tokens, passed to every toolkit's translate command

TORCH = "torch==2.13.0"

# How each toolkit is installed, in order; "pip" lines are arguments to the venv's pip install.
# Why each differs is in README.md beside this file.
INSTALL = {
    "opennmt": [
        [TORCH],
        # opennmt-py 3.5.1 pins torch<2.3,>=2.1: a plain install replaces torch 2.13 by 2.2.2 (+ CUDA
        # wheels). Install it without its pins, then its runtime dependencies (onmt/__init__ imports all
        # transforms, hence spacy, pyonmttok, fasttext, ...).
        ["--no-deps", "opennmt-py==3.5.1"],
        ["configargparse", "pyyaml", "sacrebleu", "six", "pyonmttok<2,>=1.37", "tensorboard>=2.3",
         "ctranslate2<5,>=4", "flask", "waitress", "rapidfuzz", "pyahocorasick", "fasttext-wheel", "spacy"],
    ],
    "joeynmt": [
        [TORCH],
        ["joeynmt==2.3.0"],
    ],
    "fairseq": [
        [TORCH],
        ["fairseq==0.12.2"],
    ],
}


def venv_python(toolkit: str) -> Path:
    return VENVS / toolkit / "bin" / "python"


def venv_bin(toolkit: str, command: str) -> str:
    return str(VENVS / toolkit / "bin" / command)


def ensure_venv(toolkit: str) -> None:
    """Create .toolkit_venvs/<toolkit> and install the toolkit there, once."""
    marker = VENVS / toolkit / ".installed"
    if marker.exists():
        return
    subprocess.run([sys.executable, "-m", "venv", str(VENVS / toolkit)], check=True)
    for args in INSTALL[toolkit]:
        subprocess.run([venv_bin(toolkit, "pip"), "install", "-q", *args], check=True)
    marker.write_text(json.dumps(INSTALL[toolkit]))


def package_versions(toolkit: str, packages: list[str]) -> dict[str, str]:
    code = (
        "import json, importlib.metadata as m, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    text = subprocess.run([str(venv_python(toolkit)), "-c", code, *packages], check=True,
                          capture_output=True, text=True).stdout
    return json.loads(text)


# ---------------------------------------------------------------- data

_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(line: str) -> str:
    """Lowercase, split words from punctuation: 'Ein Mann, der läuft.' -> 'ein mann , der läuft .'"""
    return " ".join(_TOKEN.findall(line.strip().lower()))


def read_lines(name: str, count: int) -> list[str]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        out = []
        for line in f:
            out.append(tokenize(line))
            if len(out) == count:
                break
    return out


def make_slice(folder: Path) -> dict[str, Path]:
    """Write the tokenized slice into folder: {train,valid,test}.{de,en}."""
    spec = {"train": ("train", TRAIN_LINES), "valid": ("val", VALID_LINES), "test": ("test_2016_flickr", TEST_LINES)}
    paths = {}
    for split, (stem, count) in spec.items():
        for lang in ("de", "en"):
            path = folder / f"{split}.{lang}"
            path.write_text("\n".join(read_lines(f"{stem}.{lang}.gz", count)) + "\n", encoding="utf-8")
            paths[f"{split}.{lang}"] = path
    return paths


# ---------------------------------------------------------------- running

def run(cmd: list[str], cwd: Path, log: Path) -> list[str]:
    """Run one toolkit command with a deterministic CPU environment; return it as recorded."""
    # TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: torch>=2.6 loads with weights_only=True by default, and the
    # toolkits' own torch.load calls (onmt_release_model, onmt_translate's load_checkpoint, ...) then
    # refuse their own checkpoints (argparse.Namespace is not an allowed global). These are files this
    # script has just written, so the toolkits may unpickle them as they did under their pinned torch.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0",
               CUDA_VISIBLE_DEVICES="", TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"command failed ({done.returncode}), see {log}: {' '.join(cmd)}")
    return cmd


def shown(cmd: list[str], work: Path) -> str:
    """A command as recorded in provenance.json: venv and temp paths made relative."""
    text = " ".join(cmd)
    text = text.replace(str(VENVS) + "/", ".toolkit_venvs/").replace(str(work) + "/", "$WORK/")
    return text.replace(str(work), "$WORK")


def write_fixture(name: str, work: Path, files: dict[str, Path], provenance: dict) -> None:
    """Copy files (fixture name -> path in work) into tests/fixtures/toolkits/<name>/."""
    target = OUT / name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for dest, src in files.items():
        shutil.copyfile(src, target / dest)
    provenance = {
        "fixture": name,
        **provenance,
        "seed": SEED,
        "slice": {"data": "multi30k de->en (read from $MULTI30K)", "train_lines": TRAIN_LINES,
                  "valid_lines": VALID_LINES, "test": f"first {TEST_LINES} lines of test_2016_flickr",
                  "tokenization": "lowercase; tokens = re.findall(r'\\w+|[^\\w\\s]') (make.py tokenize)"},
        "beam_size": BEAM,
        "max_length": MAX_LENGTH,
        "date": datetime.date.today().isoformat(),
        "made_by": "scripts/toolkit_fixtures/make.py",
        "files": sorted(files),
    }
    (target / "provenance.json").write_text(json.dumps(provenance, indent=2, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------- OpenNMT-py

ONMT_COMMON = {
    "seed": SEED, "src_vocab_size": VOCAB_SIZE, "tgt_vocab_size": VOCAB_SIZE,
    "train_steps": 800, "valid_steps": 100000, "save_checkpoint_steps": 800,
    "batch_size": 64, "batch_type": "sents", "optim": "adam", "learning_rate": 0.003,
    "num_workers": 0, "report_every": 100, "world_size": 1,
}

ONMT_MODELS = {
    # name: model options (everything else is ONMT_COMMON)
    "opennmt_rnn_general": {
        "encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": "LSTM", "layers": 2,
        "word_vec_size": 24, "hidden_size": 32, "global_attention": "general", "input_feed": 1,
        "bridge": True,
    },
    "opennmt_rnn_mlp": {
        "encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": "GRU", "layers": 1,
        "word_vec_size": 24, "hidden_size": 32, "global_attention": "mlp", "input_feed": 1,
        "bridge": False,
    },
    "opennmt_rnn_dot": {
        "encoder_type": "rnn", "decoder_type": "rnn", "rnn_type": "LSTM", "layers": 1,
        "word_vec_size": 24, "hidden_size": 32, "global_attention": "dot", "input_feed": 0,
        "bridge": False,
    },
    "opennmt_transformer": {
        "encoder_type": "transformer", "decoder_type": "transformer", "layers": 2,
        "word_vec_size": 32, "hidden_size": 32, "heads": 2, "transformer_ff": 64,
        "position_encoding": True, "dropout": [0.1], "attention_dropout": [0.1],
        "optim": "adam", "learning_rate": 0.002, "param_init": 0.0, "param_init_glorot": True,
        "train_steps": 1000, "save_checkpoint_steps": 1000,
    },
}


def _yaml(options: dict) -> str:
    import json as _json  # YAML is a superset of JSON: one value per line, no yaml module needed here

    return "".join(f"{k}: {_json.dumps(v)}\n" for k, v in options.items())


def make_opennmt(name: str, work: Path, data: dict[str, Path]) -> None:
    ensure_venv("opennmt")
    log = work / "log.txt"
    options = {**ONMT_COMMON, **ONMT_MODELS[name]}
    config = {
        "save_data": str(work / "run"),
        "src_vocab": str(work / "vocab.src"), "tgt_vocab": str(work / "vocab.tgt"),
        "data": {"corpus_1": {"path_src": str(data["train.de"]), "path_tgt": str(data["train.en"])},
                 "valid": {"path_src": str(data["valid.de"]), "path_tgt": str(data["valid.en"])}},
        "save_model": str(work / "model"),
        **options,
    }
    (work / "config.yaml").write_text(_yaml(config))
    commands = [
        run([venv_bin("opennmt", "onmt_build_vocab"), "-config", str(work / "config.yaml"), "-n_sample", "-1"],
            work, log),
        run([venv_bin("opennmt", "onmt_train"), "-config", str(work / "config.yaml")], work, log),
    ]
    steps = options["train_steps"]
    trained = work / f"model_step_{steps}.pt"
    released = work / "model.pt"
    commands.append(run([venv_bin("opennmt", "onmt_release_model"), "-m", str(trained), "-o", str(released)],
                        work, log))
    translate = []
    for beam, out in ((1, "greedy.txt"), (BEAM, "beam.txt")):
        translate.append(run([venv_bin("opennmt", "onmt_translate"), "-model", str(released),
                              "-src", str(data["test.de"]), "-output", str(work / out),
                              "-beam_size", str(beam), "-max_length", str(MAX_LENGTH),
                              "-batch_size", "16", "-seed", str(SEED)], work, log))
    versions = package_versions("opennmt", ["opennmt-py", "torch"])
    write_fixture(name, work, {
        "model.pt": released, "vocab.src": work / "vocab.src", "vocab.tgt": work / "vocab.tgt",
        "config.yaml": work / "config.yaml", "test.de": data["test.de"],
        "greedy.txt": work / "greedy.txt", "beam.txt": work / "beam.txt",
    }, {
        "toolkit": "opennmt-py", "versions": versions,
        "options": options,
        "commands": {"vocab": shown(commands[0], work), "train": shown(commands[1], work),
                     "release": shown(commands[2], work),
                     "greedy": shown(translate[0], work), "beam": shown(translate[1], work)},
        "notes": "model.pt is the training checkpoint after onmt_release_model (optimizer state set to None); "
                 "greedy/beam are onmt_translate outputs, space-joined target tokens.",
    })


# ---------------------------------------------------------------- registry

FIXTURES = {name: make_opennmt for name in ONMT_MODELS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="fixture names to make (default: all)")
    parser.add_argument("--list", action="store_true", help="list the fixture names and stop")
    parser.add_argument("--keep-work", action="store_true", help="keep the temporary work folders")
    args = parser.parse_args()
    if args.list:
        print("\n".join(FIXTURES))
        return
    names = args.only or list(FIXTURES)
    unknown = sorted(set(names) - set(FIXTURES))
    if unknown:
        parser.error(f"unknown fixture(s) {unknown}; known: {list(FIXTURES)}")
    root = Path(tempfile.mkdtemp(prefix="toolkit_fixtures_"))
    data_dir = root / "data"
    data_dir.mkdir()
    data = make_slice(data_dir)
    failed = {}
    for name in names:
        work = root / name
        work.mkdir()
        print(f"[{name}] working in {work}", flush=True)
        try:
            FIXTURES[name](name, work, data)
            print(f"[{name}] done", flush=True)
        except Exception as error:  # record and go on with the next toolkit
            failed[name] = str(error)
            print(f"[{name}] FAILED: {error}", flush=True)
    if not args.keep_work and not failed:
        shutil.rmtree(root)
    if failed:
        print(f"failed: {json.dumps(failed, indent=2)} (work kept in {root})")
        sys.exit(1)


if __name__ == "__main__":
    main()
