"""Benchmark section ``pipeline``: training speed and memory on the path users run.

The other training section times a bare loop that hands ``labels`` to the model. The training job does more:
a trained tokenizer, a tokenized corpus, ``DataCollatorForSeq2Seq``, the job's own trainer
(:class:`~hf_s2s.training.trainer.CountingSeq2SeqTrainer`: length-grouped or token-budget batches) and the main job's
recipe (label smoothing 0.1, AdamW with beta2 0.98, warm-up). This section runs exactly that for hf_s2s and for
MarianMT of the same dimensions, on the same batches (the sampler is seeded alike, so both train on identical
batches: checked), timed round-robin in one process, with the peak memory of each in a fresh process.

MarianMT takes label smoothing the way Trainer gives it to any transformers model (Trainer smooths the full
logits); hf_s2s takes it as the training job does (the model smooths its own loss on label positions). The main job
also runs with ``--rdrop_alpha 5`` (R-Drop: each batch twice), on the same batches, so its cost is a ratio measured
side by side.
"""

import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import fields, replace
from multiprocessing import get_context

import torch
from transformers import DataCollatorForSeq2Seq

from ..data import corpus as data_lib
from ..data import synthetic, tokenization
from ..data.encoding import tokenize_corpus
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from ..models.modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration
from ..training.arguments import TrainingArguments, default_training_arguments, load_recipe
from ..training.trainer import CountingSeq2SeqTrainer, move_loss_into_model
from .builders import build_marian
from .measure import median, multi30k_dir, set_threads, status_mb

RECIPE = "transformer_small"  # the README's main job
MAIN_JOB = "hf_s2s (main job)"
RDROP = "hf_s2s (main job), R-Drop 5"
MODELS = (MAIN_JOB, RDROP, "MarianMT")
RDROP_ALPHA = {RDROP: 5.0}  # --rdrop_alpha of each run: the R-Drop paper's weight for IWSLT14 de-en


def benchmark_corpus(settings, num_train: int) -> tuple[dict, str, str]:
    """(corpus, source key, target key): Multi30k de-en (train, validation, test), or for smoke runs
    (``use_multi30k`` False) a synthetic corpus of ``num_train`` training pairs and 8 validation and test pairs."""
    if settings.use_multi30k:
        corpus = data_lib.load_translation_corpus("multi30k", source_lang="de", target_lang="en",
                                                  data_dir=multi30k_dir())
        return corpus, "de", "en"
    return synthetic.text_reversal_corpus(num_train=num_train, num_validation=8, num_test=8), "src", "tgt"


def pipeline_dataset(settings):
    """(tokenizer, tokenized training split): the first ``pipeline_pairs`` Multi30k de-en training pairs with a
    BPE of ``pipeline_vocab_size`` entries trained on them, or a synthetic corpus for smoke runs."""
    corpus, source, target = benchmark_corpus(settings, settings.pipeline_pairs)
    corpus = {"train": corpus["train"].select(range(min(settings.pipeline_pairs, len(corpus["train"]))))}
    tokenizer = tokenization.train_tokenizer(corpus["train"], source_lang=source, target_lang=target,
                                             vocab_size=settings.pipeline_vocab_size)
    tokenized = tokenize_corpus(corpus, tokenizer, source_lang=source, target_lang=target,
                                max_source_length=128, max_target_length=128)
    return tokenizer, tokenized["train"]


def pipeline_arguments(output_dir: str, steps: int, seed: int, rdrop_alpha: float = 0.0) -> TrainingArguments:
    """The main job's training arguments (its defaults under its recipe), training only: no evaluation, no
    checkpoints, no logging, ``steps`` optimizer steps; ``rdrop_alpha`` as ``--rdrop_alpha``."""
    known = {f.name for f in fields(TrainingArguments)}
    values = {k: v for k, v in {**default_training_arguments(), **load_recipe(RECIPE)}.items() if k in known}
    values.update(output_dir=output_dir, max_steps=steps, eval_strategy="no", save_strategy="no",
                  load_best_model_at_end=False, report_to=[], logging_strategy="no", disable_tqdm=True,
                  use_cpu=True, seed=seed, rdrop_alpha=rdrop_alpha)
    return TrainingArguments(**values)


