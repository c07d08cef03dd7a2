#!/usr/bin/env python3
"""One real-size Transformer per toolkit, trained on the whole of Multi30k de->en, and its BLEU before and after
conversion (issue 27): the table in docs/importers.md.

Each toolkit trains a Transformer of hf_s2s's reference size (d_model 256, 3 + 3 layers, 8 heads, FFN 512,
dropout 0.1: ``TransformerSeq2SeqConfig()``'s defaults and the README's ``transformer_small`` recipe) for
TRAIN_UPDATES updates of 64 sentences (3 epochs of the 29,000 training pairs), on the same word-level data,
in its own virtual environment (make.py's). Then, on the 1,000 sentences of test_2016_flickr:

1. the toolkit's own translate command, greedy and beam 5, otherwise with its defaults;
2. ``hf-s2s convert`` of the toolkit's checkpoint, and ``hf-s2s translate`` of the converted folder, greedy and
   beam 5, otherwise with the folder's generation config (what a user gets);
3. BLEU of both against the reference, and how many of the 1,000 lines are the same tokens.

Run with the Python that has hf_s2s installed (it runs ``python -m hf_s2s.cli``); the toolkits run in
.toolkit_venvs/. Work goes to runs/toolkit_real_size/<toolkit>/ (git-ignored), each toolkit's figures to its
result.json there; the table of every toolkit measured so far is printed at the end. Toolkits given to separate
processes (--only) run side by side.

    python scripts/toolkit_fixtures/real_size.py                      # all three, one after another
    python scripts/toolkit_fixtures/real_size.py --only joeynmt &     # or side by side: 39 min for the
    python scripts/toolkit_fixtures/real_size.py --only opennmt-py &  # three on 2 cores
    python scripts/toolkit_fixtures/real_size.py --only fairseq
    python scripts/toolkit_fixtures/real_size.py --only fairseq --no-train  # score the last run again
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (make.py's virtual environments, slice and running)
import toolkit_fairseq  # noqa: E402  (make.py's toolkit runners)
import toolkit_joeynmt  # noqa: E402
import toolkit_opennmt  # noqa: E402

WORK = common.REPO / "runs" / "toolkit_real_size"
TEST_LINES = 1000  # the whole of test_2016_flickr
# Word-level vocabularies of 8,000 words a side (the recipes' vocab_size); each toolkit counts its own
REAL = common.Scale(src_vocab=8000, tgt_vocab=8000, test_lines=TEST_LINES, max_length=None)
TRAIN_UPDATES = 1362  # 3 epochs of ceil(29,000 / 64) = 454 batches of 64 sentences
WARMUP = 300  # the transformer_small recipe's warmup_steps
PEAK_LR = 0.001  # and its learning_rate, reached after WARMUP updates, then decayed as 1/sqrt(update)
D_MODEL, LAYERS, HEADS, FFN, DROPOUT = 256, 3, 8, 512, 0.1

OPENNMT = {
    **toolkit_opennmt.ONMT_COMMON,
    "encoder_type": "transformer", "decoder_type": "transformer", "layers": LAYERS,
    "word_vec_size": D_MODEL, "hidden_size": D_MODEL, "heads": HEADS, "transformer_ff": FFN,
    "position_encoding": True, "dropout": [DROPOUT], "attention_dropout": [DROPOUT],
    "param_init": 0.0, "param_init_glorot": True, "adam_beta2": 0.98,
    # noam: learning_rate x d^-0.5 x min(step^-0.5, step x warmup^-1.5), whose peak at step WARMUP is PEAK_LR
    "decay_method": "noam", "warmup_steps": WARMUP, "learning_rate": PEAK_LR * (D_MODEL * WARMUP) ** 0.5,
    "train_steps": TRAIN_UPDATES, "save_checkpoint_steps": TRAIN_UPDATES,
}

_JOEY_SIDE = {"type": "transformer", "num_layers": LAYERS, "num_heads": HEADS, "hidden_size": D_MODEL,
              "ff_size": FFN, "embeddings": {"embedding_dim": D_MODEL, "scale": True}, "dropout": DROPOUT,
              "layer_norm": "pre", "activation": "relu"}
JOEY_MODEL = {**{k: v for k, v in toolkit_joeynmt.JOEY_MODELS["joeynmt_transformer"].items() if k not in ("encoder", "decoder")},
              "encoder": _JOEY_SIDE, "decoder": _JOEY_SIDE}
# Joey NMT validates (and saves) every validation_freq updates, which logging_freq must divide
JOEY_TRAINING = {"updates": TRAIN_UPDATES, "validation_freq": TRAIN_UPDATES, "logging_freq": TRAIN_UPDATES // 6,
                 "scheduling": "warmupinversesquareroot",
                 "learning_rate": PEAK_LR, "learning_rate_warmup": WARMUP,
                 "adam_betas": [0.9, 0.98]}

FAIRSEQ = [
    "--arch", "transformer", "--encoder-embed-dim", str(D_MODEL), "--encoder-ffn-embed-dim", str(FFN),
    "--encoder-layers", str(LAYERS), "--encoder-attention-heads", str(HEADS), "--decoder-embed-dim", str(D_MODEL),
    "--decoder-ffn-embed-dim", str(FFN), "--decoder-layers", str(LAYERS), "--decoder-attention-heads", str(HEADS),
    "--dropout", str(DROPOUT), "--share-decoder-input-output-embed", "--adam-betas", "(0.9, 0.98)",
    "--lr", str(PEAK_LR), "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(WARMUP),
    "--max-update", str(TRAIN_UPDATES),
]


def convert_arguments(toolkit: str, work: Path) -> list[str]:
    """``hf-s2s convert``'s arguments for the checkpoint the toolkit's run left in ``work``."""
    if toolkit == "opennmt-py":  # the vocabularies are in the released checkpoint
        return [str(work / "model.pt")]
    if toolkit == "joeynmt":  # the config its beam search ran with (testing.beam_size, beam_alpha), its vocabularies
        return [str(work / "model.ckpt"), "--config", str(work / f"translate_beam{REAL.beam}.yaml"),
                "--source-vocab", str(work / "model" / "src_vocab.txt"),
                "--target-vocab", str(work / "model" / "trg_vocab.txt")]
    return [str(work / "ckpt" / "checkpoint_last.pt"), "--source-vocab", str(work / "data-bin" / "dict.de.txt"),
            "--target-vocab", str(work / "data-bin" / "dict.en.txt")]


TOOLKITS = {  # --from name: (make.py's virtual environment, its training and translating run)
    "opennmt-py": ("opennmt", lambda work, data: toolkit_opennmt.run_opennmt(work, data, OPENNMT, REAL)),
    "joeynmt": ("joeynmt", lambda work, data: toolkit_joeynmt.run_joeynmt("joeynmt_real_size", work, data, JOEY_MODEL,
                                                              JOEY_TRAINING, REAL)),
    "fairseq": ("fairseq", lambda work, data: toolkit_fairseq.run_fairseq(work, data, FAIRSEQ, REAL)),
}


def write_data(folder: Path) -> dict[str, Path]:
    """The whole corpus, tokenized as the fixtures are: {train,valid,test}.{de,en}. valid is the first 100
    lines of val (Joey NMT validates once, at the end; the others not at all)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, stem, count in (("train", "train", None), ("valid", "val", 100), ("test", "test_2016_flickr", None)):
        for lang in ("de", "en"):
            path = folder / f"{split}.{lang}"
            path.write_text("\n".join(common.read_lines(f"{stem}.{lang}.gz", count)) + "\n", encoding="utf-8")
            paths[f"{split}.{lang}"] = path
    return paths


