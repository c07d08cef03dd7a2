"""How the training job's cost grows with its corpus: Multi30k repeated 1x, 10x and 100x (29k to 2.9M pairs),
each trained for a few steps of the main job's recipe, in memory and streamed, every run in a fresh process.

The corpora are written at run time into a temporary folder (or ``ScalingLoad.work_dir``), never beside the
code: :func:`write_scaled_corpus` writes ``factor`` copies of the training pairs, each copy in its own seeded
order, and links the validation and test files. The pairs repeat, so a run that removed duplicates would train
on Multi30k alone: the section filters nothing.

Each run goes through the job's own phases (:mod:`hf_s2s.training.run`: data, tokenizer, model, trainer,
train) with the ``transformer_small`` recipe, token-budget batches and ``--max_steps``, and reports per phase
the wall time, the CPU time of the process and its children (CPU / wall: the cores it kept busy), the resident
memory after it, and for the whole run the time to the first training step, the steady training tokens/s (the
steps after the first), the peak resident memory (VmHWM) and the disk the run wrote (its output folder and
datasets cache).
"""

import gzip
import os
import random
import resource
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

from transformers import TrainerCallback

from ..data import synthetic
from ..training import run as job
from .measure import multi30k_dir, set_threads, status_mb

RECIPE = "transformer_small"  # the README's main job
MODES = ("in memory", "streamed")
PREPARATION = ("load", "tokenizer", "encode", "batches", "first step")  # the phases up to the first step's end


@dataclass
class ScalingLoad:
    """What the scaling section trains."""

    factors: tuple[int, ...] = (1, 10, 100)  # copies of the training split
    steps: int = 20  # optimizer steps of each run (the measurement: 20 steps of the main job)
    token_budget: int = 1800  # --max_tokens_per_batch of every run (about 64 Multi30k sentences)
    window_pairs: int | None = None  # --streaming_window_pairs of the streamed runs (None: the job's default)
    preprocessing_num_workers: int | None = None  # --preprocessing_num_workers of the in-memory runs
    vocab_size: int = 8000  # the recipe's
    work_dir: str | None = None  # where the corpora and runs go (None: a temporary folder, removed after)
    use_multi30k: bool = True  # False: the synthetic reversal task stands for Multi30k (smoke runs)

    @classmethod
    def quick(cls) -> "ScalingLoad":
        return cls(factors=(1, 2), steps=3, token_budget=300, window_pairs=48, vocab_size=300, use_multi30k=False)


# ------------------------------------------------------------------------------------------------ the corpora


def write_base_corpus(folder: Path, source_lang: str, target_lang: str, use_multi30k: bool) -> Path:
    """The 1x corpus the others repeat: Multi30k (read in place: links to its files) or, for smoke runs, 128
    pairs of the synthetic reversal task written as text files."""
    folder.mkdir(parents=True, exist_ok=True)
    if use_multi30k:
        source = multi30k_dir()
        for prefix in ("train", "val", "test_2016_flickr"):
            for lang in (source_lang, target_lang):
                (folder / f"{prefix}.{lang}.gz").symlink_to(source / f"{prefix}.{lang}.gz")
        return folder
    corpus = synthetic.text_reversal_corpus(num_train=128, num_validation=16, num_test=16, source_lang=source_lang,
                                            target_lang=target_lang)
    for split, prefix in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr")):
        for lang in (source_lang, target_lang):
            lines = "".join(pair[lang] + "\n" for pair in corpus[split]["translation"])
            with gzip.open(folder / f"{prefix}.{lang}.gz", "wt", encoding="utf-8") as handle:
                handle.write(lines)
    return folder


