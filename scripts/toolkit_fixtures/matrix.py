"""The matrix of real toolkit settings (issue 45): per toolkit, tiny models that each vary one or two settings users
change from the toolkit's base fixture (width and heads, encoder and decoder depths, norm placement, position
encodings, shared / tied tables, vocabularies cut by frequency so that subword pieces are missing, SentencePiece
unigram and BPE, subword-nmt BPE after Moses), trained by the toolkit itself. Each cell keeps what converting needs
and the toolkit's own raw-text greedy output, one sentence a batch (greedy_single.txt), under
tests/fixtures/toolkits/matrix/<cell>/; tests/test_importers_matrix.py converts every cell and compares.

The width-512 cells (WIDE) are made like the others but their checkpoints are tens of MB (three d x d attention
projections alone are 3 MB a layer in float32, and OpenNMT-py and Joey NMT add two 5,000 x 512 position tables,
20 MB): they are written under runs/toolkit_matrix/ (git-ignored, common.WIDE_OUT), and the matrix test includes them
where they exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from common import MATRIX_NAMES, TINY, WIDE_NAMES, make_spm_data, record_single, spm_fixture, write_fixture
from toolkit_fairseq import FAIRSEQ_MODELS, FAIRSEQ_UPDATES, make_moses_bpe_data, run_fairseq
from toolkit_joeynmt import JOEY_MODELS, run_joeynmt
from toolkit_opennmt import ONMT_COMMON, ONMT_MODELS, run_opennmt

UPDATES = 150  # training steps of a cell: few (the 2 CPU cores were shared with other work), outputs still vary
# the Moses + subword-nmt cell's dictionaries keep every piece (fairseq-preprocess's default -1): cut to TINY's 1,000
# target words, the English pieces outside them were <unk> in training and the model generated <unk> on 41 of the 100
# test lines, text that fairseq prints and transformers' decode(skip_special_tokens=True) drops (docs/importers.md)
EVERY_PIECE = replace(TINY, src_vocab=-1, tgt_vocab=-1)


@dataclass(frozen=True)
class Cell:
    """One matrix cell: ``toolkit``'s base model with ``changes``; ``text`` is how the toolkit reads text ("word":
    the tokenized slice; "spm" / "spm_bpe": raw text through its SentencePiece unigram / BPE step; "moses_bpe": raw
    text through Moses and subword-nmt BPE); ``setting`` says in words what the cell varies (the docs table);
    ``updates``: its training steps."""

    toolkit: str
    setting: str
    changes: dict | list = field(default_factory=dict)
    text: str = "word"
    wide: bool = False
    updates: int = UPDATES

    def make(self, name: str, work: Path, data: dict[str, Path]) -> None:
        MAKERS[self.toolkit](name, self, work, data)


def transformer_width(width: int, heads: int, ffn: int) -> dict:
    return {"word_vec_size": width, "hidden_size": width, "heads": heads, "transformer_ff": ffn}


def joey_sides(base: dict, **changes) -> dict:
    """Joey NMT's base Transformer with ``changes`` applied to both sides ("embedding_dim" inside "embeddings")."""
    model = dict(base)
    for side in ("encoder", "decoder"):
        options = dict(base[side])
        embeddings = dict(options["embeddings"])
        for key, value in changes.items():
            if key in ("embedding_dim", "scale"):
                embeddings[key] = value
            else:
                options[key] = value
        model[side] = {**options, "embeddings": embeddings}
    return model


