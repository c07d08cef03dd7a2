"""The benchmark's measurements, each hf_s2s against its peer timed side by side in one process:

1. Transformer training tokens/s (+ peak memory) vs MarianMTModel of identical dimensions;
2. generation tokens/s, greedy and beam, vs Marian, with the RNN family in the same table; and (section shortlist)
   the Transformer with a vocabulary shortlist beside itself without and MarianMT, at batch 1, 8 and 64;
3. cache scaling: time per generated token as the output grows, cached vs uncached;
4. the RNN family vs the textbook loop of ``reference_rnn``, training and greedy decoding;
5. FLOP utilisation of the Transformer training step against the measured matmul peak;
6. RNN learning: validation loss after the same steps on the same real batches, hf_s2s vs the textbook RNN;
7. batching: token-budget batches vs length-grouped batches of sentences, padding fraction and tokens/s;
8. pipeline: the training job's own path (tokenizer, collator, trainer, the main job's recipe with label smoothing)
   for hf_s2s (also with R-Drop) and MarianMT, tokens/s and peak memory (:mod:`.pipeline`).
9. serving: ``hf-s2s serve`` under a fixed load of concurrent clients, dynamic batching against one request at a
   time and CTranslate2 against torch, throughput and latency (:mod:`.serving`).
10. scaling: the training job on Multi30k repeated 1x, 10x and 100x, in memory and streamed: time to the first
    step, where the preparation goes, training tokens/s, peak memory and disk (:mod:`.scaling`; only when
    asked for).
"""

import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import torch
from transformers import DataCollatorForSeq2Seq

from ..data import corpus as data_lib
from ..data import tokenization
from ..data.encoding import tokenize_corpus
from ..data.sampling import LengthGroupedEpochSampler, TokenBudgetBatchSampler, padded_tokens
from ..inference.int8 import quantize_int8
from ..models.shortlist import shortlist_from_texts
from .builders import (
    PAD,
    TRAINING_BUILDERS,
    TransformerDims,
    build_hf_s2s_rnn,
    build_hf_s2s_transformer,
    build_marian,
    build_textbook_rnn,
    make_trainer,
    peak_training_memory,
)
from .generation import (
    SHORTLIST_ROW,
    bench_generation_rows,
    bench_shortlist_rows,
    generate_fn,
    generation_config,
)
from .measure import (
    count_matmul_flops,
    interleaved_times,
    make_batches,
    matmul_peak,
    median,
    multi30k_length_pairs,
    padded_batch,
    set_threads,
    synthetic_length_pairs,
)
from .pipeline import MAIN_JOB, RDROP, bench_pipeline, benchmark_corpus
from .reference_rnn import TextbookRNNSeq2Seq
from .scaling import ScalingLoad, bench_scaling
from .serving import ServingLoad, bench_serving, serving_targets


