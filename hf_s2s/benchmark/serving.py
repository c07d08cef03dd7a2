"""Load benchmark of ``hf-s2s serve``: dynamic batching against one-request-at-a-time serving, the engines against
each other, and each served engine against the same engine decoding the same batches alone, each a real server on
localhost driven by the same clients, side by side in one process.

The clients (:mod:`.serving_load`) run in a process of their own: a closed loop of concurrent clients, each sending a
fixed list of requests one after the other, so a run stops by itself; the CPU time they took is reported. Every
configuration gets the same requests, in the same order, round-robin over the repeats. Reported per configuration:
requests and sentences per second, generated tokens per second, the median and 99th-percentile request latency, the
mean sentences per engine call (what dynamic batching gathered), and, for the dynamically batched float32 engines and
the shortlist, the engine alone: the engine calls the server made, replayed through ``Engine.translate`` on the same
sentences in the same batches with no server around it, so that served / alone is what serving costs. For those rows
one more run is profiled (:mod:`.serving_profile`): the server's CPU time per sentence by stage (HTTP, validation,
queueing, tokenization, decoding, detokenization, JSON).

Checked on every run, against the server's own counters and the answers: each request answered once with 200 and
one translation per sentence, the server counting exactly the requests and sentences sent (none lost, none
duplicated), and the same translations from batched and sequential serving of one engine (float32 engines are
batch-invariant, so a request answered with another's translations would show).

The models: a trained folder when given (``ServingLoad.model``), else the benchmark's Transformer and Bahdanau GRU
trained for a few hundred steps on Multi30k (:mod:`.serving_models`): models that end their sentences as trained ones
do, where a random model's outputs all run to their length bound.
"""

import dataclasses
import statistics
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch

from ..inference.engines import ENGINES, FAMILIES, load_engine
from ..inference.onnx import import_exporter
from ..inference.translate import read_sentences
from ..models.loading import load_config
from ..models.shortlist import SHORTLIST_FILE
from ..serving import require_serve_extra
from ..serving.config import BatchingConfig, RequestLimits
from .measure import multi30k_dir
from .serving_load import LoadProcess
from .serving_models import ServingTraining, serving_models_report, train_serving_folders
from .serving_profile import BENCHMARK, ServingProfiler, profiling_supported


class Configuration(NamedTuple):
    """How a model is served: the engine, its weights, dynamic batching or one request at a time, and whether the
    requests ask for the folder's vocabulary shortlist."""

    engine: str
    weights: str
    batching: bool
    shortlist: bool = False

    @property
    def name(self) -> str:
        return (f"{self.engine} {self.weights}{' + shortlist' if self.shortlist else ''} | "
                f"{'dynamic batching' if self.batching else 'sequential'}")

    @property
    def against_alone(self) -> bool:
        """Whether the row is replayed on the engine alone and profiled: the float32 engines dynamically batched."""
        return self.batching and self.weights == "float32"


# Sequential serving (one request at a time) is measured for the float32 torch and CTranslate2 engines, the batching
# comparison; every engine and weight type under dynamic batching, the engine comparison; and torch with the folders'
# shortlist. CTranslate2 rows only for the Transformer family; the shortlist row only for folders that hold one.
CONFIGURATIONS = (Configuration("torch", "float32", True), Configuration("torch", "float32", False),
                  Configuration("torch", "bfloat16", True), Configuration("torch", "int8", True),
                  Configuration("ctranslate2", "float32", True), Configuration("ctranslate2", "float32", False),
                  Configuration("ctranslate2", "int8", True), Configuration("onnx", "float32", True),
                  Configuration("torch", "float32", True, shortlist=True))