CELLS: dict[str, Cell] = {
    # OpenNMT-py: the base is opennmt_transformer (2+2 layers, d 32, 2 heads, SinusoidalInterleaved, pre-norm)
    "opennmt_w64_depths": Cell("opennmt", "d 64, 4 heads, ffn 128, 3 encoder + 1 decoder layers",
                               {**transformer_width(64, 4, 128), "enc_layers": 3, "dec_layers": 1}),
    "opennmt_concat_gelu_biases": Cell("opennmt", "SinusoidalConcat, gelu, -add_qkvbias -add_ffnbias",
                                       {"position_encoding_type": "SinusoidalConcat", "pos_ffn_activation_fn": "gelu",
                                        "add_qkvbias": True, "add_ffnbias": True}),
    "opennmt_shared_spm_minfreq": Cell("opennmt", "-share_vocab -share_embeddings -share_decoder_embeddings, "
                                       "SentencePiece unigram, vocabulary from the corpus with min frequency 3",
                                       {"share_vocab": True, "share_embeddings": True,
                                        "share_decoder_embeddings": True, "src_words_min_frequency": 3,
                                        "tgt_words_min_frequency": 3}, text="spm"),
    "opennmt_spm_bpe": Cell("opennmt", "SentencePiece BPE, separate vocabularies", text="spm_bpe"),
    "opennmt_spm_minfreq": Cell("opennmt", "SentencePiece unigram, separate vocabularies from the corpus with min "
                                "frequency 3", {"src_words_min_frequency": 3, "tgt_words_min_frequency": 3},
                                text="spm"),
    "opennmt_w16_depths_tied": Cell("opennmt", "d 16, 4 heads, ffn 32, 1 encoder + 3 decoder layers, "
                                    "-share_decoder_embeddings",
                                    {**transformer_width(16, 4, 32), "enc_layers": 1, "dec_layers": 3,
                                     "share_decoder_embeddings": True}),
    "opennmt_w16_shared_concat_minfreq": Cell("opennmt", "d 16, ffn 64, SinusoidalConcat, -share_vocab "
                                              "-share_embeddings, words with min frequency 2",
                                              {**transformer_width(16, 2, 64), "position_encoding_type":
                                               "SinusoidalConcat", "share_vocab": True, "share_embeddings": True,
                                               "src_words_min_frequency": 2, "tgt_words_min_frequency": 2}),
    # Joey NMT: the base is joeynmt_transformer (2+2 layers, d 32, pre-norm, scaled embeddings, tied softmax)
    "joeynmt_w64_post_depths": Cell("joeynmt", "d 64, 4 heads, ffn 128, post-norm, unscaled embeddings, 3 encoder + "
                                    "1 decoder layers",
                                    {"width": 64, "num_heads": 4, "ff_size": 128, "layer_norm": "post",
                                     "scale": False, "encoder_layers": 3, "decoder_layers": 1}),
    "joeynmt_spm_minfreq": Cell("joeynmt", "SentencePiece unigram, vocabularies with min frequency 3 "
                                "(SetVocabulary restricts the model)", {"voc_min_freq": 3}, text="spm"),
    "joeynmt_w16_post_minfreq": Cell("joeynmt", "d 16, 4 heads, ffn 32, post-norm, word vocabularies with min "
                                     "frequency 3", {"width": 16, "num_heads": 4, "ff_size": 32,
                                                     "layer_norm": "post", "voc_min_freq": 3}),
    "joeynmt_spm_bpe": Cell("joeynmt", "SentencePiece BPE, separate vocabularies", text="spm_bpe"),
    "joeynmt_gelu_heads8_depths": Cell("joeynmt", "8 heads (d 32), gelu, 1 encoder + 3 decoder layers",
                                       {"num_heads": 8, "activation": "gelu", "encoder_layers": 1,
                                        "decoder_layers": 3}),
    # fairseq: the base is fairseq_transformer (2+2 layers, d 32, post-norm, --share-decoder-input-output-embed)
    "fairseq_w64_pre_depths": Cell("fairseq", "d 64, 4 heads, ffn 128, pre-norm, 3 encoder + 1 decoder layers",
                                   ["--encoder-embed-dim", "64", "--decoder-embed-dim", "64", "--encoder-attention-heads",
                                    "4", "--decoder-attention-heads", "4", "--encoder-ffn-embed-dim", "128",
                                    "--decoder-ffn-embed-dim", "128", "--encoder-layers", "3", "--decoder-layers", "1",
                                    "--encoder-normalize-before", "--decoder-normalize-before"]),
    # 800 updates (the base fixture's, 1.5 min): after 150 its outputs held no word of two pieces and no comma, so
    # neither the joining of "@@" pieces nor Moses' detokenization beyond a final period was compared
    "fairseq_moses_bpe": Cell("fairseq", "--tokenizer moses --bpe subword_nmt (fairseq's IWSLT/WMT recipes)",
                              text="moses_bpe", updates=FAIRSEQ_UPDATES),
    "fairseq_shared_spm_threshold": Cell("fairseq", "--share-all-embeddings, --joined-dictionary with --thresholdsrc 3, "
                                         "SentencePiece unigram", ["--share-all-embeddings"], text="spm"),
    # learned tables have --max-*-positions + 2 rows a side (1,026 x 32 by default): 256 keeps the cell small and
    # varies the max lengths
    "fairseq_learned_pos_gelu": Cell("fairseq", "--encoder-learned-pos --decoder-learned-pos, gelu, "
                                     "--max-source-positions 256 --max-target-positions 256",
                                     ["--encoder-learned-pos", "--decoder-learned-pos", "--activation-fn", "gelu",
                                      "--max-source-positions", "256", "--max-target-positions", "256"]),
    # width 512 with the toolkit's default 5,000-row position tables (not in git: see the module docstring)
    "opennmt_w512": Cell("opennmt", "d 512, 8 heads, ffn 128, 1 + 1 layers",
                         {**transformer_width(512, 8, 128), "enc_layers": 1, "dec_layers": 1}, wide=True),
    "joeynmt_w512": Cell("joeynmt", "d 512, 8 heads, ffn 128, 1 + 1 layers",
                         {"width": 512, "num_heads": 8, "ff_size": 128, "encoder_layers": 1, "decoder_layers": 1},
                         wide=True),
    "fairseq_w512": Cell("fairseq", "d 512, 8 heads, ffn 128, 1 + 1 layers",
                         ["--encoder-embed-dim", "512", "--decoder-embed-dim", "512", "--encoder-attention-heads", "8",
                          "--decoder-attention-heads", "8", "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim",
                          "128", "--encoder-layers", "1", "--decoder-layers", "1"], wide=True),
}
MATRIX_NAMES.update(name for name, cell in CELLS.items() if not cell.wide)
WIDE_NAMES.update(name for name, cell in CELLS.items() if cell.wide)