def write_scaled_corpus(base: Path, factor: int, folder: Path, source_lang: str, target_lang: str,
                        seed: int = 0) -> Path:
    """A corpus folder whose training split is ``factor`` copies of ``base``'s, copy k in the order of a
    shuffle seeded with ``seed + k`` (so a stream's windows do not meet the pairs in one order); validation
    and test link to ``base``'s. Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    sides = [gzip.open(base / f"train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
             for lang in (source_lang, target_lang)]
    order = list(range(len(sides[0])))
    # gzip level 1: a 100x corpus writes in a minute; reading it decompresses as fast as at any level
    with gzip.open(folder / f"train.{source_lang}.gz", "wt", encoding="utf-8", compresslevel=1) as source, \
            gzip.open(folder / f"train.{target_lang}.gz", "wt", encoding="utf-8", compresslevel=1) as target:
        for copy in range(factor):
            random.Random(seed + copy).shuffle(order)
            source.write("".join(sides[0][i] + "\n" for i in order))
            target.write("".join(sides[1][i] + "\n" for i in order))
    for prefix in ("val", "test_2016_flickr"):
        for lang in (source_lang, target_lang):
            (folder / f"{prefix}.{lang}.gz").symlink_to((base / f"{prefix}.{lang}.gz").resolve())
    return folder


# ------------------------------------------------------------------------------------------------ one run


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (datasets' map workers)."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def _disk_mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink()) / 1e6


class _Clock:
    """Wall and CPU seconds and resident memory at the end of each phase."""

    def __init__(self):
        self.start = self.last = time.perf_counter()
        self.last_cpu = _cpu_seconds()
        self.phases: dict[str, dict] = {}

    def phase(self, name: str) -> None:
        now, cpu = time.perf_counter(), _cpu_seconds()
        self.phases[name] = {"seconds": now - self.last, "cpu_seconds": cpu - self.last_cpu,
                             "rss_mb": status_mb("VmRSS")}
        self.last, self.last_cpu = now, cpu


class _StepTimes(TrainerCallback):
    """When training begins and when each optimizer step ends, with the tokens trained so far; the first
    step's end closes the clock's "first step" phase."""

    def __init__(self, clock: _Clock):
        self.clock, self.trainer, self.steps = clock, None, []

    def on_train_begin(self, args, state, control, **kwargs):
        # get_train_dataloader ran just before: in memory it built the token-budget batches; a stream is read
        # lazily
        self.clock.phase("batches")

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append((time.perf_counter(), self.trainer.train_tokens))
        if len(self.steps) == 1:
            self.clock.phase("first step")  # streamed: reading and encoding the first window, then the step


def job_arguments(folder: Path, output_dir: Path, load: ScalingLoad, streaming: bool, source_lang: str,
                  target_lang: str, seed: int) -> list[str]:
    """``hf-s2s train``'s flags for one run: the recipe, token budgets, ``load.steps`` steps, nothing saved or
    evaluated."""
    flags = ["--recipe", RECIPE, "--dataset", str(folder), "--source_lang", source_lang,
             "--target_lang", target_lang, "--vocab_size", str(load.vocab_size), "--output_dir", str(output_dir),
             "--max_steps", str(load.steps), "--max_tokens_per_batch", str(load.token_budget),
             "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
             "--test_num_beams", "", "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
             "--logging_strategy", "no", "--seed", str(seed)]
    if streaming:
        flags += ["--streaming", "true"]
        if load.window_pairs is not None:
            flags += ["--streaming_window_pairs", str(load.window_pairs)]
    elif load.preprocessing_num_workers is not None:
        flags += ["--preprocessing_num_workers", str(load.preprocessing_num_workers)]
    return flags


def _scaling_probe(folder: str, output_dir: str, load: ScalingLoad, streaming: bool, threads: int | None,
                   source_lang: str, target_lang: str, seed: int) -> dict:
    """Runs in a fresh process: one run of the job's phases on ``folder``, timed phase by phase."""
    set_threads(threads)
    clock = _Clock()
    args = job.parse_args(job_arguments(Path(folder), Path(output_dir), load, streaming, source_lang, target_lang,
                                        seed))
    job.check_arguments(*args)
    corpus_filter = job.build_corpus_filter(args.data)
    corpus = job.load_corpus(args.data, args.selection, args.training, corpus_filter)
    clock.phase("load")
    tokenizer = job.prepare_tokenizer(args.model, args.data, args.training, corpus["train"])
    clock.phase("tokenizer")
    model, _ = job.prepare_model(args.model, args.decoding, args.training, tokenizer)
    steps = _StepTimes(clock)
    trainer = job.build_trainer(model, tokenizer, corpus, args, [steps], corpus_filter)
    steps.trainer = trainer
    clock.phase("encode")
    trainer.train()
    clock.phase("other steps")
    (first_step_end, first_tokens), (last_step_end, last_tokens) = steps.steps[0], steps.steps[-1]
    steady = (last_tokens - first_tokens) / (last_step_end - first_step_end) if len(steps.steps) > 1 else None
    return {"pairs": len(corpus["train"]) if not streaming else None, "phases": clock.phases,
            "first_step_seconds": first_step_end - clock.start,
            "steady_tokens_per_s": steady, "steps": len(steps.steps),
            "peak_rss_mb": status_mb("VmHWM")}


