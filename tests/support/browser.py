"""Headless Chromium for the report's browser tests (Debian's chromium + chromium-driver, driven
by selenium), and what those tests read back from a rendered page. No test here.

When the browser is missing `start_chromium` installs it (`make browser-deps`, apt) and skips,
saying why, when that is not possible: Playwright's own browser download does not work here.
Screenshots and pages are kept under test-artifacts/report/ (git-ignored): the folder for CI to
keep as its artifacts.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
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


def _install_browser() -> str:
    """Run `make browser-deps`; returns its output's tail for a skip message."""
    if shutil.which("make") is None or not (REPO / "Makefile").exists():
        return "make is not available to run `make browser-deps`"
    try:
        done = subprocess.run(["make", "-s", "-C", str(REPO), "browser-deps"],
                              capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return "`make browser-deps` timed out"
    return (done.stdout + done.stderr).strip()[-400:]


def start_chromium(profile_dir: Path):
    """A headless Chromium WebDriver keeping the console log; skips the test when none can be
    had. The caller quits it."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed: pip install -e '.[dev]'")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = _find_browser()
    if chromium is None or driver_path is None:
        output = _install_browser()
        chromium, driver_path = _find_browser()
        if chromium is None or driver_path is None:
            pytest.skip("headless Chromium is needed (Debian packages chromium and "
                        f"chromium-driver) and could not be installed: {output}")
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
