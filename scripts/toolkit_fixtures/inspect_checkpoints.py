#!/usr/bin/env python3
"""List what each toolkit fixture's checkpoint pickle holds: the Python globals it names (the allow-list a
``torch.load(weights_only=True)`` loader needs), whether weights_only loading succeeds with exactly those
allowed, and every state-dict key with its shape. Writes scripts/toolkit_fixtures/CHECKPOINTS.md.

Needs torch: run it with a toolkit venv's python (any; the fixtures are not unpickled beyond what torch's
weights_only unpickler allows, except the key listing, which loads our own fixtures in full):

    .toolkit_venvs/opennmt/bin/python scripts/toolkit_fixtures/inspect_checkpoints.py
"""

from __future__ import annotations

import importlib
import io
import pickletools
import zipfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "toolkits"
OUT = Path(__file__).with_name("CHECKPOINTS.md")
CHECKPOINT_NAMES = ("model.pt", "model.ckpt", "checkpoint.pt")


def pickled_globals(path: Path) -> list[str]:
    """Every module.name a checkpoint's data.pkl imports (GLOBAL / STACK_GLOBAL opcodes), without unpickling."""
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl")
        data = archive.read(name)
    found, strings = set(), []
    for opcode, arg, _ in pickletools.genops(io.BytesIO(data)):
        if opcode.name == "GLOBAL":
            module, attr = arg.split(" ", 1)
            found.add(f"{module}.{attr}")
        elif opcode.name == "STACK_GLOBAL":
            found.add(f"{strings[-2]}.{strings[-1]}")
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
            strings.append(arg)
    return sorted(found)


def resolve(qualified: str):
    module, _, attr = qualified.rpartition(".")
    module = {"__builtin__": "builtins"}.get(module, module)  # protocol-2 pickles name builtins so
    try:
        obj = importlib.import_module(module)
    except ImportError:
        return None
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    return obj


def weights_only_status(path: Path, names: list[str]) -> str:
    """Try torch.load(weights_only=True) allowing exactly the non-torch globals the pickle names."""
    allowed = [resolve(n) for n in names if not n.startswith(("torch.", "collections.OrderedDict"))]
    missing = [n for n, obj in zip([n for n in names if not n.startswith(("torch.", "collections.OrderedDict"))],
                                   allowed, strict=True) if obj is None]
    if missing:
        return f"not tried here: {missing} not importable in this venv"
    try:
        with torch.serialization.safe_globals([a for a in allowed if a is not None]):
            torch.load(path, map_location="cpu", weights_only=True)
        return "loads with weights_only=True and these globals allowed"
    except Exception as error:  # report, do not fail: the converter engineer needs the message
        first = str(error).strip().splitlines()
        return "fails: " + " ".join(line.strip() for line in first if "WeightsUnpickler" in line or "Unsupported" in line)[:400]


def state_dicts(path: Path) -> dict[str, dict[str, tuple]]:
    """{top-level key: {param name: shape}} for every dict of tensors in the checkpoint (our own fixture)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    out = {}
    for key, value in checkpoint.items():
        if isinstance(value, dict) and value and all(torch.is_tensor(v) for v in value.values()):
            out[key] = {name: tuple(tensor.shape) for name, tensor in value.items()}
    out["<top-level keys>"] = {k: type(v).__name__ for k, v in checkpoint.items()}
    return out


def main() -> None:
    lines = ["# What the fixture checkpoints hold",
             "",
             "Written by `scripts/toolkit_fixtures/inspect_checkpoints.py` (do not edit by hand). For each fixture: the",
             "globals its pickle names (found with pickletools, nothing unpickled), whether",
             "`torch.load(weights_only=True)` succeeds with exactly the non-torch ones allowed, and each state dict's",
             "keys and shapes.", ""]
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        path = next((folder / n for n in CHECKPOINT_NAMES if (folder / n).exists()), None)
        if path is None:
            continue
        names = pickled_globals(path)
        lines += [f"## {folder.name}/{path.name} ({path.stat().st_size:,} bytes)", "", "Pickled globals:", ""]
        lines += [f"- `{n}`" for n in names]
        lines += ["", f"weights_only: {weights_only_status(path, names)}", ""]
        for key, entries in state_dicts(path).items():
            lines += [f"`{key}`:", "", "```"]
            lines += [f"{name}  {shape}" if isinstance(shape, tuple) else f"{name}: {shape}" for name, shape in entries.items()]
            lines += ["```", ""]
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
