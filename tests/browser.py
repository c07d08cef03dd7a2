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
def chromium(width: int = 1280, height: int = 1000, scale: float = 1.0):
    """A headless Chromium (a Selenium WebDriver) whose viewport is ``width`` x ``height`` CSS pixels at
    ``scale`` device pixels each (2: what a browser zoomed to 200% on a window twice as wide shows), with a profile
    of its own that is removed afterwards."""
    options = webdriver.ChromeOptions()
    options.binary_location = next(shutil.which(name) for name in BROWSERS if shutil.which(name))
    with tempfile.TemporaryDirectory(prefix="hf_s2s_chromium_") as profile:
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
        try:
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                "width": width, "height": height, "deviceScaleFactor": scale, "mobile": False})
            yield driver
        finally:
            driver.quit()


class ExplorerPage:
    """The attention explorer in ``driver``, read and used as a person does: typing, choosing, clicking, the keys."""

    def __init__(self, driver, url: str, timeout: float = 120):
        self.driver, self.url = driver, url
        self.wait = WebDriverWait(driver, timeout)

    def open(self) -> "ExplorerPage":
        self.driver.get(f"{self.url}/")
        self.wait.until(lambda d: d.execute_script(
            "return document.querySelectorAll('#model option').length > 0 || !document.getElementById('error').hidden"))
        return self

    def find(self, selector: str, within=None):
        return (within or self.driver).find_element(By.CSS_SELECTOR, selector)

    def find_all(self, selector: str, within=None) -> list:
        return (within or self.driver).find_elements(By.CSS_SELECTOR, selector)

    def choose(self, selector: str, value: str, within=None) -> None:
        Select(self.find(selector, within)).select_by_value(value)

    def fill(self, selector: str, text: str) -> None:
        field = self.find(selector)
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

    def error(self) -> str | None:
        """The error box's text, None while it is hidden."""
        box = self.find("#error")
        return None if box.get_attribute("hidden") is not None else box.text

    def results(self) -> list[dict]:
        """Each sentence's translation as shown: its text and score, and its n-best list of (text, score)."""
        return self.driver.execute_script("""
            const text = (node) => node ? node.textContent : null;
            return [...document.querySelectorAll('#results section.result')].map((section) => ({
              text: text(section.querySelector('.translation .text')),
              score: text(section.querySelector('.translation .score')),
              nbest: [...section.querySelectorAll('ol.nbest li')].map((item) =>
                [text(item.querySelector('.text')), text(item.querySelector('.score'))]),
            }));""")

    def section(self, index: int):
        return self.find_all("#results section.result")[index]

    def view(self, index: int, *, which: str | None = None, layer: int | None = None, head: str | None = None) -> None:
        """Choose what sentence ``index``'s heatmap shows: the attention (``which``: "cross" or "encoder"), layer and
        head ("mean" or a number), as a person does with the selects."""
        section = self.section(index)
        for selector, value in ((".which", which), (".layer", layer), (".head", head)):
            if value is not None:
                self.choose(selector, str(value), within=section)

    def heatmap(self, index: int) -> dict:
        """Sentence ``index``'s heatmap as drawn: its caption, row and column tokens, and each cell's weight, read
        from the numbers the cells hold (exactly the doubles the page drew)."""
        read = self.driver.execute_script("""
            const table = arguments[0].querySelector('table.heatmap');
            return {
              caption: arguments[0].querySelector('.caption').textContent,
              rows: [...table.querySelectorAll('tbody th.row-token')].map((th) => th.textContent),
              columns: [...table.querySelectorAll('thead th.column-token')].map((th) => th.textContent),
              weights: [...table.querySelectorAll('tbody tr')].map((tr) =>
                [...tr.querySelectorAll('td')].map((td) => td.dataset.weight)),
              selects: [...arguments[0].querySelectorAll('.controls label')].filter((l) => !l.hidden)
                .map((l) => l.querySelector('span').textContent),
            };""", self.section(index))
        read["weights"] = [[float(weight) for weight in row] for row in read["weights"]]
        return read

    def focused(self) -> dict:
        """The element that has the keyboard focus: its tag, row, column, label; and the readout beside the map."""
        return self.driver.execute_script("""
            const node = document.activeElement;
            const section = node.closest('section.result');
            return {tag: node.tagName.toLowerCase(), row: node.dataset.row, column: node.dataset.col,
                    label: node.getAttribute('aria-label'),
                    readout: section ? section.querySelector('.readout').textContent : null,
                    highlighted: section ? section.querySelectorAll('td.in-row.in-column').length : 0};""")

    def hover(self, node) -> None:
        """Move the pointer over ``node`` (an element found with :meth:`find`)."""
        ActionChains(self.driver).move_to_element(node).perform()

    def keys(self, *keys) -> None:
        """Press ``keys`` in the element that has the focus."""
        self.driver.switch_to.active_element.send_keys(*keys)

    def overflows(self) -> bool:
        """Whether the page is wider than the viewport (it should reflow instead, the heatmap scrolling in its box)."""
        return self.driver.execute_script(
            "return document.documentElement.scrollWidth > document.documentElement.clientWidth")

    def full_page_screenshot(self) -> bytes:
        """The whole page as PNG bytes: the viewport is made as tall as the page first (its width kept)."""
        width, height, scale = self.driver.execute_script(
            "return [window.innerWidth, document.documentElement.scrollHeight, window.devicePixelRatio]")
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": scale, "mobile": False})
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
