"""The report in a real browser: headless Chromium (Debian's chromium + chromium-driver) via
selenium renders the page of a plan with recomputations and copies, with no console error, no
network fetch, every figure present, sized and non-empty, and a working step list and tooltip.

A full-page screenshot is kept as a test artifact (test-artifacts/report/, git-ignored) and its
path printed. When the browser is missing the test installs it (`make browser-deps`, apt) and
skips, saying why, when that is not possible.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from planner.report import render_report_html
from schemas.plan import ComputeStep
from tests.test_report_plans import remat_plan

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "report"
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)
BROWSERS = ("chromium", "chromium-browser")
WIDTH = 1280


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


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
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
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.add_argument(f"--window-size={WIDTH},1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _screenshot(driver, path: Path) -> None:
    """The whole page, not only the window (DevTools: capture beyond the viewport)."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1},
    })
    path.write_bytes(base64.b64decode(shot["data"]))


FIGURES_JS = """
return Array.from(document.querySelectorAll('svg.figure')).map(function (svg) {
  var box = svg.getBoundingClientRect();
  return {id: svg.id, width: box.width, height: box.height,
          children: svg.childElementCount,
          drawn: svg.querySelectorAll('rect, path, line').length};
});
"""


def test_report_renders_in_headless_chromium(browser, capsys):
    graph, plan = remat_plan()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = ARTIFACTS / "unet_small_remat.html"
    page.write_text(render_report_html(plan, graph), encoding="utf-8")
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"

    figures = {f["id"]: f for f in browser.execute_script(FIGURES_JS)}
    expected = {f"{kind}-{device}" for kind in ("memory", "matrix", "arena")
                for device in ("cpu", "cpu-1")}
    assert set(figures) == expected
    for f in figures.values():
        assert f["width"] > 300 and f["height"] > 100, f
        assert f["children"] > 3 and f["drawn"] > 3, f
    layers = browser.execute_script(
        "return document.querySelectorAll('#memory-cpu path.layer').length")
    assert layers >= 4  # parameters, activations, gradients, recomputed, ...
    marks = browser.execute_script("""
        return Array.from(document.querySelectorAll('#matrix-cpu rect.recompute'))
            .map(function (r) { var b = r.getBoundingClientRect(); return b.width * b.height; });
    """)
    recomputes = sum(isinstance(s, ComputeStep) and s.recompute for s in plan.steps)
    assert len(marks) == recomputes and min(marks) > 4  # highlighted, not sub-pixel
    budget = browser.execute_script(
        "return document.querySelector('#memory-cpu .budget-label').textContent")
    assert budget.startswith("budget")

    # The step list: collapsed for a long plan, paged, filtered.
    browser.find_element("css selector", "#steps summary").click()
    rows = browser.find_elements("css selector", "#step-rows tr")
    assert len(rows) == 200 and rows[0].text.startswith("0 ")
    browser.find_element("id", "step-next").click()
    assert browser.find_element("css selector", "#step-rows tr").text.startswith("200 ")
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "step-kind")).select_by_value("recompute")
    assert len(browser.find_elements("css selector", "#step-rows tr")) == recomputes
    Select(browser.find_element("id", "step-kind")).select_by_value("")

    # The tooltip over the memory curve names the step and the bytes live.
    from selenium.webdriver.common.action_chains import ActionChains

    area = browser.find_element("css selector", "#memory-cpu .hover-area")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", area)
    ActionChains(browser).move_to_element(area).perform()
    time.sleep(0.1)
    tip = browser.find_element("id", "tooltip")
    assert tip.is_displayed() and "live" in tip.text and "step" in tip.text
    ActionChains(browser).move_by_offset(0, 400).perform()

    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
    assert fetched == [], f"the page fetched {fetched}"
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], errors

    browser.execute_script("window.scrollTo(0, 0)")
    shot = ARTIFACTS / "unet_small_remat.png"
    _screenshot(browser, shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    with capsys.disabled():
        print(f"\nreport screenshot: {shot}\nreport page: {page}")
