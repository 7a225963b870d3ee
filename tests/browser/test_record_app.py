"""Real browser: save the home page's run (both files, downloaded by Chromium), open the JSON on the saved-run page,
run it here, and read the verdict beside the record."""
import json
import re

from engine.record import format as F
from tests.browser.harness import assert_no_error, screenshot, wait_idle, wait_text


def _download(page, label: str, to):
    with page.expect_download(timeout=120_000) as got:
        page.get_by_role("button", name=label, exact=True).click()
    got.value.save_as(to)
    return to


def test_save_a_run_open_it_and_run_it_here(app_server, page, tmp_path):
    page.goto(f"{app_server.url}/?max_new_tokens=6")
    wait_idle(page)
    wait_text(page, "Save this run", "Download as a page")
    rec = F.load(_download(page, "Save this run", tmp_path / "run.json"))  # a valid, sealed record
    assert rec["kind"] == "trace" and len(rec["trace"]["generated_ids"]) == 6
    assert rec["model"]["name"] == "embedded" and rec["model"]["identity"]["weights_sha256"]
    html = _download(page, "Download as a page", tmp_path / "run.html").read_text(encoding="utf-8")
    inside = json.loads(re.search(r'id="record">(.*?)</script>', html, re.S).group(1))  # the page holds the record
    assert html.startswith("<!DOCTYPE html>") and inside["trace"]["steps"] == rec["trace"]["steps"]
    assert_no_error(page)

    page.goto(f"{app_server.url}/record")
    wait_idle(page)
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(tmp_path / "run.json"))
    wait_text(page, "What was recorded", "Recorded there, measured here")
    wait_idle(page)
    page.get_by_role("button", name=re.compile("Run it here")).click()
    wait_text(page, "Reproduced", timeout=300)
    wait_idle(page)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "measured here" in body and "Every timing, recorded there and measured here" in body
    screenshot(page, "record-page")