@dataclass
class ServingLoad:
    """The load the serving section sends to each configuration, and the models it serves."""

    clients: int = 8  # concurrent clients
    requests_per_client: int = 8  # requests each client sends, one after the other
    max_sentences: int = 4  # sentences per request, drawn uniformly from 1..max_sentences
    num_beams: int = 1
    repeats: int = 3  # timed runs per configuration (round-robin), after one untimed warm-up run
    max_wait_ms: float = BatchingConfig.max_wait_ms  # the server's batching wait
    model: str | None = None  # a trained Transformer or RNN folder; None: the models of .serving_models
    models_dir: str | None = None  # where those are trained (and found again by a later run); None: a temporary folder
    training: ServingTraining = field(default_factory=ServingTraining)  # how they are trained
    vocab_size: int | None = None  # their BPE vocabulary; None: the benchmark's (dims.vocab_size)
    profile: bool = True  # profile the float32 engines' served path (one more run each)
    seed: int = 0

    @classmethod
    def quick(cls) -> "ServingLoad":
        return cls(clients=3, requests_per_client=2, max_sentences=2, repeats=1, vocab_size=300,
                   training=ServingTraining.quick())


# ------------------------------------------------------------------------------------------------ the models


def _corpus(use_multi30k: bool) -> tuple[list[str], list[tuple[str, str]]]:
    """(source sentences the clients send, training pairs of the served models): Multi30k's German test sentences and
    its de-en training pairs, or synthetic word sequences (copied) for smoke runs."""
    if use_multi30k:
        folder = multi30k_dir()
        test = read_sentences(folder / "test_2016_flickr.de.gz")
        pairs = list(zip(read_sentences(folder / "train.de.gz"), read_sentences(folder / "train.en.gz"), strict=True))
        return test, pairs
    words = "ein hund rennt über die wiese eine frau liest ein buch im park zwei kinder spielen".split()
    synthetic = [" ".join(words[(i * k) % len(words)] for k in range(1, 3 + i % 9)) for i in range(300)]
    return synthetic, [(sentence, sentence) for sentence in synthetic]


def _requests(sentences: list[str], load: ServingLoad) -> list[list[dict]]:
    """Each client's requests, drawn with a fixed seed: the same for every configuration."""
    generator = torch.Generator().manual_seed(load.seed)

    def draw(count: int) -> list[str]:
        return [sentences[i] for i in torch.randint(len(sentences), (count,), generator=generator).tolist()]

    return [[{"sentences": draw(int(torch.randint(1, load.max_sentences + 1, (1,), generator=generator))),
              "num_beams": load.num_beams} for _ in range(load.requests_per_client)] for _ in range(load.clients)]


def _with_shortlist(requests: list[list[dict]]) -> list[list[dict]]:
    return [[{**request, "shortlist": True} for request in own] for own in requests]


class RecordedEngine:
    """An engine whose ``translate`` calls are recorded while ``calls`` is a list (the server's engine calls, to be
    replayed on the engine alone); everything else is the engine's."""

    def __init__(self, engine):
        self._engine = engine
        self.calls: list | None = None

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def translate(self, sentences, options, **kwargs):
        if self.calls is not None:
            self.calls.append((list(sentences), options, kwargs.get("batch_size"), kwargs.get("scores", False)))
        return self._engine.translate(sentences, options, **kwargs)


def _alone(engine, calls: list) -> float:
    """Seconds the engine takes for ``calls`` (the server's engine calls: text in, text out, each batch as the
    server formed it), one after the other, with no server around it."""
    start = time.perf_counter()
    for sentences, options, batch_size, scores in calls:
        engine.translate(sentences, options, batch_size=batch_size or len(sentences), scores=scores)
    return time.perf_counter() - start


# ------------------------------------------------------------------------------------------------- the load


def _counters(url: str) -> dict[str, float]:
    """The server's counters that the checks and the rates read, summed over labels, from /metrics."""
    import httpx

    names = {"hf_s2s_requests_total": "requests", "hf_s2s_sentences_total": "sentences",
             "hf_s2s_target_tokens_total": "target_tokens", "hf_s2s_batch_sentences_sum": "batched_sentences",
             "hf_s2s_batch_sentences_count": "engine_calls"}
    counters = dict.fromkeys(names.values(), 0.0)
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in names and not line.startswith("#"):
            counters[names[name]] += float(line.rsplit(" ", 1)[1])
    return counters


