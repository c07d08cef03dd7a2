"""Loading a saved model folder strictly, and without running code of its own.

Every load here passes ``trust_remote_code=False``: hf_s2s has the classes of its own families (and transformers
those of its models), so no hf_s2s command runs a model folder's code, nor hands a person transformers'
interactive "run custom code? [y/N]" prompt, which it shows when the argument is left out and a folder's
``auto_map`` names classes neither has. Such a folder is a :class:`ModelFolderError` naming it and what to do
(:func:`refusing_folder_code`).

``from_pretrained`` is lenient on purpose (fine-tuning a checkpoint into a new head is its everyday use): a
weight missing from ``model.safetensors``, an unexpected one, or a whole config of the other family loads with
random weights and a load-report warning. The tools that publish or use a trained model must not be lenient:
:func:`load_model` turns every missing, unexpected or mismatched key into an error, names a truncated or
corrupt weights file, and tells a missing local folder apart from a Hub id. The tied ``lm_head.weight`` is
absent from the file by design when embeddings are tied; transformers does not report it, so neither do we.

Writing over an output folder is :mod:`hf_s2s.models.output_record`'s rule: a command replaces only what it wrote.
"""

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# The JSON files of a tokenizer folder that AutoTokenizer reads when they are there.
TOKENIZER_JSON_FILES = (*TOKENIZER_FILES, "special_tokens_map.json", "added_tokens.json")
# What huggingface_hub accepts as a repo id: "name" or "namespace/name", no leading dot or slash.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
# Names ending so are files, never Hub repo ids (corpora, weights, configs).
LOCAL_FILE_SUFFIXES = (".gz", ".tsv", ".txt", ".csv", ".json", ".jsonl", ".parquet", ".arrow", ".safetensors", ".bin",
                       ".pt", ".pth")
_SHOWN_KEYS = 5  # keys named per kind of problem; the count says how many more


class ModelFolderError(ValueError):
    """A model folder is missing, incomplete, corrupt, or its weights do not match its config."""


def looks_like_local_path(name_or_path: str | Path) -> bool:
    """Whether ``name_or_path`` can only mean a local path, not a Hub repo id: it starts with ``.``, ``~`` or
    ``/``, cannot be a repo id (``runs/x/model``: a repo id is ``name`` or ``namespace/name``), ends in a data or
    weights file suffix (``corpus.tsv``), or its first folder exists here (``runs/x`` beside a ``runs/``
    folder). Decided on the name only: whether the path exists is the caller's question."""
    text = str(name_or_path)
    first = text.split("/", 1)[0]
    return (text.startswith((".", "~", "/", os.sep)) or not _REPO_ID.fullmatch(text)
            or text.lower().endswith(LOCAL_FILE_SUFFIXES) or ("/" in text and Path(first).is_dir()))


def local_folder(name_or_path: str | Path, flag: str | None = None) -> Path | None:
    """The local folder ``name_or_path`` names, or None when it can only be a Hub repo id. A path that exists
    but is not a folder, or that does not exist and looks like a local path (:func:`looks_like_local_path`:
    ``runs/x/model``, ``./model``), is a :class:`ModelFolderError` saying so (with ``flag``, the command-line flag
    that gave it), instead of a Hub lookup that fails with a network message."""
    path = Path(name_or_path).expanduser()
    named = f"{flag} {name_or_path}: " if flag else ""
    if path.is_dir():
        return path
    if path.exists():
        raise ModelFolderError(f"{named}{path} is a file, not a model folder")
    if not looks_like_local_path(name_or_path):
        return None
    raise ModelFolderError(f"{named}model folder {path} does not exist" + (
        " (a local path, not a Hub repo id: those read 'name' or 'namespace/name')" if flag else ""))