def make_opennmt_cell(name: str, cell: Cell, work: Path, data: dict[str, Path]) -> None:
    options = {**ONMT_COMMON, **ONMT_MODELS["opennmt_transformer"], **cell.changes, "train_steps": cell.updates,
               "save_checkpoint_steps": cell.updates}
    if "enc_layers" in cell.changes:  # -layers would set both
        del options["layers"]
    if cell.text == "word":
        files, provenance = run_opennmt(work, data, options, TINY)
        write_fixture(name, work, {key: files[key] for key in files if key in ("model.pt", "vocab.src", "vocab.tgt",
                                                                                "config.yaml", "test.de")}, provenance)
        record_single(name, work)
        return
    spm = make_spm_data(work / "raw", model_type="bpe" if cell.text == "spm_bpe" else "unigram")
    options.update({"transforms": ["sentencepiece"], "src_subword_model": str(spm["model"]),
                    "tgt_subword_model": str(spm["model"])})
    files, provenance = run_opennmt(work, spm, options, TINY)
    keep = ("model.pt", "vocab.src", "config.yaml") + (() if options.get("share_vocab") else ("vocab.tgt",))
    spm_fixture(name, work, files, provenance, spm, keep, "opennmt", ["opennmt-py", "torch", "sentencepiece"])


