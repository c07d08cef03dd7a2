"""Code integrity of shared model folders: the code a folder ships is an hf_s2s release's own, byte for byte.

A folder loaded with ``trust_remote_code=True`` runs its .py files. Reading that code to guess what it may do (an
allow-list of modules and forbidden names over the syntax tree, before issue 24) cannot be complete: Python is an
open language, and five payloads passed such a check. hf_s2s checks identity instead: ``code_manifest.json``,
shipped in the package, records the sha256 of every code file a saved folder can hold
(:data:`SHIPPED_CODE_FILES`) for each release. :func:`compare_with_releases` compares a folder's code with those
records: ``hf-s2s push-to-hub`` refuses code that is not the installed release's (``--allow-modified-code`` pushes
it after printing :func:`code_diff`), and ``hf-s2s verify`` tells a downloader which release a folder's code is.

Every .py file anywhere in the folder counts, imported or not: the Hub serves them all, and transformers runs some
that nothing imports (``custom_generate/generate.py`` replaces ``generate`` under ``trust_remote_code``). The folder
is walked entry by entry (:func:`walk_folder`), as transformers reaches files: through a symlink to a file its target
counts, under the link's name; what cannot be verified as a file of the folder is a problem of its own (a symlink to a
folder, which ``Path.rglob`` does not descend into and transformers reads through; a broken link or a loop; a FIFO,
socket or device). Every ``auto_map`` and ``custom_pipelines`` entry of the folder's JSON files must name a code file
the folder holds (transformers also loads one by absolute path, or from another repository).

The entry of the current release (``hf_s2s/models/version.py``) follows the working tree until that release is out:
:data:`REGENERATE` rewrites it and keeps every earlier release's entry, and tests/test_verify.py fails while it is
stale. Once a release is out, raise the version before changing a code file, or its entry would be overwritten.
"""

import argparse
import difflib
import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from ..models.families import SHIPPED_CODE_FILES
from ..models.version import __version__

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "models"  # the code a saved folder ships
MANIFEST_PATH = Path(__file__).resolve().parent / "code_manifest.json"  # package data: installed with hf_s2s
REGENERATE = "python -m hf_s2s.hub.code_integrity --write-manifest"

# Pickle-based or otherwise executable weight formats: loading them can run code.
PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".npy", ".npz", ".joblib")
# Compiled code cannot be compared with a release.
COMPILED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib")
# Levels of folders walk_folder descends: a model folder holds code one level down (custom_generate/), a Hub
# repository a few more; a folder deeper than this is refused, not walked (paths near the system's limit, 4,096 bytes
# on Linux, cannot even be opened).
MAX_FOLDER_DEPTH = 32


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def package_code_hashes(package_dir: Path = PACKAGE_DIR) -> dict[str, str]:
    """{file name: sha256} of the :data:`SHIPPED_CODE_FILES` in ``package_dir`` (the installed hf_s2s)."""
    return {name: sha256_of(package_dir / name) for name in SHIPPED_CODE_FILES}


def load_manifest(path: Path = MANIFEST_PATH) -> dict[str, dict[str, str]]:
    """{release: {file name: sha256}} of every release the manifest records."""
    return json.loads(Path(path).read_text())["releases"]


def write_manifest(path: Path = MANIFEST_PATH, package_dir: Path = PACKAGE_DIR,
                   version: str = __version__) -> dict[str, dict[str, str]]:
    """Record the code files of ``package_dir`` as release ``version``'s, keeping every other release's entry;
    returns the releases written."""
    path = Path(path)
    releases = load_manifest(path) if path.is_file() else {}
    releases[version] = package_code_hashes(package_dir)
    releases = dict(sorted(releases.items(), key=lambda item: Version(item[0])))
    path.write_text(json.dumps({
        "about": "sha256 of the code files each hf_s2s release ships in a saved model folder (hf_s2s/hub/code_integrity.py)",
        "regenerate": REGENERATE,
        "releases": releases,
    }, indent=2) + "\n")
    return releases