def _run(url: str, requests: list[list[dict]], clients: LoadProcess) -> dict:
    """One load run against ``url`` (the clients in their own process), checked; its measurements, the CPU seconds the
    benchmark's process (the servers) and the clients' took, and each request's translations."""
    before = _counters(url)
    server_cpu = time.process_time()
    result = clients.run(url, requests)
    server_cpu = time.process_time() - server_cpu
    after = _counters(url)
    delta = {name: after[name] - before[name] for name in after}
    answers = result["answers"]
    sent = [request for own in requests for request in own]
    sentences = sum(len(request["sentences"]) for request in sent)
    failures = [(status, answer) for request, status, answer in answers if status != 200
                or len(answer["translations"]) != len(request["sentences"])]
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(sent)} requests failed, first: {failures[0]}")
    return {
        "seconds": result["seconds"], "latencies": result["latencies"],
        "client_cpu_seconds": result["client_cpu_seconds"], "server_cpu_seconds": server_cpu,
        "answered_once": len(answers) == len(sent) and delta["requests"] == len(sent)
        and delta["sentences"] == sentences,
        "target_tokens": delta["target_tokens"], "sentences": sentences, "requests": len(sent),
        "sentences_per_call": delta["batched_sentences"] / max(delta["engine_calls"], 1),
        "translations": {_key(request): [t["text"] for t in answer["translations"]] for request, _, answer in answers},
    }


def _key(request: dict) -> str:
    return "\n".join(request["sentences"])


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


# ------------------------------------------------------------------------------------------------ the section


def _folders(settings, load: ServingLoad, pairs: list[tuple[str, str]], sentences: list[str], scratch: Path
             ) -> tuple[dict[str, Path], str]:
    """The served folders ({name: folder}) and how the report describes them."""
    if load.model is not None:
        family = FAMILIES[load_config(load.model).model_type]
        return {f"{family} ({load.model})": Path(load.model)}, "given"
    folder = Path(load.models_dir) if load.models_dir is not None else scratch / "models"
    folders = train_serving_folders(settings.dims, folder, pairs, sentences, load.training, load.vocab_size)
    dims = settings.dims
    return folders, (f"trained {load.training.steps} steps (batches of {load.training.batch_size} pairs), "
                     f"{dims.layers}+{dims.layers} layers, d_model {dims.d_model} (Transformer); GRU {dims.rnn_hidden}")


