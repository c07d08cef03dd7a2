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
import collections
import dataclasses
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
TRAIN_LINES = 10000
VALID_LINES = 100
TEST_LINES = 100
SRC_VOCAB_SIZE = 2000  # source words kept by each toolkit's vocabulary tool, before its specials
TGT_VOCAB_SIZE = 1000  # target words; the training slice uses no other (see make_slice)
SHARED_VOCAB_SIZE = 3000  # words of the one vocabulary of the fixtures that share it (both sides' words)
SEED = 1234
BEAM = 5
MAX_LENGTH = 50  # decoding cap on output tokens, passed to every toolkit's translate command
# greedy_single.txt: the toolkit's greedy output with one sentence a batch and its own default length rule (no cap
# passed), so that a line's cap depends on that line alone: what the converted folder's generation config reproduces
SINGLE = "greedy_single.txt"
SINGLE_CONFIG = "translate_single.yaml"  # Joey NMT's: the config it ran with, kept (the converter reads its testing)

TORCH = "torch==2.13.0"


@dataclasses.dataclass(frozen=True)
class Scale:
    """What a run's data and decoding look like: the tiny fixtures (TINY) or real_size.py's models."""

    src_vocab: int  # source words kept by each toolkit's vocabulary tool, before its specials
    tgt_vocab: int
    test_lines: int  # test sentences each toolkit translates
    max_length: int | None  # decoding cap on output tokens, passed to every toolkit's translate; None: its default
    beam: int = BEAM


TINY = Scale(SRC_VOCAB_SIZE, TGT_VOCAB_SIZE, TEST_LINES, MAX_LENGTH)

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
        # joeynmt/helpers.py imports importlib_metadata, which joeynmt 2.3.0 does not declare
        ["importlib_metadata"],
    ],
    "fairseq": [
        [TORCH],
        # fairseq 0.12.2 installs (with hydra-core 1.0.7, omegaconf 2.0.6) but cannot be imported on
        # Python 3.11: "ValueError: mutable default <class 'fairseq.dataclass.configs.CommonConfig'>
        # for field common is not allowed: use default_factory" (3.11's dataclasses refuse unhashable
        # defaults). fairseq-fixed 0.12.3.1 is 0.12.2 with that fixed and hydra-core 1.3.2 /
        # omegaconf 2.3.0; it imports as `fairseq` and reports __version__ 0.12.3.1.
        ["fairseq-fixed==0.12.3.1"],
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


def read_lines(name: str, count: int | None) -> list[str]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        out = []
        for line in f:
            out.append(tokenize(line))
            if len(out) == count:
                break
    return out


def make_slice(folder: Path) -> dict[str, Path]:
    """Write the tokenized slice into folder: {train,valid,test}.{de,en}.

    Training pairs are kept only when every English token is among the TGT_VOCAB_SIZE most frequent
    English tokens of the whole training set: the toolkits' target vocabularies then hold every target
    token of the slice, and tiny models learn words instead of `<unk>` (which they otherwise emit for
    most of each sentence, making the parity fixtures nearly input-independent).
    """
    paths = {}

    def write(split: str, lang: str, lines: list[str]) -> None:
        path = folder / f"{split}.{lang}"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths[f"{split}.{lang}"] = path

    de, en = read_lines("train.de.gz", None), read_lines("train.en.gz", None)
    counts = collections.Counter(token for line in en for token in line.split())
    known = {token for token, _ in counts.most_common(TGT_VOCAB_SIZE)}
    pairs = [(s, t) for s, t in zip(de, en, strict=True) if set(t.split()) <= known][:TRAIN_LINES]
    write("train", "de", [s for s, _ in pairs])
    write("train", "en", [t for _, t in pairs])
    for split, stem, count in (("valid", "val", VALID_LINES), ("test", "test_2016_flickr", TEST_LINES)):
        for lang in ("de", "en"):
            write(split, lang, read_lines(f"{stem}.{lang}.gz", count))
    return paths


# ---------------------------------------------------------------- running

def _env() -> dict[str, str]:
    # TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: torch>=2.6 loads with weights_only=True by default, and the
    # toolkits' own torch.load calls (onmt_release_model, onmt_translate's load_checkpoint, ...) then
    # refuse their own checkpoints (argparse.Namespace is not an allowed global). These are files this
    # script has just written, so the toolkits may unpickle them as they did under their pinned torch.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0",
               CUDA_VISIBLE_DEVICES="", TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    return env


def run(cmd: list[str], cwd: Path, log: Path) -> list[str]:
    """Run one toolkit command with a deterministic CPU environment; return it as recorded."""
    env = _env()
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"command failed ({done.returncode}), see {log}: {' '.join(cmd)}")
    return cmd