@contextmanager
def refusing_folder_code(name_or_path: str | Path) -> Iterator[None]:
    """Around a load with ``trust_remote_code=False``: transformers' refusal of a folder whose ``auto_map`` names
    classes that neither hf_s2s nor transformers has (its ValueError asks for ``trust_remote_code=True``, which no
    hf_s2s command passes) becomes a :class:`ModelFolderError` naming the folder and what to do."""
    try:
        yield
    except ValueError as error:
        if "trust_remote_code" not in str(error):
            raise
        raise ModelFolderError(
            f"{name_or_path} needs code of its own to load: its auto_map names classes that neither hf_s2s (model "
            "types rnn_seq2seq, transformer_seq2seq) nor transformers has, and hf-s2s commands never run a model "
            f"folder's code. Check that code (hf-s2s verify {name_or_path}) and, if you trust it, load the folder "
            f"with transformers yourself (from_pretrained(..., trust_remote_code=True)); or give an hf_s2s model "
            "folder"
        ) from error


def check_not_an_export(folder: Path) -> None:
    """A :class:`ModelFolderError` when ``folder`` is a CTranslate2 model directory (``model.bin`` beside a config.json
    without ``model_type``: what ``hf-s2s export-ctranslate2`` and CTranslate2's own converters write), which no
    hf_s2s command reads as a model folder, naming it as what it is rather than by the first file it lacks."""
    if not (folder / "model.bin").is_file() or not (folder / "config.json").is_file():
        return
    try:
        config = json.loads((folder / "config.json").read_bytes())
    except ValueError:  # not JSON: not CTranslate2's, and loading names it
        return
    if isinstance(config, dict) and "model_type" not in config:
        raise ModelFolderError(
            f"{folder} is a CTranslate2 model directory (model.bin, written by export-ctranslate2), not a model "
            "folder: give the model folder it was exported from (the ctranslate2 engine, --engine ctranslate2, "
            "exports one itself when it loads), or load this directory with ctranslate2.Translator")


def _check_weight_files(folder: Path) -> None:
    """Read the header of every safetensors file, so a truncated or corrupt one is named before loading."""
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(file, framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            raise ModelFolderError(f"{file} is truncated or corrupt ({error}); save or copy the model again") \
                from error


def _describe_keys(kind: str, keys) -> str:
    keys = sorted(str(k[0] if isinstance(k, tuple) else k) for k in keys)
    more = f" and {len(keys) - _SHOWN_KEYS} more" if len(keys) > _SHOWN_KEYS else ""
    shown = ", ".join(keys[:_SHOWN_KEYS]) + more
    return f"{len(keys)} {kind} ({shown})"


def load_model(name_or_path: str | Path, model_class=AutoModelForSeq2SeqLM, **kwargs):
    """``model_class.from_pretrained(name_or_path, **kwargs)`` that refuses a folder whose weights do not match its
    config: any missing, unexpected or mismatched key is a :class:`ModelFolderError` naming the keys. A missing
    local folder, one without config.json and a corrupt weights file are named as such."""
    folder = local_folder(name_or_path)
    if folder is not None:
        check_not_an_export(folder)
        if not (folder / "config.json").is_file():
            raise ModelFolderError(f"{folder} holds no config.json: not a saved model folder")
        _check_weight_files(folder)
    try:
        # ignore_mismatched_sizes: report a shape mismatch in the loading info (refused below, with the keys)
        # instead of transformers' RuntimeError that points at a logged table.
        with refusing_folder_code(name_or_path):
            model, info = model_class.from_pretrained(name_or_path, output_loading_info=True,
                                                      ignore_mismatched_sizes=True, trust_remote_code=False, **kwargs)
    except OSError as error:
        if folder is None:
            raise ModelFolderError(f"{name_or_path} is not a local folder (no such folder here) and could not be "
                                   f"loaded as a Hub model: {error}") from error
        raise
    problems = [_describe_keys(f"{kind} weights", info[f"{kind}_keys"])
                for kind in ("missing", "unexpected", "mismatched") if info[f"{kind}_keys"]]
    if problems:
        raise ModelFolderError(
            f"the weights in {name_or_path} do not match its config.json (model_type "
            f"{model.config.model_type!r}): " + "; ".join(problems) + ". Loading it would leave those weights "
            "random; re-save the model with save_pretrained"
        )
    return model


def load_tokenizer(name_or_path: str | Path, **kwargs):
    """``AutoTokenizer.from_pretrained`` of a model folder (or Hub id). A local folder without tokenizer files is a
    :class:`ModelFolderError` saying so (transformers would ask for sentencepiece instead); a folder of separate
    ``source/`` and ``target/`` tokenizers (no tokenizer_config.json) is one too: it loads with
    ``hf_s2s.data.tokenization.TranslationTokenizers.from_pretrained``."""
    folder = local_folder(name_or_path)
    if folder is not None:
        check_not_an_export(folder)
    if folder is not None and not (folder / "tokenizer_config.json").is_file() and (folder / "source").is_dir():
        raise ModelFolderError(f"{folder} holds separate source/ and target/ tokenizers; load them with "
                               f"TranslationTokenizers.from_pretrained({str(folder)!r})")
    if folder is not None and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelFolderError(f"{folder} holds no tokenizer (expected {' or '.join(TOKENIZER_FILES)}); save the "
                               "tokenizer into the model folder with tokenizer.save_pretrained")
    if folder is not None:
        check_tokenizer_json(folder)
    with refusing_folder_code(name_or_path):
        return AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=False, **kwargs)


