"""Headless Chromium driven through Selenium and ChromeDriver, for the tests of the attention explorer (the page at
``hf-s2s serve``'s ``/``) and for ``scripts/explorer_screenshot.py``, which takes the documentation's picture with the
same code.

The browser is the system's (Debian's ``chromium`` and ``chromium-driver``: ``apt-get install -y chromium
chromium-driver``); nothing is downloaded. It starts with a new empty profile and without the background services
that would try to reach Google's hosts (refused on a closed network, and slow to fail)."""

import io
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy
from PIL import Image

try:  # the test extra's; without it the tests skip, saying so (missing_browser)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    webdriver = Keys = None

# The flags the machines of this project start Chromium with: headless, no sandbox (root in a container), no GPU, and
# nothing that connects anywhere by itself.
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--disable-extensions", "--lang=en-US")
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
INSTALL = "apt-get install -y chromium chromium-driver"


def missing_browser() -> str | None:
    """Why no browser can be driven here (for a skip reason), or None where Selenium, Chromium and ChromeDriver are
    all installed."""
    if webdriver is None:
        return "selenium is not installed (the test extra: pip install -e '.[test]')"
    if not any(shutil.which(name) for name in BROWSERS) or not shutil.which("chromedriver"):
        return (f"no Chromium with its ChromeDriver on PATH, and none could be installed here (Debian: {INSTALL}, "
                "as root; .ci/run does it where apt-get is available)")
    return None


@contextmanager
def chromium(width: int = 1280, height: int = 1000, scale: float = 1.0, downloads: str | Path | None = None):
    """A headless Chromium (a Selenium WebDriver) whose viewport is ``width`` x ``height`` CSS pixels at
    ``scale`` device pixels each (2: what a browser zoomed to 200% on a window twice as wide shows), with a profile
    of its own that is removed afterwards; files the page downloads go to ``downloads``."""
    options = webdriver.ChromeOptions()
    options.binary_location = next(shutil.which(name) for name in BROWSERS if shutil.which(name))
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with tempfile.TemporaryDirectory(prefix="hf_s2s_chromium_") as profile:
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
        try:
            emulate(driver, width, height, scale)
            if downloads is not None:
                driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow",
                                                                       "downloadPath": str(downloads)})
            yield driver
        finally:
            driver.quit()


