"""Sharing a trained model on the Hugging Face Hub: the self-contained Hub folder and the upload.

A Hub folder holds everything a user without hf_s2s needs: safetensors weights, config.json whose ``auto_map``
names ``AutoConfig``, ``AutoModel`` and ``AutoModelForSeq2SeqLM``, the model code (the family's configuration and
modeling files plus the single-dot siblings they import), the translation pipeline named in
``custom_pipelines``, the tokenizer files, generation_config.json and a README.md model card filled from the
training run's results.json (:mod:`hf_s2s.hub.card`). :func:`check_hub_folder` refuses a folder that lacks any of
it, holds a pickled or compiled file, or whose code is not byte for byte the installed hf_s2s release's
(:mod:`hf_s2s.hub.code_integrity`).

``hf-s2s push-to-hub`` is the command line over :func:`push_to_hub`; ``--dry-run`` builds the folder without the
network. ``hf-s2s make-model-card`` regenerates a card from a results.json; ``hf-s2s verify`` tells which release a
downloaded folder's code is.
"""

import ast
import fnmatch
import json
import shutil
import sys
import tempfile
from pathlib import Path, PurePosixPath

from huggingface_hub import HfApi, ModelCard

from ..importers import CONVERSION_FILE
from ..models.families import FAMILIES
from ..models.loading import load_model, load_tokenizer
from ..models.modeling_common import CUSTOM_PIPELINES
from ..models.version import __version__
from .card import render_conversion_card, render_model_card
from .code_integrity import (
    REGENERATE,
    code_diff,
    code_references,
    compare_with_releases,
    entry_problems,
    is_code_file,
    manifest_problems,
    referenced_code_file,
    walk_folder,
)

AUTO_CLASSES = ("AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM")
REQUIRED_FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                  "tokenizer_config.json", "README.md")
ALLOW_MODIFIED_CODE_FLAG = "--allow-modified-code"


# What a training run keeps beside its weights, and a folder to share never holds: Trainer's arguments and state
# (pickles, but for trainer_state.json), in the model folder (training_args.bin) and in each checkpoint.
# build_hub_folder leaves them out: it saves the model and tokenizer anew.
TRAINING_STATE_FILES = ("training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth",
                        "trainer_state.json")


class HubFolderError(ValueError):
    """A Hub folder lacks a piece or holds something it must not; the message names every problem."""


def _sibling_imports(code: str, filename: str) -> tuple[set[str], list[str]]:
    """The single-dot siblings one code file imports (files the folder must hold), and what keeps it from loading
    where hf_s2s is not installed: invalid Python, an import of hf_s2s, an import from outside the folder. This
    reads imports only; it says nothing about what the code does (that is what integrity is for)."""
    try:
        tree = ast.parse(code, filename=filename)
    except SyntaxError as error:
        return set(), [f"{filename}:{error.lineno} is not valid Python ({error.msg})"]
    siblings, problems = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            siblings.add(node.module.split(".")[0] + ".py")
        elif isinstance(node, ast.ImportFrom) and node.level > 1:
            problems.append(f"{filename}:{node.lineno} imports from {'.' * node.level}{node.module or ''} (outside "
                            "the folder)")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            problems += [f"{filename}:{node.lineno} imports hf_s2s (not installed where the folder is used)"
                         for module in modules if module.split(".")[0] == "hf_s2s"]
    return siblings, problems


def _code_integrity_problems(folder: Path, allow_modified_code: bool) -> tuple[list[str], str]:
    """(problems, diff): the folder's code files against the installed release's. Code that is not byte for byte
    that release's (a changed file, or a .py file the release does not ship) is a problem unless
    ``allow_modified_code``, when it is the diff instead."""
    report = compare_with_releases(folder, release=__version__)
    if report.release is None:
        return [f"the installed hf_s2s {__version__} has no entry in code_manifest.json, so no code can be compared "
                f"with its release's (in a checkout: `{REGENERATE}`)"], ""
    if not (report.modified or report.unknown):
        return [], ""
    if allow_modified_code:
        return [], code_diff(report)
    problems = [f"its code is not hf_s2s {__version__}'s ({'; '.join(report.problems())}): only a release's own "
                f"code, byte for byte, is shared without review; to push this code, pass {ALLOW_MODIFIED_CODE_FLAG}, "
                "which prints its diff against the release first"]
    # the installed hf_s2s is not its release either: an edited install, or a checkout whose manifest is stale
    problems += [f"the installed hf_s2s is not its release either: {problem}" for problem in manifest_problems()]
    return problems, ""


