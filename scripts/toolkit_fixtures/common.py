"""What every toolkit's fixture maker shares: the slice of Multi30k, the toolkits' virtual environments, running
their commands, writing a fixture folder, the SentencePiece data, and recording the toolkit's greedy output one
sentence a batch (record_single). make.py is the command; toolkit_*.py train and translate with one toolkit each."""


import collections
import dataclasses
import datetime
import gzip
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
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
        # the sentencepiece transform (onmt/transforms/tokenize.py) imports it; opennmt-py does not declare it
        ["sentencepiece==0.2.1"],
    ],
    "joeynmt": [
        [TORCH],
        ["joeynmt==2.3.0"],
        # joeynmt/helpers.py imports importlib_metadata, which joeynmt 2.3.0 does not declare
        ["importlib_metadata"],
        # joeynmt 2.3.0 declares sentencepiece unpinned, and 0.2.3 dropped SentencePieceProcessor.SetVocabulary, which
        # its SentencePieceTokenizer.set_vocab calls ("has no attribute 'SetVocabulary'"); 0.2.1 has it
        ["sentencepiece==0.2.1"],
    ],
    "fairseq": [
        [TORCH],
        # fairseq 0.12.2 installs (with hydra-core 1.0.7, omegaconf 2.0.6) but cannot be imported on
        # Python 3.11: "ValueError: mutable default <class 'fairseq.dataclass.configs.CommonConfig'>
        # for field common is not allowed: use default_factory" (3.11's dataclasses refuse unhashable
        # defaults). fairseq-fixed 0.12.3.1 is 0.12.2 with that fixed and hydra-core 1.3.2 /
        # omegaconf 2.3.0; it imports as `fairseq` and reports __version__ 0.12.3.1.
        # It is a source distribution whose build requires an unpinned torch: pip's isolated build environment then
        # downloads the newest torch with its CUDA wheels (4.4 GB, and the install never finished on 2 cores). Its
        # build requirements go into the venv instead, and it is built against the venv's torch 2.13.
        ["cython", "numpy", "setuptools", "wheel"],
        ["--no-build-isolation", "fairseq-fixed==0.12.3.1"],
        # --bpe sentencepiece (fairseq/data/encoders/sentencepiece_bpe.py) imports it; fairseq does not declare it
        ["sentencepiece==0.2.1"],
        # --tokenizer moses and --bpe subword_nmt import them (fairseq/data/encoders/moses_tokenizer.py,
        # subword_nmt_bpe.py); fairseq does not declare them
        ["sacremoses==0.2.0", "subword-nmt==0.3.8"],
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

def toolkit_env() -> dict[str, str]:
    # TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: torch>=2.6 loads with weights_only=True by default, and the
    # toolkits' own torch.load calls (onmt_release_model, onmt_translate's load_checkpoint, ...) then
    # refuse their own checkpoints (argparse.Namespace is not an allowed global). These are files this
    # script has just written, so the toolkits may unpickle them as they did under their pinned torch.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0",
               CUDA_VISIBLE_DEVICES="", TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    return env


def run(cmd: list[str], cwd: Path, log: Path) -> list[str]:
    """Run one toolkit command with a deterministic CPU environment; return it as recorded."""
    env = toolkit_env()
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"command failed ({done.returncode}), see {log}: {' '.join(cmd)}")
    return cmd


def option(flag: str, value: object) -> list[str]:
    """A command-line option, or nothing where the value is None (the toolkit's default then applies)."""
    return [] if value is None else [flag, str(value)]


def shown(cmd: list[str], work: Path) -> str:
    """A command as recorded in provenance.json: venv and temp paths made relative."""
    text = " ".join(cmd)
    text = text.replace(str(VENVS) + "/", ".toolkit_venvs/").replace(str(work) + "/", "$WORK/")
    text = text.replace(str(work), "$WORK")
    return text.replace(str(work.parent), "$TMP")  # $TMP/data holds the slice


# the matrix cells' names (matrix.py registers them): their folders are under OUT / "matrix", the width-512 ones'
# (too large for git) under WIDE_OUT
MATRIX_NAMES: set[str] = set()
WIDE_NAMES: set[str] = set()
WIDE_OUT = REPO / "runs" / "toolkit_matrix"


