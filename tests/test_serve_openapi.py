"""`hf-s2s serve` against its own OpenAPI schema (FastAPI's /openapi.json), with schemathesis: for every endpoint and
every option of the schema (attention, glossaries and the shortlist included), requests generated from the schema and
requests that break it get no 5xx, a JSON answer (the Prometheus text of /metrics aside), an answer within the
server's --max-answer-bytes, and a body and status that conform to the schema. (A request that fits the schema may
still be refused with a 4xx: its options can be impossible together, or over the server's limits, which the schema
does not express; schemathesis' check that schema-valid data is accepted is left out for that.)

The served models are tiny (both families, one folder with a shortlist), the limits small, the examples few and
derandomized (the same requests on every run), so the test takes about a minute on 2 cores."""

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from hf_s2s.inference.engines import load_engine  # noqa: E402
from hf_s2s.models.shortlist import VocabularyShortlist  # noqa: E402
from hf_s2s.serving.app import create_app  # noqa: E402
from hf_s2s.serving.config import BatchingConfig, RequestLimits  # noqa: E402
from hf_s2s.serving.server import serve_in_thread  # noqa: E402
from tests.saved_folders import save_tiny_model_folder  # noqa: E402

# Small enough that attention for a few sentences passes the answer limit, so the refusal is exercised too.
LIMITS = RequestLimits(max_sentences=4, max_sentence_tokens=24, max_beams=3, max_request_bytes=20_000,
                       max_answer_bytes=60_000, max_request_memory=20_000_000)
EXAMPLES = 50  # per operation and generation mode
# Answers that are not JSON by design: Prometheus' text exposition.
NOT_JSON = {"/metrics"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("openapi")
    tf = save_tiny_model_folder(base / "tf", "transformer_seq2seq", seed=2)
    size = len(AutoTokenizer.from_pretrained(tf))
    VocabularyShortlist.from_candidates([[(s * k) % (size - 3) + 3 for k in (7, 3)] for s in range(size)], always=[],
                                        target_vocab_size=size).save_pretrained(tf)
    engines = {"tf": load_engine(tf, threads=1),
               "rnn": load_engine(save_tiny_model_folder(base / "rnn", "rnn_seq2seq", seed=1), threads=1)}
    with serve_in_thread(create_app(engines, BatchingConfig(max_wait_ms=1), LIMITS)) as url:
        yield url


@pytest.fixture(scope="module")
def api(server):
    schema = schemathesis.openapi.from_url(f"{server}/openapi.json")
    schema.config.generation.update(modes=["positive", "negative"], max_examples=EXAMPLES, deterministic=True,
                                    database="none")
    # A request past the limits the schema states (more sentences than maxItems) is refused 413 Content Too Large,
    # as every request over the server's limits is: a rejection too, besides schemathesis' default 4xx list.
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    return schema


# Every operation of the schema (test_the_schema_lists_every_endpoint keeps this list complete).
OPERATIONS = [("POST", "/translate"), ("POST", "/score"), ("GET", "/health"), ("GET", "/models"), ("GET", "/metrics")]


def answers_in_json_within_the_answer_limit(ctx, response, case):
    """Every answer of the API is JSON, and none is larger than the server's --max-answer-bytes."""
    if case.path not in NOT_JSON:
        assert response.headers.get("content-type", [""])[0].startswith("application/json"), response.headers
        response.json()  # parses
    assert len(response.content) <= LIMITS.max_answer_bytes, (len(response.content), case.body)


def test_the_schema_lists_every_endpoint(api):
    listed = sorted((result.ok().method.upper(), result.ok().path) for result in api.get_all_operations())
    assert listed == sorted(OPERATIONS)


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_every_endpoint_and_option_answers_json_within_limits_and_never_5xx(api, method, path, mode):
    """Requests drawn from the schema (positive) and against it (negative: wrong types, missing and unknown fields),
    the same ones on every run."""
    operation = api[path][method]
    if mode == "negative" and method == "GET":
        pytest.skip("a GET without parameters has no request to break")

    @given(case=operation.as_strategy(schemathesis.GenerationMode(mode)))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def call(case):
        case.call_and_validate(additional_checks=[answers_in_json_within_the_answer_limit],
                               excluded_checks=[positive_data_acceptance])

    call()