def manifest_problems(path: Path = MANIFEST_PATH, package_dir: Path = PACKAGE_DIR,
                      version: str = __version__) -> list[str]:
    """What keeps the manifest from recording ``package_dir``'s code as release ``version``'s (empty when it
    does); the message says how to regenerate it."""
    releases = load_manifest(path) if Path(path).is_file() else {}
    recorded, current = releases.get(version), package_code_hashes(package_dir)
    if recorded is None:
        differences = [f"it has no entry for {version}"]
    else:
        differences = [f"{name} differs" for name in sorted(current) if name in recorded and recorded[name] != current[name]]
        differences += [f"{name} is not recorded" for name in sorted(set(current) - set(recorded))]
        differences += [f"{name} is recorded but not shipped" for name in sorted(set(recorded) - set(current))]
    if not differences:
        return []
    return [f"{path} does not record the code of hf_s2s {version} in {package_dir} ({'; '.join(differences)}): "
            f"regenerate it with `{REGENERATE}` and commit it (if {version} is already released, raise the version "
            "in hf_s2s/models/version.py first, so that its entry stays)"]


@dataclass
class FolderEntries:
    """What :func:`walk_folder` found in a folder: its regular files, and every entry that is not one."""

    files: list[str] = field(default_factory=list)  # relative POSIX paths of regular files (through file symlinks)
    problems: list[str] = field(default_factory=list)  # one line per entry that cannot be verified as a file


def is_code_file(name: str) -> bool:
    """A Python source file by its name; the case of the suffix is ignored, as a case-insensitive file system
    (macOS, Windows) opens ``x.PY`` when transformers asks for ``x.py``."""
    return name.lower().endswith(".py")


def walk_folder(folder: str | Path) -> FolderEntries:
    """Every entry of ``folder`` down to :data:`MAX_FOLDER_DEPTH` levels of folders, without following a symlink to a
    folder: a symlink to a regular file counts as that file under the link's name (transformers reads through it; a
    Hub cache snapshot is made of such links); a symlink to a folder, a broken or looping link, a FIFO, socket or
    device file, a folder nested deeper than the bound and anything that cannot be read are problems, never opened.
    Walked with a list of folders still to visit, not by recursion, so that no depth makes it fail otherwise."""
    folder = Path(folder)
    entries = FolderEntries()
    to_visit = [(folder, "", 0)]  # (folder, its path relative to ``folder`` with a final "/", its depth)
    while to_visit:
        directory, prefix, depth = to_visit.pop()
        try:
            children = sorted(os.scandir(directory), key=lambda child: child.name)
        except OSError as error:
            entries.problems.append(f"{prefix or '.'} cannot be read ({error.strerror})")
            continue
        subfolders = []
        for child in children:
            name = f"{prefix}{child.name}"
            try:
                mode = os.stat(child.path).st_mode  # through a symlink
            except OSError as error:
                entries.problems.append(_unreadable_entry(name, child, error))
                continue
            if child.is_symlink() and stat.S_ISDIR(mode):
                entries.problems.append(f"{name} is a symlink to the folder {os.path.realpath(child.path)}: a model "
                                        "folder holds none, and transformers reads code through it "
                                        "(custom_generate/, auto_map modules); put the files themselves there")
            elif stat.S_ISDIR(mode) and depth == MAX_FOLDER_DEPTH:
                entries.problems.append(f"{name} is a folder nested deeper than the {MAX_FOLDER_DEPTH} levels verify "
                                        "walks: what it holds cannot be verified")
            elif stat.S_ISDIR(mode):
                subfolders.append((Path(child.path), f"{name}/", depth + 1))
            elif not stat.S_ISREG(mode):
                entries.problems.append(f"{name} is not a regular file (a FIFO, socket or device): it cannot be "
                                        "verified")
            elif not os.access(child.path, os.R_OK):
                entries.problems.append(f"{name} cannot be read, so it cannot be verified")
            else:
                entries.files.append(name)
        to_visit += reversed(subfolders)  # popped from the end: the first subfolder is visited next
    return entries


def _unreadable_entry(name: str, child: os.DirEntry, error: OSError) -> str:
    """The problem of an entry ``os.stat`` refused: a symlink to nothing or round a loop, or a path the system cannot
    take (too long)."""
    if child.is_symlink() and error.errno in (errno.ENOENT, errno.ELOOP):
        kind = "a symlink loop" if error.errno == errno.ELOOP else "a broken symlink"
        return (f"{name} is {kind} (to {os.readlink(child.path)}): it cannot be verified, and whatever it comes to "
                "point at would be read")
    return f"{name} cannot be read ({error.strerror}), so it cannot be verified"


