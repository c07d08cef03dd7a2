"""The server's settings, one dataclass per concern, with their defaults (the command line's flags default to them).
No optional dependency here, so that ``hf-s2s serve --help`` shows the defaults without the serve extra."""

from dataclasses import dataclass

# Seconds the requests in flight get to finish after SIGTERM before uvicorn closes their connections.
DEFAULT_GRACEFUL_TIMEOUT = 30.0


def _check_numbers(settings, names: tuple[str, ...], low: float, whole: bool) -> None:
    """A ValueError naming the first field of ``names`` that is not a number >= ``low`` (a whole one if ``whole``)."""
    for name in names:
        value = getattr(settings, name)
        kinds = int if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not value >= low:
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"{name} (--{name.replace('_', '-')}) must be {kind} >= {low:g}, got {value!r}")


@dataclass
class BatchingConfig:
    """How requests are gathered into batches (:mod:`.batching`), and how many may wait."""

    # How long a batch waits for requests to join it (ms), from the later of its oldest request's arrival and the end
    # of the previous batch. 20 ms: enough for the clients the previous batch answered to send again on a loaded
    # 2-core machine (5 ms was not; docs/serving.md), small beside the hundreds of ms an engine call takes.
    max_wait_ms: float = 20.0
    max_batch_tokens: int = 2048  # source tokens gathered per batch, and padded tokens (sentences x longest) per call
    max_queue_sentences: int = 1024  # sentences waiting per model; a request that would exceed it is refused (503)
    batching: bool = True  # False: each request decoded alone, one after the other (the benchmark's baseline)

    def __post_init__(self):
        _check_numbers(self, ("max_wait_ms",), 0, whole=False)
        _check_numbers(self, ("max_batch_tokens", "max_queue_sentences"), 1, whole=True)


@dataclass
class RequestLimits:
    """What one request may ask for (:mod:`.app` refuses more with 413 or 422)."""

    max_sentences: int = 64  # sentences per request
    max_sentence_tokens: int = 256  # source tokens per sentence, </s> included (lowered to a model's own limit)
    max_beams: int = 16  # num_beams per request
    max_request_bytes: int = 1_000_000  # size of a request's body
    # size of an answer's JSON, attention included, at most as predicted before decoding (hf_s2s.serving.sizes)
    max_answer_bytes: int = 32_000_000
    # memory one request may take to decode and answer, as predicted before decoding; also what one engine call and
    # the answers of one batch may take (hf_s2s.serving.sizes)
    max_request_memory: int = 512_000_000

    def __post_init__(self):
        _check_numbers(self, ("max_sentences", "max_sentence_tokens", "max_beams", "max_request_bytes",
                              "max_answer_bytes", "max_request_memory"), 1, whole=True)


__all__ = ["DEFAULT_GRACEFUL_TIMEOUT", "BatchingConfig", "RequestLimits"]
