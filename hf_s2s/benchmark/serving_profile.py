"""Where a served sentence's CPU time goes: a sampling profiler of the serving benchmark's own process.

The benchmark's servers run in threads of its process (:func:`hf_s2s.serving.server.serve_in_thread`): uvicorn's event
loop (HTTP, validation, JSON) in one, each model's batcher (tokenization, the engine, detokenization) in another, and
the engines' own native threads (CTranslate2's workers, torch's and onnxruntime's intra-op pools). While a
:class:`ServingProfiler` runs, a thread of its own wakes every ``interval`` seconds and, for each Python thread, reads
the CPU time the thread used since the last wake (``time.pthread_getcpuclockid``: nanoseconds of that thread alone) and
charges it to the stage its current stack is in (:data:`STAGES`, matched innermost frame first), as py-spy would
sample it; native threads, which have no Python stack, are charged to "engine threads" from /proc. CPU time, not
samples: a thread waiting for a socket or a lock costs nothing.

Only where /proc and per-thread CPU clocks exist (Linux); elsewhere :func:`profiling_supported` is False and the
benchmark reports no profile.
"""

import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

BENCHMARK = "the benchmark's counters"  # not the server's: left out of its CPU total
# (stage, [(path fragment of the frame's file, function names or None for any)]): a stack's stage is the first stage
# one of whose patterns matches a frame, frames read innermost first, stages in this order. Detokenization and
# tokenization come before the decoding whose frames enclose them; the engines' decoding before the batcher and the
# application that call them.
STAGES = (
    ("detokenization", [("transformers/tokenization", {"batch_decode", "decode", "_decode", "convert_tokens_to_ids",
                                                       "convert_ids_to_tokens_target"})]),
    ("tokenization", [("transformers/tokenization", None), ("tokenizers/", None)]),
    ("decoding", [("ctranslate2", None), ("hf_s2s/inference/ctranslate2.py", {"decode_rows"}),
                  ("transformers/generation", None), ("torch/", None), ("hf_s2s/models/", None),
                  ("onnxruntime", None), ("onnx_runtime.py", None), ("numpy", None)]),
    ("engine bookkeeping", [("hf_s2s/inference/", None)]),
    ("JSON and responses", [("json/", None), ("fastapi/encoders.py", None),
                            ("fastapi/routing.py", {"serialize_response"}),
                            ("starlette/responses.py", None), ("pydantic", {"model_dump", "model_dump_json",
                                                                           "dump_python", "to_json"})]),
    ("validation", [("fastapi/routing.py", {"request_body_to_args", "_validate_value", "solve_dependencies"}),
                    ("fastapi/dependencies", None), ("pydantic", None), ("hf_s2s/serving/app.py", {"_check_options"})]),
    ("metrics", [("prometheus_client", None), ("hf_s2s/serving/metrics.py", None)]),
    ("batching and queueing", [("hf_s2s/serving/batching.py", None), ("concurrent/futures", None)]),
    ("HTTP and the event loop", [("uvicorn", None), ("h11", None), ("httptools", None), ("starlette", None),
                                 ("fastapi", None), ("asyncio", None), ("selectors", None), ("socket", None),
                                 ("anyio", None), ("hf_s2s/serving/", None)]),
    # not the server's: the benchmark reading the server's counters before and after a run (an HTTP client each time)
    (BENCHMARK, [("hf_s2s/benchmark/serving.py", {"_counters"})]),
)
ENGINE_THREADS = "engine threads"  # native threads without a Python stack (CTranslate2, OpenMP, onnxruntime pools)
OTHER = "other"


def profiling_supported() -> bool:
    return hasattr(time, "pthread_getcpuclockid") and Path("/proc/self/task").is_dir()


def stage_of(frame) -> str:
    """The stage of a thread whose innermost frame is ``frame``."""
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename.replace("\\", "/"), frame.f_code.co_name))
        frame = frame.f_back
    for stage, patterns in STAGES:
        for filename, function in frames:
            if any(fragment in filename and (names is None or function in names) for fragment, names in patterns):
                return stage
    return OTHER


def _native_cpu_seconds(skip: set[int]) -> dict[int, float]:
    """CPU seconds (user + system) used so far by each of this process' threads whose native ids are not in
    ``skip``: native id -> seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for task in Path("/proc/self/task").iterdir():
        if int(task.name) in skip:
            continue
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        seconds[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15)
    return seconds


# Samples between two reads of the native threads' CPU time from /proc (every 50 ms at the default interval).
NATIVE_EVERY = 25


class ServingProfiler:
    """CPU seconds per stage while the block runs (``with ServingProfiler() as profile: ...``; then
    :meth:`seconds`). ``interval``: seconds between samples."""

    def __init__(self, interval: float = 0.002):
        self.interval = interval
        self.cpu = defaultdict(float)  # stage -> CPU seconds
        self.other = defaultdict(float)  # "file:function" of the innermost frame -> CPU seconds charged to OTHER
        self.wall = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hf_s2s-profiler", daemon=True)

    def __enter__(self) -> "ServingProfiler":
        self._start = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.wall = time.perf_counter() - self._start

    def _run(self) -> None:
        me = threading.get_ident()
        last: dict[int, float] = {}  # thread ident -> its CPU seconds at the last sample
        python_natives = {thread.native_id for thread in threading.enumerate()}
        # each native thread's CPU seconds when the block began and when last read: a thread's own count only grows,
        # and one that ends (an engine's pool torn down) keeps what it used until it was last read
        native_start = _native_cpu_seconds(python_natives)
        native_seen = dict(native_start)
        samples = 0
        while not self._stop.wait(self.interval):
            samples += 1
            if samples % NATIVE_EVERY == 0:
                native_seen.update(_native_cpu_seconds(python_natives))
            frames = sys._current_frames()
            for thread in threading.enumerate():
                ident = thread.ident
                if ident == me or ident not in frames:
                    continue
                python_natives.add(thread.native_id)
                try:
                    now = time.clock_gettime(time.pthread_getcpuclockid(ident))
                except (OSError, ProcessLookupError):  # the thread ended meanwhile
                    continue
                if ident in last:
                    stage = stage_of(frames[ident])
                    self.cpu[stage] += now - last[ident]
                    if stage == OTHER:
                        code = frames[ident].f_code
                        self.other[f"{Path(code.co_filename).name}:{code.co_name}"] += now - last[ident]
                last[ident] = now
        native_seen.update(_native_cpu_seconds(python_natives | {threading.get_native_id()}))
        self.cpu[ENGINE_THREADS] += sum(seconds - native_start.get(tid, 0.0) for tid, seconds in native_seen.items()
                                        if tid not in python_natives)

    def other_functions(self, top: int = 8) -> dict[str, float]:
        """The innermost functions of the CPU time charged to no stage, most first: what :data:`STAGES` misses."""
        return dict(sorted(self.other.items(), key=lambda item: -item[1])[:top])

    def seconds(self) -> dict[str, float]:
        """CPU seconds per stage, stages in :data:`STAGES`' order, then engine threads and other."""
        order = [stage for stage, _ in STAGES] + [ENGINE_THREADS, OTHER]
        return {stage: self.cpu.get(stage, 0.0) for stage in order}


__all__ = ["BENCHMARK", "ENGINE_THREADS", "STAGES", "ServingProfiler", "profiling_supported", "stage_of"]
