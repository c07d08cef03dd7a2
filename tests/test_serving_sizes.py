"""What a request costs (hf_s2s/serving/sizes.py), as a real server on localhost refuses and bounds it: an answer or a
memory over the limits is refused 413 before anything is decoded, naming the limit and how to ask for less; the
prediction bounds every answer the server sends (requests drawn by hypothesis); no engine call and no batch's answers
take more memory than one request may; and under the worst requests the limits allow, the server's peak memory stays
under the bound the limits state (the load test of hf_s2s/benchmark/serving_memory.py, on a tiny model)."""

import asyncio

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from hf_s2s.benchmark.serving_memory import MemoryLoad, run  # noqa: E402
from hf_s2s.inference.engines import load_engine  # noqa: E402
from hf_s2s.serving.app import create_app  # noqa: E402
from hf_s2s.serving.batching import _engine_calls  # noqa: E402
from hf_s2s.serving.config import BatchingConfig, RequestLimits  # noqa: E402
from hf_s2s.serving.schemas import AttentionView  # noqa: E402
from hf_s2s.serving.server import serve_in_thread  # noqa: E402
from hf_s2s.serving.sizes import RequestCosts, RequestTooLarge, call_memory  # noqa: E402
from tests.saved_folders import TEXTS, save_tiny_model_folder  # noqa: E402

