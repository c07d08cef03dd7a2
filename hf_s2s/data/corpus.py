"""Parallel corpora as 🤗 datasets (their tokenization into model inputs is :mod:`hf_s2s.data.encoding`).

Every loader returns a ``DatasetDict`` (or, with ``streaming=True``, an ``IterableDatasetDict``) whose splits
are among ``train`` / ``validation`` / ``test`` and hold one column, ``translation``:
``{"translation": {source_lang: "...", target_lang: "..."}}`` — the layout of transformers' translation examples.

Sources: a folder of line-aligned text files ``{prefix}.{lang}[.gz]`` (:func:`load_text_folder`, the Multi30k
layout), JSON lines with a ``translation`` field (:func:`load_jsonl`), tab-separated ``source<TAB>target``
files (:func:`load_tsv`), or a Hub dataset (:func:`load_hub`); :func:`load_multi30k` finds Multi30k on its
own, and :func:`load_translation_corpus` dispatches on a name or path (what the scripts call).

Files are read as UTF-8 lines that end only at ``"\\n"`` (:func:`_lines`). Pairs where either side is empty
are skipped and counted in a warning; anything else that is wrong (missing file, misaligned files, bytes that
are not UTF-8, a malformed TSV or JSON line, a split left without pairs, unknown language) is an error that
names the file, the line where there is one, and what was expected.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import os
import unicodedata
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from datasets import (
    Dataset,
    DatasetDict,
    IterableDataset,
    IterableDatasetDict,
    concatenate_datasets,
    load_dataset,
)

from ..models.loading import looks_like_local_path
from . import synthetic

logger = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
# File prefixes tried in order for each split of a text folder when the caller names none; Multi30k's
# files are train / val / test_2016_flickr.
DEFAULT_SPLIT_PREFIXES: dict[str, tuple[str, ...]] = {
    "train": ("train",),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test", "test_2016_flickr", "newstest"),
}
DATA_DIR_ENV = "HF_S2S_DATA_DIR"
IN_MEMORY_CHUNK_PAIRS = 100_000  # pairs turned from Python objects into Arrow at a time, loading into memory
MULTI30K_HUB_NAME = "bentrevett/multi30k"

AnyDatasetDict = DatasetDict | IterableDatasetDict
PathLike = str | os.PathLike


# --------------------------------------------------------------------------------------------- helpers


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line of a plain or gzip file (decided by the ``.gz`` suffix), UTF-8.

    A line ends only at ``"\\n"`` (or ``"\\r\\n"``): a lone ``"\\r"`` inside a line stays in it, so two files
    with one in the same line stay aligned (the tokenizers trained here read it as a space). Lines holding
    one are counted in a warning. A UTF-8 byte-order mark at the start of the file is dropped. Bytes that
    are not UTF-8, or a damaged gzip file, raise ValueError naming the file (and the line).
    """
    inner_returns = 0
    number = 0
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                raw = raw.removesuffix(b"\n").removesuffix(b"\r")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise ValueError(
                        f"{path}, line {number}: not UTF-8 (byte 0x{raw[error.start]:02x} at byte {error.start + 1} "
                        f"of the line); convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8"
                    ) from None
                inner_returns += "\r" in text
                yield number, text.removeprefix("\ufeff") if number == 1 else text
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise ValueError(f"{path}: damaged gzip file, unreadable from line {number + 1} on ({error})") from None
    if inner_returns:
        logger.warning(
            "%s: %d line(s) hold a carriage return (\\r) that does not end the line; kept inside the line",
            path, inner_returns,
        )


def is_blank(sentence: str) -> bool:
    """Whether ``sentence`` holds nothing to learn from or translate: only whitespace, control and format characters
    (zero-width spaces and joiners, byte-order marks, soft hyphens: Unicode categories Cc and Cf), none of which a
    tokenizer trained here turns into a word. The corpus loader skips such pairs; translation keeps such lines blank
    (with :func:`hf_s2s.inference.decoding.is_blank`, the same rule in the file an ONNX export ships without hf_s2s;
    tests/test_decoding.py holds the two equal)."""
    return all(char.isspace() or unicodedata.category(char) in ("Cc", "Cf") for char in sentence)


