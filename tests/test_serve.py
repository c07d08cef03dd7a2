"""`hf-s2s serve` as a client sees it: the real server (uvicorn, on a free localhost port, in a thread or as the
command's own process) called over HTTP with httpx.

Under concurrency, every request gets the translations it gets alone from ``translate()`` (or the CTranslate2 or
ONNX engine), greedy and beam, with n-best lists and scores, while requests of one set of options share batches. Every
kind of bad input is a 4xx with a JSON message and leaves the server answering; a full queue is a 503; a failed batch
a 500 for its requests only; SIGTERM lets the request in flight finish, and what it cannot finish in time is answered
503 in JSON; a request whose client hung up is never decoded; /metrics counts every answer by the status the client
got; metrics and the OpenAPI page are served."""

import asyncio
import collections
import json
import os
import random
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from hf_s2s.cli import run_command  # noqa: E402
from hf_s2s.importers import convert  # noqa: E402
from hf_s2s.inference.attention import eager_attention  # noqa: E402
from hf_s2s.inference.engines import TorchEngine, load_engine, open_engine  # noqa: E402
from hf_s2s.inference.translate import alignment, translate  # noqa: E402
from hf_s2s.models.shortlist import SHORTLIST_FILE, VocabularyShortlist  # noqa: E402
from hf_s2s.models.term_constraints import Glossary  # noqa: E402
from hf_s2s.serving.app import create_app  # noqa: E402
from hf_s2s.serving.config import BatchingConfig, RequestLimits  # noqa: E402
from hf_s2s.serving.folders import check_model_folder  # noqa: E402
from hf_s2s.serving.schemas import TranslateResponse  # noqa: E402
from hf_s2s.serving.server import bind_socket, serve_in_thread  # noqa: E402
from tests.saved_folders import TEXTS, save_tiny_model_folder  # noqa: E402
from tests.server_process import start_server_process  # noqa: E402

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

ROOT = Path(__file__).resolve().parent.parent
LIMITS = RequestLimits(max_sentences=8, max_sentence_tokens=40, max_beams=4, max_request_bytes=20_000)
# a wait long enough that the concurrent requests of a test meet in batches even on a loaded machine
BATCHING = BatchingConfig(max_wait_ms=50, max_batch_tokens=400)
# the options the concurrent clients draw from: greedy and beam, n-best, the generation config's bound and others
OPTIONS = [{}, {"num_beams": 3}, {"num_beams": 3, "num_return_sequences": 2, "scores": True},
           {"num_beams": 1, "max_len_a": 0.5, "max_len_b": 2, "scores": True}, {"no_length_bound": True}]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    return {"tf": save_tiny_model_folder(base / "tf", "transformer_seq2seq"),
            "rnn": save_tiny_model_folder(base / "rnn", "rnn_seq2seq", seed=1)}


@pytest.fixture(scope="module")
def engines(folders):
    return {name: load_engine(folder, threads=1) for name, folder in folders.items()}