@dataclass
class BenchSettings:
    dims: TransformerDims = field(default_factory=TransformerDims)
    # torch intra-op threads, recorded in the output (None: torch's default). 1 by default: on these shared cores
    # a 2-thread OpenMP pool stalls whenever another process takes a core (repeats varied 4 s .. 25 s).
    threads: int | None = 1
    repeats: int = 5  # timed repeats per measurement; the median is reported
    warmup: int = 1  # untimed runs before timing
    seed: int = 0
    train_batches: int = 4  # batches per timed training repeat
    rnn_train_batches: int = 2
    generation_batch: int = 32
    new_tokens: int = 40  # generated tokens per sentence (min_new_tokens = max_new_tokens)
    num_beams: int = 4
    cache_lengths: tuple[int, ...] = (16, 32, 64, 128, 256)
    cache_batch: int = 8
    # Uncached decoding re-runs the whole prefix per token: quadratic, ~35 s per 256-token call here, so it stops
    # at this length (its growth from 16 to 128 already shows what the cache removes).
    uncached_max_length: int = 128
    memory_steps: int = 4  # training steps of the peak-memory probe (0 = skip it)
    matmul_size: int = 2048
    use_multi30k: bool = True  # length distribution from Multi30k; False: synthetic lengths (smoke runs)
    learning_steps: int = 100  # training steps of the RNN learning comparison (real sentences, Adam 1e-3)
    learning_validation_pairs: int = 256
    # Token budget of the batching comparison: 1,800 padded tokens make about as many batches per Multi30k epoch
    # as the length-grouped batches of `dims.batch_size` (64) sentences, so both take the same number of steps.
    token_budget: int = 1800
    batching_batches: int = 8  # batches of each kind per timed repeat, drawn at random from one epoch
    pipeline_pairs: int = 4096  # Multi30k training pairs the pipeline section tokenizes and trains on
    pipeline_steps: int = 16  # optimizer steps of one pipeline run (one timed repeat)
    pipeline_vocab_size: int = 8000  # BPE trained by the pipeline section (the main job's; > 260 byte-fallback ids)
    # The shortlist section: batch sizes of real test sentences (a sentence's list is its source tokens'
    # candidates, so the union the output layer multiplies grows with the batch), and its beam size.
    shortlist_batches: tuple[int, ...] = (1, 8, 64)
    shortlist_num_beams: int = 5
    serving: ServingLoad = field(default_factory=ServingLoad)  # the load the serving section sends
    scaling: ScalingLoad = field(default_factory=ScalingLoad)  # the corpora and runs of the scaling section

    @classmethod
    def quick(cls) -> "BenchSettings":
        """Tiny sizes for a smoke run of every code path in seconds."""
        return cls(
            dims=TransformerDims(vocab_size=128, d_model=32, layers=1, heads=4, ffn_dim=64, max_positions=64,
                                 rnn_hidden=16, batch_size=8),
            threads=1, repeats=2, warmup=1, train_batches=1, rnn_train_batches=1, generation_batch=4, new_tokens=4,
            num_beams=2, cache_lengths=(4, 8), cache_batch=2, uncached_max_length=8, memory_steps=0, matmul_size=128,
            use_multi30k=False, learning_steps=3, learning_validation_pairs=16, token_budget=140,
            batching_batches=2, pipeline_pairs=64, pipeline_steps=2, pipeline_vocab_size=300,
            shortlist_batches=(1, 4), shortlist_num_beams=2,
            serving=ServingLoad.quick(), scaling=ScalingLoad.quick(),
        )


RNN_VARIANTS = {"Bahdanau GRU": ("gru", "bahdanau"), "Luong LSTM": ("lstm", "luong_general")}
TRANSFORMER_ROW = "hf_s2s Transformer (post-LN)"  # the generation rows the targets compare
CT2_ROW = "CTranslate2 float32 (hf_s2s Transformer exported)"


def _generation_inputs(settings: BenchSettings, length_pairs, batch_size: int, seed: int) -> dict[str, torch.Tensor]:
    batch = make_batches(length_pairs, 1, batch_size, settings.dims.vocab_size, seed=seed)[0]
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


# ------------------------------------------------------------------------------------------------ measurements


def bench_training(settings: BenchSettings, length_pairs) -> dict:
    """1 + 5: Transformer training tokens/s, hf_s2s vs Marian, and matmul FLOPs per second of each."""
    dims = settings.dims
    batches = make_batches(length_pairs, settings.train_batches, dims.batch_size, dims.vocab_size, seed=settings.seed)
    tokens = sum(b["num_tokens"] for b in batches)
    padded = sum(b["input_ids"].numel() + b["labels"].numel() for b in batches)
    steps, flops = {}, {}
    for name, build in TRAINING_BUILDERS.items():
        torch.manual_seed(settings.seed)
        step = make_trainer(build(dims))
        steps[name] = step
        flops[name] = count_matmul_flops(lambda step=step: [step(b) for b in batches])
    times = interleaved_times({name: lambda s=s: [s(b) for b in batches] for name, s in steps.items()},
                              settings.repeats, settings.warmup)
    results = {}
    for name in steps:
        seconds = median(times[name])
        results[name] = {"tokens_per_s": tokens / seconds, "seconds_per_repeat": seconds, "times": times[name],
                         "matmul_flops": flops[name], "flops_per_s": flops[name] / seconds}
    return {"tokens_per_repeat": tokens, "padded_positions_per_repeat": padded,
            "batches_per_repeat": settings.train_batches, "models": results}


