"""The serving benchmark's clients, in a process of their own: a closed loop of concurrent httpx clients.

A fixed number of clients (asyncio, httpx) each send a fixed list of requests one after the other (a client sends its
next request once the last is answered), so a run stops by itself. They run in a separate process
(:class:`LoadProcess`, started once and reused), so that the servers measured in the benchmark's process do not share
its interpreter with the clients, and the CPU time the clients take is measured (reported beside the rates: on a
2-core machine it is time the servers did not have).
"""

import asyncio
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor


async def _client(client, requests: list[dict], latencies: list[float], answers: list) -> None:
    for request in requests:
        start = time.perf_counter()
        response = await client.post("/translate", json=request)
        latencies.append(time.perf_counter() - start)
        answers.append((request, response.status_code, response.json()))


async def _load(url: str, requests: list[list[dict]]) -> tuple[float, list[float], list]:
    import httpx  # the clients' HTTP library, checked by the section before it starts (require_serve_extra)

    latencies, answers = [], []
    async with httpx.AsyncClient(base_url=url, timeout=600,
                                 limits=httpx.Limits(max_connections=len(requests))) as client:
        start = time.perf_counter()
        await asyncio.gather(*(_client(client, own, latencies, answers) for own in requests))
        return time.perf_counter() - start, latencies, answers


def run_load(url: str, requests: list[list[dict]]) -> dict:
    """Every client's requests sent to ``url`` at once (``requests[c]``: client c's, in order): the seconds until the
    last answer, each request's latency, the answers (request, status, body), and the CPU seconds this process took."""
    cpu = time.process_time()
    seconds, latencies, answers = asyncio.run(_load(url, requests))
    return {"seconds": seconds, "latencies": latencies, "answers": answers,
            "client_cpu_seconds": time.process_time() - cpu}


class LoadProcess:
    """The clients' process (spawned once; ``with LoadProcess() as load: load.run(url, requests)``)."""

    def __enter__(self) -> "LoadProcess":
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True)

    def run(self, url: str, requests: list[list[dict]]) -> dict:
        return self._pool.submit(run_load, url, requests).result()


__all__ = ["LoadProcess", "run_load"]
