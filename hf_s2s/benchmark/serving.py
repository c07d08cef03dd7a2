"""Load benchmark of ``hf-s2s serve``: dynamic batching against one-request-at-a-time serving, and the CTranslate2
engine against torch, each a real server on localhost driven by the same clients, side by side in one process.

A fixed number of clients (asyncio, httpx) each send a fixed list of requests one after the other (a closed loop:
a client sends its next request once the last is answered), so a run stops by itself. Every configuration gets the
same requests, in the same order, round-robin over the repeats. Reported per configuration: requests and sentences
per second, generated tokens per second, the median and 99th-percentile request latency, and the mean sentences per
engine call (what dynamic batching gathered).

Checked on every run, against the server's own counters and the answers: each request answered once with 200 and
one translation per sentence, the server counting exactly the requests and sentences sent (none lost, none
duplicated), and the same translations from batched and sequential serving of one engine (float32 engines are
batch-invariant, so a request answered with another's translations would show).

The models: a trained folder when given (``ServingLoad.model``), else random models of the benchmark's dimensions
(:class:`.builders.TransformerDims`) with a BPE tokenizer trained on Multi30k's training text (a random model
rarely ends a sentence, so its outputs run to the length bound: 1.3 x source tokens + 5).
"""

import asyncio
import dataclasses
import statistics
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.tokenization import train_tokenizer_from_texts
from ..inference.engines import ENGINES, FAMILIES, load_engine
from ..inference.translate import read_sentences
from ..models.loading import load_config
from ..serving import require_serve_extra
from ..serving.config import BatchingConfig, RequestLimits
from .builders import TransformerDims, build_hf_s2s_rnn, build_hf_s2s_transformer
from .measure import multi30k_dir

# What each model is served with: (engine, weights, dynamic batching). Sequential serving (one request at a time) is
# measured for the float32 engines, the batching comparison; every engine and weight type under dynamic batching, the
# engine comparison. CTranslate2 rows only for the Transformer family.
CONFIGURATIONS = (("torch", "float32", True), ("torch", "float32", False), ("torch", "bfloat16", True),
                  ("torch", "int8", True), ("ctranslate2", "float32", True), ("ctranslate2", "float32", False),
                  ("ctranslate2", "int8", True))


@dataclass
class ServingLoad:
    """The load the serving section sends to each configuration."""

    clients: int = 8  # concurrent clients
    requests_per_client: int = 8  # requests each client sends, one after the other
    max_sentences: int = 4  # sentences per request, drawn uniformly from 1..max_sentences
    num_beams: int = 1
    repeats: int = 3  # timed runs per configuration (round-robin), after one untimed warm-up run
    max_wait_ms: float = BatchingConfig.max_wait_ms  # the server's batching wait
    model: str | None = None  # a trained Transformer or RNN folder; None: random models of the benchmark's sizes
    vocab_size: int | None = None  # the random models' BPE vocabulary; None: the benchmark's (dims.vocab_size)
    seed: int = 0

    @classmethod
    def quick(cls) -> "ServingLoad":
        return cls(clients=3, requests_per_client=2, max_sentences=2, repeats=1, vocab_size=300)


# ------------------------------------------------------------------------------------------------ the models


def random_folders(dims: TransformerDims, folder: Path, texts: list[str], seed: int,
                    vocab_size: int | None = None) -> dict[str, Path]:
    """A random Transformer and a random Bahdanau GRU of ``dims``, saved with a BPE tokenizer of ``vocab_size`` (None:
    ``dims.vocab_size``) trained on ``texts`` (the models' vocabulary is the tokenizer's)."""
    tokenizer = train_tokenizer_from_texts(texts, vocab_size=vocab_size or dims.vocab_size)
    dims = dataclasses.replace(dims, vocab_size=len(tokenizer))
    folders = {}
    for name, build in (("Transformer", build_hf_s2s_transformer),
                        ("RNN Bahdanau GRU", lambda d: build_hf_s2s_rnn(d, "gru", "bahdanau"))):
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


