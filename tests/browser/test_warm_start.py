"""scripts/warm.py (run by scripts/start.sh): right after a start it runs the home page once in the server, so the
first visitor finds the model loaded and the default run in the cache (about 100 s once on a busy laptop)."""
import os
import subprocess
import sys
import time

from tests.browser.harness import ROOT, App, wait_text

sys.path.insert(0, str(ROOT / "scripts"))
from warm import url_from_streamlit_args  # noqa: E402


def test_the_port_and_base_path_come_from_streamlits_arguments():
    assert url_from_streamlit_args([]) == "http://127.0.0.1:8501"
    assert url_from_streamlit_args(["--server.address", "0.0.0.0", "--server.port", "9000"]) == "http://127.0.0.1:9000"
    assert url_from_streamlit_args(["--server.port=9001", "--server.baseUrlPath", "/class/"]) == \
        "http://127.0.0.1:9001/class"


def test_a_warmed_server_answers_the_first_visitor_from_its_cache(embedded_lm, browser):
    secret = {"ILE_WARM_SECRET": "this start's warm-up secret"}  # as scripts/start.sh gives both (docs/class.md)
    app = App(env=secret)
    try:
        out = subprocess.run([sys.executable, "scripts/warm.py", "--url", app.url, "--timeout", "600"], cwd=ROOT,
                             capture_output=True, text=True, timeout=700, env={**os.environ, **secret})
        assert out.returncode == 0, out.stderr
        assert app.pages_run() == {"loop"}, app.run_log.read_text()
        warmed = app.worker_stats()
        assert warmed.get("submitted", 0) >= 1, warmed  # the warm run did the model work
        ctx = browser.new_context(viewport={"width": 1366, "height": 768})
        page = ctx.new_page()
        t0 = time.time()
        page.goto(app.url + "/")
        wait_text(page, "the model chose", timeout=300)
        waited = time.time() - t0
        ctx.close()
        stats = app.worker_stats()
        print(f"warmed: {out.stderr.strip()}; first visitor's answer after {waited:.1f} s; worker {stats}")
        assert stats.get("submitted") == warmed["submitted"], (warmed, stats)  # the visitor's page: all cached
    finally:
        app.stop()
