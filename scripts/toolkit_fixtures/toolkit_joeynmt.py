"""Joey NMT 2.3.0: training, releasing and translating the fixtures' models (make.py)."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from common import (
    SEED,
    SHARED_VOCAB_SIZE,
    SINGLE,
    SINGLE_CONFIG,
    SINGLE_RUNNERS,
    SPM_MODEL,
    TINY,
    Scale,
    ensure_venv,
    make_spm_data,
    package_versions,
    record_single,
    run,
    shown,
    spm_fixture,
    test_source,
    translate_stdin,
    venv_python,
    write_fixture,
    yaml_config,
    yaml_text,
)

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
    for side in ("src", "trg"):  # a SentencePiece fixture's model, where the config named it in $WORK
        if "model_file" in config["data"][side].get("tokenizer_cfg", {}):
            config["data"][side]["tokenizer_cfg"]["model_file"] = str(fixture / SPM_MODEL)
    testing = {k: v for k, v in config["testing"].items() if k != "max_output_length"}
    config["testing"] = {**testing, "beam_size": 1, "batch_size": 1, "batch_type": "sentence",
                         "load_model": str(fixture / "model.ckpt")}
    path = work / SINGLE_CONFIG
    path.write_text(yaml_text(config))
    cmd = [str(venv_python("joeynmt")), "-m", "joeynmt", "translate", str(path)]
    translate_stdin(cmd, test_source(fixture), work / SINGLE, work, work / "log.txt")
    return cmd + ["<", str(test_source(fixture)), ">", SINGLE]



def run_joeynmt(name: str, work: Path, data: dict[str, Path], model: dict, training: dict,
                scale: Scale, text: dict | None = None) -> tuple[dict[str, Path], dict]:
    """Train with Joey NMT (``training`` overrides the fixtures' training options; ``text`` the data options of
    both sides, e.g. a tokenizer), release, translate greedy and beam: (the files to keep, their provenance)."""
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
                "min_length": 1, "voc_limit": limit, "voc_min_freq": 1, "tokenizer_type": "none", **(text or {})}

    sides = {"src": side("de", scale.src_vocab), "trg": side("en", scale.tgt_vocab)}
    if model.get("tied_embeddings"):  # one vocabulary file for both sides
        joint = joint_vocabulary(data, work / "joint_vocab.txt", SHARED_VOCAB_SIZE)
        sides = {key: {**value, "voc_limit": SHARED_VOCAB_SIZE, "voc_file": str(joint)} for key, value in sides.items()}
    config = {
        "name": name, "joeynmt_version": "2.3.0", "model_dir": str(model_dir), "use_cuda": False,
        "fp16": False, "random_seed": SEED,
        "data": {"train": str(data["train.de"].parent / "train"), "dev": str(data["train.de"].parent / "valid"),
                 "test": str(data["train.de"].parent / "test"), "dataset_type": "plain",
                 **sides},
        "training": training,
        "testing": {"beam_size": 1, "beam_alpha": -1, "batch_size": 16, "batch_type": "sentence",
                    **({} if scale.max_length is None else {"max_output_length": scale.max_length}),
                    "eval_metrics": ["bleu"], "n_best": 1},
        "model": model,
    }
    (work / "config.yaml").write_text(yaml_text(config))
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
        cfg_path.write_text(yaml_text(test_config))
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


def make_joeynmt_spm(name: str, work: Path, data: dict[str, Path]) -> None:
    """Joey NMT's Transformer with level bpe, tokenizer_type sentencepiece: Joey segments the raw slice itself,
    builds its vocabularies from the pieces, and segments and joins at translation time."""
    spm = make_spm_data(work / "raw")
    text = {"level": "bpe", "tokenizer_type": "sentencepiece", "tokenizer_cfg": {"model_file": str(spm["model"])},
            "max_length": 100}
    files, provenance = run_joeynmt(name, work, spm, JOEY_MODELS["joeynmt_transformer"], {}, TINY, text)
    spm_fixture(name, work, files, provenance, spm, ("model.ckpt", "src_vocab.txt", "trg_vocab.txt", "config.yaml",
                                                     "translate_beam1.yaml"),
                "joeynmt", ["joeynmt", "torch", "sentencepiece"])


SINGLE_RUNNERS["joeynmt"] = single_joeynmt