def code_files_in(folder: Path) -> list[str]:
    """The folder's Python files (:func:`is_code_file`), at any depth, as sorted relative POSIX paths."""
    return sorted(name for name in walk_folder(folder).files if is_code_file(name))


def _json_object(path: Path) -> dict:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def code_references(folder: Path) -> dict[str, str]:
    """{where: class reference} of every entry through which transformers loads code from this folder: ``auto_map``
    in any of its JSON files (config.json, tokenizer_config.json, processor_config.json,
    preprocessor_config.json, ...) and ``custom_pipelines`` impls. A reference is ``module.Class`` (the module a path
    without ``.py``, relative to the folder or absolute), or ``namespace/repo--module.Class`` for another
    repository's code."""
    references = {}
    for name in (name for name in walk_folder(folder).files if name.lower().endswith(".json")):
        data = _json_object(folder / name)
        auto_map = data.get("auto_map") if isinstance(data.get("auto_map"), dict) else {}
        for auto_class, entry in auto_map.items():
            for i, reference in enumerate(entry if isinstance(entry, list) else [entry]):
                if reference:
                    references[f"{name} auto_map {auto_class}" + (f"[{i}]" if isinstance(entry, list) else "")] = \
                        str(reference)
        pipelines = data.get("custom_pipelines") if isinstance(data.get("custom_pipelines"), dict) else {}
        for task, spec in pipelines.items():
            if isinstance(spec, dict) and spec.get("impl"):
                references[f"{name} custom_pipelines {task}"] = str(spec["impl"])
    return references


def referenced_code_file(reference: str) -> str:
    """The file a local class reference ``module.Class`` loads, as transformers derives it: ``module + ".py"``."""
    return reference.split(".")[0] + ".py"


def code_reference_problems(folder: Path) -> list[str]:
    """The code references (:func:`code_references`) whose code no check of this folder covers: another
    repository's, or a file that is not one of the folder's own (an absolute path, a missing file)."""
    files = set(walk_folder(folder).files)
    problems = []
    for where, reference in code_references(folder).items():
        code_file = referenced_code_file(reference)
        if "--" in reference:
            problems.append(f"{where} loads another repository's code ({reference})")
        elif code_file not in files:
            place = "outside the folder" if Path(code_file).is_absolute() else "not a regular file of the folder"
            problems.append(f"{where} loads {code_file}, which is {place} ({reference})")
    return problems


@dataclass
class CodeReport:
    """A folder's code files compared with one release's."""

    folder: Path
    release: str | None  # the release compared with (None: the manifest records none)
    unmodified: list[str] = field(default_factory=list)  # byte-identical to that release's file of the same name
    modified: list[str] = field(default_factory=list)  # a file the release ships, with other bytes
    unknown: list[str] = field(default_factory=list)  # a .py file the release does not ship (at this path)
    identical_releases: list[str] = field(default_factory=list)  # every release all of the folder's code is

    @property
    def is_release(self) -> bool:
        return bool(self.unmodified) and not self.modified and not self.unknown

    def problems(self) -> list[str]:
        """One line per file that is not the release's."""
        release = f"hf_s2s {self.release}" if self.release else "any hf_s2s release"
        return ([f"{name} differs from {release}'s" for name in self.modified]
                + [f"{name} is not a file of {release}" for name in self.unknown])


def _compare(folder: Path, names: list[str], recorded: dict[str, str], release: str | None) -> CodeReport:
    report = CodeReport(folder=folder, release=release)
    for name in names:
        if name not in recorded:
            report.unknown.append(name)
        elif sha256_of(folder / name) == recorded[name]:
            report.unmodified.append(name)
        else:
            report.modified.append(name)
    return report


def compare_with_releases(folder: str | Path, release: str | None = None,
                          manifest_path: Path = MANIFEST_PATH) -> CodeReport:
    """Compare the folder's code files with release ``release``'s (push-to-hub: the installed one) or, when None,
    with every recorded release: the report names each release the code is byte for byte (the newest is compared
    with), else compares with the release config.json says wrote the folder, else with the one that shares the most
    files (the newest on a tie)."""
    folder = Path(folder)
    releases = load_manifest(manifest_path)
    names = code_files_in(folder)
    if release is not None:
        report = _compare(folder, names, releases.get(release, {}), release if release in releases else None)
        report.identical_releases = [release] if report.is_release else []
        return report
    by_release = {r: _compare(folder, names, recorded, r) for r, recorded in releases.items()}
    identical = sorted((r for r, report in by_release.items() if report.is_release), key=Version)
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    newest_first = sorted(by_release, key=Version, reverse=True)
    if identical:
        chosen = identical[-1]
    elif config.get("hf_s2s_version") in by_release:
        chosen = config["hf_s2s_version"]
    elif newest_first:
        chosen = max(newest_first, key=lambda r: len(by_release[r].unmodified))  # max keeps the first: newest
    else:
        return _compare(folder, names, {}, None)
    report = by_release[chosen]
    report.identical_releases = identical
    return report


