"""fairseq's --tokenizer moses --bpe subword_nmt, carried over as transformers' FSMTTokenizer
(hf_s2s/importers/moses_bpe.py): on real Multi30k text, the folder's tokenizer segments a raw line into the pieces
fairseq-interactive's encode_fn gives (sacremoses with fairseq's flags, then subword-nmt's apply_bpe), and decodes
generated pieces into fairseq's decode_fn text (the @@ continuations joined, then Moses detokenization). The one
place they part, FSMTTokenizer's punctuation normalization, is measured; settings it cannot reproduce are refused.
The end-to-end parity against a real fairseq model is tests/test_importers_matrix.py's (fairseq_moses_bpe)."""

import io
import json
import subprocess
import sys

import pytest
from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer
from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe

from hf_s2s.importers import CheckpointError
from hf_s2s.importers.fairseq import moses_bpe_settings
from hf_s2s.importers.moses_bpe import MosesBPE, fsmt_tokenizer
from tests.helpers import multi30k_lines

FAIRSEQ_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


class Fairseq:
    """fairseq's encode_fn / decode_fn for --tokenizer moses --bpe subword_nmt (fairseq/data/encoders/
    moses_tokenizer.py and subword_nmt_bpe.py with their defaults), written out."""

    def __init__(self, codes: str, source: str = "de", target: str = "en"):
        self.tok, self.detok = MosesTokenizer(source), MosesDetokenizer(target)
        self.bpe = BPE(io.StringIO(codes), separator="@@")

    def encode(self, line: str) -> list[str]:
        tokenized = self.tok.tokenize(line, aggressive_dash_splits=True, return_str=True, escape=True)
        return self.bpe.process_line(tokenized).split()

    def decode(self, pieces: list[str]) -> str:
        return self.detok.detokenize((" ".join(pieces) + " ").replace("@@ ", "").rstrip().split())


@pytest.fixture(scope="module")
def codes(tmp_path_factory) -> tuple[str, "Fairseq", list[str]]:
    """subword-nmt codes (600 merges) learned on the first 3,000 Moses-tokenized training lines of both sides, and
    the dictionary fairseq-preprocess would build from them (every piece, most frequent first)."""
    lines = {lang: multi30k_lines(f"train.{lang}.gz")[:3000] for lang in ("de", "en")}
    tokenized = [MosesTokenizer(lang).tokenize(line, aggressive_dash_splits=True, return_str=True, escape=True)
                 for lang, side in lines.items() for line in side]
    out = io.StringIO()
    learn_bpe(io.StringIO("\n".join(tokenized) + "\n"), out, 600)
    fairseq = Fairseq(out.getvalue())
    counts: dict[str, int] = {}
    for line in tokenized:
        for piece in fairseq.bpe.process_line(line).split():
            counts[piece] = counts.get(piece, 0) + 1
    return out.getvalue(), fairseq, FAIRSEQ_SPECIALS + sorted(counts, key=lambda piece: -counts[piece])


def tokenizer_for(codes_text: str, tokens: list[str], tmp_path, **languages):
    path = tmp_path / "codes.bpe"
    path.write_text(codes_text, encoding="utf-8")
    moses_bpe = MosesBPE(path, f"--bpe-codes {path}", (languages.get("source", "de"), languages.get("target", "en")))
    return fsmt_tokenizer(moses_bpe, tokens, tokens, "<unk>", "<pad>", "<s>", "</s>")


def test_raw_lines_encode_to_fairseqs_ids(codes, tmp_path):
    """Every German validation line (1,014) encodes to the ids fairseq gives, </s> appended, except where Moses'
    punctuation normalization (FSMTTokenizer's, not fairseq's) changes the line: those are counted and printed."""
    codes_text, fairseq, tokens = codes
    tokenizer = tokenizer_for(codes_text, tokens, tmp_path)
    index = {token: i for i, token in enumerate(tokens)}
    normalizer = MosesPunctNormalizer("de")
    equal, normalized = 0, 0
    for line in multi30k_lines("val.de.gz"):
        expected = [index.get(piece, index["<unk>"]) for piece in fairseq.encode(line)] + [index["</s>"]]
        got = tokenizer(line)["input_ids"]
        if got == expected:
            equal += 1
        else:
            assert normalizer.normalize(line) != line, line  # the only reason they may part
            normalized += 1
    print(f"FSMTTokenizer == fairseq's encode_fn on {equal} of {equal + normalized} lines; {normalized} differ, "
          "each changed by Moses' punctuation normalization")
    assert equal >= 1000