def bench_training_memory(settings: BenchSettings, length_pairs) -> dict:
    if not settings.memory_steps:
        return {}
    spec = {"dims": asdict(settings.dims), "threads": settings.threads or torch.get_num_threads(),
            "seed": settings.seed, "steps": settings.memory_steps, "length_pairs": length_pairs}
    return {name: peak_training_memory({**spec, "model": name}) for name in TRAINING_BUILDERS}


def bench_generation(settings: BenchSettings, length_pairs) -> dict:
    """2: generated tokens/s at a fixed output length, greedy and beam (:mod:`.generation`)."""
    dims = settings.dims
    inputs = _generation_inputs(settings, length_pairs, settings.generation_batch, settings.seed + 1)
    models = {TRANSFORMER_ROW: build_hf_s2s_transformer(dims).eval(), "MarianMT": build_marian(dims).eval()}
    rnn_models = {f"hf_s2s RNN {name}": build_hf_s2s_rnn(dims, cell, attention).eval()
                  for name, (cell, attention) in RNN_VARIANTS.items()}
    return bench_generation_rows(models, rnn_models, inputs, settings.new_tokens, settings.num_beams,
                                 settings.repeats, settings.warmup, int8=quantize_int8)


def bench_shortlist(settings: BenchSettings, length_pairs=None) -> dict:
    """2b: the Transformer decoding with a vocabulary shortlist, next to itself without and MarianMT (:mod:`.generation`).
    A BPE of ``pipeline_vocab_size`` entries (the main job's, 8,000) and the shortlist (``hf-s2s build-shortlist``'s builder, its defaults) come
    from the training split; the models are random (speed does not depend on the weights, only K does, and K depends
    on the source tokens); each batch is the first sentences of the test split."""
    corpus, source, target = benchmark_corpus(settings, settings.pipeline_pairs)
    train = corpus["train"]
    tokenizer = tokenization.train_tokenizer(train, source_lang=source, target_lang=target,
                                             vocab_size=settings.pipeline_vocab_size)
    vocab = len(tokenizer)
    pairs = train["translation"]
    shortlist = shortlist_from_texts(tokenizer, [pair[source] for pair in pairs], [pair[target] for pair in pairs],
                                     source_vocab_size=vocab, target_vocab_size=vocab)
    dims = replace(settings.dims, vocab_size=vocab)
    test = [pair[source] for pair in corpus["test"]["translation"]]
    inputs_by_batch = {}
    for batch in settings.shortlist_batches:
        encoded = tokenizer(test[:batch], truncation=True, max_length=dims.max_positions, padding=True,
                            return_tensors="pt")
        encoded["input_ids"][encoded["attention_mask"] == 0] = PAD  # the models' padding id (builders.PAD)
        inputs_by_batch[batch] = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
    results = bench_shortlist_rows(build_hf_s2s_transformer(dims).eval(), build_marian(dims).eval(), shortlist,
                                   inputs_by_batch, settings.new_tokens, settings.shortlist_num_beams,
                                   settings.repeats, settings.warmup)
    return {"vocab_size": vocab, "shortlist": repr(shortlist), "batches": results}


def bench_cache_scaling(settings: BenchSettings, length_pairs) -> dict:
    """3: seconds per generated token (greedy) at growing output lengths, with and without the cache."""
    dims = settings.dims
    inputs = _generation_inputs(settings, length_pairs, settings.cache_batch, settings.seed + 2)
    models = {"hf_s2s Transformer": build_hf_s2s_transformer(dims).eval(),
              "hf_s2s RNN Bahdanau GRU": build_hf_s2s_rnn(dims, "gru", "bahdanau").eval()}
    results = {name: {"cached": {}, "uncached": {}} for name in models}
    for i, length in enumerate(settings.cache_lengths):
        fns = {}
        for name, model in models.items():
            fns[(name, "cached")] = generate_fn(model, inputs, generation_config(length, 1, use_cache=True))
            if length <= settings.uncached_max_length:
                fns[(name, "uncached")] = generate_fn(model, inputs, generation_config(length, 1, use_cache=False))
        times = interleaved_times(fns, settings.repeats, settings.warmup if i == 0 else 0)  # warm once per model
        for (name, mode), t in times.items():
            results[name][mode][length] = median(t) / length
    return results