def fixture_folder(name: str) -> Path:
    """Where the fixture ``name`` lives: tests/fixtures/toolkits/<name>/, .../matrix/<name>/ for a matrix cell,
    runs/toolkit_matrix/<name>/ for a width-512 one."""
    if name in WIDE_NAMES:
        return WIDE_OUT / name
    return OUT / "matrix" / name if name in MATRIX_NAMES else OUT / name


def write_fixture(name: str, work: Path, files: dict[str, Path], provenance: dict) -> None:
    """Copy files (fixture name -> path in work) into the fixture's folder (:func:`fixture_folder`)."""
    target = fixture_folder(name)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for dest, src in files.items():
        shutil.copyfile(src, target / dest)
    provenance = {
        "fixture": name,
        **provenance,
        "seed": SEED,
        "slice": provenance.pop("slice", None) or {
            "data": "multi30k de->en (read from $MULTI30K)", "train_lines": TRAIN_LINES,
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



def yaml_text(options: dict) -> str:
    """A config as YAML without a yaml module: YAML is a superset of JSON, one value a line."""
    return "".join(f"{k}: {json.dumps(v)}\n" for k, v in options.items())



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
        done = subprocess.run(cmd, cwd=cwd, env=toolkit_env(), stdin=stdin, stdout=hyps, stderr=f)
    if done.returncode != 0:
        raise RuntimeError(f"command failed ({done.returncode}), see {log}: {' '.join(cmd)}")



# ---------------------------------------------------------------- SentencePiece fixtures (issue 34)
# Raw text (cased, untokenized) segmented by the toolkit's own SentencePiece step, with the toolkit's raw-text
# translations recorded: what a converted folder must reproduce from raw input. One joint unigram model
# (nmt_nfkc normalization, sentencepiece's defaults otherwise) trained on both sides of the raw slice, with
# character_coverage 1.0: with the default 0.9995 the rarest characters of the slice become unknown pieces that the
# toolkits' vocabularies then list as tokens, which the converter refuses (docs/importers.md).

SPM_MODEL = "spm.model"
SPM_VOCAB_SIZE = 1000  # pieces, <unk> <s> </s> included
SPM_TRAIN_LINES = 10000  # the first raw training pairs (no vocabulary filter: pieces cover every word)
SPM_SOURCE = "test.raw.de"  # the raw test sources a fixture keeps


def read_raw(name: str, count: int) -> list[str]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        return [line.strip() for line in itertools.islice(f, count)]


def test_source(fixture: Path) -> Path:
    """The test sources a fixture's toolkit translated: tokenized (test.de) or raw (SPM_SOURCE)."""
    return fixture / "test.de" if (fixture / "test.de").is_file() else fixture / SPM_SOURCE


def write_raw_slice(folder: Path) -> dict[str, Path]:
    """The raw slice, {train,valid,test}.{de,en} in ``folder`` (cased, untokenized)."""
    folder.mkdir()
    paths = {}
    for split, stem, count in (("train", "train", SPM_TRAIN_LINES), ("valid", "val", VALID_LINES),
                               ("test", "test_2016_flickr", TEST_LINES)):
        for lang in ("de", "en"):
            path = folder / f"{split}.{lang}"
            path.write_text("\n".join(read_raw(f"{stem}.{lang}.gz", count)) + "\n", encoding="utf-8")
            paths[f"{split}.{lang}"] = path
    return paths


def make_spm_data(folder: Path, segmented: bool = False, model_type: str = "unigram") -> dict[str, Path]:
    """The raw slice ({train,valid,test}.{de,en} in ``folder``) and the joint SentencePiece model (``model_type``
    unigram or bpe), trained with the sentencepiece package of the OpenNMT-py environment. ``segmented``: also the
    slice as sentencepiece segments it (pieces joined by spaces, in ``folder``/seg), for a toolkit that reads
    segmented text (fairseq)."""
    paths = write_raw_slice(folder)
    ensure_venv("opennmt")
    code = ("import sys, sentencepiece as spm\n"
            "spm.SentencePieceTrainer.train(input=sys.argv[1:3], model_prefix=sys.argv[3], vocab_size=int(sys.argv[4]),"
            " model_type=sys.argv[5], character_coverage=1.0, num_threads=1, minloglevel=2)")
    subprocess.run([str(venv_python("opennmt")), "-c", code, str(paths["train.de"]), str(paths["train.en"]),
                    str(folder / "spm"), str(SPM_VOCAB_SIZE), model_type], check=True, env=toolkit_env())
    paths["model"] = folder / SPM_MODEL
    if segmented:
        (folder / "seg").mkdir()
        code = ("import sys, sentencepiece as spm\n"
                "sp = spm.SentencePieceProcessor(model_file=sys.argv[1])\n"
                "for name in sys.argv[2:]:\n"
                "    lines = open(name, encoding='utf-8').read().splitlines()\n"
                "    out = name.replace('/raw/', '/raw/seg/')\n"
                "    open(out, 'w', encoding='utf-8').write(''.join(' '.join(sp.encode(l, out_type=str)) + '\\n'"
                " for l in lines))")
        names = [str(paths[f"{split}.{lang}"]) for split in ("train", "valid", "test") for lang in ("de", "en")]
        subprocess.run([str(venv_python("opennmt")), "-c", code, str(paths["model"]), *names], check=True, env=toolkit_env())
    return paths


def spm_fixture(name: str, work: Path, files: dict[str, Path], provenance: dict, spm: dict[str, Path],
                keep: tuple[str, ...], toolkit: str, packages: list[str], model_file: str | None = SPM_MODEL) -> None:
    """Write the raw-text fixture ``name``: ``keep`` of the toolkit run's ``files``, the SentencePiece model (unless
    ``model_file`` is None: the subword files are among ``keep`` then), the raw test sources (``spm["test.de"]``);
    then record the toolkit's raw-text greedy output (record_single)."""
    kept = {key: files[key] for key in keep}
    kept[SPM_SOURCE] = spm["test.de"]
    if model_file is not None:
        kept[model_file] = spm["model"]
        provenance["commands"].update(spm_commands(toolkit))
    provenance["commands"] = {key: value for key, value in provenance["commands"].items()
                              if key not in ("greedy", "beam")}  # runs on text that is not the fixture's
    provenance["versions"] = package_versions(toolkit, packages)
    provenance["slice"] = {"data": "multi30k de->en raw text (read from $MULTI30K)", "train_lines": SPM_TRAIN_LINES,
                           "valid_lines": VALID_LINES, "test": f"first {TEST_LINES} lines of test_2016_flickr, raw",
                           "subwords": f"{SPM_MODEL}: joint SentencePiece model of {SPM_VOCAB_SIZE} pieces "
                                       "trained on both sides of the raw training slice (nmt_nfkc, "
                                       "character_coverage 1.0)" if model_file else
                                       "codes.bpe: subword-nmt BPE codes learned on both sides after Moses"}
    provenance["notes"] = ("the toolkit's raw-text route: greedy_single.txt is its own subword segmentation of "
                           f"{SPM_SOURCE}, greedy, one sentence a batch, its default length rule, its detokenized "
                           "output. The toolkit's files name the subword model by its path in $WORK (gone).")
    write_fixture(name, work, kept, provenance)
    record_single(name, work)


def spm_commands(toolkit: str) -> dict[str, str]:
    """How make_spm_data made the model (and, for fairseq, the segmented slice), as provenance.json records it."""
    commands = {"sentencepiece": f"SentencePieceTrainer.train(input=[train.de, train.en], vocab_size={SPM_VOCAB_SIZE}, "
                                 "model_type='unigram', character_coverage=1.0, num_threads=1) on the raw slice "
                                 "(make.py make_spm_data, the OpenNMT-py environment's sentencepiece)"}
    if toolkit == "fairseq":
        commands["segment"] = ("SentencePieceProcessor.encode(line, out_type=str) of every raw line, pieces joined by "
                               "spaces, as fairseq-preprocess's input (make.py make_spm_data)")
    return commands



# toolkit -> its greedy-one-sentence-a-batch runner (fixture folder, work folder) -> the command; each toolkit_*.py
# registers its own
SINGLE_RUNNERS: dict[str, Callable[[Path, Path], list[str]]] = {}


def record_single(name: str, work: Path) -> None:
    """Add SINGLE (greedy, one sentence a batch, the toolkit's default length rule) to the fixture ``name``, from
    its stored checkpoint, and its command to provenance.json."""
    toolkit = name.split("_", 1)[0]
    ensure_venv(toolkit)
    fixture = fixture_folder(name)
    command = SINGLE_RUNNERS[toolkit](fixture, work)
    lines = (work / SINGLE).read_text(encoding="utf-8").splitlines()
    if len(lines) != TEST_LINES:
        raise RuntimeError(f"{name}: {len(lines)} lines in {work / SINGLE}, expected {TEST_LINES}")
    kept = str(fixture.relative_to(REPO))
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

