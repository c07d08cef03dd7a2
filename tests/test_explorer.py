"""The attention explorer, the page `hf-s2s serve` serves at `/`, as a person uses it: headless Chromium (Selenium and
ChromeDriver, tests/browser.py) against `hf-s2s serve` running as its own process on a free localhost port, with
two tiny models trained by the training job (a Transformer of two layers of two heads, a GRU with Bahdanau
attention), and an RNN without attention.

What the page shows is checked against the command line and the API: its translations and n-best lists are those of
`hf-s2s translate`; its heatmaps have a row per target token and a column per source token, holding the API's
weights (each layer and head, the mean of the heads, the encoder's self-attention); a refused request shows the
server's own message. It is usable from the keyboard and at 200% zoom, and its screenshots are not blank.

The browser tests skip, saying why, only where no Chromium with its ChromeDriver can be installed; .ci/run installs
Debian's."""

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from hf_s2s.cli import run_command  # noqa: E402
from hf_s2s.inference.engines import load_engine  # noqa: E402
from hf_s2s.serving.app import EXPLORER_FILES, EXPLORER_POLICY, create_app  # noqa: E402
from hf_s2s.serving.server import serve_in_thread  # noqa: E402
from tests.browser import ExplorerPage, Keys, chromium, missing_browser, pixel_spread  # noqa: E402
from tests.runs import train_tiny_folder  # noqa: E402
from tests.saved_folders import save_tiny_model_folder  # noqa: E402
from tests.server_process import start_server_process  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# reversal sources the models were not trained on all of, of several lengths
SENTENCES = ["c a f h", "j i b e d", "g c"]