def check_hub_folder(folder: str | Path, allow_modified_code: bool = False) -> list[str]:
    """Raise :class:`HubFolderError` naming every missing or forbidden piece of a Hub folder; return its files.

    Checks: the required files; config.json's ``model_type``, ``auto_map`` (AutoConfig, AutoModel,
    AutoModelForSeq2SeqLM, each pointing at a code file present, none at another repository's) and
    ``custom_pipelines``; the family's code files and every single-dot import they make; no pickled or compiled
    files, no entry that is not a regular file (a symlink to a folder, a broken link, a FIFO), no code reference to
    a file outside the folder; a card whose YAML metadata parses; and code integrity: every .py file, at any depth,
    is byte for byte the installed hf_s2s release's file of that name (:mod:`hf_s2s.hub.code_integrity`). With ``allow_modified_code``
    other code passes, and the unified diff against the release (unknown files in full) is printed to stderr once
    everything else has passed: the person pushing it vouches for it, having seen it.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise HubFolderError(f"{folder} is not a folder")
    files = walk_folder(folder).files
    problems = [f"missing {name}" for name in REQUIRED_FILES if name not in files]
    # entries that are not regular files, pickled weights, compiled code and code loaded from elsewhere are never
    # uploaded: no comparison with the release covers them
    problems += entry_problems(folder)

    config = json.loads((folder / "config.json").read_text()) if "config.json" in files else {}
    model_type = config.get("model_type")
    if config and model_type not in FAMILIES:
        problems.append(f"config.json model_type {model_type!r} is not one of {sorted(FAMILIES)}")
    code_files = set(FAMILIES[model_type].code_files) if model_type in FAMILIES else set()
    auto_map = config.get("auto_map") or {}
    problems += [f"config.json auto_map lacks {auto_class}" for auto_class in AUTO_CLASSES
                 if config and auto_class not in auto_map]
    for task, spec in CUSTOM_PIPELINES.items():
        if config and (config.get("custom_pipelines") or {}).get(task, {}).get("impl") != spec["impl"]:
            problems.append(f"config.json custom_pipelines lacks the {task!r} pipeline ({spec['impl']})")
    # every code file the folder's JSON files name (a separate-vocabulary tokenizer names its own); one the folder
    # does not hold is named by entry_problems, with the entry that names it
    referenced = {referenced_code_file(reference) for reference in code_references(folder).values()}
    code_files |= referenced & set(files)

    imports = {name: _sibling_imports((folder / name).read_text(), name) for name in files if is_code_file(name)}
    checked = set()
    while code_files - checked:
        name = sorted(code_files - checked)[0]
        checked.add(name)
        if name not in imports:
            problems.append(f"missing code file {name}")
            continue
        code_files |= imports[name][0]
    problems += [problem for _, file_problems in imports.values() for problem in file_problems]
    integrity_problems, diff = _code_integrity_problems(folder, allow_modified_code)
    problems += integrity_problems

    if "README.md" in files:
        metadata = ModelCard.load(folder / "README.md").data.to_dict()
        for key in ("license", "library_name", "tags"):
            if not metadata.get(key):
                problems.append(f"README.md card metadata lacks {key!r}")
    if problems:
        raise HubFolderError(f"Hub folder {folder} is not ready to share: " + "; ".join(problems))
    if diff:
        print(f"{ALLOW_MODIFIED_CODE_FLAG}: the code below is not hf_s2s {__version__}'s; you vouch for it by "
              f"pushing it\n{diff}", file=sys.stderr, end="")
    return files


def training_state_files(folder: str | Path) -> list[str]:
    """The files of ``folder``, at any depth, that only a training run writes (:data:`TRAINING_STATE_FILES`), as
    relative paths: a folder holding one is a training run's, not one to share."""
    return [name for name in walk_folder(folder).files
            if any(fnmatch.fnmatch(PurePosixPath(name).name, pattern) for pattern in TRAINING_STATE_FILES)]


def run_model_folder(folder: str | Path) -> Path | None:
    """The model folder of a training run's ``folder``: itself when it is one (config.json), else its ``model/``
    (``hf-s2s train`` writes <output_dir>/model); None when neither is there."""
    folder = Path(folder)
    return next((path for path in (folder, folder / "model") if (path / "config.json").is_file()), None)


def _check_staging_folder(model_dir: Path, output_dir: Path) -> None:
    """The folder the Hub folder is built in must be new or empty, and apart from the model folder: building never
    deletes or mixes into anything it did not create."""
    model, staging = model_dir.resolve(), output_dir.resolve()
    if staging == model or model.is_relative_to(staging) or staging.is_relative_to(model):
        relation = ("is" if staging == model else "contains" if model.is_relative_to(staging) else "is inside")
        raise HubFolderError(f"the staging folder {output_dir} {relation} the model folder {model_dir}: give a "
                             "new or empty folder outside it")
    if output_dir.exists() and not output_dir.is_dir():
        raise HubFolderError(f"the staging folder {output_dir} is a file: give a new or empty folder")
    if output_dir.exists() and any(output_dir.iterdir()):
        held = sorted(p.name for p in output_dir.iterdir())
        raise HubFolderError(f"the staging folder {output_dir} is not empty (it holds {', '.join(held[:5])}"
                             f"{' ...' if len(held) > 5 else ''}); nothing is deleted to make room: give a new or "
                             "empty folder")


