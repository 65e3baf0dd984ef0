"""Headless Chromium for the report's browser tests (Debian's chromium + chromium-driver, driven
by selenium), and what those tests read back from a rendered page. No test here.

Tests never install packages: `make browser-deps` (run by `.ci/run`) installs the browser, and
without it `start_chromium` skips the test, saying what is missing and how to get it.
Playwright's own browser download does not work here, hence Debian's packages.
Screenshots and pages are kept under test-artifacts/report/ (git-ignored): the folder for CI to
keep as its artifacts.
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "report"
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)
BROWSERS = ("chromium", "chromium-browser")
WIDTH = 1280
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Every figure of the page: its box on the page and how much it draws.
FIGURES_JS = """
return Array.from(document.querySelectorAll('svg.figure')).map(function (svg) {
  var box = svg.getBoundingClientRect();
  return {id: svg.id, width: box.width, height: box.height,
          children: svg.childElementCount,
          drawn: svg.querySelectorAll('rect, path, line').length};
});
"""


def _find_browser() -> tuple[str | None, str | None]:
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    return browser, shutil.which("chromedriver")


def start_chromium(profile_dir: Path):
    """A headless Chromium WebDriver keeping the console log; skips the test when Chromium or
    its driver is not installed. The caller quits it."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed: pip install -e '.[dev]'")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = _find_browser()
    missing = [name for name, path in (("Chromium (" + " or ".join(BROWSERS) + ")", chromium),
                                       ("chromedriver", driver_path)) if path is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not found on PATH: run `make browser-deps` "
                    "(Debian packages chromium and chromium-driver) to run the browser tests")
    options = Options()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    options.add_argument(f"--window-size={WIDTH},1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    return driver


def figures(driver) -> dict[str, dict]:
    """Figure id -> its box and element counts (FIGURES_JS)."""
    return {f["id"]: f for f in driver.execute_script(FIGURES_JS)}


def fetched(driver) -> list[str]:
    """Every resource the page loaded after itself (a self-contained page loads none)."""
    return driver.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; })")


def console_errors(driver) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def card_values(driver, key: str) -> list[str]:
    """The values of the summary cards titled `key` (e.g. "recomputations")."""
    return driver.execute_script("""
        var key = arguments[0];
        return Array.from(document.querySelectorAll('#summary .card'))
            .filter(function (c) { return c.querySelector('.k').textContent === key; })
            .map(function (c) { return c.querySelector('.v').textContent; });
    """, key)


def save_screenshot(driver, path: Path) -> Path:
    """The whole page, not only the window (DevTools: capture beyond the viewport), as PNG."""
    driver.execute_script("window.scrollTo(0, 0)")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1},
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    return path