def _sentences(use_multi30k: bool) -> tuple[list[str], list[str]]:
    """(source sentences the clients send, text a tokenizer for random models is trained on): Multi30k's German test
    sentences and its training text, or synthetic word sequences for smoke runs."""
    if use_multi30k:
        folder = multi30k_dir()
        test = read_sentences(folder / "test_2016_flickr.de.gz")
        return test, read_sentences(folder / "train.de.gz") + read_sentences(folder / "train.en.gz")
    words = "ein hund rennt über die wiese eine frau liest ein buch im park zwei kinder spielen".split()
    synthetic = [" ".join(words[(i * k) % len(words)] for k in range(1, 3 + i % 9)) for i in range(300)]
    return synthetic, synthetic


def _requests(sentences: list[str], load: ServingLoad) -> list[list[dict]]:
    """Each client's requests, drawn with a fixed seed: the same for every configuration."""
    generator = torch.Generator().manual_seed(load.seed)

    def draw(count: int) -> list[str]:
        return [sentences[i] for i in torch.randint(len(sentences), (count,), generator=generator).tolist()]

    return [[{"sentences": draw(int(torch.randint(1, load.max_sentences + 1, (1,), generator=generator))),
              "num_beams": load.num_beams} for _ in range(load.requests_per_client)] for _ in range(load.clients)]


# ------------------------------------------------------------------------------------------------- the load


async def _client(client, requests: list[dict], latencies: list[float], answers: list) -> None:
    for request in requests:
        start = time.perf_counter()
        response = await client.post("/translate", json=request)
        latencies.append(time.perf_counter() - start)
        answers.append((request, response.status_code, response.json()))


async def _load(url: str, requests: list[list[dict]]) -> tuple[float, list[float], list]:
    """Every client's requests sent to ``url`` at once; (seconds until the last answer, latencies, answers)."""
    import httpx  # the clients' HTTP library, checked by bench_serving (require_serve_extra)

    latencies, answers = [], []
    async with httpx.AsyncClient(base_url=url, timeout=600,
                                 limits=httpx.Limits(max_connections=len(requests))) as client:
        start = time.perf_counter()
        await asyncio.gather(*(_client(client, own, latencies, answers) for own in requests))
        return time.perf_counter() - start, latencies, answers


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


def _run(url: str, requests: list[list[dict]]) -> dict:
    """One load run against ``url``, checked; its measurements and each request's translations."""
    before = _counters(url)
    elapsed, latencies, answers = asyncio.run(_load(url, requests))
    after = _counters(url)
    delta = {name: after[name] - before[name] for name in after}
    sent = [request for own in requests for request in own]
    sentences = sum(len(request["sentences"]) for request in sent)
    failures = [(status, answer) for request, status, answer in answers if status != 200
                or len(answer["translations"]) != len(request["sentences"])]
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(sent)} requests failed, first: {failures[0]}")
    return {
        "seconds": elapsed, "latencies": latencies,
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


def bench_serving(settings, length_pairs=None) -> dict:
    """The serving section of ``hf-s2s bench`` (``settings``: its :class:`.suites.BenchSettings`, whose ``serving``
    is a :class:`ServingLoad`): per model and engine, dynamic batching and sequential serving, timed round-robin."""
    require_serve_extra(also=("httpx",))
    from ..serving.app import create_app  # the serve extra (FastAPI, uvicorn), present: checked above
    from ..serving.server import serve_in_thread

    load: ServingLoad = settings.serving
    threads = settings.threads or torch.get_num_threads()
    sentences, corpus = _sentences(settings.use_multi30k)
    requests = _requests(sentences, load)
    limits = RequestLimits(max_sentences=max(load.max_sentences, 1), max_beams=max(load.num_beams, 1))
    with tempfile.TemporaryDirectory(prefix="hf_s2s_bench_serving_") as folder, ExitStack() as servers:
        if load.model is not None:
            family = FAMILIES[load_config(load.model).model_type]
            folders = {f"{family} ({load.model})": Path(load.model)}
        else:
            folders = random_folders(settings.dims, Path(folder), corpus, settings.seed, load.vocab_size)
        urls = {}
        for model_name, model_folder in folders.items():
            engines = {}
            model_type = load_config(model_folder).model_type
            for engine_name, weights, batching in CONFIGURATIONS:
                if model_type not in ENGINES[engine_name].families:  # CTranslate2 has no RNN models
                    continue
                if (engine_name, weights) not in engines:
                    engines[engine_name, weights] = load_engine(
                        model_folder, engine_name, dtype="bfloat16" if weights == "bfloat16" else "float32",
                        int8=weights == "int8", threads=threads)
                app = create_app({"model": engines[engine_name, weights]},
                                 BatchingConfig(max_wait_ms=load.max_wait_ms, batching=batching), limits)
                name = f"{model_name} | {engine_name} {weights} | {'dynamic batching' if batching else 'sequential'}"
                urls[name] = servers.enter_context(serve_in_thread(app))
        runs = {name: [] for name in urls}
        for repeat in range(1 + load.repeats):  # the first round warms every server up, untimed
            for name, url in urls.items():
                result = _run(url, requests)
                if repeat:
                    runs[name].append(result)
    return _summarize(runs, load, threads, settings, folders)


def _summarize(runs: dict[str, list[dict]], load: ServingLoad, threads: int, settings, folders) -> dict:
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
            "answered_once": all(r["answered_once"] for r in results),
        }
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
        "sentences_per_run": first["sentences"],
        "models": "given" if load.model else f"random, {settings.dims.layers}+{settings.dims.layers} layers, "
                                             f"d_model {settings.dims.d_model} (Transformer); GRU {settings.dims.rnn_hidden}",
        "folders": {name: str(path) for name, path in folders.items()} if load.model else None,
        "rows": rows, "same_translations_batched_and_sequential": same,
    }