def bench_serving(settings, length_pairs=None) -> dict:
    """The serving section of ``hf-s2s bench`` (``settings``: its :class:`.suites.BenchSettings`, whose ``serving``
    is a :class:`ServingLoad`): per model, each configuration of :data:`CONFIGURATIONS` it can serve, timed
    round-robin; the float32 engines dynamically batched also replayed alone and profiled."""
    require_serve_extra(also=("httpx",))
    from ..serving.app import create_app  # the serve extra (FastAPI, uvicorn), present: checked above
    from ..serving.server import serve_in_thread

    load: ServingLoad = settings.serving
    threads = settings.threads or torch.get_num_threads()
    sentences, pairs = _corpus(settings.use_multi30k)
    requests = _requests(sentences, load)
    limits = RequestLimits(max_sentences=max(load.max_sentences, 1), max_beams=max(load.num_beams, 1))
    with tempfile.TemporaryDirectory(prefix="hf_s2s_bench_serving_") as scratch, ExitStack() as stack:
        folders, described = _folders(settings, load, pairs, sentences, Path(scratch))
        trained = serving_models_report(folders) if load.model is None else {}  # read before the scratch folder goes
        clients = stack.enter_context(LoadProcess())
        servers, skipped = {}, []  # name -> (recorded engine, configuration, requests)
        for model_name, model_folder in folders.items():
            engines = {}
            model_type = load_config(model_folder).model_type
            for configuration in CONFIGURATIONS:
                if model_type not in ENGINES[configuration.engine].families:  # CTranslate2 has no RNN models
                    continue
                if configuration.engine == "onnx" and _onnx_missing():
                    skipped.append(f"{model_name} | {configuration.name}: {_onnx_missing()}")
                    continue
                if configuration.shortlist and not (Path(model_folder) / SHORTLIST_FILE).is_file():
                    skipped.append(f"{model_name} | {configuration.name}: the folder holds no {SHORTLIST_FILE}")
                    continue
                key = (configuration.engine, configuration.weights)
                if key not in engines:
                    engines[key] = load_engine(model_folder, configuration.engine,
                                               dtype="bfloat16" if configuration.weights == "bfloat16" else "float32",
                                               int8=configuration.weights == "int8", threads=threads)
                servers[f"{model_name} | {configuration.name}"] = (RecordedEngine(engines[key]), configuration,
                                                                  _with_shortlist(requests) if configuration.shortlist
                                                                  else requests)

        def serve_run(name: str) -> dict:
            """One run against a server of its own, started for it: no other server's threads share the process."""
            engine, configuration, own = servers[name]
            app = create_app({"model": engine}, BatchingConfig(max_wait_ms=load.max_wait_ms,
                                                               batching=configuration.batching), limits)
            with serve_in_thread(app) as url:
                return _run(url, own, clients)

        runs = {name: [] for name in servers}
        alone = {name: [] for name in servers}
        for repeat in range(1 + load.repeats):  # the first round warms every engine up, untimed
            for name, (engine, configuration, _) in servers.items():
                engine.calls = [] if configuration.against_alone else None
                result = serve_run(name)
                calls, engine.calls = engine.calls, None
                if repeat:
                    runs[name].append(result)
                    if calls is not None:
                        alone[name].append(_alone(engine, calls))
        profiles = {}
        if load.profile and profiling_supported():
            for name, (_, configuration, _) in servers.items():
                if configuration.against_alone:
                    with ServingProfiler() as profiler:
                        result = serve_run(name)
                    profiles[name] = {"sentences": result["sentences"], "seconds": profiler.wall,
                                      "cpu_seconds": profiler.seconds(), "other": profiler.other_functions()}
    return _summarize(runs, alone, profiles, load, threads, folders, described, trained, skipped)


def _onnx_missing() -> str | None:
    """Why the ONNX engine cannot run here (its extra is not installed), or None."""
    try:
        import_exporter()
    except ImportError as error:
        return str(error)
    return None


def _summarize(runs: dict[str, list[dict]], alone: dict[str, list[float]], profiles: dict, load: ServingLoad,
               threads: int, folders: dict, described: str, trained: dict, skipped: list[str]) -> dict:
    rows = {}
    for name, results in runs.items():
        seconds = statistics.median(r["seconds"] for r in results)
        latencies = [latency for r in results for latency in r["latencies"]]
        first = results[0]
        rows[name] = {
            "seconds": seconds, "times": [r["seconds"] for r in results],
            "requests_per_s": first["requests"] / seconds, "sentences_per_s": first["sentences"] / seconds,
            "tokens_per_s": statistics.median(r["target_tokens"] / r["seconds"] for r in results),
            "latency_p50_ms": 1000 * _percentile(latencies, 0.5), "latency_p99_ms": 1000 * _percentile(latencies, 0.99),
            "sentences_per_call": statistics.median(r["sentences_per_call"] for r in results),
            "client_cpu_s": statistics.median(r["client_cpu_seconds"] for r in results),
            "server_cpu_s": statistics.median(r["server_cpu_seconds"] for r in results),
            "answered_once": all(r["answered_once"] for r in results),
        }
        if alone[name]:
            alone_seconds = statistics.median(alone[name])
            rows[name].update(alone_seconds=alone_seconds, alone_sentences_per_s=first["sentences"] / alone_seconds,
                              served_vs_alone=alone_seconds / seconds)
    # batched and sequential serving of one engine must give every request the same translations
    same = {}
    for name in runs:
        model_engine, mode = name.rsplit(" | ", 1)
        if mode == "sequential":
            batched = runs[f"{model_engine} | dynamic batching"]
            same[model_engine] = all(r["translations"] == o["translations"] for r in runs[name] for o in batched)
    first = next(iter(runs.values()))[0]
    return {
        "load": dataclasses.asdict(load), "threads": threads, "requests_per_run": first["requests"],
        "sentences_per_run": first["sentences"], "models": described,
        "folders": {name: str(path) for name, path in folders.items()},
        "trained_models": trained,
        "rows": rows, "same_translations_batched_and_sequential": same, "profiles": profiles, "skipped": skipped,
    }


