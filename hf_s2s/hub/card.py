"""The model card: README.md with Hub metadata, filled from a training run's results (:class:`~hf_s2s.hub.results.RunResults`)
and nothing else, so that ``hf-s2s make-model-card`` regenerates the card the run wrote. The training job writes it
into its model folder (:func:`write_model_card`), and the Hub folder carries it (:mod:`hf_s2s.hub.publish`).
"""

import json
import re
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..models.families import FAMILIES, get_family
from .results import DecodingScores, RunResults

CARD_TEMPLATE = Path(__file__).resolve().with_name("model_card_template.md")  # package data: installed with hf_s2s

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


def _language_codes(results: RunResults) -> list[str]:
    """ISO 639 codes of the two sides; the synthetic tasks' "src"/"tgt" are not languages and are left out."""
    codes = [results.source_lang, results.target_lang]
    return [c for c in codes if isinstance(c, str) and re.fullmatch(r"[a-z]{2,3}", c) and c not in ("src", "tgt")]


def _dataset_info(results: RunResults) -> tuple[str, str, str | None, str]:
    """(Hub dataset id or local name, human-readable name, citation or None, description) of the training data."""
    dataset, src, tgt = results.dataset or "unknown", results.source_lang, results.target_lang
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


def _is_named_recipe(recipe: str) -> bool:
    """Whether ``--recipe`` named one of the recipes hf_s2s ships (``transformer_small``), not a JSON file of the
    user's."""
    return "/" not in recipe and not recipe.endswith(".json")


def _model_name(results: RunResults, repo_id: str | None) -> str:
    """The card's title and model-index name: the repository's name when one is given, else the run's own: its
    recipe (a named one, or the stem of the user's JSON file), else its family's registered name, then the corpus
    (unless the recipe's name holds it) and the languages. Never the family alone: every Transformer trained on
    Multi30k de-en would then carry the reference model's name (``transformer-multi30k-de-en``, the
    ``transformer_multi30k`` recipe's)."""
    if repo_id and repo_id != PLACEHOLDER_REPO_ID:
        return repo_id.split("/")[-1]
    own = Path(results.recipe).stem if results.recipe else results.model_type
    parts = own.replace("_", "-").split("-")
    dataset = (results.dataset or "model").replace(":", "-")
    if dataset not in own.replace("_", "-"):
        parts.append(dataset)
    return "-".join([*parts, str(results.source_lang), str(results.target_lang)])


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


def _checked(results: RunResults | dict) -> RunResults:
    """``results`` as RunResults, refused (ValueError) unless it is a run of one of the families with its config."""
    results = RunResults.of(results)
    if results.model_config is None:
        raise ValueError("results has no 'model_config': pass the results.json that the training job (hf-s2s train) "
                         "writes")
    if results.model_type not in FAMILIES:
        raise ValueError(f"results['model_type'] must be one of {sorted(FAMILIES)}, got {results.model_type!r}")
    return results


def model_card_data(results: RunResults | dict, repo_id: str | None = None,
                    license: str = "apache-2.0") -> ModelCardData:
    """The card's Hub metadata from a run's results: language, license, tags, datasets, metrics and the model-index
    of the measured test scores (one entry per decoding method and metric)."""
    results = RunResults.of(results)
    dataset_id, dataset_name, _, _ = _dataset_info(results)
    eval_results = []
    for key, scores in results.test.items():
        for metric, label in (("bleu", "BLEU"), ("chrf", "chrF")):
            eval_results.append(EvalResult(
                task_type="translation", task_name="Translation", dataset_type=dataset_id,
                dataset_name=dataset_name, dataset_config=f"{results.source_lang}-{results.target_lang}",
                dataset_split="test", metric_type=metric, metric_value=round(float(getattr(scores, metric)), 2),
                metric_name=f"{label} ({_decoding_label(key)})",
                metric_config=getattr(scores, f"{metric}_signature"),
            ))
    return ModelCardData(
        model_name=_model_name(results, repo_id),
        language=_language_codes(results) or None,
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "seq2seq", results.model_type, "hf_s2s", "custom_code", "safetensors"],
        datasets=[dataset_id] if not dataset_id.startswith("synthetic:") else None,
        metrics=["bleu", "chrf"],
        eval_results=eval_results or None,
    )


