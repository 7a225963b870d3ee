"""A served app refuses an upload over the saved run's 64 MB at Streamlit's own endpoint (issue 49): the uploader's
max_upload_size is applied by the browser only, and the endpoint took 190 MB files under any file id. A session is
opened over Streamlit's websocket, as scripts/warm.py opens one, and files are PUT to the endpoint as the browser's
uploader sends them (its XSRF cookie and header included: scripts/class_tabs.py); a small one is taken, so the
refusal is the size's."""
import asyncio
import uuid

from scripts.class_tabs import Tab, put_file, run
from tests.browser.harness import App

MB = 2**20


async def _session_then_puts(app: App, sizes: list[int]) -> list[int]:
    tab = Tab(app.url, "", {"model": "tiny-random"})
    await tab.open()
    try:
        await tab.wait_run(300)
        loop = asyncio.get_running_loop()
        return [await loop.run_in_executor(None, put_file, app.url,
                                           f"/_stcore/upload_file/{tab.session_id}/{uuid.uuid4().hex}", b" " * n)
                for n in sizes]
    finally:
        await tab.close()


def test_the_upload_endpoint_refuses_a_file_over_the_saved_runs_cap(monkeypatch):
    monkeypatch.setenv("ILE_MODELS", "tiny-random")
    app = App()
    try:
        small, large = run(_session_then_puts(app, [1 * MB, 70 * MB]), timeout=600)
    finally:
        app.stop()
    assert small in (200, 204), small  # the endpoint takes a file from this session: the refusal below is its size
    assert large == 413, large