# A Transformer with more layers and heads than the tiny default, so that its attention weighs something.
DEEP = {"encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4}
# About 1 MB of answer: one long sentence's every attention weight fits, two do not.
LIMITS = RequestLimits(max_sentences=8, max_sentence_tokens=40, max_beams=4, max_answer_bytes=1_000_000,
                       max_request_memory=30_000_000)
BATCHING = BatchingConfig(max_wait_ms=200, max_batch_tokens=2000)
LONG = " ".join(TEXTS[5:40])  # cut to the longest sentence the server reads by the fixture


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = save_tiny_model_folder(tmp_path_factory.mktemp("sizes") / "deep", "transformer_seq2seq", seed=4, **DEEP)
    return load_engine(folder, threads=1)


@pytest.fixture(scope="module")
def long_sentence(engine):
    ids = engine.tokenizer(LONG)["input_ids"][: LIMITS.max_sentence_tokens - 1]
    sentence = engine.tokenizer.decode(ids, skip_special_tokens=True)
    assert len(engine.tokenizer(sentence)["input_ids"]) <= LIMITS.max_sentence_tokens
    return sentence


@pytest.fixture(scope="module")
def server(engine):
    app = create_app({"deep": engine}, BATCHING, LIMITS)
    with serve_in_thread(app) as url:
        yield url


def engine_calls(url: str) -> float:
    lines = httpx.get(f"{url}/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("hf_s2s_batch_sentences_count"))


def test_an_answer_over_the_limit_is_refused_before_decoding_saying_the_limit_and_how_to_ask_for_less(
        server, long_sentence):
    calls = engine_calls(server)
    response = httpx.post(f"{server}/translate", json={"sentences": [long_sentence] * 8, "output_attentions": True},
                          timeout=120)
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    for said in ("the answer to this request would be up to", "this server sends at most 1.0 MB (--max-answer-bytes)",
                 "attention weights", "the alignment alone (alignment without output_attentions",
                 "fewer sentences per request", "a shorter length bound"):
        assert said in error, error
    assert engine_calls(server) == calls  # refused before anything was decoded
    for smaller in ({"sentences": [long_sentence], "output_attentions": True},
                    {"sentences": [long_sentence] * 2, "alignment": True}):
        assert httpx.post(f"{server}/translate", json=smaller, timeout=120).status_code == 200, smaller


def test_a_request_over_the_memory_limit_is_refused_saying_so(engine, long_sentence):
    """One sentence's every attention weight is within the answer limit but, built and sent, over a memory limit of
    5 MB (each weight takes about 200 bytes while its answer is built)."""
    limits = RequestLimits(**{**vars(LIMITS), "max_request_memory": 5_000_000})
    with serve_in_thread(create_app({"deep": engine}, BATCHING, limits)) as url:
        response = httpx.post(f"{url}/translate", json={"sentences": [long_sentence], "output_attentions": True},
                              timeout=120)
        assert response.status_code == 413, response.text
        assert "this server lets one request take 5.0 MB (--max-request-memory)" in response.json()["error"]
        assert httpx.post(f"{url}/translate", json={"sentences": [long_sentence], "alignment": True},
                          timeout=120).status_code == 200


requests = st.fixed_dictionaries({
    "count": st.integers(1, 4), "words": st.integers(1, 50), "num_beams": st.integers(1, 3),
    "nbest": st.integers(1, 3), "scores": st.booleans(),
    "attention": st.sampled_from(["none", "alignment", "output_attentions", "cross view", "encoder view"]),
    "bound": st.sampled_from([{}, {"max_len_a": 0.5, "max_len_b": 3}])})


@given(drawn=requests)
@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_prediction_bounds_every_answer_the_server_sends(server, engine, drawn):
    words = " ".join(TEXTS[5:40]).split()
    body = {"sentences": [" ".join(words[i : i + drawn["words"]]) for i in range(drawn["count"])],
            "num_beams": max(drawn["num_beams"], drawn["nbest"]), "num_return_sequences": drawn["nbest"],
            "scores": drawn["scores"], **drawn["bound"]}
    view = None
    if drawn["attention"].endswith(" view"):  # the explorer's: one map per hypothesis
        view = AttentionView(kind=drawn["attention"].split()[0])
        body["attention"] = view.model_dump()
    elif drawn["attention"] != "none":
        body[drawn["attention"]] = True
    response = httpx.post(f"{server}/translate", json=body, timeout=300)
    lengths = [len(ids) for ids in engine.tokenizer(body["sentences"])["input_ids"]]
    if max(lengths) > LIMITS.max_sentence_tokens:
        assert response.status_code == 422
        return
    options = engine.options(**{name: value for name, value in body.items()
                                if name not in ("sentences", "scores", "alignment", "output_attentions", "attention")})
    costs = RequestCosts.of(engine, LIMITS.max_answer_bytes, LIMITS.max_request_memory)
    try:
        prediction = costs.check(lengths, options, scores=body["scores"], alignment=body.get("alignment", False),
                                 output_attentions=body.get("output_attentions", False), view=view)
    except RequestTooLarge as error:
        assert response.status_code == 413 and response.json()["error"] == str(error)
        return
    assert response.status_code == 200, response.text
    assert len(response.content) <= prediction.answer_bytes, (len(response.content), prediction)


@pytest.mark.parametrize("kind", ["cross", "encoder"])
def test_explorer_maps_count_in_a_requests_cost_on_translate_and_score(engine, long_sentence, kind):
    """The explorer's view (one map per hypothesis, read by one teacher-forced call over every hypothesis) and
    POST /score's maps are refused 413 past --max-request-memory, naming it, before anything is decoded; the same
    request for one sentence is answered. They were not counted at all: an n-best view of many long sentences made
    every layer's and head's weights of every hypothesis at once."""
    costs = RequestCosts.of(engine, LIMITS.max_answer_bytes, LIMITS.max_request_memory)
    lengths = [len(engine.tokenizer(long_sentence)["input_ids"])]
    view = AttentionView(kind=kind)
    options = engine.options(num_beams=4, num_return_sequences=4)
    one = costs.check(lengths, options, scores=False, alignment=False, output_attentions=False, view=view).memory
    plain = costs.check(lengths, options, scores=False, alignment=False, output_attentions=False).memory
    assert one > plain  # the maps and the forced pass count
    scored_one = costs.check_scored(lengths, lengths, view)
    assert scored_one > costs.check_scored(lengths, lengths)
    translate = {"num_beams": 4, "num_return_sequences": 4, "attention": view.model_dump()}
    score = {"targets": [long_sentence], "attention": view.model_dump()}
    for path, body, cost in (("translate", translate, one), ("score", score, scored_one)):
        limits = RequestLimits(**{**vars(LIMITS), "max_answer_bytes": 10**9,  # the memory limit binds
                                  "max_request_memory": int(cost * 1.5)})
        with serve_in_thread(create_app({"deep": engine}, BATCHING, limits)) as url:
            calls = engine_calls(url)
            many = {**body, "sentences": [long_sentence] * 8}
            if "targets" in many:
                many["targets"] = [long_sentence] * 8
            response = httpx.post(f"{url}/{path}", json=many, timeout=300)
            assert response.status_code == 413, (path, response.text)
            assert "(--max-request-memory): ask for less" in response.json()["error"], response.text
            assert engine_calls(url) == calls  # refused before anything was decoded
            response = httpx.post(f"{url}/{path}", json={**body, "sentences": [long_sentence]}, timeout=300)
            assert response.status_code == 200, (path, response.text)


def test_engine_calls_hold_no_more_than_one_request_may(engine):
    """The batcher cuts its engine calls by the memory one request may take, as well as by tokens."""
    options = engine.options(num_beams=4)  # the source-relative bound: shorter sentences decode fewer steps
    costs = RequestCosts.of(engine, LIMITS.max_answer_bytes, 1)
    lengths = [30] * 10 + [12] * 10 + [3] * 20
    budget = call_memory([30] * 3, options, costs.shape, scores=True)
    fits = lambda call: call_memory(call, options, costs.shape, scores=True) <= budget  # noqa: E731
    calls = _engine_calls(lengths, max_tokens=10_000, fits=fits)
    assert sorted(position for call in calls for position in call) == list(range(len(lengths)))
    assert all(fits([lengths[position] for position in call]) for call in calls)
    assert len(calls[0]) == 3 and max(map(len, calls)) > 3  # shorter sentences share larger calls
    assert _engine_calls(lengths, max_tokens=10_000) == [list(range(len(lengths)))]  # no memory cut: one call


def test_a_batch_gathers_no_more_answers_and_no_larger_engine_call_than_one_request_may(engine, long_sentence):
    """Concurrent requests of one set of options, each within the limits: requests whose answers together would pass
    --max-request-memory are decoded in batches of their own, and sentences whose decoding together would pass it in
    engine calls of their own (the engine's call sizes: hf_s2s_batch_sentences)."""
    costs = RequestCosts.of(engine, LIMITS.max_answer_bytes, LIMITS.max_request_memory)
    lengths = [len(engine.tokenizer(long_sentence)["input_ids"])]
    # two answers of every attention weight do not fit together
    attention = {"sentences": [long_sentence], "output_attentions": True}
    answer = costs.check(lengths, engine.options(), scores=False, alignment=False, output_attentions=True)
    attention_budget = answer.memory + answer.answer_memory // 2
    # two sentences decoded with 4 beams and every step's scores do not fit in one engine call
    beams = {"sentences": [long_sentence] * 2, "num_beams": 4, "scores": True}
    options = engine.options(num_beams=4)
    one, two = (call_memory(lengths * count, options, costs.shape, scores=True) for count in (1, 2))
    beams_budget = (one + two) // 2
    assert two > beams_budget >= costs.check(lengths * 2, options, scores=True, alignment=False,
                                             output_attentions=False).memory

    async def send(url, body, count):
        async with httpx.AsyncClient(timeout=300) as client:
            return await asyncio.gather(*(client.post(f"{url}/translate", json=body) for _ in range(count)))

    for body, budget in ((attention, attention_budget), (beams, beams_budget)):
        limits = RequestLimits(**{**vars(LIMITS), "max_request_memory": budget})
        with serve_in_thread(create_app({"deep": engine}, BATCHING, limits)) as url:
            responses = asyncio.run(send(url, body, 2))
            assert [response.status_code for response in responses] == [200] * 2
            text = httpx.get(f"{url}/metrics").text
            calls = float(next(line.rsplit(" ", 1)[1] for line in text.splitlines()
                               if line.startswith("hf_s2s_batch_sentences_count")))
            alone = float(next(line.rsplit(" ", 1)[1] for line in text.splitlines()
                               if line.startswith('hf_s2s_batch_sentences_bucket{le="1.0"')))
            assert calls == alone == 2 * len(body["sentences"]), text  # every engine call held one sentence


@pytest.mark.slow  # a server process of its own
def test_the_server_stays_under_its_stated_memory_bound_under_the_worst_allowed_requests(engine):
    """The load test of docs/serving.md on a tiny model with small limits: every kind of worst request is answered at
    its edge (and refused one sentence past it where its cost, not the sentence limit, stops it), no answer passes
    --max-answer-bytes, and the server's peak memory stays under its memory once started plus 3 x
    --max-request-memory."""
    limits = RequestLimits(max_sentences=4, max_sentence_tokens=20, max_beams=3, max_answer_bytes=300_000,
                           max_request_memory=10_000_000)
    report = run(engine.folder, MemoryLoad(limits=limits, clients=2, rounds=1), " ".join(TEXTS[5:40]).split())
    assert report["peak_rss"] <= report["bound"], report
    assert set(report["kinds"]) == {"attention", "beams", "greedy_scores", "short"}, report
    for kind, measured in report["kinds"].items():
        assert measured["statuses"] == [200], (kind, measured)
        assert measured["largest_answer_bytes"] <= limits.max_answer_bytes, (kind, measured)
        past = measured["one_sentence_more"]
        assert past is None or (past["status"] == 413 and "ask for less" in past["error"]), (kind, past)
    assert report["kinds"]["attention"]["one_sentence_more"] is not None  # the answer limit, not the count, binds