def _training_rows(results: RunResults) -> list[tuple[str, object]]:
    """The card's training table: the recorded training arguments, then what the run measured and chose."""
    rows = list(results.training_arguments.items())
    rows += [
        ("epochs trained", results.epochs),
        ("final training loss", _fmt(results.train_loss, 4)),
        ("best validation BLEU", _fmt(results.best_validation_bleu, 2)),
        ("training time (validation excluded)", f"{results.train_seconds} s{results.session_note}"),
        ("training speed", f"{results.train_tokens_per_second} source+target tokens/s"),
        ("hardware", f"{results.hardware}, {results.torch_threads} torch thread(s), world size {results.world_size}"),
    ]
    if results.corpus_filters:
        rows.append(("corpus filters", _filters_summary(results.corpus_filters)))
    averaging = results.checkpoint_averaging
    if averaging and averaging.validated:
        outcome = "the average is this model" if averaging.used else "the best single checkpoint is this model"
        rows.append((
            "checkpoint averaging",
            f"last {len(averaging.checkpoints)} checkpoints: validation BLEU {_fmt(averaging.validation_bleu, 2)} vs "
            f"{_fmt(averaging.best_single_validation_bleu, 2)} for the best single one; {outcome}",
        ))
    ema = results.ema
    if ema and ema.validated:
        baseline = ema.baseline_validation_bleu
        rows.append((
            "EMA of the weights",
            f"decay {ema.decay} per step: validation BLEU {ema.validation_bleu:.2f} vs "
            f"{'-' if baseline is None else f'{baseline:.2f}'} for the raw weights; "
            f"{'the EMA is this model' if ema.used else 'the raw weights are this model'}",
        ))
    return rows


def _filters_summary(corpus_filters: dict) -> str:
    """results.json's ``corpus_filters`` in words: the filters, then per split the pairs kept and each
    filter's drops (of the pairs read, for a stream not read to its end)."""
    settings = ", ".join(name if value is True else f"{name} {value}" for name, value in
                         corpus_filters.get("filters", {}).items())
    splits = []
    for split, counts in corpus_filters.get("splits", {}).items():
        removed = ", ".join(f"{n:,} {name}" for name, n in counts.get("removed", {}).items() if n)
        read = "" if counts.get("complete", True) else " read so far"
        splits.append(f"{split}: kept {counts.get('kept', 0):,} of {counts.get('pairs', 0):,} pairs{read} "
                      f"({removed or 'none removed'})")
    return "; ".join([settings, *splits])


def _evaluation_row(key: str, scores: DecodingScores) -> dict:
    return {"decoding": _decoding_label(key), "bleu": _fmt(scores.bleu, 2),
            "bleu_lowercase": _fmt(scores.bleu_lowercase, 2), "chrf": _fmt(scores.chrf, 2),
            "decode_seconds": scores.decode_seconds, "settings": _decoding_settings(scores.decoding or {}),
            "bleu_signature": scores.bleu_signature, "chrf_signature": scores.chrf_signature}


def render_model_card(results: RunResults | dict, repo_id: str | None = None, license: str = "apache-2.0",
                      template_path: str | Path = CARD_TEMPLATE) -> str:
    """The filled model card (README.md text) for the run described by ``results`` (its RunResults, or the
    results.json dict)."""
    results = _checked(results)
    family = get_family(results.model_type)
    _, _, dataset_citation, data_description = _dataset_info(results)
    full_config = family.full_config(results.model_config)
    description = family.describe(full_config)
    src, tgt = results.source_lang, results.target_lang
    card = ModelCard.from_template(
        model_card_data(results, repo_id, license),
        template_path=str(template_path),
        model_name=_model_name(results, repo_id),
        summary=f"A {src}→{tgt} translation model: {description[0].lower()}{description[1:]}",
        architecture_description=description,
        architecture_rows=[(name, full_config.get(name)) for name in family.card_fields],
        num_parameters=f"{results.num_parameters:,}",
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
        recipe=results.recipe,
        named_recipe=bool(results.recipe) and _is_named_recipe(results.recipe),
        training_rows=_training_rows(results),
        evaluation_description=(
            "Detokenized sacreBLEU on the test split, computed by the training run itself (`results.json`), "
            "never copied by hand."
        ),
        evaluation_rows=[_evaluation_row(key, scores) for key, scores in results.test.items()],
        repo_id=repo_id or PLACEHOLDER_REPO_ID,
        example_source="Ein Mann fährt Fahrrad." if src == "de" else "a b c",
        citations=[c for c in (dataset_citation, family.citation) if c],
    )
    return str(card)