def hf_s2s(*args: str, stdout=None) -> None:
    subprocess.run([sys.executable, "-m", "hf_s2s.cli", *args], check=True, stdout=stdout)


def read_tokens(path: Path) -> list[list[str]]:
    """One token list per line, ``<unk>`` left out: hf-s2s translate decodes with skip_special_tokens (as
    transformers' tokenizers do), which drops it, while the toolkits print it. Both sides are scored without it."""
    return [[t for t in line.split() if t != "<unk>"] for line in path.read_text(encoding="utf-8").splitlines()]


def bleu(hypotheses: list[list[str]], reference: Path) -> float:
    """sacreBLEU (13a) against the reference, both lowercased and tokenized as the data is (hence force=True:
    sacreBLEU warns about tokenized input)."""
    import sacrebleu

    refs = reference.read_text(encoding="utf-8").splitlines()
    if len(hypotheses) != len(refs):
        raise RuntimeError(f"{len(hypotheses)} hypotheses for {len(refs)} references")
    return round(sacrebleu.corpus_bleu([" ".join(h) for h in hypotheses], [refs], force=True).score, 2)


def compare(toolkit: Path, converted: Path, reference: Path) -> dict:
    """BLEU of both outputs, the lines of equal tokens, and of the others those where one output is the other
    cut short (a length cap that differs, the rest of the tokens equal)."""
    ours, theirs = read_tokens(converted), read_tokens(toolkit)
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    cut = sum(a != b and (a[:len(b)] == b or b[:len(a)] == a) for a, b in zip(ours, theirs, strict=True))
    return {"toolkit_bleu": bleu(theirs, reference), "converted_bleu": bleu(ours, reference),
            "same_lines": same, "cut_short_lines": cut, "lines": len(ours)}


