"""Sharing a trained model on the Hugging Face Hub: the model card, the self-contained Hub folder and the upload.

A Hub folder holds everything a user without hf_s2s needs: safetensors weights, config.json whose ``auto_map``
names ``AutoConfig``, ``AutoModel`` and ``AutoModelForSeq2SeqLM``, the model code (the family's configuration and
modeling files plus the single-dot siblings they import), the translation pipeline named in
``custom_pipelines``, the tokenizer files, generation_config.json and a README.md model card filled from the
training run's results.json. :func:`check_hub_folder` refuses a folder that lacks any of it, holds a pickled or
compiled file, or whose code is not byte for byte the installed hf_s2s release's (:mod:`hf_s2s.hub.code_integrity`).

``hf-s2s push-to-hub`` is the command line over :func:`push_to_hub`; ``--dry-run`` builds the folder without the
network. ``hf-s2s make-model-card`` regenerates a card from a results.json; ``hf-s2s verify`` tells which release a
downloaded folder's code is.
"""

import ast
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData

from ..models.families import FAMILIES, get_family
from ..models.loading import load_model, load_tokenizer
from ..models.modeling_common import CUSTOM_PIPELINES
from ..models.version import __version__
from .code_integrity import (
    COMPILED_SUFFIXES,
    PICKLED_SUFFIXES,
    REGENERATE,
    code_diff,
    code_references,
    compare_with_releases,
    foreign_code_references,
    manifest_problems,
)

CARD_TEMPLATE = Path(__file__).resolve().with_name("model_card_template.md")  # package data: installed with hf_s2s

AUTO_CLASSES = ("AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM")
REQUIRED_FILES = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                  "tokenizer_config.json", "README.md")
ALLOW_MODIFIED_CODE_FLAG = "--allow-modified-code"

MULTI30K_HUB_DATASET = "bentrevett/multi30k"
MULTI30K_CITATION = """@inproceedings{elliott-etal-2016-multi30k,
    title = "{M}ulti30{K}: Multilingual {E}nglish-{G}erman Image Descriptions",
    author = "Elliott, Desmond and Frank, Stella and Sima{'}an, Khalil and Specia, Lucia",
    booktitle = "Proceedings of the 5th Workshop on Vision and Language",
    year = "2016",
    address = "Berlin, Germany",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/W16-3210",
    doi = "10.18653/v1/W16-3210",
    pages = "70--74",
}"""
PLACEHOLDER_REPO_ID = "<namespace>/<model-name>"


class HubFolderError(ValueError):
    """A Hub folder lacks a piece or holds something it must not; the message names every problem."""


# ------------------------------------------------------------------------------------------------ model card


def _language_codes(results: dict) -> list[str]:
    """ISO 639 codes of the two sides; the synthetic tasks' "src"/"tgt" are not languages and are left out."""
    codes = [results.get("source_lang"), results.get("target_lang")]
    return [c for c in codes if isinstance(c, str) and re.fullmatch(r"[a-z]{2,3}", c) and c not in ("src", "tgt")]


def _dataset_info(results: dict) -> tuple[str, str, str | None, str]:
    """(Hub dataset id or local name, human-readable name, citation or None, description) of the training data."""
    dataset, src, tgt = results.get("dataset", "unknown"), results.get("source_lang"), results.get("target_lang")
    if dataset == "multi30k":
        description = (
            f"[Multi30K](https://huggingface.co/datasets/{MULTI30K_HUB_DATASET}) task 1 (Elliott et al. 2016), "
            f"{src}→{tgt}: about 29,000 training, 1,014 validation and 1,000 test (test_2016_flickr) image "
            "descriptions with one reference translation each."
        )
        return MULTI30K_HUB_DATASET, f"Multi30k {src}-{tgt}", MULTI30K_CITATION, description
    if dataset.startswith("synthetic:"):
        description = (f"The synthetic `{dataset}` task built into hf_s2s (`hf_s2s.data.synthetic`), {src}→{tgt}: a "
                       "smoke-test model, not a translation system.")
        return dataset, f"hf_s2s {dataset}", None, description
    return dataset, f"{dataset} {src}-{tgt}", None, f"`{dataset}`, {src}→{tgt}."


def _model_name(results: dict, repo_id: str | None) -> str:
    if repo_id and repo_id != PLACEHOLDER_REPO_ID:
        return repo_id.split("/")[-1]
    family = "transformer" if results["model_type"] == "transformer_seq2seq" else "rnn"
    return f"{family}-{results.get('dataset', 'model').replace(':', '-')}-{results.get('source_lang')}-{results.get('target_lang')}"


