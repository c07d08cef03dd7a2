"""The models the serving benchmark serves by default: small models that end their sentences as trained ones do.

A random model almost never produces </s>, so each of its outputs runs to its length bound (1.3 x source + 5 tokens):
a load no trained model brings, under which a batch decodes as long as its longest bound and the CTranslate2 engine
stops every row at its own. :func:`train_serving_folders` trains the benchmark's Transformer and its Bahdanau GRU
(:class:`.builders.TransformerDims`) for a few hundred steps on Multi30k's training pairs (de->en; the synthetic
sentences of smoke runs otherwise), once per run, and saves each with its tokenizer and a generation config as
``hf-s2s train`` would, with a vocabulary shortlist (``hf-s2s build-shortlist``'s builder on the training pairs): the
folders serve, export and translate like any trained folder. A few hundred steps do not
make a good translator, but they make one whose outputs end: the lengths it writes are recorded with the folders
(``serving_models.json``: mean output tokens against the mean bound), and the section's report shows them.

``folder`` may be kept between runs (``hf-s2s bench --serving-models-dir``): folders trained there with the same
settings are served again instead of trained anew; a folder holding anything else is refused.
"""

import dataclasses
import json
import math
import random
from pathlib import Path

import torch

from ..data.tokenization import train_tokenizer_from_texts
from ..models.modeling_common import DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B, source_length_bound
from ..models.shortlist import shortlist_from_texts
from .builders import EOS, PAD, TransformerDims, build_hf_s2s_rnn, build_hf_s2s_transformer

MANIFEST = "serving_models.json"
# The families served, each built at the benchmark's dimensions.
BUILDERS = {"Transformer": build_hf_s2s_transformer,
            "RNN Bahdanau GRU": lambda dims: build_hf_s2s_rnn(dims, "gru", "bahdanau")}
MAX_TRAINING_TOKENS = 64  # longer training sentences (a few in Multi30k) are left out
SHORTLIST_PAIRS = 8192  # training pairs the folders' vocabulary shortlist is built from (hf-s2s build-shortlist's way)


@dataclasses.dataclass
class ServingTraining:
    """How the served models are trained."""

    steps: int = 400  # optimizer steps per model
    batch_size: int = 64  # sentence pairs per step
    learning_rate: float = 1e-3  # AdamW, after a linear warm-up over the first tenth of the steps
    seed: int = 0

    @classmethod
    def quick(cls) -> "ServingTraining":
        return cls(steps=20, batch_size=8)