def build_pipeline_model(name: str, settings, tokenizer) -> torch.nn.Module:
    """The main job's model for this tokenizer, or a MarianMT of the same dimensions (post-LN, as Marian is)."""
    dims, ids = settings.dims, tokenization.special_token_ids(tokenizer)
    if name == "MarianMT":
        return build_marian(replace(dims, vocab_size=len(tokenizer)), **ids)
    return TransformerSeq2SeqForConditionalGeneration(TransformerSeq2SeqConfig(
        vocab_size=len(tokenizer), d_model=dims.d_model, encoder_layers=dims.layers, decoder_layers=dims.layers,
        encoder_attention_heads=dims.heads, decoder_attention_heads=dims.heads, encoder_ffn_dim=dims.ffn_dim,
        decoder_ffn_dim=dims.ffn_dim, max_position_embeddings=dims.max_positions, **ids))


def pipeline_trainer(name: str, settings, tokenizer, train_dataset, output_dir: str):
    """The training job's trainer around a fresh model (seeded alike for every model)."""
    torch.manual_seed(settings.seed)
    model = build_pipeline_model(name, settings, tokenizer)
    args = pipeline_arguments(output_dir, settings.pipeline_steps, settings.seed, RDROP_ALPHA.get(name, 0.0))
    trainer = CountingSeq2SeqTrainer(
        model=model, args=args, train_dataset=train_dataset, processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100))
    move_loss_into_model(trainer)  # hf_s2s smooths (and R-Drops) in the model; MarianMT keeps Trainer's smoother
    return trainer


def bench_pipeline(settings, length_pairs=None) -> dict:
    """Training tokens/s (real source + target tokens) of ``pipeline_steps`` steps of the training job's trainer,
    hf_s2s (without and with R-Drop) against MarianMT, round-robin over ``repeats`` fresh runs; peak memory of each in
    a fresh process."""
    tokenizer, train_dataset = pipeline_dataset(settings)
    times = {name: [] for name in MODELS}
    tokens = {name: set() for name in MODELS}
    with tempfile.TemporaryDirectory() as output_dir:
        for repeat in range(settings.warmup + settings.repeats):
            for name in MODELS:
                trainer = pipeline_trainer(name, settings, tokenizer, train_dataset, output_dir)
                start = time.perf_counter()
                trainer.train()
                seconds = time.perf_counter() - start
                tokens[name].add(trainer.train_tokens)
                if repeat >= settings.warmup:
                    times[name].append(seconds)
    counts = {count for per_model in tokens.values() for count in per_model}
    if len(counts) != 1:
        raise RuntimeError(f"the pipeline's models trained on different batches (token counts {tokens})")
    trained = counts.pop()
    memory = pipeline_peak_memory(settings) if settings.memory_steps else {}
    models = {name: {"tokens_per_s": trained / median(times[name]), "times": times[name], **memory.get(name, {})}
              for name in MODELS}
    return {"recipe": RECIPE, "pairs": len(train_dataset), "steps": settings.pipeline_steps,
            "tokens_per_run": trained, "models": models}


def _pipeline_memory_probe(settings, name: str) -> dict:
    """Runs in a fresh process: the pipeline of one model. Resident memory before training, the peak while
    training (the high-water mark is reset first, so corpus loading and tokenizer training do not count), and the
    peak of the whole process."""
    set_threads(settings.threads)
    tokenizer, train_dataset = pipeline_dataset(settings)
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = pipeline_trainer(name, settings, tokenizer, train_dataset, output_dir)
        setup_peak = status_mb("VmHWM")
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # Linux: reset the peak resident set (VmHWM) to the current one
        # the resident set at the reset, read as the reset left it: VmRSS read before it could be higher than the
        # mark after it (memory freed in between), and the training peak then read below "before"
        before = status_mb("VmHWM")
        trainer.train()
        training_peak = status_mb("VmHWM")
    return {"rss_before_training_mb": before, "peak_rss_training_mb": training_peak,
            "peak_rss_growth_mb": training_peak - before,
            "peak_rss_process_mb": max(setup_peak, training_peak)}
def pipeline_peak_memory(settings) -> dict:
    """Resident memory of the pipeline per model (before and while training ``pipeline_steps`` steps, and the
    whole process's peak), each in its own fresh process so no model's allocations count against another's."""
    results = {}
    for name in MODELS:
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            results[name] = pool.submit(_pipeline_memory_probe, settings, name).result()
    return results
