"""OpenNMT-py 3.5.1: training, releasing and translating the fixtures' models (make.py)."""

from __future__ import annotations

from pathlib import Path

from common import (
    SEED,
    SHARED_VOCAB_SIZE,
    SINGLE,
    SINGLE_RUNNERS,
    SPM_MODEL,
    TINY,
    Scale,
    ensure_venv,
    make_spm_data,
    option,
    package_versions,
    record_single,
    run,
    shown,
    spm_fixture,
    test_source,
    venv_bin,
    write_fixture,
    yaml_text,
)

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



def make_opennmt(name: str, work: Path, data: dict[str, Path]) -> None:
    write_fixture(name, work, *run_opennmt(work, data, {**ONMT_COMMON, **ONMT_MODELS[name]}, TINY))
    record_single(name, work)


def single_opennmt(fixture: Path, work: Path) -> list[str]:
    """onmt_translate greedy, -batch_size 1 and its default -max_length / -max_length_ratio, into work/SINGLE; a
    SentencePiece fixture's raw sources through -transforms sentencepiece with its model."""
    spm = fixture / SPM_MODEL
    transform = ["-transforms", "sentencepiece", "-src_subword_model", str(spm), "-tgt_subword_model",
                 str(spm)] if spm.is_file() else []
    return run([venv_bin("opennmt", "onmt_translate"), "-model", str(fixture / "model.pt"), "-src",
                str(test_source(fixture)), "-output", str(work / SINGLE), "-beam_size", "1", "-batch_size", "1",
                "-seed", str(SEED), *transform], work, work / "log.txt")


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
    (work / "config.yaml").write_text(yaml_text(config))
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
                              "-beam_size", str(beam), *option("-max_length", scale.max_length),
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


def make_opennmt_spm(name: str, work: Path, data: dict[str, Path]) -> None:
    """OpenNMT-py's Transformer with -transforms sentencepiece: onmt_build_vocab and onmt_train segment the raw
    slice on the fly; onmt_translate segments the raw test sources and joins the output pieces back."""
    spm = make_spm_data(work / "raw")
    options = {**ONMT_COMMON, **ONMT_MODELS["opennmt_transformer"], "transforms": ["sentencepiece"],
               "src_subword_model": str(spm["model"]), "tgt_subword_model": str(spm["model"])}
    files, provenance = run_opennmt(work, spm, options, TINY)
    spm_fixture(name, work, files, provenance, spm, ("model.pt", "vocab.src", "vocab.tgt", "config.yaml"),
                "opennmt", ["opennmt-py", "torch", "sentencepiece"])


SINGLE_RUNNERS["opennmt"] = single_opennmt