def _decoding_settings(decoding: dict) -> str:
    """The length limits a score was decoded with, as the card shows them: "max_length 80, at most 1.3 x source + 5
    tokens" ("-" when results.json does not record them)."""
    parts = []
    if decoding.get("max_length") is not None:
        parts.append(f"max_length {decoding['max_length']}")
    if decoding.get("max_len_a") is not None or decoding.get("max_len_b") is not None:
        parts.append(f"at most {decoding.get('max_len_a') or 0} x source + {decoding.get('max_len_b') or 0} tokens")
    return ", ".join(parts) or "-"


def _decoding_label(key: str) -> str:
    return "greedy" if key == "greedy" else f"beam search, {key.removeprefix('beam')} beams"


def model_card_data(results: dict, repo_id: str | None = None, license: str = "apache-2.0") -> ModelCardData:
    """The card's Hub metadata from a results.json dict: language, license, tags, datasets, metrics and the
    model-index of the measured test scores (one entry per decoding method and metric)."""
    dataset_id, dataset_name, _, _ = _dataset_info(results)
    model_name = _model_name(results, repo_id)
    eval_results = []
    for key, scores in results.get("test", {}).items():
        for metric, label in (("bleu", "BLEU"), ("chrf", "chrF")):
            eval_results.append(EvalResult(
                task_type="translation", task_name="Translation", dataset_type=dataset_id,
                dataset_name=dataset_name, dataset_config=f"{results.get('source_lang')}-{results.get('target_lang')}",
                dataset_split="test", metric_type=metric, metric_value=round(float(scores[metric]), 2),
                metric_name=f"{label} ({_decoding_label(key)})",
                metric_config=scores.get(f"{metric}_signature"),
            ))
    return ModelCardData(
        model_name=model_name,
        language=_language_codes(results) or None,
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "seq2seq", results["model_type"], "hf_s2s", "custom_code", "safetensors"],
        datasets=[dataset_id] if not dataset_id.startswith("synthetic:") else None,
        metrics=["bleu", "chrf"],
        eval_results=eval_results or None,
    )


def render_model_card(results: dict, repo_id: str | None = None, license: str = "apache-2.0",
                      template_path: str | Path = CARD_TEMPLATE) -> str:
    """The filled model card (README.md text) for the run described by ``results`` (a results.json dict)."""
    for key in ("model_type", "model_config"):
        if key not in results:
            raise ValueError(f"results has no {key!r}: pass the results.json that the training job (hf-s2s train) writes")
    model_type, config = results["model_type"], results["model_config"]
    if model_type not in FAMILIES:
        raise ValueError(f"results['model_type'] must be one of {sorted(FAMILIES)}, got {model_type!r}")
    family = get_family(model_type)
    _, _, dataset_citation, data_description = _dataset_info(results)
    full_config = family.full_config(config)
    architecture_rows = [(name, full_config.get(name)) for name in family.card_fields]
    training = results.get("training_arguments", {})
    training_rows = [(name, value) for name, value in training.items()]
    training_rows += [
        ("epochs trained", results.get("epochs")),
        ("final training loss", _fmt(results.get("train_loss"), 4)),
        ("best validation BLEU", _fmt(results.get("best_validation_bleu"), 2)),
        ("training time (validation excluded)", f"{results.get('train_seconds')} s"),
        ("training speed", f"{results.get('train_tokens_per_second')} source+target tokens/s"),
        ("hardware", f"{results.get('machine') or results.get('device')}, {results.get('torch_threads')} torch "
                     f"thread(s), world size {results.get('world_size')}"),
    ]
    averaging = results.get("checkpoint_averaging")
    if averaging and "validation_bleu" in averaging:
        outcome = "the average is this model" if averaging["used"] else "the best single checkpoint is this model"
        training_rows.append((
            "checkpoint averaging",
            f"last {len(averaging['checkpoints'])} checkpoints: validation BLEU "
            f"{_fmt(averaging['validation_bleu'], 2)} vs {_fmt(averaging['best_single_validation_bleu'], 2)} for the "
            f"best single one; {outcome}",
        ))
    ema = results.get("ema")
    if ema and "validation_bleu" in ema:
        baseline = ema.get("baseline_validation_bleu")
        training_rows.append((
            "EMA of the weights",
            f"decay {ema['decay']} per step: validation BLEU {ema['validation_bleu']:.2f} vs "
            f"{'-' if baseline is None else f'{baseline:.2f}'} for the raw weights; "
            f"{'the EMA is this model' if ema['used'] else 'the raw weights are this model'}",
        ))
    evaluation_rows = [
        {"decoding": _decoding_label(key), "bleu": _fmt(s["bleu"], 2), "bleu_lowercase": _fmt(s.get("bleu_lowercase"), 2),
         "chrf": _fmt(s["chrf"], 2), "decode_seconds": s.get("decode_seconds"),
         "settings": _decoding_settings(s.get("decoding") or {}),
         "bleu_signature": s.get("bleu_signature"), "chrf_signature": s.get("chrf_signature")}
        for key, s in results.get("test", {}).items()
    ]
    src, tgt = results.get("source_lang"), results.get("target_lang")
    card = ModelCard.from_template(
        model_card_data(results, repo_id, license),
        template_path=str(template_path),
        model_name=_model_name(results, repo_id),
        summary=f"A {src}→{tgt} translation model: {family.describe(full_config)[0].lower()}"
                f"{family.describe(full_config)[1:]}",
        architecture_description=family.describe(full_config),
        architecture_rows=architecture_rows,
        num_parameters=f"{results.get('num_parameters', 0):,}",
        intended_use=f"translating {src} sentences into {tgt} in the domain of the training data, and as a "
                     "reproducible baseline for research and teaching on classic encoder-decoder models.",
        limitations=[
            "Trained on one corpus only; expect much lower quality on text unlike its training data.",
            "Sentence-level: no document context; long inputs beyond the training lengths degrade.",
            "Inherits the biases of its training data; do not use for decisions about people.",
            "Scores are corpus BLEU/chrF on one test set with one reference: a comparison point, not a quality "
            "guarantee.",
        ],
        data_description=data_description,
        recipe=results.get("recipe"),
        training_rows=training_rows,
        evaluation_description=(
            "Detokenized sacreBLEU on the test split, computed by the training run itself (`results.json`), "
            "never copied by hand."
        ),
        evaluation_rows=evaluation_rows,
        repo_id=repo_id or PLACEHOLDER_REPO_ID,
        example_source="Ein Mann fährt Fahrrad." if src == "de" else "a b c",
        citations=[c for c in (dataset_citation, family.citation) if c],
    )
    return str(card)