def _batches(pairs: list[tuple[list[int], list[int]]], batch_size: int, steps: int, seed: int) -> list[dict]:
    """``steps`` padded batches of pairs of similar source length (the main job's length grouping), in random order,
    cycling through the pairs; labels -100 on padding."""
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
    groups = [order[i: i + batch_size] for i in range(0, len(order), batch_size)]
    random.Random(seed).shuffle(groups)
    batches = []
    for step in range(steps):
        group = [pairs[i] for i in groups[step % len(groups)]]
        width_source, width_target = (max(len(pair[side]) for pair in group) for side in (0, 1))
        input_ids = torch.full((len(group), width_source), PAD)
        labels = torch.full((len(group), width_target), -100)
        for row, (source, target) in enumerate(group):
            input_ids[row, : len(source)] = torch.tensor(source)
            labels[row, : len(target)] = torch.tensor(target)
        batches.append({"input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "labels": labels})
    return batches


def _train(model: torch.nn.Module, batches: list[dict], training: ServingTraining) -> float:
    """AdamW over ``batches`` with a linear warm-up; returns the last tenth's mean loss."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=training.learning_rate)
    warmup = max(1, training.steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    losses = []
    for batch in batches:
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    model.eval()
    tail = losses[-max(1, len(losses) // 10):]
    return sum(tail) / len(tail)


def _output_lengths(model, tokenizer, sources: list[str]) -> dict[str, float]:
    """Greedy outputs of ``sources``: the mean tokens generated (</s> included) against the mean length bound, and the
    share of outputs that ended with </s> before the bound."""
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, num_beams=1)
    generated = out[:, 1:]
    lengths = ((generated != PAD).cumsum(1) * (generated != PAD)).amax(1)  # tokens up to the last non-padding one
    bounds = source_length_bound(batch["attention_mask"].sum(1), DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B)
    ended = ((generated == EOS).any(1) & (lengths < bounds)).float()
    return {"mean_output_tokens": float(lengths.float().mean()), "mean_bound": float(bounds.float().mean()),
            "ended_before_bound": float(ended.mean())}


def train_serving_folders(dims: TransformerDims, folder: Path, pairs: list[tuple[str, str]], sources: list[str],
                          training: ServingTraining, vocab_size: int | None = None) -> dict[str, Path]:
    """The served folders, trained into ``folder`` on ``pairs`` (source, target texts) unless ``folder`` already holds
    folders trained with these settings (``serving_models.json``); ``sources`` (the sentences the clients send) measure
    their output lengths. Returns {family name: folder}."""
    folder = Path(folder)
    settings = {"dims": dataclasses.asdict(dims), "training": dataclasses.asdict(training), "pairs": len(pairs),
                "vocab_size": vocab_size}
    manifest_path = folder / MANIFEST
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("settings") == settings:
            return {name: folder / entry["folder"] for name, entry in manifest["models"].items()}
        raise ValueError(f"{folder} holds serving models trained with other settings ({manifest_path}): give another "
                         "folder, or remove it to train them again")
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty and holds no {MANIFEST}: give a new or empty folder for the serving "
                         "models")
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer_from_texts([text for pair in pairs for text in pair],
                                           vocab_size=vocab_size or dims.vocab_size)
    dims = dataclasses.replace(dims, vocab_size=len(tokenizer))
    sources_ids = tokenizer([source for source, _ in pairs])["input_ids"]
    targets_ids = tokenizer([target for _, target in pairs])["input_ids"]
    encoded = [(s, t) for s, t in zip(sources_ids, targets_ids, strict=True)
               if len(s) <= MAX_TRAINING_TOKENS and len(t) <= MAX_TRAINING_TOKENS]
    batches = _batches(encoded, training.batch_size, training.steps, training.seed)
    shortlist = shortlist_from_texts(tokenizer, [source for source, _ in pairs[:SHORTLIST_PAIRS]],
                                     [target for _, target in pairs[:SHORTLIST_PAIRS]],
                                     source_vocab_size=len(tokenizer), target_vocab_size=len(tokenizer))
    models = {}
    for name, build in BUILDERS.items():
        torch.manual_seed(training.seed)
        model = build(dims)
        loss = _train(model, batches, training)
        path = folder / name.replace(" ", "_")
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        shortlist.save_pretrained(path)
        lengths = _output_lengths(model, tokenizer, sources[:64])
        models[name] = {"folder": path.name, "final_loss": loss if math.isfinite(loss) else None, **lengths}
    manifest_path.write_text(json.dumps({"settings": settings, "models": models}, indent=2))
    return {name: folder / entry["folder"] for name, entry in models.items()}


def serving_models_report(folders: dict[str, Path]) -> dict[str, dict]:
    """What ``serving_models.json`` records of each trained folder (its loss and output lengths); {} for folders
    it does not describe (a user's own)."""
    reports = {}
    for name, path in folders.items():
        manifest = Path(path).parent / MANIFEST
        if manifest.is_file():
            reports[name] = json.loads(manifest.read_text())["models"].get(name, {})
    return reports


def random_folders(dims: TransformerDims, folder: Path, texts: list[str], seed: int,
                    vocab_size: int | None = None) -> dict[str, Path]:
    """A random Transformer and a random Bahdanau GRU of ``dims``, saved with a BPE tokenizer of ``vocab_size`` (None:
    ``dims.vocab_size``) trained on ``texts`` (the models' vocabulary is the tokenizer's)."""
    tokenizer = train_tokenizer_from_texts(texts, vocab_size=vocab_size or dims.vocab_size)
    dims = dataclasses.replace(dims, vocab_size=len(tokenizer))
    folders = {}
    for name, build in BUILDERS.items():
        torch.manual_seed(seed)
        model = build(dims).eval()
        if name == "Transformer":
            # Through its tied embeddings a random Transformer repeats its input token, here the start token, which
            # decodes to no text at all; with that row zeroed it repeats ordinary tokens, whose text can be counted.
            with torch.no_grad():
                model.get_input_embeddings().weight[model.config.decoder_start_token_id].zero_()
        folders[name] = folder / name.replace(" ", "_")
        model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


__all__ = ["MANIFEST", "ServingTraining", "random_folders", "serving_models_report", "train_serving_folders"]
