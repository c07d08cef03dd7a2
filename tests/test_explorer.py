"""The attention explorer, the page `hf-s2s serve` serves at `/`, and the API it calls (hf_s2s/serving/explorer.py:
one attention map per hypothesis, POST /score for forced decoding and other views).

The API is checked in-process against hf_s2s.inference (the maps of each n-best hypothesis, given translations'
scores, the refusals). The page is used as a person uses it: headless Chromium (Selenium and ChromeDriver,
tests/browser.py; one browser for the module) against `hf-s2s serve` running as its own process on a free localhost
port, with two tiny models trained by the training job (a Transformer of two layers of two heads, a GRU with Bahdanau
attention), and an RNN without attention. What it shows is checked against the command line and the API: its
translations and n-best lists are those of `hf-s2s translate`; each map holds the API's weights (each layer and head,
the mean of the heads, the encoder's self-attention, each n-best hypothesis', the user's own translation's); its
exports hold the same numbers and labels; a link restores what was on screen; a refused request shows the server's
own message. It is readable at any size (a 40 x 40 map keeps its labels and readout in view; a phone's page is never
wider than its screen), usable from the keyboard and at 200% zoom, and its screenshots are not blank.

The browser tests skip, saying why, only where no Chromium with its ChromeDriver can be installed; .ci/run installs
Debian's."""

import contextlib
import csv
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import numpy
import pytest
import torch
from PIL import Image

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from hf_s2s.cli import run_command  # noqa: E402
from hf_s2s.inference.attention_maps import AttentionMap, attention_map, hard_alignment, pharaoh  # noqa: E402
from hf_s2s.inference.engines import load_engine  # noqa: E402
from hf_s2s.inference.forced import force_decode  # noqa: E402
from hf_s2s.serving.app import EXPLORER_FILES, EXPLORER_POLICY, create_app  # noqa: E402
from hf_s2s.serving.config import RequestLimits  # noqa: E402
from hf_s2s.serving.server import serve_in_thread  # noqa: E402
from tests.browser import ExplorerPage, Keys, chromium, emulate, missing_browser, pixel_spread  # noqa: E402
from tests.runs import train_tiny_folder  # noqa: E402
from tests.saved_folders import save_tiny_model_folder  # noqa: E402
from tests.server_process import start_server_process  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# reversal sources the models were not trained on all of, of several lengths
SENTENCES = ["c a f h", "j i b e d", "g c"]


def api(url: str, body: dict, path: str = "translate") -> httpx.Response:
    return httpx.post(f"{url}/{path}", json=body, timeout=120)


def assert_weights_equal(drawn: list[list[float]], expected: list[list[float]], tolerance: float = 0.0) -> None:
    assert len(drawn) == len(expected) and all(len(row) == len(want) for row, want in zip(drawn, expected, strict=True))
    worst = max(abs(got - want) for row, want_row in zip(drawn, expected, strict=True)
                for got, want in zip(row, want_row, strict=True))
    assert worst <= tolerance, worst


def mean_of_heads(heads: list[list[list[float]]]) -> list[list[float]]:
    return [[sum(head[r][c] for head in heads) / len(heads) for c in range(len(heads[0][0]))]
            for r in range(len(heads[0]))]


