"""The server's memory under the worst requests its limits allow.

``hf-s2s serve`` runs in a process of its own with the limits given; concurrent clients send it, over and over, each
kind of request at the edge of what ``--max-answer-bytes`` and ``--max-request-memory`` let through (the most
sentences of the longest length the server reads that the prediction of :mod:`hf_s2s.serving.sizes` accepts):

- ``attention``: every layer's and head's attention weights (``output_attentions``);
- ``beams``: the most beams, an n-best list of as many, scores;
- ``greedy_scores``: greedy search with scores (its score keeps every step's scores of the whole vocabulary);
- ``short``: the most sentences, of one word, with the most beams and scores, from every client at once (the batcher
  would put them all in one engine call but for its memory cut).

Each kind is checked to be answered 200 at its edge and refused 413 just past it (one sentence more), and every
answer's size against ``--max-answer-bytes``. The server's peak resident memory (Linux's ``VmHWM``) is compared with
the bound the limits state: its memory once started and warmed up by one small request, plus three times
``--max-request-memory`` (one engine call, the answers of the batch being decoded and of the batch being sent:
:mod:`hf_s2s.serving.sizes`).
"""

import asyncio
import dataclasses
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..inference.engines import open_engine
from ..serving.config import RequestLimits
from ..serving.sizes import RequestCosts, RequestTooLarge

# The kinds of worst request (the module docstring): their options beside the sentences.
KINDS = {
    "attention": {"output_attentions": True},
    "beams": {"num_beams": None, "num_return_sequences": None, "scores": True},  # None: the most the server allows
    "greedy_scores": {"num_beams": 1, "scores": True, "no_length_bound": True},
    "short": {"num_beams": None, "scores": True},
}
# Bound stated for the peak: the started server's memory plus this many times --max-request-memory.
MEMORY_BOUND_FACTOR = 3


@dataclass
class MemoryLoad:
    """The load and the server's limits."""

    limits: RequestLimits = dataclasses.field(default_factory=RequestLimits)
    clients: int = 4  # concurrent clients
    rounds: int = 2  # requests of every kind each client sends
    sample_seconds: float = 0.02  # how often the server's resident memory is read