def measure(name: str, data: dict[str, Path], *, train: bool = True) -> dict:
    """Train (unless ``train`` is False: the last run's checkpoint and outputs are reused), convert, translate, score.
    """
    venv, run = TOOLKITS[name]
    work = WORK / venv / "run"
    result = WORK / venv / "result.json"
    row = {"toolkit": name}
    if train or not result.exists():
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        result.unlink(missing_ok=True)
        started = time.time()
        run(work, data)
        row["train_and_toolkit_translate_s"] = round(time.time() - started)
    else:
        row["train_and_toolkit_translate_s"] = json.loads(result.read_text())["train_and_toolkit_translate_s"]
    folder = work / "converted"
    hf_s2s("convert", "--from", name, *convert_arguments(name, work), str(folder), "--overwrite")
    package = {"opennmt": "opennmt-py", "joeynmt": "joeynmt", "fairseq": "fairseq-fixed"}[venv]
    row["versions"] = common.package_versions(venv, [package, "torch"])
    for beams, toolkit_out in ((1, "greedy.txt"), (REAL.beam, "beam.txt")):
        ours = work / f"converted_{toolkit_out}"
        with open(ours, "w", encoding="utf-8") as out:
            hf_s2s("translate", str(folder), "--input", str(data["test.de"]), "--beams", str(beams), stdout=out)
        row["greedy" if beams == 1 else f"beam{beams}"] = compare(work / toolkit_out, ours, data["test.en"])
    result.write_text(json.dumps(row, indent=2) + "\n")
    return row


def table(rows: list[dict]) -> str:
    lines = ["| toolkit | greedy BLEU: toolkit / converted | equal lines (+ cut short) "
             "| beam 5 BLEU: toolkit / converted | equal lines (+ cut short) |", "| --- | --- | --- | --- | --- |"]
    for row in rows:
        cells = [row["toolkit"]]
        for key in ("greedy", f"beam{REAL.beam}"):
            m = row[key]
            cells += [f"{m['toolkit_bleu']} / {m['converted_bleu']}",
                      f"{m['same_lines']}/{m['lines']} (+{m['cut_short_lines']})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=sorted(TOOLKITS), help="toolkits to run (default: all)")
    parser.add_argument("--no-train", action="store_true",
                        help="reuse each toolkit's last run (checkpoint and own translations): convert and score again")
    args = parser.parse_args()
    for name in args.only or list(TOOLKITS):
        measure(name, write_data(WORK / TOOLKITS[name][0] / "data"), train=not args.no_train)
    results = [WORK / venv / "result.json" for venv, _ in TOOLKITS.values()]
    print(table([json.loads(path.read_text()) for path in results if path.exists()]))


if __name__ == "__main__":
    main()
