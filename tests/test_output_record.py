"""The overwrite rule every command with an overwrite flag follows (hf_s2s.models.output_record): the flag deletes
only files whose bytes are still what the same command recorded writing, and a folder holding anything else is
refused with every such entry named and nothing deleted, however the record reads. On real files and folders;
the commands' own tests (export-onnx, export-ctranslate2, convert, average-checkpoints, train-tokenizer) show each
of them following it."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from hf_s2s.models.output_record import RECORD_FILE, check_output_folder, clear_output, record_output

FLAG = "--overwrite_output_dir"


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, a link's target, a folder or a FIFO by kind, never opened."""
    entries = {}
    for root, folders, names in os.walk(folder):
        for name in [*folders, *names]:
            path = Path(root, name)
            key = path.relative_to(folder).as_posix()
            entries[key] = (f"-> {os.readlink(path)}" if path.is_symlink() else "folder" if path.is_dir()
                            else "fifo" if not path.is_file() else path.read_bytes())
    return entries


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def output(tmp_path) -> Path:
    """What a command ("export-x") wrote and recorded: two files, one in a subfolder."""
    folder = tmp_path / "out"
    (folder / "part").mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"weights")
    (folder / "part" / "vocab.txt").write_text("a\nb\n")
    record_output(folder, "export-x")
    return folder


def test_a_recorded_unchanged_output_is_replaced_whole(output):
    recorded = json.loads((output / RECORD_FILE).read_text())
    assert recorded["command"] == "hf-s2s export-x"
    assert recorded["files"] == {"model.bin": sha256(b"weights"), "part/vocab.txt": sha256(b"a\nb\n")}
    check_output_folder(output, "export-x", FLAG, overwrite=True)
    clear_output(output, "export-x", FLAG)
    assert output.is_dir() and not any(output.iterdir())


def test_without_the_flag_any_file_is_refused_naming_the_flag(output, tmp_path):
    with pytest.raises(FileExistsError, match=rf"{output} already holds files \(hf_s2s_output.json, model.bin, part\): "
                                              rf"refusing to write into it; .* pass {FLAG} to replace what hf-s2s "
                                              "export-x wrote there"):
        check_output_folder(output, "export-x", FLAG, overwrite=False)
    check_output_folder(tmp_path / "new", "export-x", FLAG, overwrite=False)  # a new folder is fine
    (tmp_path / "empty").mkdir()
    check_output_folder(tmp_path / "empty", "export-x", FLAG, overwrite=False)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        check_output_folder(tmp_path / "a_file", "export-x", FLAG, overwrite=True)


def edit_a_file(folder: Path, outside: Path) -> str:
    (folder / "model.bin").write_bytes(b"weights fine-tuned by hand")
    return "model.bin (changed since hf-s2s export-x wrote it)"


def add_a_file(folder: Path, outside: Path) -> str:
    (folder / "part" / "notes.txt").write_text("mine")
    return "part/notes.txt (not written by hf-s2s export-x)"


def add_a_folder(folder: Path, outside: Path) -> str:
    (folder / "checkpoint-100").mkdir()
    return "checkpoint-100 (a folder hf-s2s export-x did not write)"


def replace_a_file_by_a_link_to_its_bytes(folder: Path, outside: Path) -> str:
    """The link's target holds the recorded bytes; deleting by following it would delete a file elsewhere."""
    (outside / "weights").write_bytes(b"weights")
    (folder / "model.bin").unlink()
    (folder / "model.bin").symlink_to(outside / "weights")
    return "model.bin (a symlink or special file)"


def link_a_folder(folder: Path, outside: Path) -> str:
    (outside / "data").mkdir()
    (outside / "data" / "vocab.txt").write_text("a\nb\n")
    (folder / "data").symlink_to(outside / "data", target_is_directory=True)
    return "data (a symlink or special file)"


def add_a_fifo(folder: Path, outside: Path) -> str:
    os.mkfifo(folder / "pipe")
    return "pipe (a symlink or special file)"


def record_a_persons_file(folder: Path, outside: Path) -> str:
    """A record naming a file it did not write, with a hash that is not that file's (a forged or edited record)."""
    (folder / "thesis.tex").write_text("three years of work")
    record = json.loads((folder / RECORD_FILE).read_text())
    record["files"]["thesis.tex"] = sha256(b"something else")
    (folder / RECORD_FILE).write_text(json.dumps(record))
    return "thesis.tex (changed since hf-s2s export-x wrote it)"


ENTRIES = [edit_a_file, add_a_file, add_a_folder, replace_a_file_by_a_link_to_its_bytes, link_a_folder, add_a_fifo,
           record_a_persons_file]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.__name__)
def test_an_entry_that_is_not_the_commands_unchanged_output_is_named_and_nothing_is_deleted(output, tmp_path,
                                                                                              entry):
    outside = tmp_path / "outside"
    outside.mkdir()
    named = entry(output, outside)
    before, elsewhere = snapshot(output), snapshot(outside)
    with pytest.raises(FileExistsError) as refused:
        clear_output(output, "export-x", FLAG)
    assert str(refused.value).startswith(f"{FLAG} replaces only what hf-s2s export-x wrote into {output}, byte for "
                                         f"byte, and it also holds {named}; these are left in place and nothing "
                                         f"was deleted: move them out of {output}")
    assert snapshot(output) == before and snapshot(outside) == elsewhere


@pytest.mark.parametrize("record", [None, "not json", {"files": []}, {"command": "hf-s2s convert", "files": {}}])
def test_a_folder_without_this_commands_record_is_refused_whole(output, record):
    if record is None:
        (output / RECORD_FILE).unlink()
    else:
        (output / RECORD_FILE).write_text(record if isinstance(record, str) else json.dumps(record))
    before = snapshot(output)
    with pytest.raises(FileExistsError, match=rf"{FLAG} replaces only what hf-s2s export-x wrote into {output}, byte "
                                              "for byte, and (it holds no|its) hf_s2s_output.json.*nothing was "
                                              "deleted: choose an empty or new folder"):
        clear_output(output, "export-x", FLAG)
    assert snapshot(output) == before


def test_a_record_cannot_reach_outside_the_folder(output, tmp_path):
    """The rule deletes what it finds in the folder and the record vouches for; names in the record that lead
    elsewhere (up, absolute) are never looked at, whatever hashes they carry."""
    (tmp_path / "victim.txt").write_text("keep me")
    record = json.loads((output / RECORD_FILE).read_text())
    record["files"].update({"../victim.txt": sha256(b"keep me"), str(tmp_path / "victim.txt"): sha256(b"keep me")})
    (output / RECORD_FILE).write_text(json.dumps(record))
    clear_output(output, "export-x", FLAG)
    assert not any(output.iterdir()) and (tmp_path / "victim.txt").read_text() == "keep me"