def test_the_page_and_its_files_come_from_the_package_and_name_no_other_host(tmp_path):
    """`/` is the package's index.html with a Content-Security-Policy that allows this server only; its modules, style
    sheet and icon are served beside it (and /favicon.ico); no file of the page names another host; a missing file
    is a 404 in JSON, as every refusal of the server is."""
    engine = load_engine(save_tiny_model_folder(tmp_path / "tf", "transformer_seq2seq"), threads=1)
    with serve_in_thread(create_app({"tf": engine})) as url:
        page = httpx.get(f"{url}/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.text == (EXPLORER_FILES / "index.html").read_text()
        assert page.headers["content-security-policy"] == EXPLORER_POLICY and "default-src 'self'" in EXPLORER_POLICY
        links = re.findall(r'(?:src|href)="([^"]*)"', page.text)
        assert sorted(links) == ["static/explorer.css", "static/explorer.js", "static/favicon.svg"]
        imported = {name for path in EXPLORER_FILES.glob("*.js")
                    for name in re.findall(r'from "\./([\w.]+)"', path.read_text())}
        assert imported == {path.name for path in EXPLORER_FILES.glob("*.js")} - {"explorer.js"}
        for name in sorted(imported | {"explorer.js", "explorer.css", "favicon.svg"}):
            served = httpx.get(f"{url}/static/{name}")
            kind = {"js": "javascript", "css": "text/css", "svg": "image/svg+xml"}[name.rsplit(".", 1)[1]]
            assert served.status_code == 200 and kind in served.headers["content-type"], name
            assert served.text == (EXPLORER_FILES / name).read_text()
        icon = httpx.get(f"{url}/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
        missing = httpx.get(f"{url}/static/missing.js")
        assert missing.status_code == 404 and missing.json() == {"error": "Not Found"}
    for path in EXPLORER_FILES.iterdir():
        assert not re.search(r"\b(https?:)?//[\w.-]+\.\w", path.read_text().replace("http://www.w3.org/2000/svg", "")), \
            f"{path.name} names another host"
        assert "@import" not in path.read_text() and "innerHTML" not in path.read_text()


# ----------------------------------------------------------------------------------------- the API the page uses


@pytest.fixture(scope="module")
def api_server(tmp_path_factory):
    """A Transformer of two layers of two heads and a Bahdanau GRU, random, served in a thread: (URL, engines)."""
    base = tmp_path_factory.mktemp("explorer_api")
    engines = {"tf": load_engine(save_tiny_model_folder(base / "tf", "transformer_seq2seq", seed=3, encoder_layers=2,
                                                        decoder_layers=2), threads=1),
               "rnn": load_engine(save_tiny_model_folder(base / "rnn", "rnn_seq2seq", seed=1), threads=1),
               "plain": load_engine(save_tiny_model_folder(base / "plain", "rnn_seq2seq", attention_type="none"),
                                    threads=1)}
    with serve_in_thread(create_app(engines, limits=RequestLimits(max_sentences=6, max_sentence_tokens=30))) as url:
        yield url, engines


@pytest.mark.parametrize(("model", "num_beams", "nbest", "view"), [
    ("tf", 3, 2, {}), ("tf", 1, 1, {"kind": "encoder", "layer": 0, "head": 1}),
    ("tf", 2, 2, {"layer": 0, "word_level": True}), ("rnn", 2, 2, {}),
])
def test_translate_sends_each_hypothesis_the_one_map_asked_for(api_server, model, num_beams, nbest, view):
    """Each hypothesis (the n-best list's too) comes with its tokens, their log-probabilities and one map: the one
    asked for, as hf_s2s.inference reads it from that hypothesis; every layer and head is not sent."""
    url, engines = api_server
    engine, sentences = engines[model], ["a b c d", " ", "e f g h i j"]
    body = {"sentences": sentences, "model": model, "num_beams": num_beams, "num_return_sequences": nbest,
            "scores": True, "attention": view}
    answer = api(url, body).json()
    options = engine.options(num_beams=num_beams, num_return_sequences=nbest)
    forced = engine.force_hypotheses(sentences, options)
    assert answer["engine"] == "torch float32" and answer["search"]["num_beams"] == num_beams
    assert answer["search"]["score"].startswith("greedy search" if num_beams == 1 else "beam search")
    blank = answer["translations"][1]
    assert blank == {"text": "", "score": 0.0} or blank.get("attention") is None  # not decoded: no map
    for index in (0, 2):
        translation = answer["translations"][index]
        hypotheses = translation.get("hypotheses") or [translation]
        assert len(hypotheses) == nbest
        for hypothesis, pair in zip(hypotheses, forced[index], strict=True):
            expected = attention_map(pair, engine.tokenizer, kind=view.get("kind", "cross"), layer=view.get("layer"),
                                     head=view.get("head"), word_level=view.get("word_level", False))
            shown = hypothesis["attention"]
            assert set(shown) - {"head", "row_log_probs"} == {"kind", "layer", "layers", "heads", "word_level", "rows",
                                                            "columns", "row_special", "column_special", "weights"}
            assert (shown["rows"], shown["columns"]) == (expected.rows, expected.columns)
            assert_weights_equal(shown["weights"], expected.weights.tolist(), 1e-5)
            assert hypothesis["tokens"] == pair.target_tokens
            assert hypothesis["token_log_probs"] == pytest.approx(pair.token_log_probs, abs=1e-5)
            assert engine.tokenizer.decode(pair.target_ids, skip_special_tokens=True) == hypothesis["text"]
        assert translation["attention"] == hypotheses[0]["attention"]
    every = api(url, {**body, "attention": None, "output_attentions": True}).json()["translations"][0]
    if view.get("kind", "cross") == "cross" and not view.get("word_level"):  # the same numbers as every layer's
        layer = view.get("layer", -1)
        heads = every["alignment"]["cross_attentions"][layer]
        expected = heads[view["head"]] if "head" in view else mean_of_heads(heads)
        assert_weights_equal(answer["translations"][0]["attention"]["weights"], expected, tolerance=1e-5)


def test_score_reads_given_translations_and_any_view_of_a_hypothesis(api_server):
    """POST /score reads given translations (texts, or a hypothesis' own tokens) under teacher forcing: what
    force_decode gives, and, for a hypothesis' tokens, exactly the map the translate answer held for it."""
    url, engines = api_server
    engine = engines["tf"]
    sources, targets = ["a b c", "d e f g"], ["c b a", "g f e d x"]
    scored = api(url, {"sentences": sources, "targets": targets, "model": "tf", "attention": {"layer": 1}},
                 path="score").json()
    forced = force_decode(engine.model, engine.tokenizer, sources, targets, output_attentions=True)
    for answer, pair in zip(scored["scores"], forced, strict=True):
        assert answer["target_tokens"] == pair.target_tokens and answer["source_tokens"] == pair.source_tokens
        assert answer["token_log_probs"] == pytest.approx(pair.token_log_probs, abs=1e-5)
        assert answer["score"] == pytest.approx(pair.score, abs=1e-4)
        assert_weights_equal(answer["attention"]["weights"],
                             attention_map(pair, engine.tokenizer, layer=1).weights.tolist(), 1e-5)
    translated = api(url, {"sentences": ["h i j"], "model": "tf", "num_beams": 3, "num_return_sequences": 3,
                           "attention": {"layer": 0, "head": 1}}).json()["translations"][0]
    for hypothesis in translated["hypotheses"]:
        again = api(url, {"sentences": ["h i j"], "target_tokens": [hypothesis["tokens"]], "model": "tf",
                          "attention": {"layer": 0, "head": 1}}, path="score").json()["scores"][0]
        assert_weights_equal(again["attention"]["weights"], hypothesis["attention"]["weights"], 1e-5)
        assert again["token_log_probs"] == pytest.approx(hypothesis["token_log_probs"], abs=1e-5)
    plain = api(url, {"sentences": ["a"], "targets": ["b"], "model": "plain"}, path="score").json()["scores"][0]
    assert "attention" not in plain and len(plain["token_log_probs"]) == len(plain["target_tokens"])


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"sentences": ["a"], "targets": ["b"], "target_tokens": [["▁b"]]}, 422, "give the translations as targets"),
    ({"sentences": ["a", "b"], "targets": ["b"]}, 422, "2 sentences and 1 translations"),
    ({"sentences": ["a"], "target_tokens": [["▁b", "zz-not-a-token"]]}, 422,
     "translation 1 (counted from 1): 'zz-not-a-token' is not a token of the target vocabulary"),
    ({"sentences": ["a"], "target_tokens": [[]]}, 422, "no tokens; give at least </s>"),
    ({"sentences": ["a"], "targets": ["b c " * 20]}, 422, "translation 1 (counted from 1) has 41 tokens; this server "
                                                          "reads at most 30"),
    ({"sentences": ["a", "b c " * 20], "targets": ["a", "b"]}, 422, "sentence 2 (41 tokens)"),
    ({"sentences": ["a"] * 7, "targets": ["a"] * 7}, 413, "7 sentences in one request; this server takes at most 6"),
    ({"sentences": [], "targets": []}, 422, "sentences is empty"),
    ({"sentences": ["a"], "targets": ["b"], "model": "rnn", "attention": {"kind": "encoder"}}, 422,
     "has no encoder self-attention"),
    ({"sentences": ["a"], "targets": ["b"], "model": "plain", "attention": {}}, 422,
     "reads the decoder's attention over the source"),
    ({"sentences": ["a"], "targets": ["b"], "attention": {"head": 2}}, 422, "head 2 is out of range"),
    ({"sentences": ["a"], "targets": ["b"], "model": "xx"}, 404, "unknown model 'xx'"),
    ({"sentences": ["a"], "targets": ["b"], "nbest": 2}, 422, "nbest: Extra inputs are not permitted"),
])
def test_score_refuses_by_name_before_reading(api_server, body, status, message):
    url, _ = api_server
    answer = api(url, body, path="score")
    assert answer.status_code == status and message in answer.json()["error"], answer.text


