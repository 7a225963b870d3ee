"""Real browser against a real llama.cpp server (llama-cpp-python running the embedded GGUF on 127.0.0.1):
connect, stream one request, ask for the next-token distribution, run the prompt-length sweep and a concurrency
sweep up to 8 parallel requests; every chart drawn, no error; screenshot at 1366x768 (the README shows it)."""
from tests.browser.harness import assert_no_error, close_dialogs, screenshot, wait_idle
from ui import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/serving.py")


def _click(page, key: str, timeout: float = 300) -> None:
    page.locator(f".st-key-{key} button").first.click()
    wait_idle(page, timeout=timeout)
    assert_no_error(page)


def test_serving_page_against_llama_cpp(app_server, llama_server, browser):
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    page = ctx.new_page()
    page.set_default_timeout(180_000)
    try:
        page.goto(f"{app_server.url}/{URL}")
        wait_idle(page)
        close_dialogs(page)
        assert_no_error(page)
        page.get_by_role("textbox", name="Base URL").fill(llama_server.base_url)
        page.get_by_role("textbox", name="Model name").fill(llama_server.model)
        page.get_by_role("button", name="Connect").click()
        wait_idle(page)
        assert_no_error(page)
        body = page.inner_text("body")
        assert "Connected to llama-cpp-python" in body and "no /metrics endpoint" in body  # what it is, what it lacks
        assert "serve_url=" in page.url and "serve_model=smollm2" in page.url

        _click(page, "serving_send")
        assert "Time to first token" in page.inner_text("body")
        _click(page, "serving_nt")
        _click(page, "serving_sweep_run")
        _click(page, "serving_cs_run")  # default levels 1, 2, 4, 8
        body = page.inner_text("body")
        assert "8 requests sent at the same moment" in body
        assert "the server batches requests" not in body  # llama-cpp-python's server runs one request at a time
        assert "reported no KV-cache usage" in body and "reports no speculative-decoding counters" in body
        charts = page.locator('[data-testid="stPlotlyChart"]').count()
        assert charts == 6, charts  # timeline, gaps, next token, prompt sweep, concurrency, gantt
        screenshot(page, URL)
    finally:
        ctx.close()


def test_closing_the_tab_mid_connect_closes_the_connection(app_server, browser):
    """Issue 30: Connect against a server that accepts and never answers, then close the tab. The probe runs as a
    job on the network worker; Streamlit stops the closed tab's script, the waiter detaches, the job is cancelled
    and its socket closed within seconds (it used to stay open until the app restarted)."""
    import time

    from tests.serving_servers import HostileServer

    with HostileServer("silent") as s:
        ctx = browser.new_context(viewport={"width": 1366, "height": 768})
        page = ctx.new_page()
        page.set_default_timeout(120_000)
        page.goto(f"{app_server.url}/{URL}")
        wait_idle(page)
        close_dialogs(page)
        page.get_by_role("textbox", name="Base URL").fill(s.base_url)
        page.get_by_role("button", name="Connect").click()
        end = time.monotonic() + 30
        while s.open == 0 and time.monotonic() < end:
            time.sleep(0.05)
        assert s.open == 1 and s.requests == ["GET /v1/models"]  # mid-connect: the request sent, no answer
        t0 = time.monotonic()
        ctx.close()  # the person closes the tab
        while s.open and time.monotonic() - t0 < 15:
            time.sleep(0.05)
        waited = time.monotonic() - t0
        print(f"connection closed {waited:.1f} s after the tab closed")
        assert s.open == 0, "the connection outlived the tab"
        assert waited < 10