def bench_rnn_vs_textbook(settings: BenchSettings, length_pairs) -> dict:
    """4: RNN training and greedy decoding tokens/s, hf_s2s vs the textbook loop, same sizes and batches."""
    dims = settings.dims
    batches = make_batches(length_pairs, settings.rnn_train_batches, dims.batch_size, dims.vocab_size,
                           seed=settings.seed + 3)
    tokens = sum(b["num_tokens"] for b in batches)
    inputs = _generation_inputs(settings, length_pairs, settings.generation_batch, settings.seed + 1)
    results = {}
    for name, (cell, attention) in RNN_VARIANTS.items():
        torch.manual_seed(settings.seed)
        ours, textbook = build_hf_s2s_rnn(dims, cell, attention), build_textbook_rnn(dims, cell, attention)
        train = {"hf_s2s": make_trainer(ours), "textbook": make_trainer(textbook)}
        times = interleaved_times({k: lambda s=s: [s(b) for b in batches] for k, s in train.items()},
                                  settings.repeats, settings.warmup)
        training = {k: tokens / median(t) for k, t in times.items()}
        ours.eval(), textbook.eval()
        decode = {
            "hf_s2s": generate_fn(ours, inputs, generation_config(settings.new_tokens, 1)),
            "textbook": lambda tb=textbook: tb.greedy(**inputs, num_tokens=settings.new_tokens),
        }
        times = interleaved_times(decode, settings.repeats, settings.warmup)
        generated = settings.generation_batch * settings.new_tokens
        decoding = {k: generated / median(t) for k, t in times.items()}
        results[name] = {
            "training_tokens_per_s": training, "training_ratio": training["hf_s2s"] / training["textbook"],
            "greedy_tokens_per_s": decoding, "greedy_ratio": decoding["hf_s2s"] / decoding["textbook"],
        }
    return results


def learning_batches(settings: BenchSettings) -> tuple[list[dict], list[dict], int]:
    """Real sentence pairs for the learning comparison: ``learning_steps`` shuffled training batches and the first
    ``learning_validation_pairs`` validation pairs, tokenized with a BPE tokenizer trained on the training split
    (Multi30k de->en, or the synthetic reversal task for smoke runs). Returns them and the vocabulary size."""
    dims = settings.dims
    name, src, tgt = ("multi30k", "de", "en") if settings.use_multi30k else ("synthetic:reversal", "src", "tgt")
    corpus = data_lib.load_translation_corpus(name, source_lang=src, target_lang=tgt)
    tokenizer = tokenization.train_tokenizer(corpus["train"], source_lang=src, target_lang=tgt,
                                             vocab_size=max(dims.vocab_size, 280))
    needed = settings.learning_steps * dims.batch_size
    corpus = {"train": corpus["train"].shuffle(seed=settings.seed).select(range(needed)),
              "validation": corpus["validation"].select(range(settings.learning_validation_pairs))}
    tokenized = tokenize_corpus(corpus, tokenizer, source_lang=src, target_lang=tgt,
                                max_source_length=128, max_target_length=128)
    collate = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100, return_tensors="pt")

    def batches(split):
        rows = tokenized[split]
        return [collate([rows[j] for j in range(i, min(i + dims.batch_size, len(rows)))])
                for i in range(0, len(rows), dims.batch_size)]

    return batches("train"), batches("validation"), len(tokenizer)


def _loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "labels")}
    return model(**inputs) if isinstance(model, TextbookRNNSeq2Seq) else model(**inputs).loss