def _fmt(value, digits: int):
    return round(float(value), digits) if isinstance(value, int | float) else value


def write_model_card(model_dir: str | Path, results: RunResults | dict | None = None, repo_id: str | None = None,
                     license: str = "apache-2.0") -> Path:
    """Write ``model_dir/README.md`` from ``results`` (default: ``model_dir/results.json``); returns its path."""
    model_dir = Path(model_dir)
    if results is None:
        results = json.loads((model_dir / "results.json").read_text())
    path = model_dir / "README.md"
    path.write_text(render_model_card(results, repo_id=repo_id, license=license))
    return path


TOOLKIT_NAMES = {"opennmt-py": "OpenNMT-py", "joeynmt": "Joey NMT", "fairseq": "fairseq"}


def render_conversion_card(model_dir: str | Path, repo_id: str | None = None, license: str = "apache-2.0") -> str:
    """The model card of a folder that ``hf-s2s convert`` wrote (conversion.json beside config.json): where the
    weights came from (toolkit, architecture, checkpoint file and its sha256), the architecture, how to feed it text
    and how to use it. It claims no scores: the conversion measured none."""
    model_dir = Path(model_dir)
    conversion = json.loads((model_dir / "conversion.json").read_text())
    config = json.loads((model_dir / "config.json").read_text())
    family = get_family(config.get("model_type"))
    full_config = family.full_config(config)
    toolkit = TOOLKIT_NAMES.get(conversion.get("toolkit"), str(conversion.get("toolkit")))
    name = repo_id.split("/")[-1] if repo_id else f"{toolkit} {conversion.get('architecture')} model"
    data = ModelCardData(model_name=name, license=license, library_name="transformers", pipeline_tag="translation",
                         tags=["translation", "seq2seq", family.model_type, "hf_s2s", "custom_code", "safetensors",
                               "converted", str(conversion.get("toolkit"))])
    rows = "\n".join(f"| `{field}` | {full_config.get(field)} |" for field in family.card_fields)
    repo = repo_id or PLACEHOLDER_REPO_ID
    citations = "\n".join(f"```bibtex\n{citation}\n```" for citation in (family.citation,))
    steps = conversion.get("not_carried_over") or []
    not_carried_over = "".join(
        [f"\n{toolkit} did these around the model, and this folder does not: do them yourself.\n\n"]
        + [f"- {step}\n" for step in steps]) if steps else ""
    content = f"""---
{data.to_yaml()}
---

# {name}

A translation model trained with {toolkit} ({conversion.get("architecture")}) and converted into an hf_s2s
`{family.model_type}` folder by `hf-s2s convert --from {conversion.get("toolkit")}`: the weights are the
checkpoint's, unchanged in value, and greedy decoding gives the tokens {toolkit} gives (the converters are tested
token for token against the toolkit itself).

Source checkpoint: `{conversion.get("checkpoint")}` (sha256 `{conversion.get("checkpoint_sha256")}`); the options
that decided the conversion are in `conversion.json`.

## Architecture

{family.describe(full_config)}

| field | value |
| --- | --- |
{rows}

## Input

The tokenizer splits on whitespace and maps each token to the id {toolkit} gave it: feed text tokenized (and
segmented into subwords) exactly as the toolkit's input was. Tokens outside the vocabulary become the unknown token.
{not_carried_over}
## How to use

```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

repo = "{repo}"
tokenizer = AutoTokenizer.from_pretrained(repo, trust_remote_code=True)
model = AutoModelForSeq2SeqLM.from_pretrained(repo, trust_remote_code=True)
batch = tokenizer(["a tokenized source sentence"], return_tensors="pt", padding=True)
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

`trust_remote_code=True` runs the Python files of this repository: read them first. They import only torch and
transformers; the weights are safetensors.

## Citation

{citations}
"""
    return str(ModelCard(content))


__all__ = ["CARD_TEMPLATE", "model_card_data", "render_conversion_card", "render_model_card", "write_model_card"]
