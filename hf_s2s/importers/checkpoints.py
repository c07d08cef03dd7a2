"""Reading the old toolkits' checkpoints without running their code.

OpenNMT-py, Joey NMT and fairseq save checkpoints with ``torch.save``: pickles. Unpickling runs whatever the file
names, so a checkpoint from the Hub or a colleague is code. :func:`load_checkpoint` loads with
``torch.load(weights_only=True)``, which rebuilds tensors, containers and primitives only, plus an explicit allow-list
of the few plain-data classes each toolkit stores (``argparse.Namespace`` for the options, for one). Anything else is
refused before a byte is unpickled, naming the class: the converter never imports a toolkit, and never needs to.
"""

import argparse
import collections
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


class CheckpointError(ValueError):
    """A checkpoint that cannot be converted: not one, unreadable, or holding an object outside the allow-list."""


def _name(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def load_checkpoint(path: str | Path, toolkit: str) -> dict:
    """The checkpoint at ``path`` as plain data (tensors, dicts, lists, strings, numbers and the allow-listed
    classes of ``toolkit``), loaded on the CPU. A class outside the allow-list is a :class:`CheckpointError` naming
    it, raised before anything is unpickled."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is not a file: pass the toolkit's checkpoint file (e.g. model_step_N.pt, "
                              "best.ckpt, checkpoint_best.pt)")
    allowed = ALLOWED_GLOBALS[toolkit]
    allowed_names = {_name(cls) for cls in allowed}
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception as error:  # not a torch.save zip file: an old pickle format, or not a checkpoint at all
        raise CheckpointError(f"{path} is not a torch checkpoint this converter can read safely ({error}); re-save it "
                              "with a recent torch (torch.save writes the zip format since torch 1.6)") from error
    refused = sorted(name for name in found if name not in allowed_names)
    if refused:
        raise CheckpointError(
            f"{path} holds objects of {', '.join(refused)}, which a {toolkit} checkpoint of a supported model does not: "
            f"loading them would run code, so the converter refuses (it allows only tensors, containers and "
            f"{', '.join(sorted(allowed_names))})")
    with torch.serialization.safe_globals(list(allowed)):
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{path} holds a {type(checkpoint).__name__}, not a {toolkit} checkpoint (a dict)")
    return checkpoint


def options(value: Any) -> dict:
    """A checkpoint's options (``argparse.Namespace``, a dict, or None) as a dict."""
    if value is None:
        return {}
    return dict(vars(value)) if isinstance(value, argparse.Namespace) else dict(value)


__all__ = ["ALLOWED_GLOBALS", "CheckpointError", "load_checkpoint", "options"]