def bench_scaling(settings, length_pairs=None) -> dict:
    """Every factor of ``settings.scaling`` in every mode, each in a fresh process; the corpora and runs in a
    temporary folder (or ``work_dir``), removed afterwards unless given."""
    load: ScalingLoad = settings.scaling
    source_lang, target_lang = ("de", "en") if load.use_multi30k else ("src", "tgt")
    work = Path(load.work_dir) if load.work_dir else Path(tempfile.mkdtemp(prefix="hf_s2s_scaling_"))
    results = {"recipe": RECIPE, "load": asdict(load), "runs": {}}
    try:
        base = write_base_corpus(work / "base", source_lang, target_lang, load.use_multi30k)
        base_pairs = sum(1 for _ in gzip.open(base / f"train.{source_lang}.gz", "rt", encoding="utf-8"))
        for factor in load.factors:
            start = time.perf_counter()
            folder = write_scaled_corpus(base, factor, work / f"x{factor}", source_lang, target_lang,
                                         settings.seed)
            corpus = {"pairs": base_pairs * factor, "write_seconds": time.perf_counter() - start,
                      "files_mb": _disk_mb(folder)}
            for mode in MODES:
                run_dir = work / f"x{factor}-{mode.replace(' ', '-')}"
                cache = run_dir / "datasets_cache"
                cache.mkdir(parents=True)
                # a spawned process reads its environment at start: the datasets cache it writes goes in
                # run_dir
                previous = os.environ.get("HF_DATASETS_CACHE")
                os.environ["HF_DATASETS_CACHE"] = str(cache)
                try:
                    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
                        run = pool.submit(_scaling_probe, str(folder), str(run_dir / "output"), load,
                                          mode == "streamed", settings.threads, source_lang, target_lang,
                                          settings.seed).result()
                finally:
                    if previous is None:
                        os.environ.pop("HF_DATASETS_CACHE")
                    else:
                        os.environ["HF_DATASETS_CACHE"] = previous
                run["disk_written_mb"] = _disk_mb(run_dir)
                results["runs"][f"{factor}x {mode}"] = {"factor": factor, "mode": mode, "corpus": corpus, **run}
                shutil.rmtree(run_dir)
            shutil.rmtree(folder)
    finally:
        if not load.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return results


def scaling_table(report: dict) -> list[str]:
    """The markdown table of the scaling section: one row per corpus size and mode. Phases show wall seconds and, in
    brackets, the CPU seconds of the process and its children: on shared cores the wall time is mostly waiting."""
    scaling = report["scaling"]
    load = scaling["load"]
    header = ["corpus", "mode", "to first step, s", *(f"{name}, s" for name in PREPARATION), "prep CPU/wall",
              "tokens/s", "peak RSS, MB", "disk written, MB"]
    rows = []
    for run in scaling["runs"].values():
        prep = [run["phases"][name] for name in PREPARATION]
        cores = sum(p["cpu_seconds"] for p in prep) / sum(p["seconds"] for p in prep)
        steady = run["steady_tokens_per_s"]
        rows.append([f"{run['factor']}x ({run['corpus']['pairs']:,} pairs)", run["mode"],
                     f"{run['first_step_seconds']:,.0f}",
                     *(f"{p['seconds']:,.0f} ({p['cpu_seconds']:,.0f})" for p in prep), f"{cores:.2f}",
                     f"{steady:,.0f}" if steady else "-", f"{run['peak_rss_mb']:,.0f}",
                     f"{run['disk_written_mb']:,.0f}"])
    return [f"**Scaling** (recipe `{scaling['recipe']}`, {load['steps']} steps of {load['token_budget']}-token "
            "batches per run, each in a fresh process; per phase up to the end of the first step, wall seconds and "
            "(CPU seconds): load = reading the corpus, tokenizer = training the BPE, encode = tokenizing (streamed: "
            "nothing yet), batches = building the token-budget batches (streamed: nothing yet), first step = the "
            "first optimizer step (streamed: with reading and encoding the first window); prep CPU/wall = the cores "
            "these phases kept busy; tokens/s = real source + target tokens of the steps after the first)", "",
            "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows), ""]


__all__ = ["ScalingLoad", "bench_scaling", "scaling_table", "write_base_corpus", "write_scaled_corpus"]