def entry_problems(folder: Path) -> list[str]:
    """One line per entry of ``folder`` that transformers could run and no comparison with a release covers: an
    entry that is not a regular file (:func:`walk_folder`), a compiled or pickled file, a code reference to
    another repository or to a file that is not one of the folder's (:func:`code_reference_problems`)."""
    entries = walk_folder(folder)
    suffixed = [(name, name.lower()) for name in entries.files]
    return (entries.problems
            + [f"{name} is compiled code (it cannot be compared with a release)" for name, lower in suffixed
               if lower.endswith(COMPILED_SUFFIXES)]
            + [f"{name} is a pickle (loading it can run code)" for name, lower in suffixed
               if lower.endswith(PICKLED_SUFFIXES)]
            + code_reference_problems(folder))


def verify_folder(folder: str | Path) -> tuple[CodeReport, list[str]]:
    """What ``hf-s2s verify`` reports: the folder's code compared with every release (:func:`compare_with_releases`),
    and one line per thing that keeps it from being a release's code: a file that differs or is in no release, an
    entry that cannot be verified, a compiled or pickled file, code loaded from elsewhere (:func:`entry_problems`),
    no code at all."""
    folder = Path(folder)
    report = compare_with_releases(folder)
    problems = [] if code_files_in(folder) else [f"{folder} holds no .py files: no hf_s2s code to verify"]
    return report, problems + report.problems() + entry_problems(folder)


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines(keepends=True)


def code_diff(report: CodeReport, package_dir: Path = PACKAGE_DIR, manifest_path: Path = MANIFEST_PATH) -> str:
    """A unified diff of each modified file against the release's (the installed hf_s2s's copy, when it is byte for
    byte that release's), and each unknown file in full (a diff from nothing)."""
    recorded = load_manifest(manifest_path).get(report.release, {}) if report.release else {}
    parts = []
    for name in report.modified:
        release_copy, ours = package_dir / name, report.folder / name
        if release_copy.is_file() and sha256_of(release_copy) == recorded.get(name):
            parts += difflib.unified_diff(_lines(release_copy), _lines(ours),
                                          fromfile=f"hf_s2s {report.release}/{name}", tofile=f"{report.folder}/{name}")
        else:  # the installed hf_s2s is itself modified: no copy of the release's file to compare with
            parts.append(f"# {name}: the installed hf_s2s does not hold hf_s2s {report.release}'s copy of it either, "
                         "so it is shown in full\n")
            parts += difflib.unified_diff([], _lines(ours), fromfile="/dev/null",
                                          tofile=f"{report.folder}/{name}")
    for name in report.unknown:
        parts += difflib.unified_diff([], _lines(report.folder / name), fromfile="/dev/null",
                                      tofile=f"{report.folder}/{name}")
    return "".join(part if part.endswith("\n") else part + "\n" for part in parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hf_s2s.hub.code_integrity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write-manifest", action="store_true",
                        help=f"record this checkout's code files as hf_s2s {__version__}'s in {MANIFEST_PATH.name}")
    args = parser.parse_args(argv)
    if not args.write_manifest:
        problems = manifest_problems()
        print("\n".join(problems) or f"{MANIFEST_PATH.name} records this checkout's code as hf_s2s {__version__}'s")
        return 1 if problems else 0
    write_manifest()
    print(f"{MANIFEST_PATH} now records {len(SHIPPED_CODE_FILES)} code files as hf_s2s {__version__}'s")
    return 0


__all__ = ["MAX_FOLDER_DEPTH", "CodeReport", "FolderEntries", "code_diff", "code_reference_problems", "compare_with_releases",
           "entry_problems", "manifest_problems", "verify_folder", "walk_folder", "write_manifest"]


if __name__ == "__main__":
    raise SystemExit(main())