def _is_empty(text: str | None) -> bool:
    return text is None or is_blank(text)


def _log_skipped(split: str, skipped: int, total: int, where: str) -> None:
    if skipped:
        logger.warning(
            "skipped %d of %d pairs in split '%s' (%s) where the source or the target is empty",
            skipped, total, split, where,
        )


def _aligned_pairs(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    """Pairs of lines of two line-aligned files; raises ValueError naming both files and both line counts
    when one file ends before the other (it reads on to count the rest)."""
    src_lines, tgt_lines = _lines(src_path), _lines(tgt_path)
    count = 0
    for _, src in src_lines:
        _, tgt = next(tgt_lines, (None, None))
        if tgt is None:
            src_count, tgt_count = count + 1 + sum(1 for _ in src_lines), count
            break
        count += 1
        yield src, tgt
    else:
        extra = sum(1 for _ in tgt_lines)
        if not extra:
            return
        src_count, tgt_count = count, count + extra
    raise ValueError(
        f"source and target files are not line-aligned: {src_path} has {src_count} lines but "
        f"{tgt_path} has {tgt_count} lines"
    )


def _check_language_pair(source_lang: str, target_lang: str) -> None:
    """The two sides are keys of one ``translation`` dict: equal codes would make the target overwrite the source."""
    if source_lang == target_lang:
        raise ValueError(f"the source and target languages are both {source_lang!r}; give two different codes "
                         f"(--source_lang, --target_lang)")


def _pairs_to_split(
    pairs: Callable[[], Iterator[tuple[str, str]]], source_lang: str, target_lang: str, split: str, where: str,
    streaming: bool,
) -> Dataset | IterableDataset:
    """Build one split from a pair generator, skipping (and counting) pairs with an empty side.

    A split left without any pair is a ValueError naming ``where``: nothing could be trained or scored on it.
    A streamed split is read up to its first pair here, so that this error and those of a broken first line
    come at once rather than later in the job.
    """
    _check_language_pair(source_lang, target_lang)

    def examples() -> Iterator[dict]:
        total = skipped = 0
        for src, tgt in pairs():
            total += 1
            if _is_empty(src) or _is_empty(tgt):
                skipped += 1
                continue
            yield {"translation": {source_lang: src, target_lang: tgt}}
        _log_skipped(split, skipped, total, where)
        if skipped == total:
            reason = f"all {total} have an empty source or target" if total else "the file(s) hold no lines"
            raise ValueError(f"split '{split}' ({where}) has no pairs: {reason}")

    if streaming:
        next(examples())
        # No caching: the generator is re-run on every pass, so edited files are always read afresh.
        return IterableDataset.from_generator(examples)
    # In memory, not Dataset.from_generator, whose cache is keyed by the file *names* and would serve a stale
    # corpus after a file changed. Made a chunk of pairs at a time: as Python dicts a pair holds ~1.5 kB, in
    # Arrow ~140 bytes (4.4 GB against 0.4 GB for 2.9 million pairs).
    rows = examples()
    chunks = []
    while chunk := [row["translation"] for row in itertools.islice(rows, IN_MEMORY_CHUNK_PAIRS)]:
        chunks.append(Dataset.from_dict({"translation": chunk}))
    return chunks[0] if len(chunks) == 1 else concatenate_datasets(chunks)


def make_dataset_dict(splits: Mapping[str, Dataset | IterableDataset], streaming: bool) -> AnyDatasetDict:
    """``splits`` as an ``IterableDatasetDict`` when ``streaming``, else a ``DatasetDict``."""
    return IterableDatasetDict(splits) if streaming else DatasetDict(splits)


def _check_split_names(splits: Mapping[str, Any]) -> None:
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown:
        raise ValueError(f"unknown split name(s) {unknown}; allowed: {list(SPLITS)}")


# --------------------------------------------------------------------------------------------- text folder


def _find_file(data_dir: Path, prefix: str, lang: str) -> Path | None:
    """``{prefix}.{lang}`` or ``{prefix}.{lang}.gz``; both present is an error (which one holds the corpus?)."""
    found = [data_dir / name for name in (f"{prefix}.{lang}", f"{prefix}.{lang}.gz") if (data_dir / name).is_file()]
    if len(found) > 1:
        raise ValueError(f"both {found[0]} and {found[1]} exist; keep one of them (each would be the same split)")
    return found[0] if found else None


def folder_languages(data_dir: PathLike) -> list[str]:
    """Language codes present in a text folder: the ``lang`` of every ``{prefix}.{lang}[.gz]`` file."""
    langs = set()
    for path in Path(data_dir).iterdir():
        name = path.name.removesuffix(".gz")
        if path.is_file() and "." in name:
            langs.add(name.rsplit(".", 1)[1])
    return sorted(langs)


def load_text_folder(
    data_dir: PathLike,
    source_lang: str,
    target_lang: str,
    split_prefixes: Mapping[str, str] | None = None,
    streaming: bool = False,
) -> AnyDatasetDict:
    """Load line-aligned files ``{prefix}.{lang}`` or ``{prefix}.{lang}.gz`` from ``data_dir``.

    ``split_prefixes`` maps split names (train / validation / test) to file prefixes, e.g.
    ``{"test": "test_2017_mscoco"}``; a split it names must exist. Splits it leaves out are discovered
    from :data:`DEFAULT_SPLIT_PREFIXES` (Multi30k: train, val, test_2016_flickr) and skipped when absent.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"corpus folder {data_dir} does not exist (expected files like train.{source_lang}.gz)")
    splits = {
        split: _pairs_to_split(lambda s=src_path, t=tgt_path: _aligned_pairs(s, t), source_lang, target_lang, split,
                               f"{src_path} / {tgt_path}", streaming)
        for split, (src_path, tgt_path) in _folder_split_files(data_dir, source_lang, target_lang,
                                                               split_prefixes).items()
    }
    if not splits:
        expected = ", ".join(f"{p}.{source_lang}[.gz]" for p in sum(DEFAULT_SPLIT_PREFIXES.values(), ()))
        raise FileNotFoundError(f"no split found in {data_dir}: expected files named like {expected}")
    return make_dataset_dict(splits, streaming)


def _folder_split_files(data_dir: Path, source_lang: str, target_lang: str,
                        split_prefixes: Mapping[str, str] | None = None) -> dict[str, tuple[Path, Path]]:
    """The source and target file of each split of a text folder, from the file names alone: a language without
    files, and a split with one side's file only, are errors naming them (not a missing split). A split's prefix is
    the one ``split_prefixes`` gives, else the first of :data:`DEFAULT_SPLIT_PREFIXES` with a file of either
    language."""
    split_prefixes = dict(split_prefixes or {})
    _check_split_names(split_prefixes)
    available = folder_languages(data_dir)
    for role, lang in (("source", source_lang), ("target", target_lang)):
        if lang not in available:
            raise ValueError(
                f"{role} language {lang!r} has no files in {data_dir}; languages available there: {available}"
            )
    files = {}
    for split in SPLITS:
        prefix = split_prefixes.get(split) or next(
            (p for p in DEFAULT_SPLIT_PREFIXES[split]
             if _find_file(data_dir, p, source_lang) or _find_file(data_dir, p, target_lang)), None)
        if prefix is None:
            continue
        paths = []
        for lang in (source_lang, target_lang):
            path = _find_file(data_dir, prefix, lang)
            if path is None:
                raise FileNotFoundError(
                    f"missing file for split '{split}', language {lang!r}: expected {data_dir / f'{prefix}.{lang}'} "
                    f"or {data_dir / f'{prefix}.{lang}.gz'}"
                )
            paths.append(path)
        files[split] = (paths[0], paths[1])
    return files


# --------------------------------------------------------------------------------------------- jsonl / tsv


def _as_split_files(data_files: PathLike | Mapping[str, PathLike]) -> dict[str, Path]:
    """A single file is the train split; a mapping names the split of each file. Every file must exist."""
    files = {"train": data_files} if isinstance(data_files, str | os.PathLike) else dict(data_files)
    _check_split_names(files)
    files = {split: Path(path) for split, path in files.items()}
    for split, path in files.items():
        if not path.is_file():
            raise FileNotFoundError(f"missing file for split '{split}': {path} does not exist")
    return files


def _load_files(
    data_files: PathLike | Mapping[str, PathLike], read_pairs: Callable[[Path], Iterator[tuple[str, str]]],
    source_lang: str, target_lang: str, streaming: bool,
) -> AnyDatasetDict:
    """One split per file, each read with ``read_pairs(path)``."""
    files = _as_split_files(data_files)
    splits = {
        split: _pairs_to_split(lambda p=path: read_pairs(p), source_lang, target_lang, split, str(path), streaming)
        for split, path in files.items()
    }
    return make_dataset_dict(splits, streaming)


def _json_fields(row: dict) -> set[str]:
    """The fields of a JSON-lines row: its own keys, and ``translation.<lang>`` for each language it holds."""
    return set(row) | {f"translation.{lang}" for lang in row["translation"]}


def _jsonl_pairs(path: Path, source_lang: str, target_lang: str) -> Iterator[tuple[str, str]]:
    """Pairs of a JSON-lines file (a blank line is an empty pair, skipped and counted like one).

    Every row must be an object whose ``translation`` object holds both languages as strings (null counts as
    empty), and must have exactly the fields of the first row: a row that lacks or adds one (a mistyped
    language key, a stray field) is a ValueError naming the file, the line and the field.
    """
    example = json.dumps({"translation": {source_lang: "...", target_lang: "..."}})
    first: tuple[int, set[str]] | None = None  # line number and fields of the first row
    for number, line in _lines(path):
        where = f"{path}, line {number}"
        if not line.strip():
            yield "", ""
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where}: not valid JSON ({error.msg} at column {error.colno}); expected one "
                             f"object per line, like {example}") from None
        if not isinstance(row, dict) or not isinstance(row.get("translation"), dict):
            raise ValueError(f"{where}: expected an object with a 'translation' object, like {example}; "
                             f"got {line[:80]}")
        translation = row["translation"]
        for role, lang in (("source", source_lang), ("target", target_lang)):
            if lang not in translation:
                raise ValueError(f"{where}: {role} language {lang!r} is not in the translation; "
                                 f"languages there: {sorted(translation)}")
            if not isinstance(translation[lang], str | None):
                raise ValueError(f"{where}: the field 'translation.{lang}' is a JSON "
                                 f"{type(translation[lang]).__name__}, expected a string")
        fields = _json_fields(row)
        if first is None:
            first = number, fields
        elif fields != first[1]:
            added, missing = sorted(fields - first[1]), sorted(first[1] - fields)
            change = f"adds the field {added[0]!r}" if added else f"lacks the field {missing[0]!r}"
            raise ValueError(f"{where}: the row {change}, unlike line {first[0]}; every row must have the "
                             f"fields {sorted(first[1])}")
        yield translation[source_lang], translation[target_lang]


def load_jsonl(
    data_files: PathLike | Mapping[str, PathLike], source_lang: str, target_lang: str, streaming: bool = False
) -> AnyDatasetDict:
    """JSON lines, one ``{"translation": {source_lang: ..., target_lang: ...}}`` object per line (the format of
    transformers' ``run_translation.py``), UTF-8, plain or ``.gz``. Other fields (the same in every row) are
    dropped; a malformed row is an error naming its file, line and field (:func:`_jsonl_pairs`)."""
    return _load_files(data_files, lambda path: _jsonl_pairs(path, source_lang, target_lang), source_lang,
                       target_lang, streaming)


def _tsv_pairs(path: Path) -> Iterator[tuple[str, str]]:
    for number, line in _lines(path):
        fields = line.split("\t")
        if len(fields) != 2:
            if not line.strip():
                yield "", ""
                continue
            raise ValueError(f"{path}, line {number}: expected 2 tab-separated fields (source, target), got {len(fields)}")
        yield fields[0], fields[1]


def load_tsv(
    data_files: PathLike | Mapping[str, PathLike], source_lang: str, target_lang: str, streaming: bool = False
) -> AnyDatasetDict:
    """Tab-separated ``source<TAB>target`` lines (plain or ``.gz``); no header, no quoting."""
    return _load_files(data_files, _tsv_pairs, source_lang, target_lang, streaming)


# --------------------------------------------------------------------------------------------- Hub


def load_hub(
    name: str,
    source_lang: str,
    target_lang: str,
    config_name: str | None = None,
    streaming: bool = False,
    revision: str | None = None,
) -> AnyDatasetDict:
    """A Hub dataset, e.g. ``("wmt16", "de", "en", config_name="de-en")`` (a ``translation`` column) or
    ``("bentrevett/multi30k", "de", "en")`` (one column per language); needs the network. Splits are renamed
    to train / validation / test where they have other usual names (valid, val, dev)."""
    try:
        loaded = load_dataset(name, config_name, streaming=streaming, revision=revision)
    except (OSError, ValueError) as error:  # not found, or the Hub out of reach (ConnectionError is an OSError)
        reason = " ".join(str(error).split())  # one line
        raise FileNotFoundError(f"{name} is neither a local corpus (no such file or folder here) nor a Hub dataset "
                                f"that could be loaded: {reason}") from error
    renames = {alias: split for split, aliases in DEFAULT_SPLIT_PREFIXES.items() for alias in aliases}
    splits = {}
    for split_name, split_ds in loaded.items():
        split = renames.get(split_name, split_name)
        columns = split_ds.column_names or list(next(iter(split_ds)))
        if "translation" in columns:
            get = lambda ex: (ex["translation"].get(source_lang), ex["translation"].get(target_lang))  # noqa: E731
            example = next(iter(split_ds))["translation"]
            available = sorted(example)
        else:
            get = lambda ex: (ex[source_lang], ex[target_lang])  # noqa: E731
            available = sorted(columns)
        for role, lang in (("source", source_lang), ("target", target_lang)):
            if lang not in available:
                raise ValueError(f"{role} language {lang!r} is not in {name} ({split_name}); available: {available}")
        splits[split] = _pairs_to_split(
            lambda d=split_ds, g=get: (g(ex) for ex in d), source_lang, target_lang, split, name, streaming
        )
    return make_dataset_dict(splits, streaming)


# --------------------------------------------------------------------------------------------- Multi30k


def resolve_data_dir(data_dir: PathLike | None = None) -> Path | None:
    """The Multi30k folder to use: ``data_dir`` if given, else ``$HF_S2S_DATA_DIR``, else None (then load from the
    Hub). The library looks nowhere else: a checkout's scripts point ``$HF_S2S_DATA_DIR`` at the corpus beside it.

    A folder given explicitly (argument or environment variable) that does not exist is an error, not a
    reason to look elsewhere.
    """
    for given, origin in ((data_dir, "data_dir"), (os.environ.get(DATA_DIR_ENV) or None, f"${DATA_DIR_ENV}")):
        if given is not None:
            path = Path(given).expanduser()
            if not path.is_dir():
                raise FileNotFoundError(
                    f"{origin} points to {path}, which is not a folder; pass --data_dir (or set {DATA_DIR_ENV}) "
                    f"to a folder holding train.de.gz, train.en.gz, val.*, test_2016_flickr.*"
                )
            return path
    return None


def load_multi30k(
    source_lang: str = "de",
    target_lang: str = "en",
    data_dir: PathLike | None = None,
    streaming: bool = False,
    hub_name: str | None = MULTI30K_HUB_NAME,
) -> AnyDatasetDict:
    """Multi30k task 1 from the first place that has it: ``data_dir``, ``$HF_S2S_DATA_DIR``, the Hub (``hub_name``;
    None to never try). Test split: test_2016_flickr."""
    resolved = resolve_data_dir(data_dir)
    if resolved is not None:
        logger.info("loading Multi30k from %s", resolved)
        return load_text_folder(resolved, source_lang, target_lang, streaming=streaming)
    hub_error = "not tried (hub_name=None)"
    if hub_name is not None:
        try:
            return load_hub(hub_name, source_lang, target_lang, streaming=streaming)
        except Exception as error:  # offline, unknown name, ...: reported below with what to do
            hub_error = f"{type(error).__name__}: {error}"
    raise FileNotFoundError(
        f"Multi30k not found. Pass --data_dir DIR (data_dir=DIR) or set {DATA_DIR_ENV}=DIR, where DIR holds "
        f"train.{source_lang}.gz, train.{target_lang}.gz, val.*, test_2016_flickr.*; loading {hub_name!r} from the "
        f"Hub: {hub_error}"
    )


SYNTHETIC_TASKS = ("synthetic:reversal", "synthetic:reordering")


def check_splits(corpus: AnyDatasetDict | list[str], dataset: str, needed: Mapping[str, str]) -> None:
    """Raise ValueError when ``corpus`` (loaded from ``dataset``, or the names of its splits, as
    :func:`corpus_splits` finds them before reading) lacks a split that a job needs: ``needed`` maps each such
    split to what needs it. The loaders only report the splits they find (an evaluation may need no train split),
    so the job says which it cannot do without."""
    for split, purpose in needed.items():
        if split not in corpus:
            names = ", ".join(DEFAULT_SPLIT_PREFIXES[split])
            raise ValueError(
                f"the corpus {dataset} has no '{split}' split, which {purpose} needs; its splits: {list(corpus)} "
                f"(in a corpus folder or a {{split}} file pattern, {split} files are named {names})"
            )


def corpus_splits(dataset: str, source_lang: str, target_lang: str, data_dir: PathLike | None = None,
                  flag: str = "dataset") -> list[str] | None:
    """The splits :func:`load_translation_corpus` would find in ``dataset``, from the file names alone, so that a
    job can refuse a corpus that lacks one (:func:`check_splits`) before reading it; None where only loading tells
    (a Hub dataset, Multi30k from the Hub). A name that can only be a local path (``data/corpus``, ``x.tsv``) and
    does not exist is a FileNotFoundError naming ``flag`` and the path; a corpus folder without one of the languages'
    files, or with a split of one side only, is the error loading it gives."""
    if dataset.startswith("synthetic:"):
        return list(SPLITS)
    if dataset == "multi30k":
        folder = resolve_data_dir(data_dir)
        return list(_folder_split_files(folder, source_lang, target_lang)) if folder is not None else None
    if "{split}" in dataset:
        _refuse_other_pattern(dataset, flag)
        return [split for split in SPLITS
                if any(Path(dataset.replace("{split}", name)).expanduser().is_file()
                       for name in DEFAULT_SPLIT_PREFIXES[split])]
    path = Path(dataset).expanduser()
    if path.is_dir():
        return list(_folder_split_files(path, source_lang, target_lang))
    if path.is_file():
        return ["train"]  # a .jsonl / .tsv file is the training split
    if looks_like_local_path(dataset):
        raise FileNotFoundError(f"{flag} {dataset} does not exist (a local path, not a Hub dataset name: expected a "
                                f"corpus folder, a .jsonl/.json/.tsv file or a {{split}} pattern of them)")
    return None


def _file_suffix(dataset: str) -> str:
    """The suffix that says how a corpus file reads (``.tsv`` for ``x.tsv.gz``); empty when it has none."""
    suffixes = [s for s in Path(dataset).suffixes if s != ".gz"]
    return suffixes[-1] if suffixes else ""


def _refuse_other_pattern(dataset: str, flag: str = "dataset") -> None:
    if "{split}" in dataset and _file_suffix(dataset) not in (".jsonl", ".json", ".tsv"):
        raise ValueError(f"{flag} {dataset}: a {{split}} pattern names .jsonl/.json/.tsv files (a folder of "
                         f"{{split}}.{{lang}} files is given as the folder)")


def _expand_split_pattern(pattern: str) -> dict[str, Path]:
    """``"corpus/{split}.tsv"`` -> the files among corpus/train.tsv, corpus/validation.tsv (or valid, val,
    dev), corpus/test.tsv that exist, keyed by split; train must exist."""
    files = {}
    for split in SPLITS:
        for name in DEFAULT_SPLIT_PREFIXES[split]:
            path = Path(pattern.replace("{split}", name))
            if path.is_file():
                files[split] = path
                break
    if "train" not in files:
        raise FileNotFoundError(f"no training file for the pattern {pattern!r}: expected {pattern.replace('{split}', 'train')}")
    return files


def load_translation_corpus(
    dataset: str,
    source_lang: str,
    target_lang: str,
    data_dir: PathLike | None = None,
    dataset_config: str | None = None,
    split_prefixes: Mapping[str, str] | None = None,
    streaming: bool = False,
) -> AnyDatasetDict:
    """One entry point for scripts, dispatching on ``dataset``:

    - ``"multi30k"``: :func:`load_multi30k` (``data_dir``, ``$HF_S2S_DATA_DIR``, Hub);
    - ``"synthetic:reversal"`` / ``"synthetic:reordering"``: the text tasks of :mod:`hf_s2s.data.synthetic`,
      with ``source_lang`` / ``target_lang`` as their language codes;
    - a folder: :func:`load_text_folder` (with ``split_prefixes``);
    - a ``.jsonl``/``.json`` or ``.tsv`` file (the train split), or a pattern with ``{split}`` such as
      ``"corpus/{split}.tsv"`` (every split that exists): :func:`load_jsonl` / :func:`load_tsv`;
    - anything else: a Hub dataset name, :func:`load_hub` with ``dataset_config``.
    """
    if dataset == "multi30k":
        return load_multi30k(source_lang, target_lang, data_dir=data_dir, streaming=streaming)
    if dataset.startswith("synthetic:"):
        if dataset not in SYNTHETIC_TASKS:
            raise ValueError(f"unknown synthetic task {dataset!r}; available: {list(SYNTHETIC_TASKS)}")
        _check_language_pair(source_lang, target_lang)
        make = synthetic.text_reversal_corpus if dataset == "synthetic:reversal" else synthetic.word_reordering_corpus
        corpus = make(source_lang=source_lang, target_lang=target_lang)
        return IterableDatasetDict({k: v.to_iterable_dataset() for k, v in corpus.items()}) if streaming else corpus
    path = Path(dataset)
    if path.is_dir():
        return load_text_folder(path, source_lang, target_lang, split_prefixes, streaming)
    kind = {".jsonl": load_jsonl, ".json": load_jsonl, ".tsv": load_tsv}.get(_file_suffix(dataset))
    if kind is not None:
        files = _expand_split_pattern(dataset) if "{split}" in dataset else path
        return kind(files, source_lang, target_lang, streaming)
    _refuse_other_pattern(dataset)
    if path.exists():
        raise ValueError(f"{dataset}: not a folder, a .jsonl/.json file or a .tsv file")
    if looks_like_local_path(dataset):
        raise FileNotFoundError(f"{dataset} does not exist (expected a corpus folder or a .jsonl/.json/.tsv file; "
                                f"a local path, not a Hub dataset name)")
    return load_hub(dataset, source_lang, target_lang, config_name=dataset_config, streaming=streaming)


__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_SPLIT_PREFIXES",
    "check_splits",
    "corpus_splits",
    "folder_languages",
    "load_hub",
    "load_jsonl",
    "load_multi30k",
    "load_translation_corpus",
    "load_text_folder",
    "load_tsv",
    "make_dataset_dict",
    "resolve_data_dir",
]