def test_pieces_the_dictionary_lacks_are_read_as_unk(codes, tmp_path):
    """A dictionary cut by frequency (fairseq-preprocess --thresholdsrc) lacks pieces; fairseq reads them as <unk>,
    FSMTTokenizer too."""
    codes_text, fairseq, tokens = codes
    cut = tokens[:300]
    tokenizer = tokenizer_for(codes_text, cut, tmp_path)
    index = {token: i for i, token in enumerate(cut)}
    lines = multi30k_lines("val.de.gz")[:200]
    expected = [[index.get(piece, index["<unk>"]) for piece in fairseq.encode(line)] + [index["</s>"]] for line in lines]
    got = tokenizer(lines)["input_ids"]
    assert got == expected
    assert sum(row.count(index["<unk>"]) for row in expected) > 100  # pieces were missing


def test_generated_pieces_decode_to_fairseqs_text(codes, tmp_path):
    """English lines through fairseq's encode_fn, as ids, decode to fairseq's decode_fn text (Moses-detokenized)."""
    codes_text, _, tokens = codes
    english = Fairseq(codes_text, "en", "en")
    tokenizer = tokenizer_for(codes_text, tokens, tmp_path)
    index = {token: i for i, token in enumerate(tokens)}
    lines = multi30k_lines("val.en.gz")[:300]
    for line in lines:
        pieces = english.encode(line)
        ids = [index[piece] for piece in pieces if piece in index]
        kept = [piece for piece in pieces if piece in index]
        assert tokenizer.decode(ids, skip_special_tokens=True) == english.decode(kept), line


def test_the_folder_loads_with_transformers_and_sacremoses_only(codes, tmp_path):
    """AutoTokenizer on the saved tokenizer, in a process where hf_s2s cannot be imported: FSMTTokenizer."""
    codes_text, fairseq, tokens = codes
    tokenizer_for(codes_text, tokens, tmp_path).save_pretrained(tmp_path / "folder")
    line = multi30k_lines("val.de.gz")[0]
    code = ("import sys; sys.modules['hf_s2s'] = None\n"
            "from transformers import AutoTokenizer\n"
            f"tokenizer = AutoTokenizer.from_pretrained({str(tmp_path / 'folder')!r})\n"
            f"print(type(tokenizer).__name__, tokenizer({line!r})['input_ids'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    name, ids = done.stdout.strip().split(" ", 1)
    index = {token: i for i, token in enumerate(tokens)}
    assert name == "FSMTTokenizer"
    assert json.loads(ids) == [index[piece] for piece in fairseq.encode(line)] + [index["</s>"]]


def test_codes_of_subword_nmt_before_0_2_are_refused_naming_the_file(codes, tmp_path):
    codes_text, _, tokens = codes
    with pytest.raises(CheckpointError, match=r"--bpe-codes .*codes.bpe does not start with '#version: 0.2'"):
        tokenizer_for(codes_text.split("\n", 1)[1], tokens, tmp_path)


def test_fairseq_moses_options_fsmt_lacks_are_refused_by_name(tmp_path):
    """--moses-no-dash-splits and --moses-no-escape: FSMTTokenizer always splits and escapes."""
    for name, flag in (("moses_no_dash_splits", "--moses-no-dash-splits"), ("moses_no_escape", "--moses-no-escape")):
        data = {"cfg": {"tokenizer": {"_name": "moses", name: True}, "bpe": {"_name": "subword_nmt",
                                                                          "bpe_codes": "codes"}}}
        with pytest.raises(CheckpointError, match=f"fairseq option {flag} True is not supported: the converted "
                                                  "tokenizer \\(transformers' FSMTTokenizer\\) always"):
            moses_bpe_settings(data, {}, None)