def bench_rnn_learning(settings: BenchSettings, length_pairs) -> dict:
    """6: what each RNN has learned after ``learning_steps`` Adam steps (lr 1e-3, gradients clipped at 1) on the
    same real batches from the same seed: the token-weighted validation loss, hf_s2s (its defaults, and the
    embedding init std 0.1 it had before) vs the textbook RNN (PyTorch's default init)."""
    train, validation, vocab_size = learning_batches(settings)
    dims = settings.dims
    results = {}
    for name, (cell, attention) in RNN_VARIANTS.items():
        models = {
            "hf_s2s": (build_hf_s2s_rnn, {}),
            "hf_s2s, init_std 0.1": (build_hf_s2s_rnn, {"init_std": 0.1}),
            "textbook": (build_textbook_rnn, {}),
        }
        losses = {}
        for label, (build, overrides) in models.items():
            torch.manual_seed(settings.seed)
            model = build(dims, cell, attention, vocab_size=vocab_size, **overrides).train()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            for batch in train:
                _loss(model, batch).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            model.eval()
            with torch.no_grad():
                counts = [int((b["labels"] != -100).sum()) for b in validation]
                total = sum(float(_loss(model, b)) * n for b, n in zip(validation, counts, strict=True))
            losses[label] = total / sum(counts)
        results[name] = {"validation_loss": losses, "loss_ratio": losses["hf_s2s"] / losses["textbook"]}
    return results


def bench_batching(settings: BenchSettings, length_pairs) -> dict:
    """7: one epoch of token-budget batches (:class:`~hf_s2s.data.sampling.TokenBudgetBatchSampler`) against the main
    job's length-grouped batches of ``batch_size`` sentences (Trainer's ``group_by_length``, which sorts by source
    length only). The padding fraction is exact, over the whole epoch; tokens/s times hf_s2s Transformer training
    steps on ``batching_batches`` batches drawn at random from each epoch (real source + target tokens/s)."""
    dims = settings.dims
    source, target = [s for s, _ in length_pairs], [t for _, t in length_pairs]
    grouped = list(LengthGroupedEpochSampler(source, dims.batch_size, seed=settings.seed))
    epochs = {
        f"length-grouped, {dims.batch_size} sentences": [grouped[i: i + dims.batch_size]
                                                        for i in range(0, len(grouped), dims.batch_size)],
        f"token budget {settings.token_budget}": list(TokenBudgetBatchSampler(source, target, settings.token_budget,
                                                                              seed=settings.seed)),
    }
    g = torch.Generator().manual_seed(settings.seed)
    results, runs = {}, {}
    for name, batches in epochs.items():
        padded = sum(padded_tokens(batch, source, target) for batch in batches)
        picks = torch.randperm(len(batches), generator=g)[: settings.batching_batches].tolist()
        timed = [padded_batch([length_pairs[i] for i in batches[k]], dims.vocab_size, g) for k in picks]
        torch.manual_seed(settings.seed)
        step = make_trainer(build_hf_s2s_transformer(dims))
        runs[name] = lambda step=step, timed=timed: [step(b) for b in timed]
        results[name] = {"batches_per_epoch": len(batches), "sentences_per_batch": len(source) / len(batches),
                         "padding_fraction": 1 - (sum(source) + sum(target)) / padded,
                         "timed_tokens": sum(b["num_tokens"] for b in timed)}
    times = interleaved_times(runs, settings.repeats, settings.warmup)
    for name, result in results.items():
        result.update(tokens_per_s=result["timed_tokens"] / median(times[name]), times=times[name])
    return results


