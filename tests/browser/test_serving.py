"""Real browser against llama.cpp's own llama-server (built from the llama.cpp that llama-cpp-python vendors,
running the embedded GGUF on 127.0.0.1 with --metrics --slots and 4 slots): connect, stream one request with the
server's own timings beside it, ask for the next-token distribution, run the prompt-length sweep and a
concurrency sweep up to 8 parallel requests with KV use read from /slots and the capacity verdict; then the same
server decoding speculatively, whose counters grow during a sweep. Every chart drawn, no error; screenshots at
1366x768 (the README shows them)."""
import re

from tests.browser.harness import assert_no_error, close_dialogs, new_tab, screenshot, wait_idle
from ui.frame import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/serving.py")


def _click(page, key: str, timeout: float = 300) -> None:
    page.locator(f".st-key-{key} button").first.click()
    wait_idle(page, timeout=timeout)
    assert_no_error(page)


def _connect(tabs, app_server, server):
    page = new_tab(tabs, {"width": 1366, "height": 768})
    page.goto(f"{app_server.url}/{URL}")
    wait_idle(page)
    close_dialogs(page)
    assert_no_error(page)
    page.get_by_role("textbox", name="Base URL").fill(server.base_url)
    page.get_by_role("textbox", name="Model name").fill(server.model)
    page.get_by_role("button", name="Connect").click()
    wait_idle(page)
    assert_no_error(page)
    return page


def test_serving_page_against_llama_server(app_server, llama_cpp_server, tabs):
    page = _connect(tabs, app_server, llama_cpp_server)
    try:
        body = page.inner_text("body")
        assert "Connected to llama.cpp server" in body and "no /metrics endpoint" not in body
        assert "serve_url=" in page.url and "serve_model=smollm2" in page.url

        _click(page, "serving_send")
        body = page.inner_text("body")
        assert "Time to first token" in body and "Server prompt time" in body  # the server's clock beside ours
        assert "Outside the server's prompt time" in body
        _click(page, "serving_nt")
        _click(page, "serving_sweep_run")
        _click(page, "serving_cs_run")  # default levels 1, 2, 4, 8 on 4 slots
        body = page.inner_text("body")
        assert "8 requests sent at the same moment" in body
        assert re.search(r"This server (gives \d+ users? at once|cannot give even 1 user) a time per token", body), body
        assert "KV usage: /slots: tokens cached per slot" in body  # the KV chart's caption: drawn from /slots,
        # the gauge this build does not have (the offers table says so too, but tables are drawn on a canvas)
        assert "reported no KV-cache usage" not in body
        assert "did not move during the sweep" in body  # spec counters exported, no drafting: said, not drawn
        charts = page.locator('[data-testid="stPlotlyChart"]')
        titles = [c.locator(".gtitle").first.text_content() if c.locator(".gtitle").count() else "?"
                  for c in charts.all()]
        assert charts.count() == 7, titles  # timeline, gaps, next token, prompt sweep, concurrency, gantt, KV use
        assert "with the server's own timings" in titles[0] and "KV-cache usage" in titles[-1], titles
        screenshot(page, URL)
        # the verdict follows the target the person sets, without measuring again
        box = page.get_by_role("spinbutton", name="Time per token a user should get (ms, p90)")
        box.fill("5")
        box.press("Enter")
        wait_idle(page)
        assert "cannot give even 1 user a time per token under 5 ms" in page.inner_text("body")
    finally:
        page.close()


def _deselect(page, key: str, option: str) -> None:
    """Remove ``option`` from the multiselect ``key`` with its tag's delete button, as a person does."""
    page.locator(f".st-key-{key}").get_by_role("button", name=f"Remove {option}", exact=True).first.click()
    wait_idle(page)


def test_speculative_counters_live(app_server, llama_cpp_spec_server, tabs):
    page = _connect(tabs, app_server, llama_cpp_spec_server)
    try:
        _click(page, "serving_send")
        assert "Drafted / accepted" in page.inner_text("body")
        for level in ("8", "4"):  # counters that grow need a sweep, not a big one (the first test sweeps to 8)
            _deselect(page, "serving_levels", level)
        _click(page, "serving_cs_run")
        assert "2 requests sent at the same moment" in page.inner_text("body")
        body = page.inner_text("body")
        m = re.search(r"during the sweep the server drafted (\d+) tokens and accepted (\d+)", body)
        assert m, body[-3000:]
        drafted, accepted = int(m.group(1)), int(m.group(2))
        assert drafted > 0 and 0 < accepted <= drafted
        titles = " ".join(c.text_content() for c in page.locator('[data-testid="stPlotlyChart"]').all())
        assert "Speculative decoding live" in titles and "Acceptance per draft position" in titles
        screenshot(page, f"{URL}-speculative")
    finally:
        page.close()


def test_closing_the_tab_mid_connect_closes_the_connection(app_server, tabs):
    """Connect against a server that accepts and never answers, then close the tab. The probe runs as a
    job on the network worker; Streamlit stops the closed tab's script, the waiter detaches, the job is cancelled
    and its socket closed within seconds (it used to stay open until the app restarted)."""
    import time

    from tests.serving_servers import HostileServer, wait_for

    with HostileServer("silent") as s:
        page = new_tab(tabs, {"width": 1366, "height": 768}, timeout_s=120)
        page.goto(f"{app_server.url}/{URL}")
        wait_idle(page)
        close_dialogs(page)
        page.get_by_role("textbox", name="Base URL").fill(s.base_url)
        page.get_by_role("button", name="Connect").click()
        # mid-connect: the request sent, no answer (the server counts the connection when it accepts it and the
        # request a moment later, when its handler has read it: wait for both)
        wait_for(lambda: s.open == 1 and s.requests == ["GET /v1/models"], 30)
        assert s.open == 1 and s.requests == ["GET /v1/models"]
        t0 = time.monotonic()
        page.close()  # the person closes the tab
        while s.open and time.monotonic() - t0 < 15:
            time.sleep(0.05)
        waited = time.monotonic() - t0
        print(f"connection closed {waited:.1f} s after the tab closed")
        assert s.open == 0, "the connection outlived the tab"
        assert waited < 10