def build_hub_folder(model_dir: str | Path, output_dir: str | Path, repo_id: str | None = None,
                     license: str = "apache-2.0", allow_modified_code: bool = False) -> Path:
    """Build in ``output_dir`` (new or empty, outside ``model_dir``) the exact folder :func:`push_to_hub` uploads
    for the trained model in ``model_dir`` (a folder written by the training job (``hf-s2s train``) or ``save_pretrained`` +
    tokenizer), check it, and return it.

    The model is loaded strictly (:func:`hf_s2s.models.loading.load_model`: weights that do not match the config are
    refused) and saved again (safetensors only, ``auto_map`` for the three auto classes, code files copied by
    ``save_pretrained`` from the installed hf_s2s), so nothing else from ``model_dir`` (optimizer state,
    training_args.bin, its own copies of the code) can slip in. The code is then the installed hf_s2s's: refused
    unless it is its release's byte for byte, or ``allow_modified_code`` (see :func:`check_hub_folder`).
    The card comes from ``model_dir/results.json`` when present (filled for ``repo_id``), else from
    ``model_dir/README.md``; without either the build fails. Everything is checked before ``output_dir`` is made.
    """
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    if not model_dir.is_dir():
        raise HubFolderError(f"model folder {model_dir} does not exist")
    if not (model_dir / "config.json").is_file():
        raise HubFolderError(f"{model_dir} holds no config.json: not a saved model folder")
    if not any((model_dir / name).is_file() for name in ("results.json", "README.md", CONVERSION_FILE)):
        raise HubFolderError(f"{model_dir} has neither results.json, README.md nor {CONVERSION_FILE}: no model card "
                             "can be written (write one with hf-s2s make-model-card)")
    _check_staging_folder(model_dir, output_dir)
    model = load_model(model_dir)
    if type(model).__module__.split(".")[0] != "hf_s2s":
        raise HubFolderError(f"{model_dir} loads as {type(model).__module__}.{type(model).__name__}, not an hf_s2s "
                             "model class (import hf_s2s, and load without trust_remote_code)")
    tokenizer = load_tokenizer(model_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)  # safetensors; auto_map, custom_pipelines and the code files, the pipeline's too
    tokenizer.save_pretrained(output_dir)
    if (model_dir / "results.json").is_file():
        results = json.loads((model_dir / "results.json").read_text())
        shutil.copyfile(model_dir / "results.json", output_dir / "results.json")
        (output_dir / "README.md").write_text(render_model_card(results, repo_id=repo_id, license=license))
    elif (model_dir / "README.md").is_file():
        shutil.copyfile(model_dir / "README.md", output_dir / "README.md")
    else:  # a folder hf-s2s convert wrote: the card says where it came from
        shutil.copyfile(model_dir / CONVERSION_FILE, output_dir / CONVERSION_FILE)
        (output_dir / "README.md").write_text(render_conversion_card(model_dir, repo_id=repo_id, license=license))
    check_hub_folder(output_dir, allow_modified_code=allow_modified_code)
    return output_dir


def push_to_hub(model_dir: str | Path, repo_id: str, *, dry_run: bool = False,
                staging_dir: str | Path | None = None, private: bool = False, token: str | None = None,
                license: str = "apache-2.0", commit_message: str = "Upload hf_s2s model",
                allow_modified_code: bool = False) -> Path | str:
    """Build and check the Hub folder, then create ``repo_id`` (if needed) and upload the folder.

    ``allow_modified_code``: upload code that is not the installed hf_s2s release's, after printing its diff to
    stderr (:func:`check_hub_folder`); without it such a folder is refused before anything is uploaded.

    ``dry_run``: build the folder in ``staging_dir`` (required then; a new or empty folder outside ``model_dir``,
    never cleared) and return its path; nothing touches the network. Otherwise returns the URL of the upload commit.
    """
    if dry_run and staging_dir is None:
        raise ValueError("dry_run needs staging_dir: the folder that would be uploaded is built there")
    if "/" not in repo_id:
        raise ValueError(f"repo_id must be 'namespace/name', got {repo_id!r}")
    with tempfile.TemporaryDirectory(prefix="hf_s2s_hub_") as tmp:
        folder = build_hub_folder(model_dir, staging_dir or Path(tmp) / "folder", repo_id=repo_id, license=license,
                                  allow_modified_code=allow_modified_code)
        if dry_run:
            return folder
        api = HfApi(token=token)
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(repo_id=repo_id, repo_type="model", folder_path=str(folder),
                                   commit_message=commit_message)
        return str(getattr(commit, "commit_url", commit))


__all__ = ["TRAINING_STATE_FILES", "HubFolderError", "build_hub_folder", "check_hub_folder", "push_to_hub",
           "run_model_folder", "training_state_files"]
