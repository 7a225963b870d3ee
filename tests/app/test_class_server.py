"""A real class server: Streamlit's /_stcore/metrics, open to anyone who can reach the server, is a live
activity feed of a class (sessions, connects, cache hits by function). A class server answers it with no metrics;
a server for one person keeps Streamlit's (so this test can tell the two apart). No browser: the app's warm-up
client opens the session and the endpoint is read over HTTP, so this runs with the app tier."""
import subprocess
import sys
import urllib.request

import pytest

from tests.browser.harness import ROOT, App


@pytest.mark.parametrize("class_mode", ["on", "off"])
def test_the_metrics_endpoint_is_not_a_students_to_read(monkeypatch, class_mode):
    monkeypatch.setenv("ILE_CLASS_MODE", class_mode)
    monkeypatch.setenv("ILE_MODELS", "tiny-random")
    app = App()
    try:
        # one session runs the home page (the app's own warm-up client, over Streamlit's websocket)
        subprocess.run([sys.executable, "scripts/warm.py", "--url", app.url, "--timeout", "300"], cwd=ROOT,
                       check=True, timeout=330, capture_output=True)
        text = urllib.request.urlopen(app.url + "/_stcore/metrics", timeout=30).read().decode()
        every = urllib.request.urlopen(app.url + "/_stcore/metrics?families=session_events&families=cache",
                                       timeout=30).read().decode()
    finally:
        app.stop()
    if class_mode == "on":
        for t in (text, every):
            assert "session" not in t and "cache" not in t, t[:800]
    else:
        assert "session" in text and "cache" in text, "Streamlit's own metrics (the check can fail)"