def _option(flag: str, value: object) -> list[str]:
    """A command-line option, or nothing where the value is None (the toolkit's default then applies)."""
    return [] if value is None else [flag, str(value)]


def shown(cmd: list[str], work: Path) -> str:
    """A command as recorded in provenance.json: venv and temp paths made relative."""
    text = " ".join(cmd)
    text = text.replace(str(VENVS) + "/", ".toolkit_venvs/").replace(str(work) + "/", "$WORK/")
    text = text.replace(str(work), "$WORK")
    return text.replace(str(work.parent), "$TMP")  # $TMP/data holds the slice


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
                  "train_filter": f"pairs whose English tokens are all among the {TGT_VOCAB_SIZE} most frequent",
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
    "seed": SEED,
    "train_steps": 800, "valid_steps": 100000, "save_checkpoint_steps": 800,
    "batch_size": 64, "batch_type": "sents", "optim": "adam", "learning_rate": 0.002,
    "num_workers": 0, "report_every": 100, "world_size": 1,
}

ONMT_MODELS = {
    # name: model options (everything else is ONMT_COMMON)
    "opennmt_rnn_general": {
        # With 2 layers this LSTM stayed at the unigram (13% accuracy, every output "a a a ..."), with
        # OpenNMT-py's default dropout 0.3 (800 steps) and without dropout (600 of 1,500 steps): 1 layer.
        "encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": "LSTM", "layers": 1,
        "word_vec_size": 16, "hidden_size": 32, "global_attention": "general", "input_feed": 1,
        "bridge": True, "dropout": [0.0], "train_steps": 1200, "save_checkpoint_steps": 1200,
    },
    "opennmt_rnn_mlp": {
        "encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": "GRU", "layers": 1,
        "word_vec_size": 16, "hidden_size": 32, "global_attention": "mlp", "input_feed": 1,
        "bridge": False,
    },
    "opennmt_rnn_dot": {
        # dot needs the encoder's output width (2 x 16, brnn) to equal the decoder's hidden size (32). A GRU
        # (1,200 steps, no dropout) stayed on the unigram plateau ("a a a ... ." for every input): an LSTM, as
        # for general
        "encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": "LSTM", "layers": 1,
        "word_vec_size": 16, "hidden_size": 32, "global_attention": "dot", "input_feed": 1,
        "bridge": False, "dropout": [0.0], "train_steps": 1200, "save_checkpoint_steps": 1200,
    },
    "opennmt_transformer": {
        "encoder_type": "transformer", "decoder_type": "transformer", "layers": 2,
        "word_vec_size": 32, "hidden_size": 32, "heads": 2, "transformer_ff": 64,
        "position_encoding": True, "dropout": [0.1], "attention_dropout": [0.1],
        "optim": "adam", "learning_rate": 0.002, "param_init": 0.0, "param_init_glorot": True,
        "train_steps": 800, "save_checkpoint_steps": 800,
    },
}
ONMT_MODELS["opennmt_transformer_concat"] = {**ONMT_MODELS["opennmt_transformer"],
                                              "position_encoding_type": "SinusoidalConcat"}
# OpenNMT-py's Transformer recipes: one vocabulary, one token table for both sides and the generator
ONMT_MODELS["opennmt_transformer_shared"] = {**ONMT_MODELS["opennmt_transformer"], "share_vocab": True,
                                             "share_embeddings": True, "share_decoder_embeddings": True,
                                             "src_vocab_size": SHARED_VOCAB_SIZE}


def _yaml(options: dict) -> str:
    import json as _json  # YAML is a superset of JSON: one value per line, no yaml module needed here

    return "".join(f"{k}: {_json.dumps(v)}\n" for k, v in options.items())


def make_opennmt(name: str, work: Path, data: dict[str, Path]) -> None:
    write_fixture(name, work, *run_opennmt(work, data, {**ONMT_COMMON, **ONMT_MODELS[name]}, TINY))
    record_single(name, work)