def check_tokenizer_json(folder: Path) -> None:
    """A :class:`ModelFolderError` naming the first tokenizer JSON file of ``folder`` (:data:`TOKENIZER_JSON_FILES`;
    through a symlink, as a Hub cache snapshot holds them, naming the file it points to) that is not JSON, where
    transformers' own error names no file."""
    for path in (folder / name for name in TOKENIZER_JSON_FILES):
        if not path.is_file():
            continue
        try:
            json.loads(path.read_bytes())
        except ValueError as error:  # JSONDecodeError, or bytes that are not UTF-8
            reason = f"{error.msg} at line {error.lineno}, column {error.colno}" \
                if isinstance(error, json.JSONDecodeError) else "not UTF-8"
            linked = f" (a symlink to {path.resolve()})" if path.is_symlink() else ""
            raise ModelFolderError(f"{path}{linked} is not JSON ({reason}): the folder's tokenizer cannot be read; "
                                   "copy the file again, or save the tokenizer again (tokenizer.save_pretrained)") \
                from None


def load_config(name_or_path: str | Path):
    """A model folder's config alone, without its weights (``AutoConfig``): what decoding and averaging check before
    loading. A missing folder, or one without config.json, is a :class:`ModelFolderError` as in :func:`load_model`."""
    folder = local_folder(name_or_path)
    if folder is not None:
        check_not_an_export(folder)
    if folder is not None and not (folder / "config.json").is_file():
        raise ModelFolderError(f"{folder} holds no config.json: not a saved model folder")
    with refusing_folder_code(name_or_path):
        return AutoConfig.from_pretrained(name_or_path, trust_remote_code=False)


def load_generation_config(name_or_path: str | Path, config=None) -> GenerationConfig:
    """A model folder's generation config without its weights, as ``from_pretrained`` gives its model one: the
    folder's generation_config.json, else one made from its model config (``config``, else config.json), as
    transformers falls back. Decoding completes its options from it before any weights are loaded, and hands it to
    :func:`load_model` (``generation_config=``), so that the model decodes with the config the options came from."""
    try:
        return GenerationConfig.from_pretrained(name_or_path)
    except OSError:  # no generation_config.json
        return GenerationConfig.from_model_config(config if config is not None else load_config(name_or_path))


def check_writable(folder: str | Path, flag: str) -> None:
    """Raise ``PermissionError`` unless ``folder`` can be created or written to, naming ``flag``: checked on the
    folder, or on the nearest folder above it that exists, before any long work, so that a read-only place fails
    at once instead of after training. Nothing is created."""
    folder = Path(folder).expanduser()
    existing = next(path for path in (folder, *folder.absolute().parents) if path.exists())
    if not existing.is_dir():
        raise NotADirectoryError(f"{flag} {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == folder else f" (it would be created in {existing})"
        raise PermissionError(f"{flag} {folder} cannot be written to{where}: no write permission there, or a "
                              f"read-only file system; choose another {flag}")


__all__ = ["ModelFolderError", "check_not_an_export", "check_tokenizer_json", "check_writable", "load_config", "load_model", "load_tokenizer", "local_folder",
           "looks_like_local_path", "refusing_folder_code"]
