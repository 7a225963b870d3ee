"""Browser sessions without a browser: each ``Tab`` opens one Streamlit session over the served app's own websocket
(the protocol scripts/warm.py speaks), runs a page, and acts as the page's frontend does for what the class tests
and the class probe (scripts/class_probe.py) need: it keeps the widgets' values, sends a radio pick or a button
press as a rerun of the widget's fragment, uploads a file as the uploader does (PUT to Streamlit's upload endpoint,
then a rerun naming it), and reruns every ``run_every`` fragment on the interval the server asks for (Streamlit's
auto-rerun messages), as the browser's own timer does. It reads what a person would read: metrics, markdown, radio
options, error boxes, and when its first run ended.

Thirty of them cost the server what thirty students' tabs cost it, and the test machine none of Chromium's
drawing (30 Chromium tabs do not fit 2 shared cores). Standard library, Streamlit's protobuf messages and the
websockets client only (what Streamlit itself depends on)."""
from __future__ import annotations

import asyncio
import time
import urllib.parse
from dataclasses import dataclass, field


@dataclass
class Widget:
    id: str
    fragment: str  # the fragment that drew it ("" for the page's own run)
    options: tuple[str, ...] = ()
    chosen: int | None = None  # a radio's option shown as chosen


@dataclass
class Tab:
    url: str  # the server, http://host:port
    page: str  # the page's URL path, e.g. "tokenization"
    query: dict
    headers: dict = field(default_factory=dict)
    radios: dict = field(default_factory=dict)  # widget id -> Widget, in the order first drawn
    buttons: dict = field(default_factory=dict)  # label -> Widget
    metrics: dict = field(default_factory=dict)  # label -> (value, time.monotonic() it was drawn)
    texts: list = field(default_factory=list)  # (time.monotonic(), markdown body), in order
    alerts: list = field(default_factory=list)  # (time.monotonic(), body) of st.error/warning/info/success boxes
    errors: list = field(default_factory=list)  # exception boxes drawn
    uploaders: dict = field(default_factory=dict)  # label -> Widget
    runs_finished: int = 0
    session_id: str = ""  # the server's id of this session (its uploads go under it)
    opened_at: float = 0.0  # time.monotonic() when open() began
    first_run_at: float | None = None  # time.monotonic() when the first run (the whole page) finished

    async def open(self) -> None:
        from websockets.asyncio.client import connect

        self.opened_at = time.monotonic()
        self._ws = await connect(self.url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                                 additional_headers=self.headers, max_size=None)
        self._states: dict = {}  # widget id -> WidgetState proto (values the frontend keeps)
        self._timers: dict = {}  # fragment id -> task rerunning it
        self._finished = asyncio.Event()
        self._reader = asyncio.create_task(self._read())
        await self._send()

    async def close(self) -> None:
        for t in self._timers.values():
            t.cancel()
        self._reader.cancel()
        await self._ws.close()

    async def wait_run(self, timeout: float = 300.0) -> None:
        """Until the page's current run has finished (its first run: the whole page)."""
        await asyncio.wait_for(self._finished.wait(), timeout)

    def radio(self, key: str) -> Widget | None:
        """The radio drawn last whose widget key starts with ``key`` (a page may ask two questions; a new round
        draws a new radio)."""
        return next((w for wid, w in reversed(self.radios.items()) if wid.split("-", 2)[-1].startswith(key)), None)

    async def pick(self, key: str, option: int | None = None, raw=None) -> None:
        """Choose option ``option`` of the radio ``key`` (its widget key's start, e.g. "timeline_try_pick"), as
        the frontend sends it (the option's text); ``raw``: send this WidgetState field instead, e.g.
        ("string_value", "<forged>")."""
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        w = self.radio(key)
        s = WidgetState(id=w.id)
        name, value = raw if raw is not None else ("string_value", w.options[option])
        setattr(s, name, value)
        self._states[w.id] = s
        await self._send(fragment=w.fragment)

    async def press(self, label: str) -> None:
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        w = self.buttons[label]
        await self._send(fragment=w.fragment, trigger=WidgetState(id=w.id, trigger_value=True))

    async def upload(self, label: str, data: bytes, name: str = "run.json") -> int:
        """Upload ``data`` to the uploader ``label`` as the browser does: PUT it to the upload endpoint under a new
        file id of this session, then rerun naming it. The PUT's status (a refused file is not named)."""
        import uuid

        from streamlit.proto.Common_pb2 import FileUploaderState
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        file_id = uuid.uuid4().hex
        url = f"/_stcore/upload_file/{self.session_id}/{file_id}"
        status = await asyncio.get_running_loop().run_in_executor(None, put_file, self.url, url, data, name,
                                                                   self.headers)
        if status in (200, 204):
            w = self.uploaders[label]
            state = FileUploaderState()
            info = state.uploaded_file_info.add(file_id=file_id, name=name, size=len(data))
            info.file_urls.file_id, info.file_urls.upload_url, info.file_urls.delete_url = file_id, url, url
            self._states[w.id] = WidgetState(id=w.id, file_uploader_state_value=state)
            await self._send(fragment=w.fragment)
        return status

    def said(self, *words: str, since: float = 0.0) -> float | None:
        """When markdown containing any of ``words`` was first drawn after ``since`` (None: not yet)."""
        return next((t for t, body in self.texts if t >= since and any(w in body for w in words)), None)

    async def _send(self, fragment: str = "", trigger=None, auto: bool = False) -> None:
        from streamlit.proto.BackMsg_pb2 import BackMsg

        msg = BackMsg()
        rs = msg.rerun_script
        rs.query_string = urllib.parse.urlencode(self.query)
        rs.page_script_hash = ""
        rs.page_name = self.page
        rs.widget_states.widgets.extend(list(self._states.values()) + ([trigger] if trigger is not None else []))
        rs.fragment_id = fragment
        rs.is_auto_rerun = auto
        if not fragment:
            self._finished.clear()
        await self._ws.send(msg.SerializeToString())

    async def _every(self, fragment: str, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            await self._send(fragment=fragment, auto=True)

    async def _read(self) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        async for raw in self._ws:
            fwd = ForwardMsg()
            fwd.ParseFromString(raw)
            kind = fwd.WhichOneof("type")
            if kind == "new_session":
                self.session_id = fwd.new_session.initialize.session_id
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                self._element(fwd.delta.new_element, fwd.delta.fragment_id)
            elif kind == "auto_rerun":
                fid = fwd.auto_rerun.fragment_id
                if fid not in self._timers:
                    self._timers[fid] = asyncio.create_task(self._every(fid, fwd.auto_rerun.interval))
            elif kind == "stop_auto_rerun":
                for fid in fwd.stop_auto_rerun.fragment_ids:
                    if t := self._timers.pop(fid, None):
                        t.cancel()
            elif kind == "page_info_changed":  # the page rewrote its address, as the browser's bar shows it
                self.query = dict(urllib.parse.parse_qsl(fwd.page_info_changed.query_string))
            elif kind == "script_finished":
                self.runs_finished += 1
                self.first_run_at = self.first_run_at or time.monotonic()
                self._finished.set()

    def _element(self, el, fragment: str) -> None:
        now = time.monotonic()
        kind = el.WhichOneof("type")
        if kind == "radio":
            self.radios[el.radio.id] = Widget(el.radio.id, fragment, tuple(el.radio.options),
                                                 el.radio.default if el.radio.HasField("default") else None)
        elif kind == "button":
            self.buttons[el.button.label] = Widget(el.button.id, fragment)
        elif kind == "file_uploader":
            self.uploaders[el.file_uploader.label] = Widget(el.file_uploader.id, fragment)
        elif kind == "metric":
            self.metrics[el.metric.label] = (el.metric.body, now)
        elif kind == "markdown":
            self.texts.append((now, el.markdown.body))
            del self.texts[:-400]  # a polling page draws its box every second: keep the recent ones
        elif kind == "alert":
            self.alerts.append((now, el.alert.body))
            del self.alerts[:-400]
        elif kind == "exception":
            self.errors.append(f"{el.exception.type}: {el.exception.message}")


def xsrf_cookie(url: str) -> str:
    """The XSRF token the server hands a browser (its cookie), which an upload sends back as cookie and header."""
    import http.client

    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("GET", "/_stcore/health")
        resp = conn.getresponse()
        resp.read()
        return next(c.split("=", 1)[1].split(";")[0] for c in resp.headers.get_all("Set-Cookie") or []
                    if c.startswith("_streamlit_xsrf="))
    finally:
        conn.close()


def put_file(base: str, path: str, data: bytes, name: str = "run.json", headers: dict | None = None) -> int:
    """PUT ``data`` as Streamlit's uploader sends a file (multipart, its XSRF cookie and header); the status, or 413
    where the server cut the body off."""
    import http.client
    import uuid

    token = xsrf_cookie(base)
    boundary = uuid.uuid4().hex
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            "Content-Type: application/json\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.putrequest("PUT", path)
    for k, v in {**(headers or {}), "Content-Type": f"multipart/form-data; boundary={boundary}",
                 "Content-Length": str(len(head) + len(data) + len(tail)), "Cookie": f"_streamlit_xsrf={token}",
                 "X-Xsrftoken": token}.items():
        conn.putheader(k, v)
    conn.endheaders()
    try:
        conn.send(head)
        view = memoryview(data)
        for i in range(0, len(data), 2**20):
            conn.send(view[i:i + 2**20])
        conn.send(tail)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered before the body ended
    try:
        return conn.getresponse().status
    finally:
        conn.close()


def run(coroutine, timeout: float = 900.0):
    """Run ``coroutine`` to its end on a thread of its own (the browser tier's Playwright keeps an event loop on
    the test's thread, where asyncio.run refuses to start another)."""
    import threading

    out: list = []

    def target():
        try:
            out.append(("ok", asyncio.run(coroutine)))
        except BaseException as e:  # handed to the test's thread, which raises it
            out.append(("error", e))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    if not out:
        raise TimeoutError(f"the class sessions did not finish in {timeout:.0f} s")
    if out[0][0] == "error":
        raise out[0][1]
    return out[0][1]


class Crowd:
    """Tabs on an event loop of their own thread, driven from synchronous code (a Playwright test, whose sync API
    keeps its own loop on the test's thread)."""

    def __init__(self):
        import threading

        self.loop = asyncio.new_event_loop()
        self.tabs: list[Tab] = []
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def do(self, coroutine, timeout: float = 300.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def open(self, tabs: list[Tab], timeout: float = 300.0) -> None:
        """Open ``tabs`` together and wait for each page's first run."""
        async def go():
            await asyncio.gather(*(t.open() for t in tabs))
            await asyncio.gather(*(t.wait_run(timeout) for t in tabs))
        self.tabs += tabs
        self.do(go(), timeout + 30)

    def close(self) -> None:
        async def go():
            await asyncio.gather(*(t.close() for t in self.tabs), return_exceptions=True)
        try:
            self.do(go(), 30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
