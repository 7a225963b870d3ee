"""A served app refuses an upload over the saved run's 64 MB at Streamlit's own endpoint (issue 49): the uploader's
max_upload_size is applied by the browser only, and the endpoint took 190 MB files under any file id. A session is
opened over Streamlit's websocket, as scripts/warm.py opens one, and files are PUT to the endpoint as the browser's
uploader sends them (its XSRF cookie and header included); a small one is taken, so the refusal is the size's."""
import asyncio
import http.client
import uuid

import pytest

from tests.browser.harness import App

MB = 2**20


def _put(app: App, session: str, cookie: str, size: int) -> int:
    """PUT a ``size``-byte file as the uploader does; the status, or 413 where the server cut the body off."""
    boundary = uuid.uuid4().hex
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"run.json\"\r\n"
            "Content-Type: application/json\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=120)
    conn.putrequest("PUT", f"/_stcore/upload_file/{session}/{uuid.uuid4().hex}")
    conn.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
    conn.putheader("Content-Length", str(len(head) + size + len(tail)))
    conn.putheader("Cookie", f"_streamlit_xsrf={cookie}")
    conn.putheader("X-Xsrftoken", cookie)
    conn.endheaders()
    try:
        conn.send(head)
        chunk = b" " * MB
        for _ in range(size // MB):
            conn.send(chunk)
        conn.send(b" " * (size % MB) + tail)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered before the body ended
    try:
        return conn.getresponse().status
    finally:
        conn.close()


async def _session_then_puts(app: App, sizes: list[int]) -> list[int]:
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.asyncio.client import connect

    conn = http.client.HTTPConnection("127.0.0.1", app.port, timeout=30)
    conn.request("GET", "/_stcore/health")  # its answer sets the XSRF cookie, as the browser first asks it
    resp = conn.getresponse()
    resp.read()
    cookie = next(c.split("=", 1)[1].split(";")[0] for c in resp.headers.get_all("Set-Cookie") or []
                  if c.startswith("_streamlit_xsrf="))
    msg = BackMsg()
    msg.rerun_script.query_string = "model=tiny-random"
    msg.rerun_script.page_script_hash = ""
    async with connect(app.url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                       additional_headers={"Cookie": f"_streamlit_xsrf={cookie}"}, max_size=None) as ws:
        await ws.send(msg.SerializeToString())
        session = None
        while session is None:
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(ws.recv(), timeout=120))
            if fwd.WhichOneof("type") == "new_session":
                session = fwd.new_session.initialize.session_id
        loop = asyncio.get_running_loop()
        return [await loop.run_in_executor(None, _put, app, session, cookie, n) for n in sizes]


def test_the_upload_endpoint_refuses_a_file_over_the_saved_runs_cap(monkeypatch):
    monkeypatch.setenv("ILE_MODELS", "tiny-random")
    app = App()
    try:
        small, large = asyncio.run(_session_then_puts(app, [1 * MB, 70 * MB]))
    finally:
        app.stop()
    assert small in (200, 204), small  # the endpoint takes a file from this session: the refusal below is its size
    assert large == 413, large