def test_models_name_the_maps_and_limits_a_page_can_show(api_server):
    url, _ = api_server
    models = {model["name"]: model for model in httpx.get(f"{url}/models").json()}
    assert models["tf"]["attention"] == {"cross": [2, 2], "encoder": [2, 2]}
    assert models["rnn"]["attention"] == {"cross": [1, 1]} and models["plain"]["attention"] == {}
    assert {(m["max_sentence_tokens"], m["max_sentences"], m["max_beams"]) for m in models.values()} == {(30, 6, 16)}


# ------------------------------------------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The two served folders: name -> trained model folder."""
    base = tmp_path_factory.mktemp("explorer")
    return {"tf": train_tiny_folder(base / "tf", "transformer_seq2seq", encoder_layers=2, decoder_layers=2),
            "rnn": train_tiny_folder(base / "rnn", "rnn_seq2seq")}


@pytest.fixture(scope="module")
def server(trained, tmp_path_factory):
    """`hf-s2s serve tf=... rnn=... plain=...` as a process of its own (plain: an RNN without attention, untrained):
    its base URL."""
    reason = missing_browser()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("server")
    folders = {**trained, "plain": save_tiny_model_folder(work / "plain", "rnn_seq2seq", attention_type="none")}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process, url = start_server_process([f"{name}={folder}" for name, folder in folders.items()], work, env=env)
    try:
        yield url
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(server, downloads):
    """One headless Chromium for the module's tests (each test sets the viewport it needs)."""
    with chromium(downloads=downloads) as driver:
        yield driver