@pytest.fixture(scope="module")
def server(engines):
    """The torch engine serving both families: (base URL, app)."""
    app = create_app(engines, BATCHING, LIMITS)
    with serve_in_thread(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def ct2_server(folders):
    pytest.importorskip("ctranslate2")
    engine = load_engine(folders["tf"], "ctranslate2", threads=1)
    with serve_in_thread(create_app({"tf": engine}, BATCHING, LIMITS)) as url:
        yield url, engine


@pytest.fixture(scope="module")
def onnx_server(folders):
    """The onnx engine, as ``hf-s2s serve --engine onnx`` opens it: the RNN folder exported to ONNX on start."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    engine = load_engine(folders["rnn"], "onnx", threads=1)
    with serve_in_thread(create_app({"rnn": engine}, BATCHING, LIMITS)) as url:
        yield url, engine


def post(url: str, body, **kwargs) -> httpx.Response:
    if isinstance(body, dict):
        return httpx.post(f"{url}/translate", json=body, timeout=60, **kwargs)
    return httpx.post(f"{url}/translate", content=body, headers={"content-type": "application/json"}, timeout=60,
                      **kwargs)


def answers(response: httpx.Response) -> list[list[tuple[str, float | None]]]:
    """Each sentence's hypotheses as (text, score), from a /translate answer."""
    assert response.status_code == 200, response.text
    result = []
    for translation in response.json()["translations"]:
        hypotheses = translation.get("hypotheses") or [{"text": translation["text"], "score": translation.get("score")}]
        assert hypotheses[0]["text"] == translation["text"]
        result.append([(h["text"], h.get("score")) for h in hypotheses])
    return result


def alone(engine, request: dict) -> list[list[tuple[str, float | None]]]:
    """What ``request`` gets from its engine decoding it alone: ``translate()`` on the model for the torch engine."""
    options = engine.options(**{k: v for k, v in request.items() if k not in ("sentences", "scores", "model")})
    if isinstance(engine, TorchEngine):
        results = translate(engine.model, engine.tokenizer, request["sentences"], scores=True,
                            **options.decoding_kwargs())
    else:
        results = engine.translate(request["sentences"], options, scores=True)
    return [[(h.text, h.score if request.get("scores") else None) for h in hypotheses] for hypotheses in results]


def concurrent_requests(url: str, model: str | None, count: int, seed: int) -> tuple[list[dict], list]:
    """``count`` requests of 1-4 sentences with options drawn from OPTIONS, sent at once by as many clients."""
    rng = random.Random(seed)
    requests = [{"sentences": rng.sample(TEXTS[:40] + ["", "j"], rng.randint(1, 4)), **rng.choice(OPTIONS)}
                for _ in range(count)]
    if model is not None:
        requests = [{**request, "model": model} for request in requests]

    async def send_all():
        async with httpx.AsyncClient(base_url=url, timeout=120,
                                     limits=httpx.Limits(max_connections=count)) as client:
            return await asyncio.gather(*(client.post("/translate", json=request) for request in requests))

    return requests, asyncio.run(send_all())


def metric(url: str, name: str) -> float:
    """The sum of a Prometheus metric's samples named ``name`` (every label set) in /metrics."""
    lines = httpx.get(f"{url}/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.split("{")[0].split(" ")[0] == name)


def statuses_counted(text: str) -> collections.Counter:
    """hf_s2s_requests_total's counts by status, summed over models, from /metrics' text."""
    counted = collections.Counter()
    for line in text.splitlines():
        if line.startswith("hf_s2s_requests_total{"):
            labels, value = line.rsplit(" ", 1)
            status = labels.split('status="')[1].split('"')[0]
            counted[int(status)] += int(float(value))
    return counted


def wait_until(condition, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def queued(url: str) -> int:
    return httpx.get(f"{url}/health").json()["queued_sentences"]


def same(got, expected) -> bool:
    """Equal texts, and scores equal to 1e-5 (None where none was asked for)."""
    return all(len(g) == len(e) and all(gt == et and (gs is None) == (es is None) and (gs is None or abs(gs - es) < 1e-5)
                                        for (gt, gs), (et, es) in zip(g, e, strict=True))
               for g, e in zip(got, expected, strict=True)) and len(got) == len(expected)


@pytest.mark.parametrize("model", ["tf", "rnn"])
def test_concurrent_requests_get_the_translations_they_get_alone(server, engines, model):
    url, _ = server
    calls_before = metric(url, "hf_s2s_batch_sentences_count")
    requests, responses = concurrent_requests(url, None if model == "tf" else model, count=24, seed=len(model))
    for request, response in zip(requests, responses, strict=True):
        assert response.json()["model"] == model
        assert same(answers(response), alone(engines[model], request)), request
    assert len({tuple(t for t, _ in hypotheses) for response in responses for hypotheses in answers(response)}) > 5
    calls = metric(url, "hf_s2s_batch_sentences_count") - calls_before
    assert calls < len(requests)  # requests shared engine calls: batching happened


@pytest.mark.parametrize(("fixture", "seed"), [("ct2_server", 3), ("onnx_server", 4)])
def test_other_engines_serve_concurrent_requests_as_they_translate_each_alone(fixture, seed, request):
    url, engine = request.getfixturevalue(fixture)
    requests, responses = concurrent_requests(url, None, count=16, seed=seed)
    for sent, response in zip(requests, responses, strict=True):
        assert same(answers(response), alone(engine, sent)), sent
    assert httpx.get(f"{url}/models").json()[0]["engine"] == engine.name
    response = post(url, {"sentences": ["a"], "alignment": True})
    assert response.status_code == 422 and f"{engine.label} gives no alignments" in response.json()["error"]
    many = [[f"w{index}", "x"] for index in range(500)]
    for option, value in (("glossary", [["a", "x"]]), ("shortlist", True), ("glossary", many)):
        response = post(url, {"sentences": ["a"], option: value})
        assert response.status_code == 422 and f"which {engine.label} does not" in response.json()["error"]
        assert len(response.content) < 600  # a glossary is named by its size and first entries, never whole


@pytest.fixture(scope="module")
def lexical_server(tmp_path_factory):
    """The torch engine serving a Transformer folder with a shortlist that keeps 3 target tokens per source token:
    (base URL, engine)."""
    folder = save_tiny_model_folder(tmp_path_factory.mktemp("lexical") / "tf", "transformer_seq2seq", seed=2)
    size = len(AutoTokenizer.from_pretrained(folder))
    VocabularyShortlist.from_candidates([[(s * k) % (size - 3) + 3 for k in (7, 3, 11)] for s in range(size)],
                                        always=[], target_vocab_size=size).save_pretrained(folder)
    engine = load_engine(folder, threads=1)
    with serve_in_thread(create_app({"tf": engine}, BATCHING, LIMITS)) as url:
        yield url, engine


LEXICAL_OPTIONS = [{}, {"shortlist": True}, {"glossary": [["a", "j i"], ["b c", "h"]]}, {"glossary": [["d", "g"]]},
                   {"glossary": [["a", "j i"]], "shortlist": True}]


def test_glossaries_and_the_shortlist_serve_what_translate_gives_alone(lexical_server):
    """Concurrent requests with per-request glossaries and the folder's shortlist, greedy and beam, each answered
    with what translate() gives them alone with the same glossary and shortlist."""
    url, engine = lexical_server
    rng = random.Random(5)
    requests = [{"sentences": rng.sample(TEXTS, rng.randint(1, 3)), "num_beams": beams, "scores": True, **options}
                for options in LEXICAL_OPTIONS for beams in (1, 3)]
    rng.shuffle(requests)

    async def send_all():
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(*(client.post(f"{url}/translate", json=r) for r in requests))

    shortlist = VocabularyShortlist.from_pretrained(engine.folder)
    for request, response in zip(requests, asyncio.run(send_all()), strict=True):
        glossary = Glossary.from_pairs(request["glossary"]) if "glossary" in request else None
        expected = translate(engine.model, engine.tokenizer, request["sentences"], num_beams=request["num_beams"],
                             glossary=glossary, shortlist=shortlist if request.get("shortlist") else None)
        assert same(answers(response), [[(h.text, h.score) for h in hypotheses] for hypotheses in expected]), request
        texts = [translation["text"] for translation in response.json()["translations"]]
        for sentence, text in zip(request["sentences"], texts, strict=True):
            for term in glossary.matches(sentence) if glossary else []:
                assert term in text  # the glossary was applied, not only passed on


def test_answer_shape_scores_nbest_and_alignment(server):
    url, _ = server
    plain = post(url, {"sentences": ["a b c", ""]}).json()
    assert set(plain) == {"model", "translations"} and plain["model"] == "tf"
    assert all(set(t) == {"text"} for t in plain["translations"]) and plain["translations"][1]["text"] == ""
    full = post(url, {"sentences": ["a b c"], "num_beams": 3, "num_return_sequences": 3, "scores": True,
                      "alignment": True}).json()["translations"][0]
    assert len(full["hypotheses"]) == 3 and full["score"] == full["hypotheses"][0]["score"]
    assert [h["score"] for h in full["hypotheses"]] == sorted((h["score"] for h in full["hypotheses"]), reverse=True)
    alignment = full["alignment"]
    assert alignment["source_tokens"][-1] == "</s>" and len(alignment["weights"]) == len(alignment["target_tokens"])
    assert all(len(row) == len(alignment["source_tokens"]) for row in alignment["weights"])


BAD_REQUESTS = {
    "malformed JSON": ('{"sentences": ["a b"', 400, "not valid JSON"),
    "a list, not an object": ("[1, 2]", 422, "valid dictionary"),
    "sentences not a list": ({"sentences": "a b c"}, 422, "sentences: Input should be a valid list"),
    "a number for a sentence": ({"sentences": ["a", 3]}, 422, "sentences.1: Input should be a valid string"),
    "a lone surrogate (no text)": ('{"sentences": ["a", "b \\ud800 c"]}', 422,
                                   "cannot be read by the model's tokenizer (counted from 1): sentence 2: a lone "
                                   "surrogate U+D800 at character 2"),
    "a body not in UTF-8": (b'{"sentences": ["\xff"]}', 400, "not valid JSON (UnicodeDecodeError"),
    "no sentences field": ({"num_beams": 2}, 422, "sentences: Field required"),
    "a boolean beam count": ({"sentences": ["a"], "num_beams": True}, 422, "num_beams: Input should be a valid int"),
    "a string for a number": ({"sentences": ["a"], "max_len_a": "1.5"}, 422, "max_len_a: Input should be"),
    "an unknown option": ({"sentences": ["a"], "nbest": 2}, 422, "nbest: Extra inputs are not permitted"),
    "no sentences": ({"sentences": []}, 422, "give at least one sentence"),
    "too many sentences": ({"sentences": ["a"] * 9}, 413, "at most 8"),
    "a sentence over the limit": ({"sentences": ["a", "b c " * 30]}, 422, "sentence 2 (61 tokens)"),
    "a body over the limit": ({"sentences": ["a" * 30_000]}, 413, "larger than the 20,000 bytes"),
    "an unknown model": ({"sentences": ["a"], "model": "de-xx"}, 404, "unknown model 'de-xx'; this server serves"),
    "n-best above beams": ({"sentences": ["a"], "num_beams": 2, "num_return_sequences": 3}, 422,
                           "num_return_sequences (3"),
    "zero beams": ({"sentences": ["a"], "num_beams": 0}, 422, "num_beams"),
    "more beams than allowed": ({"sentences": ["a"], "num_beams": 5}, 422, "at most 4 beams"),
    "a bound of 0 tokens": ({"sentences": ["a"], "max_len_a": 0, "max_len_b": 0}, 422, "0 tokens"),
    "a negative bound": ({"sentences": ["a"], "max_len_b": -1}, 422, "max_len_b"),
    "an absurd bound": ({"sentences": ["a"], "max_len_a": 1e18}, 422, "max_len_a must be <= 100"),
    "no bound and a bound": ({"sentences": ["a"], "no_length_bound": True, "max_len_b": 3}, 422, "no_length_bound"),
    "a glossary entry not a pair": ({"sentences": ["a"], "glossary": [["a", "x"], ["b", "c", "d"]]}, 422,
                                    "glossary entry 2 (counted from 1) has 3 strings"),
    "a number in a glossary": ({"sentences": ["a"], "glossary": [["a", 3]]}, 422,
                               "glossary.0.1: Input should be a valid string"),
    "a glossary term of no letters": ({"sentences": ["a"], "glossary": [["--", "x"]]}, 422,
                                      "the source term '--' has no letters or digits"),
    "an empty glossary": ({"sentences": ["a"], "glossary": []}, 422, "glossary is empty"),
    "a shortlist the folder has not": ({"sentences": ["a"], "shortlist": True}, 422,
                                       "build it with hf-s2s build-shortlist"),
    "an alignment with a glossary": ({"sentences": ["a"], "glossary": [["a", "x"]], "alignment": True}, 422,
                                     "ask for the alignment or for them"),
    "a lone surrogate in a glossary term": ('{"sentences": ["a"], "glossary": [["a", "x \\ud800"]]}', 422,
                                            "glossary entry 1 (counted from 1): the target term holds a lone surrogate "
                                            "U+D800 at character 2"),
    "a glossary term spelling a special token": ({"sentences": ["a b"], "glossary": [["a", "x </s> y"]]}, 422,
                                                 "the target term 'x </s> y' spells the special token '</s>'"),
    "a glossary term longer than the model writes": (
        {"sentences": ["a"], "glossary": [["b", "c d " * 100]]}, 422,
        "glossary entry 1 (counted from 1): the target term 'c d c d"),
    "a sentence whose terms together are too long": (
        {"sentences": ["a", "b c"], "glossary": [["b", "c d " * 35], ["c", "e f " * 35]]}, 422,  # 70 tokens each
        "sentence 2 (counted from 1) needs the target terms"),
    "an attention view with a glossary": ({"sentences": ["a"], "glossary": [["a", "x"]], "attention": {}}, 422,
                                          "ask for the alignment or for them"),
    "an attention layer the model lacks": ({"sentences": ["a"], "attention": {"layer": 7}}, 422,
                                           "layer 7 is out of range: the cross attention has 1 layer"),
    "an attention kind that is none": ({"sentences": ["a"], "attention": {"kind": "decoder"}}, 422,
                                       "attention.kind: Input should be 'cross' or 'encoder'"),
}


def test_the_search_of_an_answer_without_a_length_bound_fits_the_schema(server):
    """With no_length_bound the search has no max_len_a / max_len_b, and the answer leaves them out: the schema lets
    it (schemathesis found an answer that /openapi.json declared invalid, when they were required)."""
    url, _ = server
    answer = post(url, {"sentences": ["Ein Hund.", ""], "num_beams": 1, "no_length_bound": True, "scores": True})
    assert answer.status_code == 200
    search = answer.json()["search"]
    assert "max_len_a" not in search and "max_len_b" not in search and search["max_new_tokens"] > 0
    TranslateResponse.model_validate(answer.json())
    required = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]["Search"]["required"]
    assert "max_len_a" not in required and "max_len_b" not in required


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_input_is_a_4xx_with_a_json_message_and_the_server_goes_on(server, case):
    url, _ = server
    body, status, message = BAD_REQUESTS[case]
    response = post(url, body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"], response.json()
    assert post(url, {"sentences": ["a b"]}).status_code == 200


def test_a_chunked_body_over_the_limit_is_refused_while_read(server):
    url, _ = server
    chunks = (b'{"sentences": ["' + b"a " * 5_000 + b'"]}' for _ in range(5))  # no Content-Length
    response = httpx.post(f"{url}/translate", content=chunks, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "20,000 bytes" in response.json()["error"]


def test_a_converted_folder_serves_the_translations_it_gives_alone(tmp_path):
    """A folder hf-s2s convert wrote from an OpenNMT-py checkpoint (the converted tokenizer class, the toolkit's beam
    search in its generation config): served, each request gets the translations translate() gives it alone."""
    fixture = ROOT / "tests" / "fixtures" / "toolkits" / "opennmt_transformer"
    engine = load_engine(convert("opennmt-py", fixture / "model.pt", tmp_path / "converted"), threads=1)
    sources = (fixture / "test.de").read_text().splitlines()[:6]
    with serve_in_thread(create_app({"onmt": engine}, BATCHING)) as url:
        for request in ({"sentences": sources[:3]}, {"sentences": sources[3:], "num_beams": 1, "scores": True}):
            assert same(answers(post(url, request)), alone(engine, request)), request


@pytest.mark.parametrize("option", ["alignment", "output_attentions"])
def test_an_alignment_from_a_model_without_attention_is_refused(tmp_path, option):
    folder = save_tiny_model_folder(tmp_path / "plain", "rnn_seq2seq", attention_type="none")
    with serve_in_thread(create_app({"plain": load_engine(folder)})) as url:
        response = post(url, {"sentences": ["a"], option: True})
        assert response.status_code == 422 and "attention over the source, but" in response.json()["error"]


def test_answers_without_output_attentions_are_as_before(server, engines):
    """The answers of requests that do not name output_attentions hold exactly what they held before it existed:
    the texts of translate() and, with alignment, the three fields of alignment() for each sentence alone."""
    url, _ = server
    engine, sentences = engines["tf"], TEXTS[5:8]
    options = engine.options()
    texts = [hypotheses[0].text for hypotheses in translate(engine.model, engine.tokenizer, sentences,
                                                             **options.decoding_kwargs())]
    assert post(url, {"sentences": sentences}).json() == {"model": "tf", "translations": [{"text": text}
                                                                                           for text in texts]}
    answer = post(url, {"sentences": sentences, "alignment": True}).json()
    assert [set(t) for t in answer["translations"]] == [{"text", "alignment"}] * len(sentences)
    for sentence, text, translation in zip(sentences, texts, answer["translations"], strict=True):
        weights, source_tokens, target_tokens = alignment(
            engine.model, engine.tokenizer, sentence, num_beams=options.num_beams, max_len_a=options.max_len_a,
            max_len_b=options.max_len_b, length_penalty=options.length_penalty)
        assert translation["text"] == text
        assert set(translation["alignment"]) == {"source_tokens", "target_tokens", "weights"}
        assert (translation["alignment"]["source_tokens"], translation["alignment"]["target_tokens"]) == (
            source_tokens, target_tokens)
        torch.testing.assert_close(torch.tensor(translation["alignment"]["weights"]), weights, rtol=0, atol=1e-6)


@pytest.mark.parametrize("option", ["alignment", "output_attentions"])
def test_a_blank_sentence_gets_no_alignment_of_a_translation_it_does_not_get(server, option):
    """A blank sentence is not decoded: its translation is empty, and no alignment of some other output comes
    with it."""
    url, _ = server
    translations = post(url, {"sentences": [" ", "a b c"], option: True}).json()["translations"]
    assert translations[0] == {"text": ""} and translations[1]["alignment"]["target_tokens"]


@pytest.fixture(scope="module")
def attention_server(tmp_path_factory):
    """A Transformer of two layers of two heads each (so that a layer or head out of place shows) and the RNN with
    its Bahdanau attention, served: (base URL, engines)."""
    base = tmp_path_factory.mktemp("attention")
    engines = {"tf2": load_engine(save_tiny_model_folder(base / "tf2", "transformer_seq2seq", seed=2, encoder_layers=2,
                                                         decoder_layers=2), threads=1),
               "rnn": load_engine(save_tiny_model_folder(base / "rnn", "rnn_seq2seq", seed=1), threads=1)}
    with serve_in_thread(create_app(engines, BATCHING, LIMITS)) as url:
        yield url, engines


def generated_attentions(engine, sentence: str, num_beams: int):
    """What ``generate(output_attentions=True)`` gives for ``sentence`` decoded alone with the engine's options:
    (its best translation's ids, the cross-attention of each of its steps along its beam (layers, heads, T, S), the
    encoder's self-attention (layers, heads, S, S), None for an RNN)."""
    options = engine.options(num_beams=num_beams)
    batch = engine.tokenizer([sentence], return_tensors="pt")
    with eager_attention([engine.model]), torch.no_grad():
        output = engine.model.generate(**batch, **options.decoding_kwargs(), output_attentions=True,
                                       return_dict_in_generate=True)
    sequence = output.sequences[0]
    steps = []
    for step in range(len(sequence) - 1):  # the step that chose token step + 1
        row = 0 if num_beams == 1 else int(output.beam_indices[0, step])  # the beam the best hypothesis was on
        steps.append(torch.stack([layer[row, :, -1] for layer in output.cross_attentions[step]]))  # (layers, heads, S)
    encoder = torch.stack(output.encoder_attentions)[:, 0] if output.encoder_attentions else None
    return sequence, torch.stack(steps, dim=2), encoder


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("model", ["tf2", "rnn"])
def test_output_attentions_are_the_weights_generate_gives(attention_server, model, num_beams):
    """Every layer's and head's cross-attention of each sentence's best translation, and the Transformer's encoder
    self-attention, equal what generate(output_attentions=True) gives for that sentence alone (along the best beam),
    and the alignment's weights are the last layer's mean over heads; the tokens are the translation's."""
    url, engines = attention_server
    engine, sentences = engines[model], TEXTS[10:14]
    response = post(url, {"sentences": sentences, "model": model, "num_beams": num_beams, "output_attentions": True})
    assert response.status_code == 200, response.text
    config = engine.config
    for sentence, translation in zip(sentences, response.json()["translations"], strict=True):
        sequence, cross, encoder = generated_attentions(engine, sentence, num_beams)
        answer = translation["alignment"]
        assert translation["text"] == engine.tokenizer.decode(sequence, skip_special_tokens=True)
        assert answer["target_tokens"] == engine.tokenizer.convert_ids_to_tokens(sequence[1:].tolist())
        assert answer["source_tokens"] == engine.tokenizer.tokenize(sentence) + ["</s>"]
        layers, heads = ((config.decoder_layers, config.decoder_attention_heads) if model == "tf2" else
                         (1, config.attention_heads))
        got = torch.tensor(answer["cross_attentions"])
        assert got.shape == (layers, heads, len(sequence) - 1, len(answer["source_tokens"]))
        torch.testing.assert_close(got, cross, rtol=0, atol=1e-5)
        torch.testing.assert_close(torch.tensor(answer["weights"]), got[-1].mean(dim=0), rtol=0, atol=1e-6)
        if model == "tf2":
            assert torch.tensor(answer["encoder_attentions"]).shape == (config.encoder_layers,
                                                                        config.encoder_attention_heads,
                                                                        *encoder.shape[-2:])
            torch.testing.assert_close(torch.tensor(answer["encoder_attentions"]), encoder, rtol=0, atol=1e-5)
        else:
            assert "encoder_attentions" not in answer  # a GRU reads the source in order: no self-attention


class GatedEngine(TorchEngine):
    """Decodes once the test opens its gate (``entered`` says a batch is waiting at it), records the sentences of each
    engine call (``calls``), fails any batch holding the sentence "boom", and has a bug completing the options of a
    request with max_len_b 13 (a RuntimeError, not the ValueError of a refusal)."""

    def __init__(self, folder):
        super().__init__(folder)
        self.gate, self.entered = threading.Event(), threading.Event()
        self.calls: list[list[str]] = []

    def options(self, **options):
        if options.get("max_len_b") == 13:
            raise RuntimeError("a bug in the engine")
        return super().options(**options)

    def _translate(self, sentences, options, batch_size, scores, encoded):
        self.calls.append(list(sentences))
        self.entered.set()
        assert self.gate.wait(timeout=60)
        if "boom" in sentences:
            raise RuntimeError("the engine broke")
        return super()._translate(sentences, options, batch_size, scores, encoded)


class CountedTokenizer:
    """Counts, while active, how often each text reaches the tokenizer's class' __call__ (every engine and the server
    call it so)."""

    def __init__(self, tokenizer, monkeypatch):
        self.texts = collections.Counter()
        call = type(tokenizer).__call__

        def counted(tokenizer_self, text=None, *args, **kwargs):
            self.texts.update([text] if isinstance(text, str) else list(text or []))
            return call(tokenizer_self, text, *args, **kwargs)

        monkeypatch.setattr(type(tokenizer), "__call__", counted)


@pytest.mark.parametrize("engine_name", ["torch", "ctranslate2"])
def test_a_request_is_tokenized_once_and_the_engine_decodes_the_ids_the_server_read(folders, monkeypatch, engine_name):
    """The server reads a request's sentences with the tokenizer when it arrives (their lengths decide the limit and
    the batch) and hands those ids to the engine, which does not tokenize them again; the answer is the one the engine
    gives from the text alone."""
    if engine_name == "ctranslate2":
        pytest.importorskip("ctranslate2")
    engine = load_engine(folders["tf"], engine_name, threads=1)
    sentences = ["Ein Hund rennt.", "Zwei Kinder spielen im Park.", "Eine Frau liest."]
    expected = [hypotheses[0].text for hypotheses in engine.translate(sentences, engine.options())]
    with serve_in_thread(create_app({"tf": engine}, BATCHING, LIMITS)) as url:
        counted = CountedTokenizer(engine.tokenizer, monkeypatch)
        response = post(url, {"sentences": sentences})
    assert [translation["text"] for translation in response.json()["translations"]] == expected
    assert all(counted.texts[sentence] == 1 for sentence in sentences), counted.texts


def test_a_full_queue_is_503_and_a_failed_batch_500_for_its_requests_only(folders):
    """While the engine holds one request, a second fills the queue (4 sentences), and a third is refused."""
    engine = GatedEngine(folders["tf"]).load()
    app = create_app({"tf": engine}, BatchingConfig(max_queue_sentences=4), RequestLimits(max_sentences=4))
    with serve_in_thread(app) as url:
        answered = {}

        def send(name, sentences):
            answered[name] = post(url, {"sentences": sentences, "num_beams": 1})

        first = threading.Thread(target=send, args=("first", ["a"]))
        first.start()
        assert engine.entered.wait(timeout=30)  # the first request is being decoded, out of the queue
        second = threading.Thread(target=send, args=("second", ["a", "b", "c", "d"]))
        second.start()
        deadline = time.monotonic() + 30
        while httpx.get(f"{url}/health").json()["queued_sentences"] < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        full = post(url, {"sentences": ["e"]})
        assert full.status_code == 503 and full.headers["retry-after"] == "1"
        assert "4 sentences are waiting" in full.json()["error"]
        engine.gate.set()
        first.join()
        second.join()
        assert answered["first"].status_code == answered["second"].status_code == 200
        failed = post(url, {"sentences": ["boom"], "num_beams": 1})
        assert failed.status_code == 500 and "the engine broke" in failed.json()["error"]
        assert post(url, {"sentences": ["a"], "num_beams": 1}).status_code == 200
        assert 'hf_s2s_requests_total{model="tf",status="503"} 1.0' in httpx.get(f"{url}/metrics").text


def test_a_client_answered_by_a_batch_joins_the_requests_that_waited_during_it(folders):
    """While the engine holds request A, request B waits longer than max_wait_ms. A's client sends C as soon as A is
    answered: B and C are decoded in one engine call, because the wait counts from the end of A's batch too (counted
    from B's arrival alone, B would leave at once and C make a call of its own: the closed loop's two alternating
    half-batches)."""
    engine = GatedEngine(folders["tf"]).load()
    wait_ms = 1500
    app = create_app({"tf": engine}, BatchingConfig(max_wait_ms=wait_ms), LIMITS)
    with serve_in_thread(app) as url:
        answered = {}

        def client_a():
            answered["a"] = post(url, {"sentences": ["Ein Hund."], "num_beams": 1})
            answered["c"] = post(url, {"sentences": ["Zwei Katzen."], "num_beams": 1})

        def client_b():
            answered["b"] = post(url, {"sentences": ["Ein Mann."], "num_beams": 1})

        threads = [threading.Thread(target=client_a), threading.Thread(target=client_b)]
        threads[0].start()
        assert engine.entered.wait(timeout=30)  # A is on the engine
        threads[1].start()
        assert wait_until(lambda: queued(url) == 1)
        time.sleep(wait_ms / 1000 + 0.3)  # B has waited longer than max_wait_ms since its arrival
        engine.gate.set()
        for thread in threads:
            thread.join(timeout=60)
        assert all(answered[name].status_code == 200 for name in "abc")
        assert [sorted(call) for call in engine.calls] == [["Ein Hund."], ["Ein Mann.", "Zwei Katzen."]]


def test_a_batch_leaves_at_once_when_the_clients_the_previous_one_answered_are_back(folders):
    """A steady load does not pay the batching wait before every batch: once as many requests have arrived since the
    previous batch ended as it answered, the next one leaves without waiting out max_wait_ms (30 s here). The first
    request fills the token budget alone, so it leaves at once; its client's next request is then the one the
    batcher waits for, and would have waited the whole 30 s."""
    engine = GatedEngine(folders["tf"]).load()
    engine.gate.set()
    long_sentence, short_sentence = "Ein Mann mit Hut.", "Ein Hund."
    lengths = [len(engine.tokenizer(text)["input_ids"]) for text in (long_sentence, short_sentence)]
    assert lengths[0] > lengths[1]
    wait_ms = 30_000
    app = create_app({"tf": engine}, BatchingConfig(max_wait_ms=wait_ms, max_batch_tokens=lengths[0]), LIMITS)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=120) as client:
        answers, seconds = [], []
        for sentence in (long_sentence, short_sentence):
            start = time.monotonic()
            answers.append(client.post("/translate", json={"sentences": [sentence], "num_beams": 1}))
            seconds.append(time.monotonic() - start)
    assert [answer.status_code for answer in answers] == [200, 200], [answer.text for answer in answers]
    assert engine.calls == [[long_sentence], [short_sentence]]
    assert seconds[1] < wait_ms / 1000 / 2, seconds  # it did not wait out max_wait_ms


def test_connections_the_server_accepts_send_without_waiting_for_acknowledgements():
    """The server's listening socket names TCP, so that asyncio, which uvicorn serves on, turns Nagle's algorithm off
    on each connection it accepts. With protocol 0 it stayed on, and an answer written in two parts (headers, then
    body) waited for the client's delayed acknowledgement: about 40 ms between a keep-alive client's requests,
    which split the load benchmark's closed loop into alternating half-batches."""

    async def accepted_nodelay() -> int:
        loop = asyncio.get_running_loop()
        sock = bind_socket("127.0.0.1", 0)
        accepted = loop.create_future()

        class Accepted(asyncio.Protocol):
            def connection_made(self, transport):
                connection = transport.get_extra_info("socket")
                accepted.set_result(connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = await loop.create_server(Accepted, sock=sock)  # as uvicorn starts on the socket it is given
        try:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            value = await asyncio.wait_for(accepted, timeout=30)
            writer.close()
            return value
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted_nodelay()) != 0


def test_metrics_count_every_answer_by_the_status_the_client_received(folders):
    """A known mix of answers, each from another layer (the body size limit, FastAPI's parsing and validation, the
    handler's checks, the tokenizer, a failed batch, a bug): /metrics counts each status as often as the clients got
    it, and every answer is JSON."""
    engine = GatedEngine(folders["tf"]).load()
    engine.gate.set()
    app = create_app({"tf": engine}, BATCHING, LIMITS)
    with serve_in_thread(app) as url:
        chunked = (b'{"sentences": ["' + b"a " * 5_000 + b'"]}' for _ in range(5))
        responses = [post(url, {"sentences": ["a b"]}), post(url, {"sentences": ["c"], "num_beams": 2}),
                     post(url, '{"sentences": ['), post(url, b'{"sentences": ["\xff"]}'),
                     post(url, {"sentences": "a"}), post(url, {"sentences": ["a"], "nbest": 2}),
                     post(url, {"sentences": ["a"], "num_beams": 0}), post(url, '{"sentences": ["\\udfff"]}'),
                     post(url, {"sentences": ["a" * 30_000]}), post(url, {"sentences": ["a"] * 9}),
                     httpx.post(f"{url}/translate", content=chunked, headers={"content-type": "application/json"}),
                     post(url, {"sentences": ["a"], "model": "xx"}), httpx.get(f"{url}/translate"),
                     post(url, {"sentences": ["boom"]}), post(url, {"sentences": ["a"], "max_len_b": 13})]
        assert all(response.headers["content-type"] == "application/json" for response in responses)
        received = collections.Counter(response.status_code for response in responses)
        assert received == {200: 2, 400: 2, 422: 4, 413: 3, 404: 1, 405: 1, 500: 2}, received
        assert "a bug in the engine" in responses[-1].json()["error"]
        text = httpx.get(f"{url}/metrics").text
        assert statuses_counted(text) == received
        # the model's name where the handler chose the model, empty where the body was refused before
        assert 'hf_s2s_requests_total{model="tf",status="422"} 2.0' in text
        assert 'hf_s2s_requests_total{model="",status="413"} 2.0' in text


def hang_up_later(url: str, body: dict) -> socket.socket:
    """A client that sends a /translate request and keeps its connection open without reading: close the socket to
    hang up."""
    address = httpx.URL(url)
    payload = json.dumps(body).encode()
    sock = socket.create_connection((address.host, address.port))
    sock.sendall(b"POST /translate HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%b" % (address.host.encode(), len(payload), payload))
    return sock


def test_a_request_whose_client_hung_up_is_not_decoded_and_does_not_delay_the_next(folders):
    """A holds the engine at its gate; B (beam search) and then C (greedy) wait in the queue, and B's client hangs up.
    B leaves the queue at once, while the engine is still busy; once the gate opens, the engine's next call is C's,
    as if B had never come (oldest first, B would have had a call of its own before C). /metrics counts B under
    status 499 and its sentence nowhere among the decoded ones."""
    engine = GatedEngine(folders["tf"]).load()
    app = create_app({"tf": engine}, BATCHING, LIMITS)
    with serve_in_thread(app) as url:
        answered = {}

        def send(name, body):
            answered[name] = post(url, body)

        first = threading.Thread(target=send, args=("A", {"sentences": ["a"], "num_beams": 1}))
        first.start()
        assert engine.entered.wait(timeout=30)
        client = hang_up_later(url, {"sentences": ["b c"], "num_beams": 2})
        assert wait_until(lambda: queued(url) == 1)
        last = threading.Thread(target=send, args=("C", {"sentences": ["d e"], "num_beams": 1}))
        last.start()
        assert wait_until(lambda: queued(url) == 2)
        client.close()
        try:
            assert wait_until(lambda: queued(url) == 1, timeout=10), "B is still queued after its client hung up"
        finally:
            engine.gate.set()
            first.join()
            last.join()
        assert answered["A"].status_code == answered["C"].status_code == 200
        assert engine.calls == [["a"], ["d e"]]
        text = httpx.get(f"{url}/metrics").text
        assert 'hf_s2s_requests_total{model="tf",status="499"} 1.0' in text
        assert statuses_counted(text) == {200: 2, 499: 1}
        assert metric(url, "hf_s2s_batch_sentences_sum") == 2  # a, and d e: b c never decoded


def test_requests_cut_off_at_shutdown_are_answered_503_in_json_and_counted(folders):
    """With a graceful timeout of 0, A (held on the engine at its gate) and B, C (queued) are answered 503 in JSON as
    the server stops; B and C are never decoded, and the metrics count the three 503s."""
    engine = GatedEngine(folders["tf"]).load()
    app = create_app({"tf": engine}, BATCHING, LIMITS)
    answered, clients = {}, []

    def send(url, name, body):
        answered[name] = post(url, body)

    def open_gate_once_answered():  # the engine call in progress ends only then, and the server's exit waits for it
        for client in clients:
            client.join(timeout=60)
        engine.gate.set()

    with serve_in_thread(app, graceful_timeout=0) as url:
        try:
            for name, sentences in (("A", ["a"]), ("B", ["b c"]), ("C", ["d"])):
                clients.append(threading.Thread(target=send, args=(url, name, {"sentences": sentences})))
                clients[-1].start()
                assert engine.entered.wait(timeout=30)
            assert wait_until(lambda: queued(url) == 2)
        finally:  # the server stops as this block ends
            threading.Thread(target=open_gate_once_answered).start()
    for name in "ABC":
        response = answered[name]
        assert response.status_code == 503 and response.headers["content-type"] == "application/json", response.text
        assert "retry" in response.json()["error"]
    assert engine.calls == [["a"]]
    assert statuses_counted(app.state.metrics.exposition().decode()) == {503: 3}


def test_a_request_still_sending_its_body_at_shutdown_is_answered_503_in_json(engines):
    """The application waits for a body (uvicorn's "100 Continue" says so) when the server stops: uvicorn cancels it
    past the graceful timeout, and it is answered 503 in JSON, not with uvicorn's 500 text/plain."""
    app = create_app({"tf": engines["tf"]}, BATCHING, LIMITS)
    with serve_in_thread(app, graceful_timeout=0) as url:
        address = httpx.URL(url)
        sock = socket.create_connection((address.host, address.port), timeout=60)
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 20\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 ")
    answer = b""  # the server has stopped: its answer, then the end of the connection
    while chunk := sock.recv(65536):
        answer += chunk
    sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"content-type: application/json" in head.lower(), answer
    assert "retry" in json.loads(body)["error"]
    assert statuses_counted(app.state.metrics.exposition().decode()) == {503: 1}


def test_health_models_metrics_and_openapi_docs(server):
    url, _ = server
    post(url, {"sentences": ["a b c", "d"], "model": "rnn"})
    assert httpx.get(f"{url}/health").json() == {"status": "ok", "models": ["tf", "rnn"], "queued_sentences": 0}
    models = httpx.get(f"{url}/models").json()
    assert [(m["name"], m["default"], m["model_type"], m["engine"], m["attention_type"]) for m in models] == [
        ("tf", True, "transformer_seq2seq", "torch", None), ("rnn", False, "rnn_seq2seq", "torch", "bahdanau")]
    assert [m["folder"] for m in models] == ["tf", "rnn"]  # served from absolute paths: their last component only
    text = httpx.get(f"{url}/metrics").text
    for name in ('hf_s2s_requests_total{model="rnn",status="200"}', 'hf_s2s_sentences_total{model="rnn"}',
                 'hf_s2s_source_tokens_total{model="rnn"}', 'hf_s2s_target_tokens_total{model="rnn"}',
                 'hf_s2s_request_latency_seconds_bucket{le="0.1",model="rnn"}',
                 'hf_s2s_batch_sentences_bucket{le="2.0",model="rnn"}', 'hf_s2s_batch_padded_tokens_count{model="rnn"}',
                 'hf_s2s_queue_sentences{model="rnn"} 0.0', 'hf_s2s_queue_requests{model="rnn"} 0.0'):
        assert name in text, name
    assert metric(url, "hf_s2s_sentences_total") >= 2
    docs = httpx.get(f"{url}/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    schema = httpx.get(f"{url}/openapi.json").json()
    assert {"/translate", "/health", "/models", "/metrics"} <= set(schema["paths"])
    request = schema["components"]["schemas"]["TranslateRequest"]["properties"]
    assert "num_return_sequences" in request and request["output_attentions"]["default"] is False


def test_models_names_each_folder_as_the_server_was_started_with_it(folders, tmp_path, monkeypatch):
    """No client learns where the server keeps its files: a folder given as an absolute path is named by its last
    component, a relative one as given; --show-folder-paths (show_folder_paths) gives the absolute paths."""
    monkeypatch.chdir(folders["rnn"].parent)
    engines = {"tf": open_engine(folders["tf"]), "rnn": open_engine("rnn")}  # absolute, and relative to the cwd
    for show, expected in ((False, ["tf", "rnn"]), (True, [str(folders["tf"]), str(folders["rnn"])])):
        with serve_in_thread(create_app(engines, BATCHING, LIMITS, show_folder_paths=show)) as url:
            assert [model["folder"] for model in httpx.get(f"{url}/models").json()] == expected


@pytest.mark.slow  # a process of its own
def test_files_changed_under_a_running_server_neither_stop_it_nor_are_used_damaged(tmp_path):
    """The shortlist and the weights, truncated in place and rewritten while `hf-s2s serve` runs: the process goes on
    answering with the files it read (nothing of them is memory-mapped, where a truncated page is a SIGBUS), a
    damaged shortlist is not used (a warning says so), and a valid new shortlist is used from the next request."""
    folder = save_tiny_model_folder(tmp_path / "tf", "transformer_seq2seq", seed=2)
    size = len(AutoTokenizer.from_pretrained(folder))
    narrow = VocabularyShortlist.from_candidates([[(s * k) % (size - 3) + 3 for k in (7, 3, 11)] for s in range(size)],
                                                 always=[], target_vocab_size=size)
    narrow.save_pretrained(folder)
    engine = load_engine(folder, threads=1)  # what the server decodes with, read before any file changes
    body = {"sentences": TEXTS[:3], "num_beams": 2, "shortlist": True}
    expected = [[(h.text, None)] for h, *_ in translate(engine.model, engine.tokenizer, TEXTS[:3], num_beams=2,
                                                         shortlist=narrow)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process, url = start_server_process([str(folder)], tmp_path, env=env)
    try:
        assert answers(post(url, body)) == expected
        with open(folder / SHORTLIST_FILE, "r+b") as file:  # in place: the same inode, shorter
            file.truncate(64)
        assert answers(post(url, body)) == expected and process.poll() is None
        with open(folder / "model.safetensors", "r+b") as file:
            file.truncate(1000)
        assert answers(post(url, body)) == expected and process.poll() is None
        assert answers(post(url, {**body, "shortlist": False})) != expected  # the shortlist is still applied
        everything = VocabularyShortlist.from_candidates([[]] * size, always=range(size), target_vocab_size=size)
        everything.save_pretrained(folder)  # a valid new one: holding every token, it decodes as without one
        assert answers(post(url, body)) == answers(post(url, {**body, "shortlist": False}))
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=60)
    assert f"{folder / SHORTLIST_FILE} changed and cannot be used" in errors


def without_generation_config(folder: Path, copy: Path) -> Path:
    """A copy of ``folder`` without generation_config.json, as written by hand with save_pretrained of the
    config and weights alone."""
    shutil.copytree(folder, copy)
    (copy / "generation_config.json").unlink()
    return copy


def drop_end_token(folder: Path) -> None:
    """No generation_config.json and a config.json without eos_token_id: the generation config transformers
    builds from it names no end token."""
    (folder / "generation_config.json").unlink()
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "eos_token_id": None}))


def test_serve_command_refuses_folders_it_cannot_serve_in_one_line(folders, tmp_path):
    """Folders written by someone else: a damaged JSON file, a generation config (or, without one, the
    config.json transformers builds it from) without the tokens generate() needs, a default beam count over
    --max-beams. Each is one error line naming the file or option; the host cannot be listened on, so a folder
    that is not refused fails the test at once instead of serving."""
    broken = {}
    for name, change in [("no_end_token_in_config", drop_end_token),
                         ("damaged_generation_config", lambda f: (f / "generation_config.json").write_text('{"a": ')),
                         ("config_a_list", lambda f: (f / "config.json").write_text("[]")),
                         ("damaged_tokenizer", lambda f: (f / "tokenizer.json").write_text("xx")),
                         ("no_start_token", lambda f: (f / "generation_config.json").write_text('{"eos_token_id": 2}')),
                         ("three_beams", lambda f: (f / "generation_config.json").write_text(json.dumps(
                             {**json.loads((f / "generation_config.json").read_text()), "num_beams": 3})))]:
        broken[name] = save_tiny_model_folder(tmp_path / name, "transformer_seq2seq")
        change(broken[name])
    for arguments, named in [([str(broken["no_end_token_in_config"])], "config.json names no eos_token_id"),
                             ([str(broken["damaged_generation_config"])], "generation_config.json is not valid JSON"),
                             ([str(broken["config_a_list"])], "config.json holds a JSON list, not an object"),
                             ([str(broken["damaged_tokenizer"])], "tokenizer.json is not valid JSON"),
                             ([str(broken["no_start_token"])], "names no decoder_start_token_id"),
                             ([str(broken["three_beams"]), "--max-beams", "2"], "decodes with 3 beams by default")]:
        with pytest.raises(SystemExit) as exit_info:
            run_command("serve", [*arguments, "--host", "256.0.0.1", "--port", "0"])
        assert str(exit_info.value.code).startswith("error: ") and named in str(exit_info.value.code), arguments


def test_a_folder_without_generation_config_is_served_as_with_the_default_one(folders, engines, tmp_path):
    """serve decodes a folder without generation_config.json as hf-s2s translate does, with the family's
    defaults (it refused such folders; transformers' generic max_length would cut every translation at 19
    tokens): what the command checks lets it pass, and each request gets the translations of the folder with
    its generation config."""
    folder = without_generation_config(folders["tf"], tmp_path / "tf")
    check_model_folder(folder)  # what the command checks before loading
    sentences = [" ".join("abcdefghij"[(i * k) % 10] for k in range(30)) for i in (1, 3)]  # 30 words each
    with serve_in_thread(create_app({"tf": load_engine(folder, threads=1)}, BATCHING, LIMITS)) as url:
        served = answers(post(url, {"sentences": sentences, "scores": True}))
    assert served == alone(engines["tf"], {"sentences": sentences, "scores": True})
    tokenizer = engines["tf"].tokenizer
    assert max(len(tokenizer(hypotheses[0][0]).input_ids) for hypotheses in served) > 20


def test_serve_command_refuses_bad_options_in_one_line(folders, tmp_path):
    tf, rnn = str(folders["tf"]), str(folders["rnn"])
    for arguments, named in [([rnn, "--engine", "ctranslate2"], "Transformer family only"),
                             ([f"a={tf}", f"a={rnn}"], "two models are named 'a'"),
                             ([tf, "--port", "70000"], "--port"),
                             ([tf, "--max-wait-ms", "-1"], "max_wait_ms (--max-wait-ms)"),
                             ([tf, "--max-sentences", "2000"], "max_queue_sentences"),
                             ([str(tmp_path / "missing")], "missing"),
                             ([tf, "--int8", "--dtype", "bfloat16"], "--int8")]:
        if "ctranslate2" in arguments:
            pytest.importorskip("ctranslate2")
        with pytest.raises(SystemExit) as exit_info:
            run_command("serve", arguments)
        assert str(exit_info.value.code).startswith("error: ") and named in str(exit_info.value.code), arguments


@pytest.mark.slow  # a process of its own: importing torch and transformers takes seconds
def test_sigterm_lets_the_request_in_flight_finish(folders, tmp_path):
    """The request waits in the queue (max_wait_ms 3000) when SIGTERM arrives: it is still answered, then the
    process ends and the port takes no more requests."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process, url = start_server_process([f"tf={folders['tf']}", "--max-wait-ms", "3000"], tmp_path, env=env)
    try:
        waiting = {}
        request = threading.Thread(target=lambda: waiting.update(response=post(url, {"sentences": ["a b", "c"]})))
        request.start()
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/health").json()["queued_sentences"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        request.join(timeout=60)
        assert len(answers(waiting["response"])) == 2
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once shut down
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/health")
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow  # a process of its own per signal
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_requests_wait_answers_each_in_json(folders, tmp_path, signal_number):
    """--graceful-timeout 0, requests decoded one at a time: the signal arrives while most wait in the queue. Each is
    answered, 200 where it was translated before, else 503 in JSON (never uvicorn's 500 text/plain), the process
    ends, and Ctrl-C ends it with the shell's status for it, without a traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process, url = start_server_process([f"tf={folders['tf']}", "--graceful-timeout", "0", "--no-batching"],
                                        tmp_path, env=env)
    body = {"sentences": TEXTS[:8], "num_beams": 4, "no_length_bound": True}

    async def send_and_signal():
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=20)) as client:
            requests = [asyncio.ensure_future(client.post("/translate", json=body)) for _ in range(12)]
            deadline = time.monotonic() + 60
            while (await client.get("/health")).json()["queued_sentences"] < 80:  # 10 of 12 wait: all were read
                assert time.monotonic() < deadline, "the requests did not reach the queue"
                await asyncio.sleep(0.02)
            process.send_signal(signal_number)
            return await asyncio.gather(*requests, return_exceptions=True)

    try:
        responses = asyncio.run(send_and_signal())
        assert all(isinstance(response, httpx.Response) for response in responses), responses
        assert all(response.headers["content-type"] == "application/json" for response in responses), \
            [response.text for response in responses]
        statuses = collections.Counter(response.status_code for response in responses)
        assert set(statuses) <= {200, 503} and statuses[503] >= 2, statuses
        assert all("retry" in response.json()["error"] for response in responses if response.status_code == 503)
        status = process.wait(timeout=120)
        assert status in ((0, -signal.SIGTERM) if signal_number == signal.SIGTERM else (130,)), status
        assert "Traceback" not in process.stderr.read()
    finally:
        process.kill()
        process.wait()