def status_bytes(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` memory field (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # kB
    raise ValueError(f"/proc/{pid}/status has no {field}")


def sentence_of(tokenizer, tokens: int, words: list[str]) -> str:
    """A sentence of ``words`` that the tokenizer reads as exactly ``tokens`` tokens (</s> included), or as close
    below as the words allow."""
    text, index = "", 0
    while True:
        longer = f"{text} {words[index % len(words)]}".strip()
        if len(tokenizer(longer)["input_ids"]) > tokens:
            return text or words[0]
        text, index = longer, index + 1


def edge_requests(folder: str, limits: RequestLimits, sentence: str,
                  word: str) -> tuple[dict[str, dict], dict[str, str]]:
    """Each kind's request at the edge of ``limits`` for the model in ``folder``, as the server predicts its cost:
    the most sentences (``sentence``; ``word`` for ``short``) it accepts; and, for each kind refused even for one
    sentence (which the load then cannot send), the refusal."""
    engine = open_engine(folder)
    costs = RequestCosts.of(engine, limits.max_answer_bytes, limits.max_request_memory)
    requests, refused_alone = {}, {}
    for kind, options in KINDS.items():
        options = {name: limits.max_beams if value is None else value for name, value in options.items()}
        text = word if kind == "short" else sentence
        accepted = None
        for count in range(1, limits.max_sentences + 1):
            request = {"sentences": [text] * count, **options}
            try:
                _cost(engine, costs, request)
            except RequestTooLarge as error:
                if accepted is None:
                    refused_alone[kind] = str(error)
                break
            accepted = request
        if accepted is not None:
            requests[kind] = accepted
    return requests, refused_alone


def _cost(engine, costs: RequestCosts, request: dict):
    lengths = [len(ids) for ids in engine.tokenizer(request["sentences"])["input_ids"]]
    call = {name: value for name, value in request.items()
            if name not in ("sentences", "scores", "output_attentions", "alignment")}
    options = engine.options(**call)
    return costs.check(lengths, options, scores=request.get("scores", False),
                       alignment=request.get("alignment", False),
                       output_attentions=request.get("output_attentions", False))


def past_the_edge(request: dict, limits: RequestLimits) -> dict | None:
    """The request with one sentence more (None where the sentence limit, not the cost, stops it)."""
    if len(request["sentences"]) >= limits.max_sentences:
        return None
    return {**request, "sentences": [*request["sentences"], request["sentences"][0]]}


async def _send_all(url: str, requests: list[dict], clients: int) -> list:
    import httpx  # the serve extra's test client, present where the server runs

    queue = list(requests)
    answers = []

    async def client(http):
        while queue:
            request = queue.pop(0)
            response = await http.post(f"{url}/translate", json=request)
            answers.append((request, response.status_code, len(response.content)))

    async with httpx.AsyncClient(timeout=3600) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return answers


def measure(url: str, pid: int, folder: str, load: MemoryLoad, sentence: str, word: str) -> dict:
    """Drive the server at ``url`` (process ``pid``, serving ``folder`` with ``load.limits``) with the worst allowed
    requests; returns what was sent, what came back and its memory, in bytes."""
    import httpx

    httpx.post(f"{url}/translate", json={"sentences": [word]}, timeout=600).raise_for_status()  # warm up
    started = status_bytes(pid, "VmRSS")
    edges, refused_alone = edge_requests(folder, load.limits, sentence, word)
    refused = {}
    for kind, request in edges.items():
        larger = past_the_edge(request, load.limits)
        if larger is not None:
            response = httpx.post(f"{url}/translate", json=larger, timeout=600)
            refused[kind] = {"status": response.status_code, "error": response.json().get("error", "")}
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(status_bytes(pid, "VmRSS"))
            time.sleep(load.sample_seconds)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    begun = time.perf_counter()
    requests = [request for _ in range(load.rounds * load.clients) for request in edges.values()]
    answers = asyncio.run(_send_all(url, requests, load.clients))
    seconds = time.perf_counter() - begun
    stop.set()
    sampler.join()
    peak = status_bytes(pid, "VmHWM")
    kinds = {}
    for kind, request in edges.items():
        sizes = [size for sent, status, size in answers if sent is request and status == 200]
        statuses = sorted({status for sent, status, _ in answers if sent is request})
        kinds[kind] = {"sentences": len(request["sentences"]), "options": {k: v for k, v in request.items()
                                                                          if k != "sentences"},
                       "statuses": statuses, "largest_answer_bytes": max(sizes, default=0),
                       "one_sentence_more": refused.get(kind)}
    for kind, error in refused_alone.items():  # not sent: said in the report, never left out silently
        kinds[kind] = {"sentences": 0, "statuses": [], "refused_for_one_sentence": error}
    return {"started_rss": started, "peak_rss": peak, "largest_sampled_rss": max(samples, default=started),
            "bound": started + MEMORY_BOUND_FACTOR * load.limits.max_request_memory, "requests": len(answers),
            "seconds": seconds, "kinds": kinds}


def limit_flags(limits: RequestLimits) -> list[str]:
    """``hf-s2s serve``'s flags for ``limits``."""
    return [flag for field in dataclasses.fields(limits)
            for flag in (f"--{field.name.replace('_', '-')}", str(getattr(limits, field.name)))]


def start_serve(command: list[str], *, cwd: str | Path | None = None, env: dict | None = None, preexec_fn=None,
                timeout: float = 600) -> tuple[subprocess.Popen, str]:
    """Start ``command``, an ``hf-s2s serve ... --port 0`` command line, in a process of its own; returns (process,
    base URL) once it answers /health. A process that does not start or answer within ``timeout`` seconds is killed
    and a RuntimeError gives its stderr's end."""
    import httpx  # the serve extra's client, present where the server runs

    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=preexec_fn)
    line = process.stdout.readline()  # "listening on http://127.0.0.1:PORT (OpenAPI: ...)"
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"the server did not start: {line}{process.stderr.read()[-3000:]}")
    url = line.split()[2]
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(f"{url}/health").raise_for_status()
            return process, url
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"the server does not answer: {process.stderr.read()[-3000:]}") from None
            time.sleep(0.1)


@contextmanager
def serve_process(folder: str, flags: list[str], start_timeout: float = 600) -> Iterator[tuple[str, int]]:
    """``hf-s2s serve FOLDER FLAGS --port 0`` in a process of its own (one torch thread); yields (base URL, process
    id) once it answers, and stops it (SIGTERM) when the block ends."""
    command = [sys.executable, "-m", "hf_s2s.cli", "serve", folder, *flags, "--threads", "1", "--port", "0",
               "--log-level", "warning"]
    process, url = start_serve(command, timeout=start_timeout)
    try:
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run(folder: str, load: MemoryLoad, words: list[str]) -> dict:
    """Serve ``folder`` with ``load.limits`` in a process of its own and :func:`measure` it, the requests built of
    ``words`` (the longest sentence the server reads, and the first word alone)."""
    tokenizer = open_engine(folder).tokenizer
    sentence = sentence_of(tokenizer, load.limits.max_sentence_tokens, words)
    with serve_process(folder, limit_flags(load.limits)) as (url, pid):
        report = measure(url, pid, folder, load, sentence, words[0])
    report["source_tokens"] = len(tokenizer(sentence)["input_ids"])
    report["limits"] = dataclasses.asdict(load.limits)
    return report


__all__ = ["KINDS", "MEMORY_BOUND_FACTOR", "MemoryLoad", "edge_requests", "limit_flags", "measure", "run",
           "sentence_of", "serve_process", "start_serve", "status_bytes"]