def serving_targets(serving: dict) -> dict[str, bool]:
    """The issues' expectations of the section: dynamic batching at 3x sequential serving (issue 35), CTranslate2
    ahead of torch, and no request lost, duplicated or answered with another's translations."""
    rows = serving["rows"]
    targets = {}
    for model in dict.fromkeys(name.split(" | ")[0] for name in rows):
        speed = {name.split(" | ", 1)[1]: row["sentences_per_s"] for name, row in rows.items() if name.startswith(model)}
        targets[f"serving {model}: dynamic batching >= 3x sequential (torch float32)"] = (
            speed["torch float32 | dynamic batching"] >= 3 * speed["torch float32 | sequential"])
        if "ctranslate2 float32 | dynamic batching" in speed:
            targets[f"serving {model}: CTranslate2 float32 > torch float32 (dynamic batching)"] = (
                speed["ctranslate2 float32 | dynamic batching"] > speed["torch float32 | dynamic batching"])
    targets["serving: every request answered once, batched and sequential translations equal"] = (
        all(row["answered_once"] for row in rows.values())
        and all(serving["same_translations_batched_and_sequential"].values()))
    return targets


def serving_table(report: dict) -> list[str]:
    """The section's markdown: one row per configuration, with its speed against sequential torch serving of the
    same model."""
    serving = report["serving"]
    load = serving["load"]
    rows = []
    for name, row in serving["rows"].items():
        model = name.split(" | ")[0]
        baseline = serving["rows"][f"{model} | torch float32 | sequential"]["sentences_per_s"]
        rows.append([*name.split(" | "), f"{row['requests_per_s']:,.1f}", f"{row['sentences_per_s']:,.1f}",
                     f"{row['tokens_per_s']:,.0f}", f"{row['latency_p50_ms']:,.0f}", f"{row['latency_p99_ms']:,.0f}",
                     f"{row['sentences_per_call']:.1f}", f"{row['sentences_per_s'] / baseline:.2f}x",
                     "yes" if row["answered_once"] else "NO"])
    header = ["model", "engine", "serving", "requests/s", "sentences/s", "output tokens/s", "p50 ms", "p99 ms",
              "sentences per engine call", "vs torch float32 sequential", "every request answered once"]
    same = ", ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in serving["same_translations_batched_and_sequential"].items())
    lines = [f"**Serving** ({load['clients']} concurrent clients x {load['requests_per_client']} requests of 1-"
             f"{load['max_sentences']} sentences ({serving['sentences_per_run']} sentences per run), num_beams "
             f"{load['num_beams']}, {serving['threads']} thread(s) per engine, max wait {load['max_wait_ms']:g} ms; "
             f"models: {serving['models']}; medians of {load['repeats']} runs, p50/p99 over all their requests)", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", f"Output tokens: the translations re-tokenized (the server's hf_s2s_target_tokens_total). Same "
                  f"translations from batched and sequential serving: {same}.", ""]
    return lines


__all__ = ["CONFIGURATIONS", "ServingLoad", "bench_serving", "serving_table", "serving_targets"]