def _fmt(value, digits: int):
    return round(float(value), digits) if isinstance(value, int | float) else value


def write_model_card(model_dir: str | Path, results: dict | None = None, repo_id: str | None = None,
                     license: str = "apache-2.0") -> Path:
    """Write ``model_dir/README.md`` from ``results`` (default: ``model_dir/results.json``); returns its path."""
    model_dir = Path(model_dir)
    if results is None:
        results = json.loads((model_dir / "results.json").read_text())
    path = model_dir / "README.md"
    path.write_text(render_model_card(results, repo_id=repo_id, license=license))
    return path


# ------------------------------------------------------------------------------------------------ Hub folder


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
    files; a card whose YAML metadata parses; and code integrity: every .py file, at any depth, is byte for byte
    the installed hf_s2s release's file of that name (:mod:`hf_s2s.hub.code_integrity`). With ``allow_modified_code``
    other code passes, and the unified diff against the release (unknown files in full) is printed to stderr once
    everything else has passed: the person pushing it vouches for it, having seen it.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise HubFolderError(f"{folder} is not a folder")
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    problems = [f"missing {name}" for name in REQUIRED_FILES if name not in files]
    # pickled weights and compiled code are never uploaded
    problems += [f"pickled file {name} (only safetensors weights are allowed)" for name in files
                 if name.endswith(PICKLED_SUFFIXES)]
    problems += [f"compiled code {name} (it cannot be compared with a release)" for name in files
                 if name.endswith(COMPILED_SUFFIXES)]

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
    # every code file config.json and tokenizer_config.json name (a separate-vocabulary tokenizer names its own)
    problems += foreign_code_references(folder)
    code_files |= {reference.split(".")[0] + ".py" for reference in code_references(folder).values()
                   if "--" not in reference}

    imports = {name: _sibling_imports((folder / name).read_text(), name) for name in files if name.endswith(".py")}
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
    if not ((model_dir / "results.json").is_file() or (model_dir / "README.md").is_file()):
        raise HubFolderError(f"{model_dir} has neither results.json nor README.md: no model card can be written "
                             "(write one with hf-s2s make-model-card)")
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
    else:
        shutil.copyfile(model_dir / "README.md", output_dir / "README.md")
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


__all__ = ["HubFolderError", "build_hub_folder", "check_hub_folder", "model_card_data", "push_to_hub",
           "render_model_card", "write_model_card"]
