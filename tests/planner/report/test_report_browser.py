"""The report in a real browser: headless Chromium (Debian's chromium + chromium-driver) via
selenium renders the page of a plan with recomputations and copies (a hand-made schedule, quick
to build, tests/support/report_plans.py), with no console error, no network fetch, every figure
present, sized and non-empty, and a working step list and tooltip. The real solver's plan is
checked the same way, and served by the service, in test_report_solver_plan.py (slow).

A full-page screenshot is kept as a test artifact (test-artifacts/report/, git-ignored) and its
path printed. Without Chromium and chromedriver (`make browser-deps` installs them) the test
skips and says so (tests/support/browser.py).
"""

from __future__ import annotations

import time

import pytest

from planner.report import render_report_html
from schemas.plan import ComputeStep
from tests.support.browser import (
    ARTIFACTS,
    PNG_MAGIC,
    console_errors,
    fetched,
    figures,
    save_screenshot,
    start_chromium,
)
from tests.support.report_plans import remat_plan


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def test_report_renders_in_headless_chromium(browser, capsys):
    graph, plan = remat_plan()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = ARTIFACTS / "unet_small_remat.html"
    page.write_text(render_report_html(plan, graph), encoding="utf-8")
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"

    drawn = figures(browser)
    expected = {f"{kind}-{device}" for kind in ("memory", "matrix", "arena")
                for device in ("cpu", "cpu-1")}
    assert set(drawn) == expected
    for f in drawn.values():
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

    assert fetched(browser) == []
    assert console_errors(browser) == []

    shot = save_screenshot(browser, ARTIFACTS / "unet_small_remat.png")
    assert shot.read_bytes()[:8] == PNG_MAGIC and shot.stat().st_size > 50_000
    with capsys.disabled():
        print(f"\nreport screenshot: {shot}\nreport page: {page}")
