"""What a command wrote into its output folder, recorded by content, and the one rule for writing over it.

An overwrite flag (``hf-s2s convert --overwrite``; ``--overwrite_output_dir`` of ``export-onnx``,
``export-ctranslate2`` and ``average-checkpoints``) replaces what the same command wrote into that folder before,
and nothing else. A list of names cannot tell what that is: anyone can write such a list (a crafted or foreign one
named any file), and a file under a listed name may have been edited or replaced since. So each of these commands
records in :data:`RECORD_FILE` the sha256 of every file it wrote (:func:`record_output`), and the flag deletes a
file only while its bytes still match that record (:func:`clear_output`). A folder that holds anything else (a
changed file, a file the record does not list, a symlink, another command's output) is refused before any work,
naming each such entry and deleting nothing (:func:`check_output_folder`). The command then writes into an empty
folder, so no file of an earlier model (its results, card, training arguments, code, tokenizer or checkpoints) is
left beside the new output, for push-to-hub or anyone else to take for part of it.
"""

import hashlib
import json
import os
import stat
from pathlib import Path

RECORD_FILE = "hf_s2s_output.json"
_SHOWN = 8  # entries named in a refusal; the count says how many more


def sha256_file(path: str | Path) -> str:
    """The sha256 of a file's bytes, read a MiB at a time (weights files run to gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _entries(folder: Path) -> tuple[dict[str, Path], list[str], list[str]]:
    """(regular files by relative POSIX path, subfolders, every other entry: a symlink of any kind, a FIFO, socket
    or device). A symlinked folder is listed, never entered: nothing the commands write is a link."""
    files, subfolders, others = {}, [], []
    for root, folders, names in os.walk(folder):  # followlinks=False
        for name in [*folders, *names]:
            path = Path(root, name)
            relative = path.relative_to(folder).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode):
                files[relative] = path
            elif stat.S_ISDIR(mode):
                subfolders.append(relative)
            else:
                others.append(relative)
    return files, subfolders, others


def _recorded(folder: Path, command: str) -> tuple[dict[str, str] | None, str]:
    """({file: sha256} that ``command`` recorded in ``folder``, "") or (None, why there is no such record)."""
    path = folder / RECORD_FILE
    if path.is_symlink() or not path.is_file():
        return None, f"it holds no {RECORD_FILE} (the record hf-s2s {command} writes of its output)"
    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError):
        record = None
    if not (isinstance(record, dict) and isinstance(record.get("files"), dict)):
        return None, f"its {RECORD_FILE} is not a record hf_s2s wrote"
    if record.get("command") != f"hf-s2s {command}":
        return None, f"its {RECORD_FILE} records the output of {record.get('command')!r}, not of hf-s2s {command}"
    return record["files"], ""


def _shown(names: list[str]) -> str:
    return ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def check_output_folder(folder: str | Path, command: str, flag: str, overwrite: bool) -> None:
    """Refuse an output ``folder`` that ``command`` may not write into: a file; a folder holding anything, unless
    ``overwrite`` (the command-line ``flag``) and everything in it is what ``command`` wrote there, unchanged (its
    record verified file by file). Deletes nothing; raises ``FileExistsError`` naming what is there and what to do."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a folder")
    if not folder.is_dir() or not any(folder.iterdir()):
        return
    if not overwrite:
        held = sorted(path.name for path in folder.iterdir())
        raise FileExistsError(f"{folder} already holds files ({_shown(held)}): refusing to write into it; choose an "
                              f"empty or new folder, or pass {flag} to replace what hf-s2s {command} wrote there")
    refusal = f"{flag} replaces only what hf-s2s {command} wrote into {folder}, byte for byte, and"
    record, missing = _recorded(folder, command)
    if record is None:
        raise FileExistsError(f"{refusal} {missing}, so nothing there is known to be its output; nothing was "
                              "deleted: choose an empty or new folder")
    foreign = _foreign_entries(folder, command, record)
    if foreign:
        raise FileExistsError(f"{refusal} it also holds {_shown(foreign)}; these are left in place and "
                              f"nothing was deleted: move them out of {folder}, or choose an empty or new "
                              "folder")


def output_problem(folder: str | Path, command: str) -> str | None:
    """Why the existing ``folder`` is not only what ``command`` wrote there, unchanged, in words that follow
    "and" (no record of ``command``'s, or entries the record does not list or that changed since, each named);
    None when it is, so that ``command`` may replace it whole. For a caller that replaces such a folder late
    in a long job and checks it before the job starts."""
    record, missing = _recorded(Path(folder), command)
    if record is None:
        return missing
    foreign = _foreign_entries(Path(folder), command, record)
    return f"it also holds {_shown(foreign)}" if foreign else None


def _foreign_entries(folder: Path, command: str, record: dict[str, str]) -> list[str]:
    """Each entry of ``folder`` other than the files ``record`` lists, unchanged: "name (why)", sorted."""
    files, subfolders, others = _entries(folder)
    foreign = {name: "a symlink or special file" for name in others}
    foreign |= {name: f"a folder hf-s2s {command} did not write" for name in subfolders
                if not any(recorded.startswith(f"{name}/") for recorded in record)}
    for name, path in files.items():
        if name not in record and name != RECORD_FILE:
            foreign[name] = f"not written by hf-s2s {command}"
        elif name in record and sha256_file(path) != record[name]:
            foreign[name] = f"changed since hf-s2s {command} wrote it"
    return [f"{name} ({why})" for name, why in sorted(foreign.items())]


def clear_output(folder: str | Path, command: str, flag: str) -> None:
    """Delete an earlier output of ``command`` from ``folder``, leaving the folder itself, empty. The folder is
    checked again first (:func:`check_output_folder` with ``overwrite``): the check before the command's work may
    be minutes old."""
    folder = Path(folder)
    check_output_folder(folder, command, flag, overwrite=True)
    if not folder.is_dir():
        return
    for root, folders, names in os.walk(folder, topdown=False):
        for name in names:
            os.unlink(Path(root, name))
        for name in folders:
            os.rmdir(Path(root, name))


def record_output(folder: str | Path, command: str) -> Path:
    """Write :data:`RECORD_FILE` into ``folder``: the sha256 of every file in it, all of which ``command`` has just
    written there (it wrote into an empty folder). Returns the record's path."""
    folder = Path(folder)
    files = _entries(folder)[0]
    record = {"command": f"hf-s2s {command}",
              "about": f"the files hf-s2s {command} wrote here and their sha256: its overwrite flag deletes them "
                       "while they are unchanged, and refuses if the folder holds anything else",
              "files": {name: sha256_file(path) for name, path in sorted(files.items()) if name != RECORD_FILE}}
    path = folder / RECORD_FILE
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


__all__ = ["RECORD_FILE", "check_output_folder", "clear_output", "output_problem", "record_output",
           "sha256_file"]