def single_opennmt(fixture: Path, work: Path) -> list[str]:
    """onmt_translate greedy, -batch_size 1 and its default -max_length / -max_length_ratio, into work/SINGLE."""
    return run([venv_bin("opennmt", "onmt_translate"), "-model", str(fixture / "model.pt"), "-src",
                str(fixture / "test.de"), "-output", str(work / SINGLE), "-beam_size", "1", "-batch_size", "1",
                "-seed", str(SEED)], work, work / "log.txt")


def run_opennmt(work: Path, data: dict[str, Path], options: dict, scale: Scale) -> tuple[dict[str, Path], dict]:
    """Train with OpenNMT-py, release, translate greedy and beam: (the files to keep, their provenance)."""
    ensure_venv("opennmt")
    log = work / "log.txt"
    options = {"src_vocab_size": scale.src_vocab, "tgt_vocab_size": scale.tgt_vocab, **options}
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
    for beam, out in ((1, "greedy.txt"), (scale.beam, "beam.txt")):
        translate.append(run([venv_bin("opennmt", "onmt_translate"), "-model", str(released),
                              "-src", str(data["test.de"]), "-output", str(work / out),
                              "-beam_size", str(beam), *_option("-max_length", scale.max_length),
                              "-batch_size", "16", "-seed", str(SEED)], work, log))
    versions = package_versions("opennmt", ["opennmt-py", "torch"])
    vocabularies = {"vocab.src": work / "vocab.src"} if options.get("share_vocab") else {
        "vocab.src": work / "vocab.src", "vocab.tgt": work / "vocab.tgt"}  # -share_vocab writes one, -src_vocab
    return ({
        "model.pt": released, **vocabularies, "config.yaml": work / "config.yaml", "test.de": data["test.de"],
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


# ---------------------------------------------------------------- Joey NMT

JOEY_RNN = {"initializer": "xavier_uniform", "bias_initializer": "zeros", "init_gain": 1.0,
            "embed_initializer": "normal", "embed_init_weight": 0.1}

JOEY_MODELS = {
    "joeynmt_rnn_bahdanau": {
        **JOEY_RNN,
        "encoder": {"type": "recurrent", "rnn_type": "lstm", "embeddings": {"embedding_dim": 16},
                    "hidden_size": 16, "bidirectional": True, "num_layers": 1, "dropout": 0.0},
        "decoder": {"type": "recurrent", "rnn_type": "lstm", "embeddings": {"embedding_dim": 16},
                    "hidden_size": 32, "num_layers": 1, "attention": "bahdanau", "input_feeding": True,
                    "init_hidden": "bridge", "dropout": 0.0, "hidden_dropout": 0.0},
    },
    "joeynmt_rnn_luong": {
        **JOEY_RNN,
        "encoder": {"type": "recurrent", "rnn_type": "gru", "embeddings": {"embedding_dim": 16},
                    "hidden_size": 16, "bidirectional": True, "num_layers": 2, "dropout": 0.0},
        "decoder": {"type": "recurrent", "rnn_type": "gru", "embeddings": {"embedding_dim": 16},
                    "hidden_size": 32, "num_layers": 2, "attention": "luong", "input_feeding": True,
                    "init_hidden": "last", "dropout": 0.0, "hidden_dropout": 0.0},
    },
    "joeynmt_rnn_zero": {
        **JOEY_RNN,
        "encoder": {"type": "recurrent", "rnn_type": "gru", "embeddings": {"embedding_dim": 16},
                    "hidden_size": 16, "bidirectional": True, "num_layers": 1, "dropout": 0.0},
        "decoder": {"type": "recurrent", "rnn_type": "gru", "embeddings": {"embedding_dim": 16},
                    "hidden_size": 32, "num_layers": 1, "attention": "bahdanau", "input_feeding": False,
                    "init_hidden": "zero", "dropout": 0.0, "hidden_dropout": 0.0},
    },
    "joeynmt_rnn_last_forward": {
        # init_hidden last with an encoder output (2 x 32) twice the decoder's size: Joey takes the forward half
        **JOEY_RNN,
        "encoder": {"type": "recurrent", "rnn_type": "lstm", "embeddings": {"embedding_dim": 16},
                    "hidden_size": 32, "bidirectional": True, "num_layers": 1, "dropout": 0.0},
        "decoder": {"type": "recurrent", "rnn_type": "lstm", "embeddings": {"embedding_dim": 16},
                    "hidden_size": 32, "num_layers": 1, "attention": "luong", "input_feeding": True,
                    "init_hidden": "last", "dropout": 0.0, "hidden_dropout": 0.0},
    },
    "joeynmt_transformer": {
        "initializer": "xavier_uniform", "embed_initializer": "xavier_uniform", "bias_initializer": "zeros",
        "init_gain": 1.0, "embed_init_gain": 1.0, "tied_embeddings": False, "tied_softmax": True,
        "encoder": {"type": "transformer", "num_layers": 2, "num_heads": 2, "hidden_size": 32, "ff_size": 64,
                    "embeddings": {"embedding_dim": 32, "scale": True}, "dropout": 0.1,
                    "layer_norm": "pre", "activation": "relu"},
        "decoder": {"type": "transformer", "num_layers": 2, "num_heads": 2, "hidden_size": 32, "ff_size": 64,
                    "embeddings": {"embedding_dim": 32, "scale": True}, "dropout": 0.1,
                    "layer_norm": "pre", "activation": "relu"},
    },
}
# Joey NMT's Transformer configs: one vocabulary (a joint voc_file, see run_joeynmt), one token table for both sides
# and the output layer
JOEY_MODELS["joeynmt_transformer_tied"] = {**JOEY_MODELS["joeynmt_transformer"], "tied_embeddings": True}

JOEY_UPDATES = 800


def make_joeynmt(name: str, work: Path, data: dict[str, Path]) -> None:
    write_fixture(name, work, *run_joeynmt(name, work, data, JOEY_MODELS[name], {}, TINY))
    record_single(name, work)


def joint_vocabulary(data: dict[str, Path], path: Path, size: int) -> Path:
    """Both sides' training tokens, most frequent first (ties alphabetical, as Joey NMT's sort_and_cut), cut to
    ``size``: the one vocabulary that tied_embeddings needs (Joey builds one per language; its scripts/build_vocab.py,
    not in the wheel, writes a joint one)."""
    counts = collections.Counter(token for name in ("train.de", "train.en")
                                 for line in data[name].read_text(encoding="utf-8").splitlines()
                                 for token in line.split())
    tokens = sorted(counts, key=lambda token: (-counts[token], token))[:size]
    path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    return path


def single_joeynmt(fixture: Path, work: Path) -> list[str]:
    """joeynmt translate greedy, one sentence a batch, no max_output_length (Joey's 1.5 x source length), into
    work/SINGLE. The config is the fixture's, with its files and the testing options replaced."""
    config = json.loads(json.dumps(yaml_config(fixture / "translate_beam1.yaml")))
    config["model_dir"] = str(work / "model")  # joeynmt translate asserts it exists (and logs into it)
    (work / "model").mkdir(exist_ok=True)
    config["data"]["src"]["voc_file"] = str(fixture / "src_vocab.txt")
    config["data"]["trg"]["voc_file"] = str(fixture / "trg_vocab.txt")
    testing = {k: v for k, v in config["testing"].items() if k != "max_output_length"}
    config["testing"] = {**testing, "beam_size": 1, "batch_size": 1, "batch_type": "sentence",
                         "load_model": str(fixture / "model.ckpt")}
    path = work / SINGLE_CONFIG
    path.write_text(_yaml(config))
    cmd = [str(venv_python("joeynmt")), "-m", "joeynmt", "translate", str(path)]
    translate_stdin(cmd, fixture / "test.de", work / SINGLE, work, work / "log.txt")
    return cmd + ["<", str(fixture / "test.de"), ">", SINGLE]


def yaml_config(path: Path) -> dict:
    """A config this script wrote (_yaml: one JSON value a line) read back without a YAML parser."""
    return {key: json.loads(value) for key, value in
            (line.split(": ", 1) for line in path.read_text(encoding="utf-8").splitlines())}


def translate_stdin(cmd: list[str], source: Path, output: Path, cwd: Path, log: Path) -> None:
    """Run a translate command that reads ``source`` on stdin and prints hypotheses on stdout into ``output``."""
    with open(source, encoding="utf-8") as stdin, open(log, "a", encoding="utf-8") as f, \
            open(output, "w", encoding="utf-8") as hyps:
        f.write("$ " + " ".join(cmd) + f" < {source} > {output.name}\n")
        f.flush()
        done = subprocess.run(cmd, cwd=cwd, env=_env(), stdin=stdin, stdout=hyps, stderr=f)
    if done.returncode != 0:
        raise RuntimeError(f"command failed ({done.returncode}), see {log}: {' '.join(cmd)}")


def run_joeynmt(name: str, work: Path, data: dict[str, Path], model: dict, training: dict,
                scale: Scale) -> tuple[dict[str, Path], dict]:
    """Train with Joey NMT (``training`` overrides the fixtures' training options), release, translate greedy and
    beam: (the files to keep, their provenance)."""
    ensure_venv("joeynmt")
    log = work / "log.txt"
    model_dir = work / "model"
    # scheduling: joeynmt 2.3.0 passes verbose=False to ReduceLROnPlateau ("plateau"), which torch 2.13 no
    # longer accepts, and refuses no scheduler at all; ExponentialLR with gamma 1.0 is a constant rate.
    training = {"optimizer": "adam", "learning_rate": 0.002, "batch_size": 64, "batch_type": "sentence",
                "updates": JOEY_UPDATES, "epochs": 100, "validation_freq": JOEY_UPDATES,
                "logging_freq": 100, "eval_metrics": ["bleu"], "early_stopping_metric": "ppl",
                "keep_best_ckpts": 1, "overwrite": True, "shuffle": True, "clip_grad_norm": 1.0,
                "print_valid_sents": [], "num_workers": 0, "scheduling": "exponential", "decrease_factor": 1.0,
                **training}
    updates = training["updates"]

    def side(lang: str, limit: int) -> dict:
        return {"lang": lang, "level": "word", "lowercase": False, "normalize": False, "max_length": 60,
                "min_length": 1, "voc_limit": limit, "voc_min_freq": 1, "tokenizer_type": "none"}

    sides = {"src": side("de", scale.src_vocab), "trg": side("en", scale.tgt_vocab)}
    if model.get("tied_embeddings"):  # one vocabulary file for both sides
        joint = joint_vocabulary(data, work / "joint_vocab.txt", SHARED_VOCAB_SIZE)
        sides = {key: {**value, "voc_limit": SHARED_VOCAB_SIZE, "voc_file": str(joint)} for key, value in sides.items()}
    config = {
        "name": name, "joeynmt_version": "2.3.0", "model_dir": str(model_dir), "use_cuda": False,
        "fp16": False, "random_seed": SEED,
        "data": {"train": str(work.parent / "data" / "train"), "dev": str(work.parent / "data" / "valid"),
                 "test": str(work.parent / "data" / "test"), "dataset_type": "plain",
                 **sides},
        "training": training,
        "testing": {"beam_size": 1, "beam_alpha": -1, "batch_size": 16, "batch_type": "sentence",
                    **({} if scale.max_length is None else {"max_output_length": scale.max_length}),
                    "eval_metrics": ["bleu"], "n_best": 1},
        "model": model,
    }
    (work / "config.yaml").write_text(_yaml(config))
    python = str(venv_python("joeynmt"))
    commands = {"train": run([python, "-m", "joeynmt", "train", str(work / "config.yaml"), "--skip-test"],
                             work, log)}
    # Joey NMT has no release tool; the training checkpoint also holds optimizer, scheduler and data
    # iterator state (3x the weights). Release it as onmt_release_model does: the same keys, the
    # training-only states set to None. Joey's own translate then loads the released file.
    trained = model_dir / f"{updates}.ckpt"
    released = work / "model.ckpt"
    release_code = (
        "import sys, torch\n"
        "c = torch.load(sys.argv[1], map_location='cpu', weights_only=False)\n"
        "for k in ('optimizer_state', 'scheduler_state', 'scaler_state', 'train_iter_state'): c[k] = None\n"
        "torch.save(c, sys.argv[2])\n"
    )
    commands["release"] = run([python, "-c", release_code, str(trained), str(released)], work, log)
    for beam, out in ((1, "greedy.txt"), (scale.beam, "beam.txt")):
        test_config = json.loads(json.dumps(config))
        test_config["testing"]["beam_size"] = beam
        test_config["testing"]["load_model"] = str(released)
        # the vocab files written by training, so translate uses exactly the trained ids
        test_config["data"]["src"]["voc_file"] = str(model_dir / "src_vocab.txt")
        test_config["data"]["trg"]["voc_file"] = str(model_dir / "trg_vocab.txt")
        cfg_path = work / f"translate_beam{beam}.yaml"
        cfg_path.write_text(_yaml(test_config))
        # stdout, not `-o FILE`: joeynmt 2.3.0's translate with an output path fails after decoding
        # (prediction.py: save_hypothese(..., args.n_best): 'BaseConfig' object has no attribute 'n_best')
        cmd = [python, "-m", "joeynmt", "translate", str(cfg_path)]
        translate_stdin(cmd, data["test.de"], work / out, work, log)
        lines = (work / out).read_text(encoding="utf-8").splitlines()
        if len(lines) != scale.test_lines:
            raise RuntimeError(f"joeynmt translate printed {len(lines)} lines, expected {scale.test_lines}: "
                               f"{work / out}")
        commands["greedy" if beam == 1 else "beam"] = cmd + ["<", str(data["test.de"]), ">", out]
    versions = package_versions("joeynmt", ["joeynmt", "torch"])
    beam_config = f"translate_beam{scale.beam}.yaml"
    return ({
        "model.ckpt": released, "src_vocab.txt": model_dir / "src_vocab.txt",
        "trg_vocab.txt": model_dir / "trg_vocab.txt", "config.yaml": work / "config.yaml",
        "translate_beam1.yaml": work / "translate_beam1.yaml", beam_config: work / beam_config,
        "test.de": data["test.de"], "greedy.txt": work / "greedy.txt", "beam.txt": work / "beam.txt",
    }, {
        "toolkit": "joeynmt", "versions": versions, "options": config["model"],
        "training": config["training"], "testing": config["testing"],
        "commands": {k: shown(v, work) for k, v in commands.items()},
        "notes": f"model.ckpt is {updates}.ckpt with optimizer/scheduler/scaler/iterator states set to None "
                 "(the 'release' command); greedy/beam are `joeynmt translate` outputs (word level: "
                 "space-joined target tokens).",
    })


# ---------------------------------------------------------------- fairseq

FAIRSEQ_MODELS = {
    "fairseq_lstm": [
        "--arch", "lstm", "--encoder-embed-dim", "16", "--encoder-hidden-size", "32", "--encoder-layers", "1",
        "--encoder-bidirectional", "--decoder-embed-dim", "16", "--decoder-hidden-size", "32",
        "--decoder-layers", "1", "--decoder-out-embed-dim", "16", "--decoder-attention", "1",
        # at lr 0.002 (800 updates) and 0.005 (1,500) it stayed at the unigram (loss 7.06 bits, every output
        # "a a a ..."): a smaller rate for longer, like OpenNMT-py's LSTM, which left that plateau late
        "--dropout", "0.0", "--lr", "0.001", "--max-update", "3000",
    ],
    "fairseq_transformer": [
        "--arch", "transformer", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
        "--encoder-layers", "2", "--encoder-attention-heads", "2", "--decoder-embed-dim", "32",
        "--decoder-ffn-embed-dim", "64", "--decoder-layers", "2", "--decoder-attention-heads", "2",
        "--dropout", "0.1", "--lr", "0.002", "--share-decoder-input-output-embed",
    ],
}
# fairseq's usual translation setup: one joined dictionary, one token table for both sides and the output projection
# (--share-all-embeddings implies --share-decoder-input-output-embed); run_fairseq preprocesses with
# --joined-dictionary for it
FAIRSEQ_MODELS["fairseq_transformer_shared"] = [option for option in FAIRSEQ_MODELS["fairseq_transformer"]
                                                if option != "--share-decoder-input-output-embed"]
FAIRSEQ_MODELS["fairseq_transformer_shared"].append("--share-all-embeddings")

FAIRSEQ_UPDATES = 800


def make_fairseq(name: str, work: Path, data: dict[str, Path]) -> None:
    write_fixture(name, work, *run_fairseq(work, data, FAIRSEQ_MODELS[name], TINY))
    record_single(name, work)


def single_fairseq(fixture: Path, work: Path) -> list[str]:
    """fairseq-interactive greedy on the raw test.de, one sentence a batch, its default --max-len-a 0
    --max-len-b 200 (the fixture's folder holds the dictionaries it reads), into work/SINGLE."""
    raw = work / "interactive_single.txt"
    cmd = [venv_bin("fairseq", "fairseq-interactive"), str(fixture), "--path", str(fixture / "checkpoint.pt"),
           "--source-lang", "de", "--target-lang", "en", "--beam", "1", "--nbest", "1", "--batch-size", "1",
           "--buffer-size", "1", "--cpu", "--seed", str(SEED)]
    translate_stdin(cmd, fixture / "test.de", raw, work, work / "log.txt")
    # H-<id>\tscore\ttokens, in input order
    hyps = [line.split("\t")[2] if line.count("\t") == 2 else "" for line in raw.read_text(encoding="utf-8").splitlines()
            if line.startswith("H-")]
    (work / SINGLE).write_text("".join(hyp + "\n" for hyp in hyps), encoding="utf-8")
    return cmd + ["<", str(fixture / "test.de"), "|", "grep ^H- | cut -f3", ">", SINGLE]


def run_fairseq(work: Path, data: dict[str, Path], options: list[str], scale: Scale) -> tuple[dict[str, Path], dict]:
    """Preprocess and train with fairseq (``options`` name the model and may set --max-update, --lr, ...), then
    fairseq-generate greedy and beam: (the files to keep, their provenance)."""
    ensure_venv("fairseq")
    log = work / "log.txt"
    bin_dir = work / "data-bin"
    prefix = str(work.parent / "data")
    commands = {"preprocess": run([
        venv_bin("fairseq", "fairseq-preprocess"), "--source-lang", "de", "--target-lang", "en",
        "--trainpref", f"{prefix}/train", "--validpref", f"{prefix}/valid", "--testpref", f"{prefix}/test",
        "--destdir", str(bin_dir), "--workers", "1", "--seed", str(SEED),
        # one dictionary for both sides (written twice, dict.de.txt and dict.en.txt) where the model shares it
        *(["--joined-dictionary", "--nwordssrc", str(SHARED_VOCAB_SIZE)] if "--share-all-embeddings" in options else
          ["--nwordssrc", str(scale.src_vocab), "--nwordstgt", str(scale.tgt_vocab)])], work, log)}
    commands["train"] = run([
        venv_bin("fairseq", "fairseq-train"), str(bin_dir), *options,
        "--optimizer", "adam", "--clip-norm", "1.0", "--batch-size", "64",
        *([] if "--max-update" in options else ["--max-update", str(FAIRSEQ_UPDATES)]),
        "--max-epoch", "100", "--criterion", "cross_entropy", "--seed", str(SEED), "--cpu", "--num-workers", "0",
        "--save-dir", str(work / "ckpt"), "--no-epoch-checkpoints", "--no-save-optimizer-state",
        "--disable-validation", "--log-format", "simple", "--log-interval", "100"], work, log)
    checkpoint = work / "ckpt" / "checkpoint_last.pt"
    for beam, out in ((1, "greedy"), (scale.beam, "beam")):
        raw = work / f"generate_{out}.txt"
        cmd = [venv_bin("fairseq", "fairseq-generate"), str(bin_dir), "--path", str(checkpoint),
               # --required-batch-size-multiple 1: with the default 8, fairseq-generate silently drops a last
               # batch smaller than 8 (it translated 96 of the 100 sentences, the 4 longest missing)
               "--gen-subset", "test", "--beam", str(beam), "--nbest", "1", "--batch-size", "16",
               "--required-batch-size-multiple", "1",
               *_option("--max-len-a", None if scale.max_length is None else 0),
               *_option("--max-len-b", scale.max_length), "--cpu", "--seed", str(SEED),
               "--results-path", str(work / f"results_{out}")]
        commands[out] = run(cmd, work, log)
        # --results-path writes generate-test.txt; H-<id>\tscore\ttokens, in length-sorted order
        generated = (work / f"results_{out}" / "generate-test.txt").read_text(encoding="utf-8")
        shutil.copyfile(work / f"results_{out}" / "generate-test.txt", raw)
        hyps = {}
        for line in generated.splitlines():
            if line.startswith("H-"):
                ident, _score, tokens = line.split("\t")
                hyps[int(ident[2:])] = tokens
        if sorted(hyps) != list(range(scale.test_lines)):
            raise RuntimeError(f"fairseq-generate returned {len(hyps)} of {scale.test_lines} hypotheses, see {raw}")
        (work / f"{out}.txt").write_text("".join(hyps[i] + "\n" for i in range(scale.test_lines)), encoding="utf-8")
    versions = package_versions("fairseq", ["fairseq", "fairseq-fixed", "torch", "omegaconf", "hydra-core"])
    return ({
        "checkpoint.pt": checkpoint, "dict.de.txt": bin_dir / "dict.de.txt", "dict.en.txt": bin_dir / "dict.en.txt",
        "test.de": data["test.de"], "greedy.txt": work / "greedy.txt", "beam.txt": work / "beam.txt",
        "generate_greedy.txt": work / "generate_greedy.txt", "generate_beam.txt": work / "generate_beam.txt",
    }, {
        "toolkit": "fairseq", "versions": versions, "options": options,
        "commands": {k: shown(v, work) for k, v in commands.items()},
        "notes": "checkpoint.pt is checkpoint_last.pt as fairseq-train saved it with --no-save-optimizer-state; "
                 "greedy/beam are the H- lines of fairseq-generate (no --remove-bpe, no detokenizer) put back "
                 "in test order; generate_*.txt are the raw fairseq-generate outputs (S/T/H/D/P lines).",
    })


# ---------------------------------------------------------------- registry

FIXTURES = {
    **{name: make_opennmt for name in ONMT_MODELS},
    **{name: make_joeynmt for name in JOEY_MODELS},
    **{name: make_fairseq for name in FAIRSEQ_MODELS},
}
SINGLE_RUNNERS = {"opennmt": single_opennmt, "joeynmt": single_joeynmt, "fairseq": single_fairseq}


def record_single(name: str, work: Path) -> None:
    """Add SINGLE (greedy, one sentence a batch, the toolkit's default length rule) to the fixture ``name``, from
    its stored checkpoint, and its command to provenance.json."""
    toolkit = name.split("_", 1)[0]
    ensure_venv(toolkit)
    fixture = OUT / name
    command = SINGLE_RUNNERS[toolkit](fixture, work)
    lines = (work / SINGLE).read_text(encoding="utf-8").splitlines()
    if len(lines) != TEST_LINES:
        raise RuntimeError(f"{name}: {len(lines)} lines in {work / SINGLE}, expected {TEST_LINES}")
    kept = f"tests/fixtures/toolkits/{name}"
    shutil.copyfile(work / SINGLE, fixture / SINGLE)
    if (work / SINGLE_CONFIG).is_file():
        text = (work / SINGLE_CONFIG).read_text(encoding="utf-8")
        (fixture / SINGLE_CONFIG).write_text(text.replace(str(fixture), kept).replace(str(work), "$WORK"),
                                             encoding="utf-8")
    provenance = json.loads((fixture / "provenance.json").read_text())
    provenance["commands"]["greedy_single"] = shown(command, work).replace(str(fixture), kept)
    provenance["greedy_single"] = ("greedy, one sentence a batch, the toolkit's default length rule (no cap passed): "
                                   "each line's cap depends on that line only")
    provenance["files"] = sorted(set(provenance["files"]) | {SINGLE} | ({SINGLE_CONFIG} if toolkit == "joeynmt" else set()))
    (fixture / "provenance.json").write_text(json.dumps(provenance, indent=2, ensure_ascii=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="fixture names to make (default: all)")
    parser.add_argument("--list", action="store_true", help="list the fixture names and stop")
    parser.add_argument("--keep-work", action="store_true", help="keep the temporary work folders")
    parser.add_argument("--single-only", action="store_true",
                        help=f"only (re)record {SINGLE} from each named fixture's stored checkpoint (no training)")
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
    data = None if args.single_only else make_slice(data_dir)
    failed = {}
    for name in names:
        work = root / name
        work.mkdir()
        print(f"[{name}] working in {work}", flush=True)
        try:
            if args.single_only:
                record_single(name, work)
            else:
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