@pytest.fixture
def page(browser, server):
    emulate(browser, 1280, 1000)
    return ExplorerPage(browser, server).open()


def cli_translations(folder: Path, sentences: list[str], *options: str) -> list[str]:
    """What `hf-s2s translate FOLDER` prints for ``sentences`` (given on standard input's stead, as a file)."""
    source = folder.parent / "explorer_input.txt"
    source.write_text("\n".join(sentences) + "\n")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run_command("translate", [str(folder), "--input", str(source), *options]) == 0
    return printed.getvalue().splitlines()


def console_errors(driver) -> list[str]:
    """The page's console errors since the last call (a failed load, a script error)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


@pytest.mark.browser
@pytest.mark.slow
def test_typed_sentences_show_the_translate_commands_translations_and_the_apis_weights(page, server, trained):
    """The cards hold the translate command's translations, numbered from 1 (a blank line's card says it is blank,
    with no score), name model, engine and search and say what the score is; each map holds the API's weights for
    the layer and head chosen (the mean of the heads, the encoder's self-attention), and switching between the
    decoder's and the encoder's attention keeps the layer and head."""
    lines = [SENTENCES[0], " ", *SENTENCES[1:]]
    page.translate(lines, model="tf")
    assert page.error() is None and console_errors(page.driver) == []
    shown = page.results()
    assert [card["title"] for card in shown] == ["Sentence 1", "Sentence 2 (blank line)", "Sentence 3", "Sentence 4"]
    assert shown[1]["text"] is None and shown[1]["score"] is None  # no card of an invented translation
    shown = [shown[0], *shown[2:]]
    assert [card["text"] for card in shown] == cli_translations(trained["tf"], SENTENCES)
    assert len({card["text"] for card in shown}) == len(SENTENCES)  # a model that translates, not one token
    assert all(card["meta"].startswith("tf · transformer_seq2seq · torch float32 · greedy search") for card in shown)
    assert shown[0]["help"] == "Score: greedy search: the sum of the token log-probabilities (natural log), </s> " \
        "included."
    answer = api(server, {"sentences": SENTENCES, "model": "tf", "scores": True, "output_attentions": True}).json()
    for index, translation in zip((0, 2, 3), answer["translations"], strict=True):
        alignment = translation["alignment"]
        assert shown[(0, None, 1, 2)[index]]["score"] == f"score {translation['score']:.4f}"
        drawn = page.heatmap(index)  # as the page opens: the last layer, the mean of its heads
        assert drawn["rows"] == alignment["target_tokens"] and drawn["columns"] == alignment["source_tokens"]
        assert drawn["selects"] == ["Weights", "Layer", "Head", "Colour scale", "Colours"]
        assert "layer 1 of 0-1, mean of 2 heads" in drawn["caption"]
        assert_weights_equal(drawn["weights"], alignment["weights"], tolerance=1e-5)
        page.view(index, layer=0, head=1)
        assert_weights_equal(page.heatmap(index)["weights"], alignment["cross_attentions"][0][1], 1e-5)
        page.view(index, which="encoder")
        encoder = page.heatmap(index)
        assert "Encoder self-attention, layer 0 of 0-1, head 1 of 0-1" in encoder["caption"]  # layer and head kept
        assert encoder["rows"] == encoder["columns"] == alignment["source_tokens"]
        assert_weights_equal(encoder["weights"], alignment["encoder_attentions"][0][1], 1e-5)
        page.view(index, head="mean", which="cross")
        assert_weights_equal(page.heatmap(index)["weights"], mean_of_heads(alignment["cross_attentions"][0]), 1e-5)
    spread, colours = pixel_spread(page.section(0).screenshot_as_png)
    assert spread > 20 and colours > 50, (spread, colours)


@pytest.mark.browser
@pytest.mark.slow
def test_each_hypothesis_of_the_nbest_list_shows_its_own_attention(page, server, trained):
    """The n-best list is the translate command's; choosing a hypothesis draws the attention that produced it (the
    API's map of that hypothesis), in the view chosen."""
    page.translate(SENTENCES[:2], model="tf", beams=4, nbest=3)
    lines = cli_translations(trained["tf"], SENTENCES[:2], "--beams", "4", "--nbest", "3", "--scores")
    expected = [[], []]
    for line in lines:
        index, text, score = line.split("\t")
        expected[int(index)].append([text, f"score {score}"])
    assert [card["nbest"] for card in page.results()] == expected
    view = {"layer": 0, "head": 0}
    answer = api(server, {"sentences": SENTENCES[:1], "model": "tf", "num_beams": 4, "num_return_sequences": 3,
                          "attention": view}).json()["translations"][0]["hypotheses"]
    page.view(0, layer=0, head=0)
    drawn = []
    for rank, hypothesis in enumerate(answer):
        page.select_hypothesis(0, rank)
        shown = page.heatmap(0)
        assert f"hypothesis {rank + 1} of 3" in shown["caption"] and shown["rows"] == hypothesis["attention"]["rows"]
        assert_weights_equal(shown["weights"], hypothesis["attention"]["weights"], 1e-5)
        assert shown["probabilities"] == pytest.approx([math.exp(p) for p in hypothesis["token_log_probs"]],
                                                       abs=0.0051)
        drawn.append(shown["weights"])
    assert drawn[0] != drawn[1] and drawn[1] != drawn[2]  # three hypotheses, three maps


@pytest.mark.browser
@pytest.mark.slow
def test_the_rnn_shows_its_one_head_and_a_model_without_attention_says_it_has_none(page, server, trained):
    page.translate(SENTENCES, model="rnn")
    assert page.driver.find_element("id", "results").get_attribute("data-model") == "rnn"
    assert [card["text"] for card in page.results()] == cli_translations(trained["rnn"], SENTENCES)
    answer = api(server, {"sentences": SENTENCES, "model": "rnn", "output_attentions": True}).json()
    for index, translation in enumerate(answer["translations"]):
        drawn, alignment = page.heatmap(index), translation["alignment"]
        assert drawn["selects"] == ["Colour scale", "Colours"]  # one layer, one head, no encoder self-attention
        assert "(bahdanau), its one head" in drawn["caption"] and "mean of 1" not in drawn["caption"]
        assert_weights_equal(drawn["weights"], alignment["cross_attentions"][0][0], 1e-5)
    page.translate(SENTENCES[:1], model="plain")
    box = page.find("#attention")
    assert not box.is_selected() and not box.is_enabled()
    assert page.find("#attention-help").text == "this model has no attention"
    assert page.error() is None and len(page.results()) == 1 and page.find_all("table.heatmap") == []
    page.choose("#model", "tf")
    assert box.is_selected() and box.is_enabled() and page.find("#attention-help").text == ""


@pytest.mark.browser
@pytest.mark.slow
def test_a_refused_or_cancelled_request_leaves_the_previous_results_marked_as_such(page, server):
    """While a request runs the results on screen are marked as the previous request's, and it can be cancelled; a
    refused request shows the server's own message and leaves the previous results, still so marked."""
    page.translate(SENTENCES, model="tf")
    before = page.results()
    page.driver.execute_script("document.getElementById('translate').click();"
                               "document.getElementById('cancel').click();")
    page.wait.until(lambda d: page.find("#status").text == "Cancelled.")
    assert page.find("#stale-note").is_displayed() and "previous request" in page.find("#stale-note").text
    assert "stale" in page.find("#results").get_attribute("class") and page.results() == before
    assert page.find("#cancel").get_attribute("hidden") is not None and page.find("#translate").is_enabled()
    page.translate(SENTENCES[:1], model="tf", beams=2, nbest=3)
    refusal = api(server, {"sentences": SENTENCES[:1], "model": "tf", "num_beams": 2, "num_return_sequences": 3,
                           "scores": True, "attention": {}})
    assert refusal.status_code == 422
    shown = page.error()
    assert shown.startswith("The server refused the request (422") and refusal.json()["error"] in shown, shown
    assert page.results() == before and "not the one above" in page.find("#stale-note").text
    page.translate(SENTENCES[:1], model="tf")
    assert not page.find("#stale-note").is_displayed() and "stale" not in page.find("#results").get_attribute("class")


def long_pair() -> tuple[str, str]:
    """A 39-word source and a 39-word translation of it typed by the user: a map of 40 x 40 tokens and more."""
    words = [chr(ord("a") + (i * 7) % 10) for i in range(39)]
    return " ".join(words), " ".join(reversed(words))


@pytest.mark.browser
@pytest.mark.slow
def test_a_40_by_40_map_keeps_its_labels_and_readout_in_view_and_reads_the_users_translation(page, server):
    """The user types a translation of their own: the page draws the attention and each token's probability the
    model gives it (POST /score's). On that 40 x 40 map, at desktop size, pointing at any corner cell leaves its row
    and column labels and a tooltip naming both tokens and the weight in view; moving from the keyboard, the
    readout describes the focused cell even where the map scrolls under the resting pointer."""
    source, target = long_pair()
    page.translate([source], model="tf")
    panel = page.panel(0)
    page.fill(".forced-text", target, within=panel)
    page.act(page.find("form.forced button", panel).click, panel)
    drawn = page.heatmap(0)
    scored = api(server, {"sentences": [source], "targets": [target], "model": "tf", "attention": {}},
                 path="score").json()["scores"][0]
    rows, columns = len(drawn["rows"]), len(drawn["columns"])
    assert "your translation" in drawn["caption"] and rows >= 40 and columns >= 40
    assert_weights_equal(drawn["weights"], scored["attention"]["weights"], 1e-6)
    assert drawn["probabilities"] == pytest.approx([math.exp(p) for p in scored["token_log_probs"]], abs=0.0051)
    weights = scored["attention"]["weights"]  # the diagnostics beside the map, from the API's numbers (2 decimals)
    assert drawn["entropies"] == pytest.approx([-sum(w * math.log(w) for w in row if w > 0) for row in weights],
                                               abs=0.0051)
    assert drawn["coverage"] == pytest.approx([sum(column) for column in zip(*weights, strict=True)], abs=0.0051)
    assert page.find_all("ol.nbest li.selected .yours", panel)
    for row, column in ((0, 0), (0, columns - 1), (rows - 1, 0), (rows - 1, columns - 1), (20, 20)):
        cell = page.find(f'td[data-row="{row}"][data-col="{column}"]', panel)
        page.reach(cell)
        page.hover(cell)
        tip = page.find("#tooltip")
        labels = (page.find(f'th.row-token[data-row="{row}"]', panel),
                  page.find(f'th.column-token[data-col="{column}"]', panel))
        assert page.in_view(cell, *labels, tip) == [True] * 4, (row, column)
        assert tip.text == (f"target {row} “{drawn['rows'][row]}” → source {column} “{drawn['columns'][column]}”: "
                            f"{drawn['weights'][row][column]:.4f}; p({drawn['rows'][row]}) = "
                            f"{math.exp(scored['token_log_probs'][row]):.4f}")
    middle = page.find('td[data-row="20"][data-col="20"]', panel)
    page.reach(middle)
    page.hover(middle)  # the pointer rests on the map
    middle.click()
    page.keys(*[Keys.ARROW_DOWN] * (rows - 21), *[Keys.ARROW_RIGHT] * (columns - 21))  # the box scrolls under the pointer
    focused = page.focused()
    assert (focused["row"], focused["column"]) == (str(rows - 1), str(columns - 1))
    assert focused["readout"].startswith(f"target {rows - 1} “</s>” → source {columns - 1} “</s>”")
    assert focused["tooltip"] == focused["readout"]


@pytest.mark.browser
@pytest.mark.slow
def test_the_heatmap_is_reached_and_read_from_the_keyboard_and_by_pointing(page):
    page.translate(SENTENCES[1:2], model="tf")
    page.find("#sentences").click()
    for _ in range(40):  # the focus order leads from the form through the panel's controls to the map's one cell
        page.keys(Keys.TAB)
        if page.focused()["tag"] == "td":
            break
    focused = page.focused()
    assert (focused["tag"], focused["row"], focused["column"]) == ("td", "0", "0")
    drawn = page.heatmap(0)
    page.keys(Keys.ARROW_RIGHT, Keys.ARROW_DOWN)
    focused = page.focused()
    assert (focused["row"], focused["column"]) == ("1", "1") and focused["highlighted"] == 1
    weight = f"{drawn['weights'][1][1]:.4f}"
    assert focused["label"] == f"target {drawn['rows'][1]} to source {drawn['columns'][1]}: {drawn['weights'][1][1]:.3f}"
    assert weight in focused["readout"] and drawn["rows"][1] in focused["readout"]
    page.keys(Keys.END)
    assert page.focused()["column"] == str(len(drawn["columns"]) - 1)
    page.keys(Keys.HOME, Keys.ARROW_UP, Keys.ARROW_UP)
    assert (page.focused()["row"], page.focused()["column"]) == ("0", "0")
    cell = page.find('td[data-row="2"][data-col="0"]', page.section(0))
    page.hover(cell)
    readout = page.find(".readout", page.section(0)).text
    assert f"{drawn['weights'][2][0]:.4f}" in readout and drawn["columns"][0] in readout
    highlighted = page.find_all("td[data-weight].in-row", page.section(0))
    assert len(highlighted) == len(drawn["columns"]) and all(c.get_attribute("data-row") == "2" for c in highlighted)
    token = page.find('th.column-token[data-col="1"]', page.section(0))
    page.hover(token)
    column = [row[1] for row in drawn["weights"]]
    readout = page.find(".readout", page.section(0)).text
    assert f"{max(column):.4f}; coverage " in readout
    assert float(readout.rsplit(" ", 1)[1]) == pytest.approx(sum(column), abs=0.0006)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("width", [390, 360])
def test_on_a_phone_the_page_is_never_wider_than_the_screen(browser, server, width):
    """A phone (390 x 844 and 360 x 740 CSS pixels, emulated as ChromeDriver's mobileEmulation does): the page fits
    the screen on first load (the model list's longest name included) and after translating a long sentence and a long
    German compound; the map fits the width."""
    emulate(browser, width, 844 if width == 390 else 740, 3, mobile=True)
    try:
        page = ExplorerPage(browser, server).open()
        assert page.page_width() <= width
        page.translate(["a b c d e f g h i j a b c d e f g h i j a b c",
                        "Donaudampfschifffahrtsgesellschaftskapitänsmützenhersteller"], model="tf")
        assert page.error() is None and page.page_width() <= width, page.page_width()
        scroll_box = page.find(".heatmap-scroll", page.panel(0))
        assert page.driver.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1",
                                          scroll_box)  # fitted to the width
    finally:
        emulate(browser, 1280, 1000)


