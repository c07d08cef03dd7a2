"""The service's Prometheus metrics (``GET /metrics``), one registry per application so that several servers in one
process (tests, benchmarks) count apart. Every metric is labelled with the served model's name."""

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # the media type of the exposition
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Request latency buckets in seconds: a greedy sentence on one CPU thread takes milliseconds, a long beam request
# seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Sentences per engine call, and padded source tokens per engine call (sentences x the longest).
BATCH_SENTENCE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
BATCH_TOKEN_BUCKETS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384)


class ServingMetrics:
    """Counters of requests (by HTTP status), sentences and tokens; histograms of request latency and of the
    batches the engine decodes; gauges of what waits in the queue."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        common = {"labelnames": ("model",), "registry": self.registry}
        self.requests = Counter("hf_s2s_requests", "Translation requests answered, by HTTP status",
                                labelnames=("model", "status"), registry=self.registry)
        self.sentences = Counter("hf_s2s_sentences", "Sentences translated", **common)
        self.source_tokens = Counter("hf_s2s_source_tokens", "Source tokens translated (</s> included)", **common)
        self.target_tokens = Counter("hf_s2s_target_tokens",
                                     "Tokens of the returned best translations (re-tokenized, </s> included)", **common)
        self.latency = Histogram("hf_s2s_request_latency_seconds", "Time from a request's arrival to its answer",
                                 buckets=LATENCY_BUCKETS, **common)
        self.batch_sentences = Histogram("hf_s2s_batch_sentences", "Sentences per engine call",
                                         buckets=BATCH_SENTENCE_BUCKETS, **common)
        self.batch_tokens = Histogram("hf_s2s_batch_padded_tokens",
                                      "Padded source tokens per engine call (sentences x the longest)",
                                      buckets=BATCH_TOKEN_BUCKETS, **common)
        self.queue_sentences = Gauge("hf_s2s_queue_sentences", "Sentences waiting to be batched", **common)
        self.queue_requests = Gauge("hf_s2s_queue_requests", "Requests waiting to be batched", **common)

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format (served with :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)


__all__ = ["CONTENT_TYPE", "ServingMetrics"]