# Issue 48's targets, each a ratio of two rows of one run.
SERVED_VS_ALONE = 0.8  # served sentences/s against the engine alone on the same batches
BATCHING_VS_SEQUENTIAL = 3.0  # dynamic batching against one request at a time (torch float32, CTranslate2 float32)
CTRANSLATE2_VS_TORCH = 1.7  # CTranslate2 float32 against torch float32, both dynamically batched (its decoding ratio)


def serving_targets(serving: dict) -> dict[str, bool]:
    """The issues' expectations of the section (issue 48): dynamic batching at 3x sequential serving (torch float32,
    both families; CTranslate2 float32), CTranslate2 float32 at 1.7x torch float32, every float32 engine served at
    0.8x itself alone; and no request lost, duplicated or answered with another's translations."""
    rows = serving["rows"]
    targets = {}
    for model in dict.fromkeys(name.split(" | ")[0] for name in rows):
        speed = {name.split(" | ", 1)[1]: row["sentences_per_s"] for name, row in rows.items()
                 if name.split(" | ")[0] == model}
        for engine in ("torch float32", "ctranslate2 float32"):
            if f"{engine} | sequential" in speed:
                targets[f"serving {model}: {engine} dynamic batching >= {BATCHING_VS_SEQUENTIAL:g}x sequential"] = (
                    speed[f"{engine} | dynamic batching"] >= BATCHING_VS_SEQUENTIAL * speed[f"{engine} | sequential"])
        if "ctranslate2 float32 | dynamic batching" in speed:
            targets[f"serving {model}: CTranslate2 float32 >= {CTRANSLATE2_VS_TORCH:g}x torch float32 (dynamic "
                    "batching)"] = (speed["ctranslate2 float32 | dynamic batching"]
                                    >= CTRANSLATE2_VS_TORCH * speed["torch float32 | dynamic batching"])
    for name, row in rows.items():
        if "served_vs_alone" in row:
            shown = name.replace(" | ", ", ")  # a cell of the targets' table
            targets[f"serving {shown}: served >= {SERVED_VS_ALONE:g}x the engine alone"] = (
                row["served_vs_alone"] >= SERVED_VS_ALONE)
    targets["serving: every request answered once, batched and sequential translations equal"] = (
        all(row["answered_once"] for row in rows.values())
        and all(serving["same_translations_batched_and_sequential"].values()))
    return targets