@pytest.mark.browser
@pytest.mark.slow
def test_at_200_percent_zoom_the_page_reflows_instead_of_widening(browser, server):
    """A 1280-pixel-wide window zoomed to 200% lays the page out in 640 CSS pixels: nothing is wider than that but
    the heatmap, which scrolls in its own box."""
    emulate(browser, 640, 900, 2)
    try:
        page = ExplorerPage(browser, server).open()
        page.translate(["a b c d e f g h i j a b c d e f g h"], model="tf")
        assert page.error() is None and not page.overflows()
        spread, colours = pixel_spread(page.screenshot())
        assert spread > 20 and colours > 50, (spread, colours)
    finally:
        emulate(browser, 1280, 1000)


@pytest.mark.browser
@pytest.mark.slow
def test_exports_hold_the_maps_numbers_and_labels(page, server, trained, downloads):
    """PNG and SVG pictures of the map with its labels and legend, its numbers as CSV and JSON, its hard alignment as
    Pharaoh pairs: the API's weights, the hard alignment hf_s2s.inference computes (the cells marked as each row's
    maximum), at word level too; the legend's ticks follow the colour scale."""
    page.translate(["c a f h b", "j i b e d"], model="tf")
    page.view(0, word=True, layer=0, head=1, scale="row", argmax=True)
    drawn = page.heatmap(0)
    view = {"layer": 0, "head": 1, "word_level": True}
    answer = api(server, {"sentences": ["c a f h b"], "model": "tf", "attention": view}).json()["translations"][0]
    expected = answer["attention"]
    found = AttentionMap(**{**expected, "head": 1, "weights": torch.tensor(expected["weights"])})
    pairs = hard_alignment(found)
    assert_weights_equal(drawn["weights"], expected["weights"], 1e-5)
    assert sorted(drawn["marked"]) == [list(pair) for pair in pairs] and drawn["ticks"][-1] == "100%"
    assert "words: a source word's pieces summed, a target word's pieces averaged" in drawn["legend"]
    name, text = page.export(0, "pharaoh", downloads)
    assert name.endswith(".align") and text.decode() == pharaoh(pairs) + "\n"
    _, table = page.export(0, "csv", downloads)
    rows = list(csv.reader(table.decode().splitlines()))
    assert rows[0] == ["sentence", "hypothesis", "target_index", "target", "source_index", "source", "weight"]
    assert [(row[3], row[5]) for row in rows[1:]] == [(r, c) for r in expected["rows"] for c in expected["columns"]]
    assert [float(row[6]) for row in rows[1:]] == pytest.approx([w for row in drawn["weights"] for w in row], abs=0)
    _, record = page.export(0, "json", downloads)
    record = json.loads(record)
    assert (record["sentence"], record["hypothesis"], record["layer"], record["head"]) == (1, 0, 0, 1)
    assert record["weights"] == drawn["weights"] and record["alignment"] == pharaoh(pairs)
    _, picture = page.export(0, "svg", downloads)
    svg = ElementTree.fromstring(picture)
    texts = {node.get("class"): [] for node in svg.iter("{http://www.w3.org/2000/svg}text")}
    for node in svg.iter("{http://www.w3.org/2000/svg}text"):
        texts[node.get("class")].append(node.text)
    assert texts["row"] == expected["rows"] and texts["column"] == expected["columns"] and texts["tick"][-1] == "100%"
    cells = [node for node in svg.iter("{http://www.w3.org/2000/svg}rect") if node.get("class") == "cell"]
    assert [float(node.get("data-weight")) for node in cells] == [w for row in drawn["weights"] for w in row]
    assert len([node for node in svg.iter("{http://www.w3.org/2000/svg}rect") if node.get("class") == "argmax"]) == \
        len(pairs)
    _, png = page.export(0, "png", downloads)
    image = Image.open(io.BytesIO(png))
    spread, colours = pixel_spread(png)
    assert image.format == "PNG" and spread > 20 and colours > 20, (spread, colours)
    labels = numpy.asarray(image.convert("L"))[:, : image.width // 8]  # the row labels' strip, left of the cells
    assert (labels < 128).sum() > 50  # dark text on white: the labels are drawn
    page.view(0, scale="map")
    assert page.heatmap(0)["ticks"][-1] == f"{max(max(row) for row in drawn['weights']):.2f}"


@pytest.mark.browser
@pytest.mark.slow
def test_a_link_restores_the_sentence_model_search_and_view(page, browser, server):
    page.translate(SENTENCES[:2], model="tf", beams=3, nbest=2)
    page.select_hypothesis(1, 1)
    page.view(1, which="encoder", layer=0, head=1, scale="map", palette="greys", argmax=True)
    before = page.heatmap(1)
    link = before["permalink"]
    restored = ExplorerPage(browser, server).open(link[link.index("#"):])
    assert page.find("#sentences").get_attribute("value") == SENTENCES[1]
    assert (page.find("#model").get_attribute("value"), page.find("#beams").get_attribute("value"),
            page.find("#nbest").get_attribute("value")) == ("tf", "3", "2")
    after = restored.heatmap(0)
    assert {key: after[key] for key in ("caption", "rows", "columns", "ticks", "marked")} == \
        {key: before[key] for key in ("caption", "rows", "columns", "ticks", "marked")}
    assert_weights_equal(after["weights"], before["weights"], 1e-6)  # translated alone now, not in a batch of two
    panel = restored.panel(0)
    assert [restored.find(f".{name}", panel).get_attribute("value") for name in ("which", "layer", "head", "scale",
                                                                                 "palette")] == \
        ["encoder", "0", "1", "map", "greys"]


@pytest.mark.browser
@pytest.mark.slow
def test_two_models_side_by_side_on_one_sentence(page, server):
    """Compare: the same sentence translated by the RNN beside the Transformer, each panel naming its model, engine
    and search, each with its own translation and attention (the API's)."""
    page.translate(SENTENCES[:1], model="tf")
    section = page.section(0)
    page.choose(".compare-model", "rnn", section)
    page.fill(".compare-beams", "2", within=section)
    page.find("form.compare button", section).click()
    page.wait.until(lambda d: len(page.find_all(".panel", section)) == 2)
    page.settle()
    answer = api(server, {"sentences": SENTENCES[:1], "model": "rnn", "num_beams": 2, "scores": True,
                          "attention": {}}).json()
    second = page.panel(0, 1)
    assert page.find(".meta", second).text.startswith("rnn · rnn_seq2seq, bahdanau attention · torch float32 · "
                                                      "beam search, 2 beams")
    assert page.find(".translation .text", second).text == answer["translations"][0]["text"]
    assert_weights_equal(page.heatmap(0, 1)["weights"], answer["translations"][0]["attention"]["weights"], 1e-6)
    assert page.find(".meta", page.panel(0)).text.startswith("tf · transformer_seq2seq")
    page.find(".remove", second).click()
    assert len(page.find_all(".panel", section)) == 1


@pytest.mark.browser
@pytest.mark.slow
def test_the_documentation_picture_is_taken_with_this_code(trained, tmp_path):
    """scripts/explorer_screenshot.py (the picture in docs/serving.md) serves a folder, types the sentence and writes
    a palette PNG of the whole page; it refuses to replace a file without --overwrite."""
    reason = missing_browser()
    if reason:
        pytest.skip(reason)
    output = tmp_path / "picture.png"
    command = [sys.executable, str(ROOT / "scripts" / "explorer_screenshot.py"), f"tf={trained['tf']}",
               "--sentence", SENTENCES[0], "--output", str(output)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    picture = output.read_bytes()
    spread, colours = pixel_spread(picture)
    assert spread > 20 and colours > 50, (spread, colours)
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 1 and f"error: {output} exists; pass --overwrite" in again.stderr
    assert output.read_bytes() == picture