def emulate(driver, width: int, height: int, scale: float = 1.0, mobile: bool = False) -> None:
    """Give ``driver``'s page a viewport of ``width`` x ``height`` CSS pixels (``mobile``: a phone's, as
    ChromeDriver's mobileEmulation deviceMetrics gives it: overlay scroll bars, the page's viewport meta tag obeyed).
    Headless Chromium clamps --window-size to 500 pixels and more; this goes below."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": scale, "mobile": mobile})
    driver.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": mobile})


class ExplorerPage:
    """The attention explorer in ``driver``, read and used as a person does: typing, choosing, clicking, the keys."""

    def __init__(self, driver, url: str, timeout: float = 120):
        self.driver, self.url = driver, url
        self.wait = WebDriverWait(driver, timeout)

    def open(self, fragment: str = "") -> "ExplorerPage":
        """Load the page (anew: a fragment alone would not reload it), the models listed; with a ``fragment`` (a link
        of the page), wait for what it restores."""
        self.driver.get("about:blank")
        self.driver.get(f"{self.url}/{fragment}")
        self.wait.until(lambda d: d.execute_script(
            "return document.querySelectorAll('#model option').length > 0 || !document.getElementById('error').hidden"))
        if fragment:  # the page translates what the link names
            self.wait.until(lambda d: d.execute_script(
                "return document.getElementById('status').textContent.startsWith('Translated') "
                "|| !document.getElementById('error').hidden"))
            self.settle()
        return self

    def find(self, selector: str, within=None):
        return (within or self.driver).find_element(By.CSS_SELECTOR, selector)

    def find_all(self, selector: str, within=None) -> list:
        return (within or self.driver).find_elements(By.CSS_SELECTOR, selector)

    def choose(self, selector: str, value: str, within=None) -> None:
        Select(self.find(selector, within)).select_by_value(value)

    def fill(self, selector: str, text: str, within=None) -> None:
        field = self.find(selector, within)
        field.clear()
        if text:
            field.send_keys(text)

    def translate(self, sentences: list[str], *, model: str | None = None, beams: int | None = None,
                  nbest: int = 1) -> None:
        """Type ``sentences`` (one a line), choose the options, press Translate and wait for the answer: results or
        the error box."""
        self.fill("#sentences", "\n".join(sentences))
        if model is not None:
            self.choose("#model", model)
        self.fill("#beams", "" if beams is None else str(beams))
        self.fill("#nbest", str(nbest))
        before = self.driver.execute_script("return document.getElementById('status').textContent")
        self.find("#translate").click()
        self.wait.until(lambda d: d.execute_script(
            "const s = document.getElementById('status').textContent;"
            "return !document.getElementById('error').hidden || (s.startsWith('Translated') && s !== arguments[0])",
            before))
        self.settle()

    def settle(self) -> None:
        """Wait until no panel is reading a map from the server."""
        self.wait.until(lambda d: d.execute_script("return document.querySelectorAll('.panel.busy').length === 0"))

    def act(self, action, panel) -> None:
        """Do ``action()`` on ``panel`` (an element) and wait until its map is drawn again, from the server or kept."""
        before = int(panel.get_attribute("data-draws") or 0)
        action()
        self.wait.until(lambda d: int(panel.get_attribute("data-draws") or 0) > before
                        and "busy" not in panel.get_attribute("class"))

    def error(self) -> str | None:
        """The error box's text, None while it is hidden."""
        box = self.find("#error")
        return None if box.get_attribute("hidden") is not None else box.text

    def results(self) -> list[dict]:
        """Each card as shown: its title, its first panel's translation text and score, its hypotheses (text, score)."""
        return self.driver.execute_script("""
            const text = (node) => node ? node.textContent : null;
            return [...document.querySelectorAll('#results section.result')].map((section) => ({
              title: text(section.querySelector('h2')),
              text: text(section.querySelector('.panel .translation .text')),
              score: text(section.querySelector('.panel .translation .score')),
              meta: text(section.querySelector('.panel .meta')),
              help: text(section.querySelector('.panel .score-help')),
              nbest: [...section.querySelectorAll('.panel:first-child ol.nbest li')].map((item) =>
                [text(item.querySelector('.text')), text(item.querySelector('.score'))]),
            }));""")

    def section(self, index: int):
        return self.find_all("#results section.result")[index]

    def panel(self, index: int, which: int = 0):
        return self.find_all(".panel", self.section(index))[which]

    def view(self, index: int, which_panel: int = 0, **choices) -> None:
        """Choose what sentence ``index``'s map shows, as a person does with the controls: which ("cross" or
        "encoder"), layer, head ("mean" or a number), scale, palette (selects); word, argmax, fit (check boxes); one
        at a time, each time waiting for the map."""
        panel = self.panel(index, which_panel)
        for name, value in choices.items():
            if name in ("word", "argmax", "fit"):
                box = self.find({"word": ".word", "argmax": ".argmax-toggle", "fit": ".fit"}[name], panel)
                if box.is_selected() != value:
                    self.act(box.click, panel)
            else:
                select = self.find(f".{name}", panel)
                if select.get_attribute("value") != str(value):
                    self.act(lambda s=select, v=value: Select(s).select_by_value(str(v)), panel)

    def select_hypothesis(self, index: int, rank: int, which_panel: int = 0) -> None:
        panel = self.panel(index, which_panel)
        self.act(self.find_all("ol.nbest button.choose", panel)[rank].click, panel)

    def heatmap(self, index: int, which_panel: int = 0) -> dict:
        """Sentence ``index``'s map as drawn: its caption, row and column labels, each cell's weight (the numbers the
        cells hold: exactly the doubles the page drew), the cells marked as each row's maximum, the diagnostics shown
        (probability and entropy per row, coverage per column), the visible controls and the legend's ticks."""
        read = self.driver.execute_script("""
            const panel = arguments[0];
            const table = panel.querySelector('table.heatmap');
            const numbers = (selector) => [...table.querySelectorAll(selector)].map((n) => Number(n.textContent));
            return {
              caption: panel.querySelector('.caption').textContent,
              rows: [...table.querySelectorAll('tbody th.row-token')].map((th) => th.textContent),
              columns: [...table.querySelectorAll('thead th.column-token')].map((th) => th.textContent),
              weights: [...table.querySelectorAll('tbody tr')].map((tr) =>
                [...tr.querySelectorAll('td[data-weight]')].map((td) => td.dataset.weight)),
              marked: [...table.querySelectorAll('td.argmax')].map((td) => [Number(td.dataset.col),
                                                                            Number(td.dataset.row)]),
              probabilities: numbers('td.probability'), entropies: numbers('td.entropy'),
              coverage: numbers('tfoot td.diagnostic'),
              selects: [...panel.querySelectorAll('.controls label')].filter((l) => !l.hidden && l.querySelector('select'))
                .map((l) => l.querySelector('span').textContent),
              ticks: [...panel.querySelectorAll('.legend .tick')].map((t) => t.textContent),
              legend: panel.querySelector('.legend-note').textContent,
              permalink: panel.querySelector('.permalink').href,
            };""", self.panel(index, which_panel))
        read["weights"] = [[float(weight) for weight in row] for row in read["weights"]]
        return read

    def export(self, index: int, format_: str, folder: Path, which_panel: int = 0) -> tuple[str, bytes]:
        """Press sentence ``index``'s export button of ``format_`` and wait for the file the browser downloads into
        ``folder`` (the driver's ``downloads``): its name and bytes."""
        before = set(folder.iterdir())
        self.find(f".export-{format_}", self.panel(index, which_panel)).click()
        self.wait.until(lambda d: [p for p in set(folder.iterdir()) - before if not p.name.endswith(".crdownload")])
        path = next(p for p in set(folder.iterdir()) - before if not p.name.endswith(".crdownload"))
        return path.name, path.read_bytes()

    def focused(self) -> dict:
        """The element that has the keyboard focus: its tag, row, column, label; and the readout beside the map."""
        return self.driver.execute_script("""
            const node = document.activeElement;
            const panel = node.closest('.panel');
            return {tag: node.tagName.toLowerCase(), row: node.dataset.row, column: node.dataset.col,
                    label: node.getAttribute('aria-label'),
                    readout: panel ? panel.querySelector('.readout').textContent : null,
                    tooltip: document.getElementById('tooltip') ? document.getElementById('tooltip').textContent : null,
                    highlighted: panel ? panel.querySelectorAll('td.in-row.in-column').length : 0};""")

    def reach(self, cell) -> None:
        """Scroll to a map's ``cell`` as a person does: the page until the map's box is in view, then the box (the
        mouse wheel over the box scrolls the box alone) until the cell is."""
        self.driver.execute_script("""
            arguments[0].closest('.heatmap-scroll').scrollIntoView({block: 'center', inline: 'nearest'});
            arguments[0].scrollIntoView({block: 'nearest', inline: 'nearest'});""", cell)

    def hover(self, node) -> None:
        """Move the pointer over ``node`` (an element found with :meth:`find`)."""
        ActionChains(self.driver).move_to_element(node).perform()

    def keys(self, *keys) -> None:
        """Press ``keys`` in the element that has the focus."""
        self.driver.switch_to.active_element.send_keys(*keys)

    def in_view(self, *nodes) -> list[bool]:
        """Whether each of ``nodes`` is wholly inside the viewport and not hidden under another element at its
        centre."""
        return self.driver.execute_script("""
            return [...arguments].map((node) => {
              const box = node.getBoundingClientRect();
              if (box.width === 0 || box.left < -0.5 || box.top < -0.5 || box.right > innerWidth + 0.5
                  || box.bottom > innerHeight + 0.5) return false;
              const top = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
              return top === node || node.contains(top) || node.id === 'tooltip';
            });""", *nodes)

    def page_width(self) -> int:
        """How wide the page is laid out (CSS pixels): more than the viewport's width means it scrolls sideways."""
        return self.driver.execute_script("return document.documentElement.scrollWidth")

    def overflows(self) -> bool:
        """Whether the page is wider than the viewport (it should reflow instead, the heatmap scrolling in its box)."""
        return self.driver.execute_script(
            "return document.documentElement.scrollWidth > document.documentElement.clientWidth")

    def full_page_screenshot(self) -> bytes:
        """The whole page as PNG bytes: the viewport is made as tall as the page first (its width kept)."""
        width, height, scale = self.driver.execute_script(
            "return [window.innerWidth, document.documentElement.scrollHeight, window.devicePixelRatio]")
        emulate(self.driver, width, height, scale)
        return self.screenshot()

    def screenshot(self, path: str | Path | None = None) -> bytes:
        """The viewport as PNG bytes (written to ``path`` too when given)."""
        png = self.driver.get_screenshot_as_png()
        if path is not None:
            Path(path).write_bytes(png)
        return png


def pixel_spread(png: bytes) -> tuple[float, int]:
    """(standard deviation of the grey levels, number of distinct colours) of a PNG: 0 and 1 for a blank picture."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    pixels = numpy.asarray(image)
    return float(pixels.mean(axis=2).std()), len(numpy.unique(pixels.reshape(-1, 3), axis=0))