def profile_top_ops(fn: Callable[[], object], top: int = 15) -> list[dict]:
    """torch.profiler over one call of ``fn``: the ``top`` ops by self CPU time and their share of the total."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return [{"op": e.key, "self_cpu_pct": 100 * e.self_cpu_time_total / total, "calls": e.count} for e in events[:top]]


# ------------------------------------------------------------------------------------------------- the whole run


def run_benchmark(settings: BenchSettings, sections: tuple[str, ...] = ("training", "memory", "generation",
                                                                          "shortlist", "cache", "rnn", "peak",
                                                                          "learning", "batching", "pipeline",
                                                                          "serving")
                  ) -> dict:
    threads = set_threads(settings.threads)
    torch.manual_seed(settings.seed)
    length_pairs = multi30k_length_pairs() if settings.use_multi30k else synthetic_length_pairs(seed=settings.seed)
    report = {
        "environment": {"torch": torch.__version__, "threads": threads, "cpu_count": os.cpu_count(),
                        "machine": platform.machine(), "processor": platform.processor() or platform.machine(),
                        "cpu_capability": torch.backends.cpu.get_cpu_capability()},
        "settings": asdict(settings),
        "length_distribution": {"source": "multi30k train de->en" if settings.use_multi30k else "synthetic",
                                "pairs": len(length_pairs),
                                "mean_source": sum(p[0] for p in length_pairs) / len(length_pairs),
                                "mean_target": sum(p[1] for p in length_pairs) / len(length_pairs)},
    }
    runners = {"training": bench_training, "memory": bench_training_memory, "generation": bench_generation,
               "shortlist": bench_shortlist,
               "cache": bench_cache_scaling, "rnn": bench_rnn_vs_textbook,
               "learning": bench_rnn_learning, "batching": bench_batching, "pipeline": bench_pipeline,
               "serving": bench_serving, "scaling": bench_scaling}
    report["section_seconds"] = {}
    for name in sections:
        start = time.perf_counter()
        if name in runners:
            report[name] = runners[name](settings, length_pairs)
        elif name == "peak":
            report["matmul_peak"] = matmul_peak(settings.matmul_size, settings.repeats, settings.warmup)
        report["section_seconds"][name] = time.perf_counter() - start
        print(f"[bench] {name}: {report['section_seconds'][name]:.0f} s", file=sys.stderr, flush=True)
    report["summary"] = summarize(report, settings)
    return report


def summarize(report: dict, settings: BenchSettings) -> dict:
    """Ratios and whether each target of the issue is met."""
    summary = {}
    if "training" in report:
        models = report["training"]["models"]
        ours, marian = models["hf_s2s (post-LN)"], models["MarianMT"]
        summary["training_ratio_vs_marian"] = ours["tokens_per_s"] / marian["tokens_per_s"]
        summary["training_ratio_pre_ln_vs_marian"] = models["hf_s2s (pre-LN)"]["tokens_per_s"] / marian["tokens_per_s"]
        if "matmul_peak" in report:
            peak = report["matmul_peak"]["flops_per_s"]
            summary["flop_utilisation"] = {name: m["flops_per_s"] / peak for name, m in models.items()}
    if report.get("memory"):
        memory = report["memory"]
        summary["memory_ratio_vs_marian"] = (memory["hf_s2s (post-LN)"]["peak_rss_growth_mb"]
                                             / memory["MarianMT"]["peak_rss_growth_mb"])
    if "pipeline" in report:
        models = report["pipeline"]["models"]
        summary["pipeline_ratio_vs_marian"] = models[MAIN_JOB]["tokens_per_s"] / models["MarianMT"]["tokens_per_s"]
        summary["pipeline_rdrop_speed_ratio"] = models[RDROP]["tokens_per_s"] / models[MAIN_JOB]["tokens_per_s"]
    if "generation" in report:
        for search, models in report["generation"].items():
            ours = models[TRANSFORMER_ROW]["tokens_per_s"]
            summary[f"generation_{search}_ratio_vs_marian"] = ours / models["MarianMT"]["tokens_per_s"]
            if CT2_ROW in models:
                ct2 = models[CT2_ROW]["tokens_per_s"]
                summary[f"generation_{search}_ratio_vs_ctranslate2"] = ours / ct2
                for name in RNN_VARIANTS:
                    summary[f"ctranslate2_ratio {search} RNN {name}"] = (
                        models[f"hf_s2s RNN {name}"]["tokens_per_s"] / ct2)
    if "shortlist" in report:
        for batch, result in report["shortlist"]["batches"].items():
            for search, models in result["searches"].items():
                ours = models[SHORTLIST_ROW]["tokens_per_s"]
                summary[f"shortlist_{search}_batch_{batch}_ratio_vs_marian"] = ours / models["MarianMT"]["tokens_per_s"]
                summary[f"shortlist_{search}_batch_{batch}_ratio_vs_full"] = ours / models[TRANSFORMER_ROW]["tokens_per_s"]
    if "cache" in report:
        lengths = settings.cache_lengths
        for name, modes in report["cache"].items():
            for mode, per_length in modes.items():
                longest = max(per_length)
                summary[f"cache_growth {name} {mode}"] = per_length[longest] / per_length[lengths[0]]
                summary[f"cache_growth {name} {mode} longest"] = longest
    if "rnn" in report:
        for name, r in report["rnn"].items():
            summary[f"rnn_training_ratio {name}"] = r["training_ratio"]
            summary[f"rnn_greedy_ratio {name}"] = r["greedy_ratio"]
    if "learning" in report:
        for name, r in report["learning"].items():
            summary[f"learning_loss_ratio {name}"] = r["loss_ratio"]
    summary["targets"] = {**_targets(summary, settings),
                          **(serving_targets(report["serving"]) if "serving" in report else {})}
    return summary


def _targets(summary: dict, settings: BenchSettings) -> dict[str, bool]:
    targets = {}
    if "training_ratio_vs_marian" in summary:
        targets["training >= 1.2x Marian"] = summary["training_ratio_vs_marian"] >= 1.2
    if "pipeline_ratio_vs_marian" in summary:
        targets["training job pipeline >= 1.5x Marian"] = summary["pipeline_ratio_vs_marian"] >= 1.5
    if "memory_ratio_vs_marian" in summary:
        targets["training peak memory <= Marian"] = summary["memory_ratio_vs_marian"] <= 1.0
    for key in [k for k in summary if k.startswith("generation_") and k.endswith("_ratio_vs_marian")]:
        search = key.removeprefix("generation_").removesuffix("_ratio_vs_marian")
        targets[f"Transformer {search} >= 1.5x Marian"] = summary[key] >= 1.5
    for key in [k for k in summary if k.startswith("shortlist_") and k.endswith("_ratio_vs_marian")]:
        name = key.removeprefix("shortlist_").removesuffix("_ratio_vs_marian").replace("_batch_", ", batch ")
        targets[f"Transformer + shortlist {name} >= 1.5x Marian"] = summary[key] >= 1.5
    for key in [k for k in summary if k.startswith("generation_") and k.endswith("_ratio_vs_ctranslate2")]:
        search = key.removeprefix("generation_").removesuffix("_ratio_vs_ctranslate2")
        targets[f"Transformer {search} >= 0.8x CTranslate2 float32"] = summary[key] >= 0.8
    for key in [k for k in summary if k.startswith("ctranslate2_ratio ")]:
        targets[f"{key.removeprefix('ctranslate2_ratio ')} > CTranslate2 float32 Transformer"] = summary[key] > 1.0
    for key in [k for k in summary if k.startswith("cache_growth") and k.endswith(" cached")]:
        name = key.removeprefix("cache_growth ").removesuffix(" cached")
        targets[f"{name} cached per-token time at {settings.cache_lengths[-1]} <= 1.5x at "
                f"{settings.cache_lengths[0]}"] = summary[key] <= 1.5
    for key in [k for k in summary if k.startswith("rnn_")]:
        targets[key.replace("_ratio", "") + " >= 2x textbook"] = summary[key] >= 2.0
    for key in [k for k in summary if k.startswith("learning_loss_ratio")]:
        name = key.removeprefix("learning_loss_ratio ")
        targets[f"{name} validation loss after {settings.learning_steps} steps <= 1.05x textbook"] = summary[key] <= 1.05
    if "flop_utilisation" in summary:
        targets["hf_s2s training FLOP utilisation >= 50% of matmul peak"] = (
            summary["flop_utilisation"]["hf_s2s (post-LN)"] >= 0.5)
    return targets