def test_the_page_and_its_files_come_from_the_package_and_name_no_other_host(tmp_path):
    """`/` is the package's index.html with a Content-Security-Policy that allows this server only; its script and
    style sheet are served beside it; no file of the page names another host; a missing file is a 404 in JSON, as
    every refusal of the server is."""
    engine = load_engine(save_tiny_model_folder(tmp_path / "tf", "transformer_seq2seq"), threads=1)
    with serve_in_thread(create_app({"tf": engine})) as url:
        page = httpx.get(f"{url}/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.text == (EXPLORER_FILES / "index.html").read_text()
        assert page.headers["content-security-policy"] == EXPLORER_POLICY and "default-src 'self'" in EXPLORER_POLICY
        links = re.findall(r'(?:src|href)="([^"]*)"', page.text)
        assert sorted(links) == ["static/explorer.css", "static/explorer.js"]
        for name, kind in (("explorer.js", "javascript"), ("explorer.css", "text/css")):
            served = httpx.get(f"{url}/{'static/' + name}")
            assert served.status_code == 200 and kind in served.headers["content-type"]
            assert served.text == (EXPLORER_FILES / name).read_text()
        missing = httpx.get(f"{url}/static/missing.js")
        assert missing.status_code == 404 and missing.json() == {"error": "Not Found"}
    for path in EXPLORER_FILES.iterdir():
        assert not re.search(r"\b(https?:)?//[\w.-]+\.\w", path.read_text()), f"{path.name} names another host"
        assert "@import" not in path.read_text()


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
def browser(server):
    with chromium() as driver:
        yield driver


@pytest.fixture
def page(browser, server):
    return ExplorerPage(browser, server).open()


def command_line(folder: Path, sentences: list[str], *options: str) -> list[str]:
    """What `hf-s2s translate FOLDER` prints for ``sentences`` (given on standard input's stead, as a file)."""
    source = folder.parent / "explorer_input.txt"
    source.write_text("\n".join(sentences) + "\n")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run_command("translate", [str(folder), "--input", str(source), *options]) == 0
    return printed.getvalue().splitlines()


def api(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/translate", json=body, timeout=120)


def assert_weights_equal(drawn: list[list[float]], expected: list[list[float]], tolerance: float = 0.0) -> None:
    assert len(drawn) == len(expected) and all(len(row) == len(want) for row, want in zip(drawn, expected, strict=True))
    worst = max(abs(got - want) for row, want_row in zip(drawn, expected, strict=True)
                for got, want in zip(row, want_row, strict=True))
    assert worst <= tolerance, worst


def mean_of_heads(heads: list[list[list[float]]]) -> list[list[float]]:
    return [[sum(head[r][c] for head in heads) / len(heads) for c in range(len(heads[0][0]))]
            for r in range(len(heads[0]))]


@pytest.mark.browser
@pytest.mark.slow
def test_typed_sentences_show_the_translate_commands_translations_and_the_apis_weights(page, server, trained):
    page.translate(SENTENCES, model="tf")
    assert page.error() is None
    shown = page.results()
    assert [result["text"] for result in shown] == command_line(trained["tf"], SENTENCES)
    answer = api(server, {"sentences": SENTENCES, "model": "tf", "scores": True, "output_attentions": True}).json()
    assert len({result["text"] for result in shown}) == len(SENTENCES)  # a model that translates, not one token
    for index, translation in enumerate(answer["translations"]):
        alignment = translation["alignment"]
        assert shown[index]["score"] == f"score {translation['score']:.4f}"
        drawn = page.heatmap(index)  # as the page opens: the last layer, the mean of its heads
        assert drawn["rows"] == alignment["target_tokens"] and drawn["columns"] == alignment["source_tokens"]
        assert len(drawn["rows"]) >= 2 and drawn["selects"] == ["Weights", "Layer", "Head"]
        assert "layer 1 of 0-1, mean of 2 heads" in drawn["caption"]
        assert_weights_equal(drawn["weights"], alignment["weights"], tolerance=1e-6)
        for layer, head in ((0, 1), (1, 0)):
            page.view(index, layer=layer, head=head)
            assert_weights_equal(page.heatmap(index)["weights"], alignment["cross_attentions"][layer][head])
        page.view(index, layer=0, head="mean")
        assert_weights_equal(page.heatmap(index)["weights"], mean_of_heads(alignment["cross_attentions"][0]), 1e-12)
        page.view(index, which="encoder", layer=1, head=1)
        encoder = page.heatmap(index)
        assert encoder["rows"] == encoder["columns"] == alignment["source_tokens"]
        assert "Encoder self-attention" in encoder["caption"]
        assert_weights_equal(encoder["weights"], alignment["encoder_attentions"][1][1])
    heatmap_png = page.section(0).screenshot_as_png
    spread, colours = pixel_spread(heatmap_png)
    assert spread > 20 and colours > 50, (spread, colours)
    spread, colours = pixel_spread(page.screenshot())
    assert spread > 20 and colours > 50, (spread, colours)


@pytest.mark.browser
@pytest.mark.slow
def test_the_nbest_list_is_the_translate_commands(page, trained):
    page.translate(SENTENCES[:2], model="tf", beams=4, nbest=3)
    lines = command_line(trained["tf"], SENTENCES[:2], "--beams", "4", "--nbest", "3", "--scores")
    expected = [[], []]
    for line in lines:
        index, text, score = line.split("\t")
        expected[int(index)].append([text, f"score {score}"])
    assert [result["nbest"] for result in page.results()] == expected
    assert all(len(hypotheses) == 3 for hypotheses in expected)


@pytest.mark.browser
@pytest.mark.slow
def test_switching_to_the_rnn_shows_its_translations_and_its_bahdanau_attention(page, server, trained):
    page.translate(SENTENCES, model="tf")
    page.translate(SENTENCES, model="rnn")
    assert page.driver.find_element("id", "results").get_attribute("data-model") == "rnn"
    assert [result["text"] for result in page.results()] == command_line(trained["rnn"], SENTENCES)
    answer = api(server, {"sentences": SENTENCES, "model": "rnn", "output_attentions": True}).json()
    for index, translation in enumerate(answer["translations"]):
        drawn, alignment = page.heatmap(index), translation["alignment"]
        assert drawn["selects"] == []  # one layer, one head, no encoder self-attention: nothing to choose
        assert "bahdanau" in drawn["caption"] and drawn["rows"] == alignment["target_tokens"]
        assert_weights_equal(drawn["weights"], alignment["cross_attentions"][0][0])
        assert_weights_equal(drawn["weights"], alignment["weights"], 1e-6)


@pytest.mark.browser
@pytest.mark.slow
def test_a_model_without_attention_translates_and_says_it_has_no_weights(page):
    page.translate(SENTENCES[:1], model="plain")
    box = page.find("#attention")
    assert not box.is_selected() and not box.is_enabled()
    assert page.find("#attention-help").text == "this model has no attention"
    assert page.error() is None and len(page.results()) == 1 and page.find_all("table.heatmap") == []
    page.choose("#model", "tf")
    assert box.is_selected() and box.is_enabled() and page.find("#attention-help").text == ""


@pytest.mark.browser
@pytest.mark.slow
def test_a_refused_request_shows_the_servers_message(page, server):
    page.translate(SENTENCES, model="tf")
    page.translate(SENTENCES[:1], model="tf", beams=2, nbest=3)
    refusal = api(server, {"sentences": SENTENCES[:1], "model": "tf", "num_beams": 2, "num_return_sequences": 3,
                           "scores": True, "output_attentions": True})
    assert refusal.status_code == 422
    shown = page.error()
    assert shown.startswith("The server refused the request (422") and refusal.json()["error"] in shown, shown
    assert page.results() == []  # the translations of the request before are gone, not shown as this one's


@pytest.mark.browser
@pytest.mark.slow
def test_the_heatmap_is_reached_and_read_from_the_keyboard_and_by_pointing(page):
    page.translate(SENTENCES[1:2], model="tf")
    page.find("#sentences").click()
    for _ in range(30):  # the focus order leads from the form through the view's choices to the map's one cell
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
    assert focused["readout"].endswith(weight) and drawn["rows"][1] in focused["readout"]
    page.keys(Keys.END)
    assert page.focused()["column"] == str(len(drawn["columns"]) - 1)
    page.keys(Keys.HOME, Keys.ARROW_UP, Keys.ARROW_UP)
    assert (page.focused()["row"], page.focused()["column"]) == ("0", "0")
    cell = page.find('td[data-row="2"][data-col="0"]', page.section(0))
    page.hover(cell)
    readout = page.find(".readout", page.section(0)).text
    assert readout.endswith(f"{drawn['weights'][2][0]:.4f}") and drawn["columns"][0] in readout
    highlighted = page.find_all("td.in-row", page.section(0))
    assert len(highlighted) == len(drawn["columns"]) and all(c.get_attribute("data-row") == "2" for c in highlighted)
    token = page.find('th.column-token[data-col="1"]', page.section(0))
    page.hover(token)
    column = [row[1] for row in drawn["weights"]]
    assert page.find(".readout", page.section(0)).text.endswith(f"{max(column):.4f}")


@pytest.mark.browser
@pytest.mark.slow
def test_at_200_percent_zoom_the_page_reflows_instead_of_widening(server):
    """A 1280-pixel-wide window zoomed to 200% lays the page out in 640 CSS pixels: nothing is wider than that but
    the heatmap, which scrolls in its own box."""
    with chromium(width=640, height=900, scale=2) as driver:
        page = ExplorerPage(driver, server).open()
        page.translate(["a b c d e f g h i j a b c d e f g h"], model="tf")
        assert page.error() is None and not page.overflows()
        spread, colours = pixel_spread(page.screenshot())
        assert spread > 20 and colours > 50, (spread, colours)


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
