"""fairseq 0.12 (fairseq-fixed 0.12.3.1): preprocessing, training and translating the fixtures' models (make.py)."""

from __future__ import annotations

import shutil
import subprocess
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
    toolkit_env,
    translate_stdin,
    venv_bin,
    venv_python,
    write_fixture,
    write_raw_slice,
)

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
    spm, codes = fixture / SPM_MODEL, fixture / BPE_CODES
    bpe = ["--bpe", "sentencepiece", "--sentencepiece-model", str(spm)] if spm.is_file() else []
    if codes.is_file():  # fairseq's IWSLT/WMT recipes: Moses, then subword-nmt BPE, undone on the output
        bpe = ["--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", str(codes)]
    cmd = [venv_bin("fairseq", "fairseq-interactive"), str(fixture), "--path", str(fixture / "checkpoint.pt"),
           "--source-lang", "de", "--target-lang", "en", "--beam", "1", "--nbest", "1", "--batch-size", "1",
           "--buffer-size", "1", "--cpu", "--seed", str(SEED), *bpe]
    translate_stdin(cmd, test_source(fixture), raw, work, work / "log.txt")
    # H-<id>\tscore\ttokens, in input order; D- the same after --bpe's decoding (the raw-text output)
    kind = "D-" if bpe else "H-"
    hyps = [line.split("\t")[2] if line.count("\t") == 2 else "" for line in raw.read_text(encoding="utf-8").splitlines()
            if line.startswith(kind)]
    (work / SINGLE).write_text("".join(hyp + "\n" for hyp in hyps), encoding="utf-8")
    return cmd + ["<", str(test_source(fixture)), "|", f"grep ^{kind} | cut -f3", ">", SINGLE]


BPE_CODES = "codes.bpe"  # a subword-nmt fixture's BPE codes
BPE_MERGES = 2000  # merges learned on both sides of the Moses-tokenized slice


def make_moses_bpe_data(folder: Path) -> dict:
    """The raw slice in ``folder``, and the same text as fairseq's ``--tokenizer moses --bpe subword_nmt`` reads it:
    sacremoses' MosesTokenizer(lang).tokenize(line, aggressive_dash_splits=True, escape=True, return_str=True)
    (fairseq's defaults), then subword-nmt BPE codes learned on both sides (BPE_MERGES merges) applied with the
    "@@" separator, in ``folder``/processed. Returns {"raw": paths, "processed": paths, "codes": path,
    "command": what was run}."""
    raw = write_raw_slice(folder)
    (folder / "processed").mkdir()
    ensure_venv("fairseq")
    code = ("import sys, io\n"
            "from sacremoses import MosesTokenizer\n"
            "from subword_nmt.learn_bpe import learn_bpe\n"
            "from subword_nmt.apply_bpe import BPE\n"
            "folder, merges = sys.argv[1], int(sys.argv[2])\n"
            "names = [f'{s}.{l}' for s in ('train', 'valid', 'test') for l in ('de', 'en')]\n"
            "tok = {l: MosesTokenizer(l) for l in ('de', 'en')}\n"
            "text = {n: [tok[n[-2:]].tokenize(x, aggressive_dash_splits=True, escape=True, return_str=True)"
            " for x in open(f'{folder}/{n}', encoding='utf-8').read().splitlines()] for n in names}\n"
            "joint = io.StringIO('\\n'.join(text['train.de'] + text['train.en']) + '\\n')\n"
            "with open(f'{folder}/codes.bpe', 'w', encoding='utf-8') as out:\n"
            "    learn_bpe(joint, out, merges)\n"
            "bpe = BPE(open(f'{folder}/codes.bpe', encoding='utf-8'), separator='@@')\n"
            "for n in names:\n"
            "    open(f'{folder}/processed/{n}', 'w', encoding='utf-8').write("
            "''.join(bpe.process_line(x) + '\\n' for x in text[n]))\n")
    subprocess.run([str(venv_python("fairseq")), "-c", code, str(folder), str(BPE_MERGES)], check=True,
                   env=toolkit_env())
    processed = {key: folder / "processed" / path.name for key, path in raw.items()}
    command = (f"sacremoses MosesTokenizer(lang).tokenize(line, aggressive_dash_splits=True, escape=True) of every raw "
               f"line, subword_nmt.learn_bpe on both training sides ({BPE_MERGES} merges) -> {BPE_CODES}, "
               "apply_bpe.BPE(codes, separator='@@').process_line (make.py make_moses_bpe_data, the fairseq "
               "environment's sacremoses 0.2.0 and subword-nmt 0.3.8)")
    return {"raw": raw, "processed": processed, "codes": folder / "codes.bpe", "command": command}


def run_fairseq(work: Path, data: dict[str, Path], options: list[str], scale: Scale,
                preprocess: list[str] | tuple[str, ...] = ()) -> tuple[dict[str, Path], dict]:
    """Preprocess (with the extra ``preprocess`` options, e.g. a --thresholdsrc) and train with fairseq (``options``
    name the model and may set --max-update, --lr, ...), then fairseq-generate greedy and beam: (the files to keep,
    their provenance)."""
    ensure_venv("fairseq")
    log = work / "log.txt"
    bin_dir = work / "data-bin"
    prefix = str(data["train.de"].parent)
    commands = {"preprocess": run([
        venv_bin("fairseq", "fairseq-preprocess"), "--source-lang", "de", "--target-lang", "en",
        "--trainpref", f"{prefix}/train", "--validpref", f"{prefix}/valid", "--testpref", f"{prefix}/test",
        "--destdir", str(bin_dir), "--workers", "1", "--seed", str(SEED),
        # one dictionary for both sides (written twice, dict.de.txt and dict.en.txt) where the model shares it
        *(["--joined-dictionary", "--nwordssrc", str(SHARED_VOCAB_SIZE)] if "--share-all-embeddings" in options else
          ["--nwordssrc", str(scale.src_vocab), "--nwordstgt", str(scale.tgt_vocab)]), *preprocess], work, log)}
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
               *option("--max-len-a", None if scale.max_length is None else 0),
               *option("--max-len-b", scale.max_length), "--cpu", "--seed", str(SEED),
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


def make_fairseq_spm(name: str, work: Path, data: dict[str, Path]) -> None:
    """fairseq's Transformer on text segmented by sentencepiece beforehand (fairseq-preprocess reads pieces),
    trained with --bpe sentencepiece recorded; fairseq-interactive --bpe sentencepiece segments the raw test
    sources and joins the output pieces back."""
    spm = make_spm_data(work / "raw", segmented=True)
    segmented = {key: path.parent / "seg" / path.name for key, path in spm.items() if key != "model"}
    options = [*FAIRSEQ_MODELS["fairseq_transformer"], "--bpe", "sentencepiece", "--sentencepiece-model",
               str(spm["model"])]
    files, provenance = run_fairseq(work, segmented, options, TINY)
    spm_fixture(name, work, files, provenance, spm, ("checkpoint.pt", "dict.de.txt", "dict.en.txt"),
                "fairseq", ["fairseq-fixed", "torch", "sentencepiece"])


SINGLE_RUNNERS["fairseq"] = single_fairseq