def make_joeynmt_cell(name: str, cell: Cell, work: Path, data: dict[str, Path]) -> None:
    changes = dict(cell.changes)
    base = JOEY_MODELS["joeynmt_transformer"]
    model = dict(base)
    layers = {side: changes.pop(f"{side}_layers", None) for side in ("encoder", "decoder")}
    min_freq = changes.pop("voc_min_freq", None)
    if "width" in changes:
        width = changes.pop("width")
        changes.update(hidden_size=width, embedding_dim=width)
    if changes:
        model = joey_sides(base, **changes)
    for side, count in layers.items():
        if count is not None:
            model[side] = {**model[side], "num_layers": count}
    training = {"updates": cell.updates, "validation_freq": cell.updates, "logging_freq": 50}  # validation_freq % logging_freq == 0
    text = {"voc_min_freq": min_freq} if min_freq else {}
    if cell.text == "word":
        files, provenance = run_joeynmt(name, work, data, model, training, TINY, text or None)
        write_fixture(name, work, {key: files[key] for key in files if key in (
            "model.ckpt", "src_vocab.txt", "trg_vocab.txt", "config.yaml", "translate_beam1.yaml", "test.de")},
            provenance)
        record_single(name, work)
        return
    spm = make_spm_data(work / "raw", model_type="bpe" if cell.text == "spm_bpe" else "unigram")
    text.update({"level": "bpe", "tokenizer_type": "sentencepiece", "tokenizer_cfg": {"model_file": str(spm["model"])},
                 "max_length": 100})
    files, provenance = run_joeynmt(name, work, spm, model, training, TINY, text)
    spm_fixture(name, work, files, provenance, spm, ("model.ckpt", "src_vocab.txt", "trg_vocab.txt", "config.yaml",
                                                     "translate_beam1.yaml"),
                "joeynmt", ["joeynmt", "torch", "sentencepiece"])


def make_fairseq_cell(name: str, cell: Cell, work: Path, data: dict[str, Path]) -> None:
    base = [option for option in FAIRSEQ_MODELS["fairseq_transformer"]
            if not (cell.changes and option == "--share-decoder-input-output-embed"
                    and "--share-all-embeddings" in cell.changes)]
    options = override_options(base, list(cell.changes)) + ["--max-update", str(cell.updates)]
    keep = ("checkpoint.pt", "dict.de.txt", "dict.en.txt")
    if cell.text == "word":
        files, provenance = run_fairseq(work, data, options, TINY)
        write_fixture(name, work, {key: files[key] for key in (*keep, "test.de")}, provenance)
        record_single(name, work)
        return
    if cell.text == "moses_bpe":
        prepared = make_moses_bpe_data(work / "raw")
        # --source-lang / --target-lang: without them fairseq-train stops before training ("Error merging override
        # tokenizer.source_lang=null": the task infers the languages from the data later, and MosesTokenizerConfig's
        # fields may not be null), and they are the languages its Moses step records for fairseq-interactive
        options += ["--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", str(prepared["codes"]),
                    "--source-lang", "de", "--target-lang", "en"]
        files, provenance = run_fairseq(work, prepared["processed"], options, EVERY_PIECE)
        files["codes.bpe"] = prepared["codes"]
        provenance["commands"]["prepare"] = prepared["command"]
        spm_fixture(name, work, files, provenance, prepared["raw"], (*keep, "codes.bpe"), "fairseq",
                    ["fairseq-fixed", "torch", "sacremoses", "subword-nmt"], model_file=None)
        return
    spm = make_spm_data(work / "raw", segmented=True, model_type="bpe" if cell.text == "spm_bpe" else "unigram")
    segmented = {key: path.parent / "seg" / path.name for key, path in spm.items() if key != "model"}
    options += ["--bpe", "sentencepiece", "--sentencepiece-model", str(spm["model"])]
    threshold = ["--thresholdsrc", "3", "--thresholdtgt", "3"] if "--share-all-embeddings" in cell.changes else []
    files, provenance = run_fairseq(work, segmented, options, TINY, threshold)
    spm_fixture(name, work, files, provenance, spm, keep, "fairseq", ["fairseq-fixed", "torch", "sentencepiece"])


def override_options(base: list[str], changes: list[str]) -> list[str]:
    """fairseq's command-line ``base`` with the flags in ``changes`` replaced (a flag followed by its value, or a
    switch) or added."""
    out, i = list(base), 0
    while i < len(changes):
        flag = changes[i]
        has_value = i + 1 < len(changes) and not changes[i + 1].startswith("--")
        if flag in out:
            at = out.index(flag)
            if has_value:
                out[at + 1] = changes[i + 1]
        else:
            out += changes[i:i + 1 + has_value]
        i += 1 + has_value
    return out


MAKERS: dict[str, Callable[[str, Cell, Path, dict[str, Path]], None]] = {
    "opennmt": make_opennmt_cell, "joeynmt": make_joeynmt_cell, "fairseq": make_fairseq_cell}