def serving_table(report: dict) -> list[str]:
    """The section's markdown: one row per configuration, with its speed against sequential torch serving of the
    same model and against the engine alone; then the profile of the served path; then the trained models."""
    serving = report["serving"]
    load = serving["load"]
    rows = []
    for name, row in serving["rows"].items():
        model = name.split(" | ")[0]
        baseline = serving["rows"][f"{model} | torch float32 | sequential"]["sentences_per_s"]
        alone = (f"{row['alone_sentences_per_s']:,.1f}", f"{row['served_vs_alone']:.2f}x") if "served_vs_alone" in row \
            else ("", "")
        rows.append([*name.split(" | "), f"{row['requests_per_s']:,.1f}", f"{row['sentences_per_s']:,.1f}",
                     f"{row['tokens_per_s']:,.0f}", f"{row['latency_p50_ms']:,.0f}", f"{row['latency_p99_ms']:,.0f}",
                     f"{row['sentences_per_call']:.1f}", f"{row['sentences_per_s'] / baseline:.2f}x", *alone,
                     f"{row['server_cpu_s']:.1f} / {row['client_cpu_s']:.1f}",
                     "yes" if row["answered_once"] else "NO"])
    header = ["model", "engine", "serving", "requests/s", "sentences/s", "output tokens/s", "p50 ms", "p99 ms",
              "sentences per engine call", "vs torch float32 sequential", "engine alone sentences/s",
              "served / alone", "CPU s: server / clients", "every request answered once"]
    same = ", ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in serving["same_translations_batched_and_sequential"].items())
    lines = [f"**Serving** ({load['clients']} concurrent clients x {load['requests_per_client']} requests of 1-"
             f"{load['max_sentences']} sentences ({serving['sentences_per_run']} sentences per run), num_beams "
             f"{load['num_beams']}, {serving['threads']} thread(s) per engine, max wait {load['max_wait_ms']:g} ms; "
             f"models: {serving['models']}; medians of {load['repeats']} runs, p50/p99 over all their requests; the "
             "clients in a process of their own)", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", f"Output tokens: the generated tokens of the best translations (the server's "
                  f"hf_s2s_target_tokens_total). Engine alone: the server's engine calls of the same run replayed "
                  f"through Engine.translate (text in, text out, the same batches). Same translations from batched "
                  f"and sequential serving: {same}.", ""]
    for skipped in serving.get("skipped", []):
        lines.append(f"Not measured: {skipped}.")
    lines += _profile_table(serving) + _trained_models_lines(serving)
    return lines


def _profile_table(serving: dict) -> list[str]:
    """Milliseconds of CPU per served sentence by stage, per profiled configuration, with the engine alone's wall
    milliseconds per sentence on the same batches."""
    profiles = serving.get("profiles") or {}
    if not profiles:
        return []
    stages = list(next(iter(profiles.values()))["cpu_seconds"])
    header = ["model, engine", *stages, "server CPU, all", "wall per sentence", "engine alone (wall)"]
    lines = ["", "**Where a served sentence's time goes** (one profiled run per row: the server's CPU ms per "
                 "sentence by stage, sampled per thread; engine threads: CTranslate2's, torch's and onnxruntime's "
                 "native pools)", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, profile in profiles.items():
        per = 1000 / profile["sentences"]
        row = serving["rows"][name]
        cells = [f"{seconds * per:.2f}" for seconds in profile["cpu_seconds"].values()]
        server = sum(seconds for stage, seconds in profile["cpu_seconds"].items() if stage != BENCHMARK)
        alone = f"{row['alone_seconds'] * 1000 / serving['sentences_per_run']:.2f}" if "alone_seconds" in row else ""
        lines.append("| " + " | ".join([name.rsplit(" | ", 1)[0].replace(" | ", ", "), *cells,
                                         f"{server * per:.2f}",
                                         f"{profile['seconds'] * per:.2f}", alone]) + " |")
    return lines + [""]


def _trained_models_lines(serving: dict) -> list[str]:
    trained = serving.get("trained_models") or {}
    if not trained:
        return []
    parts = [f"{name}: {entry['mean_output_tokens']:.1f} output tokens on average against a bound of "
             f"{entry['mean_bound']:.1f}, {100 * entry['ended_before_bound']:.0f}% of outputs ended before it"
             for name, entry in trained.items()]
    return ["", "Trained models (greedy, 64 test sentences): " + "; ".join(parts) + ".", ""]


__all__ = ["CONFIGURATIONS", "Configuration", "ServingLoad", "bench_serving", "serving_table", "serving_targets"]
