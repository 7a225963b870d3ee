"""What the class server trusts, through the served app (websocket sessions, as scripts/warm.py and a student's
browser open them). The warm-up header counts only with this start's secret: a forged one ran its jobs outside the
seats and hid them from the class view. ``X-Forwarded-For`` names nobody unless the teacher named the proxy: 34
forged addresses from this machine had taken 23 long rows instead of 3. The server's log gives each job's client tag
(engine/jobs/worker.py), so the test reads who the server thought asked."""
from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.parse

import pytest

from tests.browser.harness import App

SECRET = "the-start's-own-warm-up-secret"
LINE = re.compile(r"worker: (answer(?: \(warm-up\))?) done session=\S+ .*?client=(\w+|-)")


async def _session(url: str, query: dict, headers: dict, timeout: float = 300.0) -> bool:
    """One browser session's first run of the home page (Streamlit's own websocket protocol), to its end."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.asyncio.client import connect

    msg = BackMsg()
    msg.rerun_script.query_string = urllib.parse.urlencode(query)
    msg.rerun_script.page_script_hash = ""
    deadline = time.monotonic() + timeout
    async with connect(url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                       additional_headers=headers, max_size=None) as ws:
        await ws.send(msg.SerializeToString())
        while time.monotonic() < deadline:
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(ws.recv(), timeout=max(1.0, deadline - time.monotonic())))
            if fwd.WhichOneof("type") == "script_finished":
                return True
    return False


def _in_a_thread(coroutine):
    """Run ``coroutine`` to its end on a thread of its own: the browser tier's Playwright (sync API) keeps an event
    loop running on the test's thread, where asyncio.run refuses to start another."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(asyncio.run(coroutine)), daemon=True)
    t.start()
    t.join(400)
    return bool(out and out[0])


def _answers(app: App, since: int) -> list[tuple[str, str]]:
    """(kind, client tag) of every answer the server finished after the first ``since`` characters of its log."""
    return LINE.findall(open(app.log.name).read()[since:])


@pytest.mark.browser
def test_the_server_trusts_no_forged_warm_up_and_no_forwarded_address():
    app = App(env={"ILE_WARM_SECRET": SECRET, "ILE_TRUSTED_PROXIES": "", "ILE_PREPARE_GEMMA": "off"})
    try:
        base = {"model": "tiny-random", "max_new_tokens": "2", "temperature": "0"}

        def ask(prompt: str, headers: dict) -> list[tuple[str, str]]:
            since = len(open(app.log.name).read())
            assert _in_a_thread(_session(app.url, {**base, "prompt": prompt}, headers))
            deadline = time.monotonic() + 60
            while not _answers(app, since) and time.monotonic() < deadline:
                time.sleep(0.2)  # the log line is written as the job ends, before the page's last draw
            return _answers(app, since)

        forged = ask("A script says it is the warm-up.", {"X-ILE-Warm-Up": "1"})
        assert forged and forged[0][0] == "answer", f"a forged warm-up header was believed: {forged}"
        real = ask("The start's own warm-up.", {"X-ILE-Warm-Up": SECRET})
        assert real and real[0][0] == "answer (warm-up)", f"the warm-up with the secret was not known: {real}"

        plain = ask("A tab on this machine.", {})
        clients = {plain[0][1]}
        for i in range(3):  # a script on this machine pretending to be three computers of the room
            got = ask(f"Forged computer {i}.", {"X-Forwarded-For": f"10.9.9.{i + 1}"})
            clients.add(got[0][1])
        assert len(clients) == 1, f"forged X-Forwarded-For made {len(clients)} clients out of one machine"
    finally:
        app.stop()
