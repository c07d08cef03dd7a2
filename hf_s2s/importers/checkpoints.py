"""Reading the old toolkits' checkpoints without running their code.

OpenNMT-py, Joey NMT and fairseq save checkpoints with ``torch.save``: pickles. Unpickling runs whatever the
file names, so a checkpoint from the Hub or a colleague is code. :func:`load_checkpoint` loads with
``torch.load(weights_only=True)``, which rebuilds tensors, containers and primitives only, plus an explicit
allow-list of the few plain-data classes each toolkit stores (``argparse.Namespace`` for the options, for
one). Anything else is refused before a byte is unpickled, naming the class: the converter never imports a
toolkit, and never needs to. A file that is no checkpoint (empty, truncated, text) is named as such, and
:func:`read_text_file` reads the text files the toolkits keep beside a checkpoint (configs, vocabularies),
refusing a binary one by name.
"""

import argparse
import collections
import pickle
from pathlib import Path
from typing import Any

import torch

# What each toolkit's checkpoints hold beyond tensors and builtins (found by reading their save code and the
# fixtures' pickles; tests/test_importers.py loads every fixture through this list).
ALLOWED_GLOBALS: dict[str, tuple[Any, ...]] = {
    "opennmt-py": (argparse.Namespace, collections.OrderedDict, collections.defaultdict),
    "joeynmt": (collections.OrderedDict, collections.defaultdict),
    "fairseq": (argparse.Namespace, collections.OrderedDict, collections.defaultdict),
}


ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since torch 1.6 is a zip archive
PICKLE_MAGIC = b"\x80"  # the legacy format starts with a pickle protocol opcode


class CheckpointError(ValueError):
    """A checkpoint that cannot be converted: not one, unreadable, or holding an object outside the
    allow-list."""


def _name(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def load_checkpoint(path: str | Path, toolkit: str) -> dict:
    """The checkpoint at ``path`` as plain data (tensors, dicts, lists, strings, numbers and the allow-listed
    classes of ``toolkit``), loaded on the CPU. A class outside the allow-list is a :class:`CheckpointError`
    naming it, raised before anything is unpickled."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is not a file: pass the toolkit's checkpoint file (e.g. model_step_N.pt, "
                              "best.ckpt, checkpoint_best.pt)")
    allowed = ALLOWED_GLOBALS[toolkit]
    allowed_names = {_name(cls) for cls in allowed}
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception as error:  # not a complete torch.save zip file
        raise CheckpointError(unreadable(path, error)) from error
    refused = sorted(name for name in found if name not in allowed_names)
    others = [other for other, classes in ALLOWED_GLOBALS.items()
              if other != toolkit and set(refused) <= {_name(cls) for cls in classes}]
    if refused and others:  # plain data another toolkit stores: the wrong --from, not a threat
        raise CheckpointError(f"{path} holds {', '.join(refused)}, which {toolkit} checkpoints do not and "
                              f"{' and '.join(others)} checkpoints do: convert it with "
                              f"{' or '.join(f'--from {other}' for other in others)}")
    if refused:
        raise CheckpointError(
            f"{path} holds objects of {', '.join(refused)}, which a {toolkit} checkpoint of a supported "
            f"model does not: loading them would run code, so the converter refuses (it allows only tensors, "
            f"containers and {', '.join(sorted(allowed_names))})")
    try:
        with torch.serialization.safe_globals(list(allowed)):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as error:  # a damaged archive member
        raise CheckpointError(f"{path} could not be read: the file is damaged ({error})") from error
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{path} holds a {type(checkpoint).__name__}, not a {toolkit} checkpoint (a dict)")
    return checkpoint


def unreadable(path: Path, error: Exception) -> str:
    """Why ``path`` is not a checkpoint torch can list safely, told by its first bytes."""
    size = path.stat().st_size
    with open(path, "rb") as file:
        head = file.read(4)
    if size == 0:
        return f"{path} is empty (0 bytes): an interrupted copy? Pass the checkpoint file the toolkit saved"
    if head == ZIP_MAGIC:
        return (f"{path} is a damaged or truncated torch checkpoint ({size:,} bytes, a zip archive without "
                "its directory): copy it again from where the toolkit saved it")
    if head.startswith(PICKLE_MAGIC):
        return (f"{path} is in torch's legacy (pre-1.6) format, which this converter cannot check before "
                "loading; re-save it with a recent torch (torch.save writes the zip format since torch 1.6)")
    return (f"{path} is not a torch checkpoint (it starts with {head!r}, a torch.save file with "
            f"{ZIP_MAGIC!r}): pass the checkpoint file the toolkit saved (e.g. model_step_N.pt, best.ckpt, "
            "checkpoint_best.pt)")


def read_text_file(path: Path, what: str, flag: str) -> str:
    """The text of a file the toolkit keeps beside its checkpoint (``what``: e.g. "the Joey NMT config";
    ``flag``: the command-line option that names it), refusing a missing file, a folder and a binary file,
    each naming the file."""
    if not path.exists():
        raise CheckpointError(f"{path} not found: pass {what} with {flag}")
    if not path.is_file():
        raise CheckpointError(f"{path} is not a file: pass {what} with {flag}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        position = error.start
    else:
        position = data.find(b"\0")  # decodes, but no text file holds a NUL byte
        if position < 0:
            return text
    raise CheckpointError(f"{path} is not a text file (byte {position} is {data[position:position + 1]!r}: a "
                          f"binary file?); pass {what} with {flag}")


class Options(dict):
    """A checkpoint's options as a dict whose missing key is a :class:`CheckpointError` naming the option and
    where it should have been (``where``, e.g. "model.pt's options (opt)")."""

    def __init__(self, values: dict, where: str):
        super().__init__(values)
        self.where = where

    def __missing__(self, key: str):
        raise CheckpointError(f"{self.where} lack(s) {key!r}, which the converter needs: not a complete set "
                              "of this toolkit's options")


def options(value: Any, where: str = "the checkpoint's options") -> Options:
    """A checkpoint's options (``argparse.Namespace``, a dict, or None) as :class:`Options`."""
    if value is None:
        return Options({}, where)
    if not isinstance(value, argparse.Namespace | dict):
        raise CheckpointError(f"{where} are a {type(value).__name__}, not a set of options: not a checkpoint "
                              "of this toolkit, or a damaged one")
    return Options(vars(value) if isinstance(value, argparse.Namespace) else value, where)


__all__ = ["ALLOWED_GLOBALS", "CheckpointError", "Options", "load_checkpoint", "options", "read_text_file"]
