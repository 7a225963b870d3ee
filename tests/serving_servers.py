"""Real HTTP servers for the serving tests, all on 127.0.0.1 and stopped at the end:

- ``LlamaCppServer``: llama.cpp's own ``llama-server`` (built by scripts/build_llama_cpp.sh from the llama.cpp
  that llama-cpp-python vendors, in the same build as the wheel's libraries) running the embedded SmolLM2 GGUF with /metrics and /slots: the reference server
  the serving page must be right about (what most people run locally);
- ``LlamaServer``: llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``), kept for what it
  does differently (one request at a time, no /metrics);
- ``OddServer``: a tiny http.server that answers the way a misconfigured or different server does (a whole JSON
  reply to a streaming request, a 404 for an unknown model, no logprobs, garbage, silence, a 401 (and one whose
  message is a phishing text: ``PHISH``), and a vLLM-named
  /metrics page written by prometheus_client itself). It is a real server on a real socket, used only for the
  answers llama.cpp cannot be made to give, never to define what a correct metrics page looks like.
"""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from engine import settings

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "browser" / "screenshots"
MODEL_ALIAS = "smollm2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unavailable(why: str) -> None:
    """End a test whose llama.cpp cannot run (not installed, not built, or killed by a signal): under CI a failure,
    since a green CI must not hide the serving tests; elsewhere a skip that says why."""
    import pytest

    if settings.CI.get():
        pytest.fail(f"llama.cpp server tests cannot run under CI: {why}", pytrace=False)
    pytest.skip(f"llama.cpp server tests skipped: {why}")


def llama_cpp_missing() -> str | None:
    """Why the llama.cpp server cannot run here, or None if it can."""
    for mod in ("llama_cpp", "fastapi", "sse_starlette", "starlette_context"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (scripts/install.sh --test installs llama-cpp-python[server])"
    return None


class LlamaServer:
    """``python -m llama_cpp.server`` on a free port. Flags: 2 threads (the machine has 2 cores); logits_all (its
    default) so logprobs work; interrupt_requests off, or a new request would cut the streaming one short (which
    would break a concurrency sweep); a short model alias to name in requests."""

    def __init__(self, gguf: Path, n_ctx: int = 4096, extra: tuple[str, ...] = ()):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model = MODEL_ALIAS
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"llama-server-{self.port}.log"
        self.log = open(self.log_path, "w")
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", MODEL_ALIAS,
               "--host", "127.0.0.1", "--port", str(self.port), "--n_threads", "2", "--n_threads_batch", "2",
               "--n_ctx", str(n_ctx), "--logits_all", "True", "--interrupt_requests", "False",
               "--verbose", "False", *extra]
        # OMP_WAIT_POLICY=passive: llama.cpp's OpenMP threads otherwise spin while they wait for each other; on a
        # busy 2-core machine that made decoding 10-20x slower (1.5 vs 14-33 tokens/s measured side by side).
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.setdefault("OMP_WAIT_POLICY", "passive")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.flush()
                raise RuntimeError(f"llama_cpp.server exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.base_url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("llama_cpp.server did not start in 180 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def llama_server_binary() -> tuple[Path | None, str]:
    """(path to llama.cpp's ``llama-server`` built by scripts/build_llama_cpp.sh, None) or (None, why not).
    ``ILE_LLAMA_SERVER`` names another binary."""
    env = settings.LLAMA_SERVER.get()
    if env:
        return (env, "") if os.access(env, os.X_OK) else (None, f"ILE_LLAMA_SERVER={env} is not executable")
    try:
        out = subprocess.run(["bash", str(ROOT / "scripts" / "build_llama_cpp.sh"), "--path"], capture_output=True,
                             text=True, timeout=30, env=dict(os.environ, PYTHON=sys.executable))
        path = Path(out.stdout.strip())
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"scripts/build_llama_cpp.sh --path failed: {exc}"
    if path.is_file() and os.access(path, os.X_OK):
        return path, ""
    failed = path.parent / "build-failed.txt"
    if failed.is_file():
        return None, "llama-server could not be built on this machine: " + failed.read_text().splitlines()[0]
    return None, f"llama-server is not built yet ({path}); scripts/install.sh --test builds it (once per machine)"


def crash_of(server) -> str | None:
    """Why ``server``'s process is gone when a signal killed it (the native build faulted), else None."""
    code = server.proc.poll()
    if code is None or code >= 0:
        return None
    return str(ServerCrashed(code, ""))


class ServerCrashed(RuntimeError):
    """llama-server was killed by a signal while it started (a segmentation or protection fault in the binary built
    on this machine): a fault of that build, which the serving tests name (``unavailable``), never a pass."""

    def __init__(self, returncode: int, tail: str):
        import signal

        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        self.signal = name
        super().__init__(f"the llama.cpp built on this machine was killed by {name}; rebuild it (scripts/install.sh "
                         f"--test, after removing its cached build). Last log lines: {tail[-300:]}")


class LlamaCppServer:
    """llama.cpp's own ``llama-server`` on a free port, on the embedded GGUF: 2 threads (the machine has 2 cores),
    ``--metrics`` and ``--slots`` (what the serving page reads), ``--parallel`` slots that batch requests together,
    the model under a short alias. ``extra`` adds flags (e.g. a draft model for speculative decoding)."""

    def __init__(self, binary: Path, gguf: Path, parallel: int = 4, n_ctx: int = 8192, extra: tuple[str, ...] = ()):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model = MODEL_ALIAS
        self.parallel, self.n_ctx = parallel, n_ctx
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"llama-cpp-server-{self.port}.log"
        self.log = open(self.log_path, "w")
        cmd = [str(binary), "-m", str(gguf), "--alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(self.port),
               "-t", "2", "-tb", "2", "-c", str(n_ctx), "-np", str(parallel), "--metrics", "--slots",
               "--no-webui", *extra]
        env = dict(os.environ)
        env.setdefault("OMP_WAIT_POLICY", "passive")  # as for llama-cpp-python: no spinning threads on 2 busy cores
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.flush()
                if self.proc.returncode < 0:  # killed by a signal: the binary itself, not the test
                    raise ServerCrashed(self.proc.returncode, self.log_path.read_text()[-500:])
                raise RuntimeError(f"llama-server exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("llama-server did not start in 120 s")

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.base_url + path, timeout=20) as r:
            return r.read()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _metrics_text() -> bytes:
    """A vLLM-like /metrics page, written by prometheus_client (not by hand) with the names of the table's vLLM v1
    row (engine.serving.names, read from vLLM's documentation: no vLLM runs here)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

    from engine.serving.names import VLLM_V1

    n = VLLM_V1.names
    reg = CollectorRegistry()
    g = Gauge(n["kv_usage"], "KV-cache usage. 1 means 100 percent usage.", ["model_name"], registry=reg)
    g.labels("odd").set(0.25)
    Gauge(n["running"], "Running requests", ["model_name"], registry=reg).labels("odd").set(3)
    Gauge(n["waiting"], "Waiting requests", ["model_name"], registry=reg).labels("odd").set(1)
    OddServer.metrics_calls += 1
    k = OddServer.metrics_calls
    Counter(n["spec_drafts"], "drafts", ["model_name"], registry=reg).labels("odd").inc(10 * k)
    Counter(n["spec_draft_tokens"], "drafted", ["model_name"], registry=reg).labels("odd").inc(40 * k)
    Counter(n["spec_accepted"], "accepted", ["model_name"], registry=reg).labels("odd").inc(30 * k)
    return generate_latest(reg)


PHISH = ("Session expired: log in again at http://127.0.0.1:19009/login [here](http://evil.example/phish) or "
         "write to admin@evil.example, see www.evil.example/help <a href=\"http://evil.example\">now</a>")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _sse(self, events: list[str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for e in events:
            self.wfile.write(f"data: {e}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.01)
        self.close_connection = True

    def do_GET(self):
        mode = self.server.mode
        if self.path == "/v1/models":
            if mode == "phish":  # a hostile error text: bare URLs, a markdown link, an e-mail address, a www. name
                return self._send(401, json.dumps({"error": {"message": PHISH}}).encode())
            if mode == "auth" and "Authorization" not in self.headers:
                return self._send(401, b'{"error": {"message": "Invalid API key"}}')
            return self._send(200, json.dumps({"object": "list", "data": [{"id": "odd", "owned_by": "vllm"}]}).encode())
        if self.path == "/metrics" and mode == "metrics":
            return self._send(200, _metrics_text(), "text/plain; version=0.0.4")
        self._send(404, b'{"detail": "Not Found"}')

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(n) or b"{}")
        mode = self.server.mode
        if mode == "auth" and "Authorization" not in self.headers:
            return self._send(401, b'{"error": {"message": "Invalid API key"}}')
        if body.get("model") not in (None, "odd"):
            msg = {"error": {"message": f"The model `{body.get('model')}` does not exist.", "type": "NotFoundError",
                             "code": 404}}
            return self._send(404, json.dumps(msg).encode())
        if mode == "json":  # ignores stream=true
            return self._send(200, json.dumps({"choices": [{"text": " Paris", "index": 0}]}).encode())
        if mode == "garbage":
            return self._sse(["this is not json", "[DONE]"])
        if mode == "slow":
            time.sleep(3)
            return self._sse(["[DONE]"])
        # "plain" and "metrics": a streamed answer with no logprobs, whatever was asked
        words = [" Paris", ",", " of", " course", "."][: int(body.get("max_tokens", 5))]
        events = [json.dumps({"choices": [{"text": w, "index": 0, "logprobs": None, "finish_reason": None}]})
                  for w in words]
        events.append(json.dumps({"choices": [{"text": "", "index": 0, "finish_reason": "length"}]}))
        self._sse(events + ["[DONE]"])


class OddServer:
    metrics_calls = 0

    def __init__(self, mode: str):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.mode = mode
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def wait_for(pred, timeout: float = 5.0) -> bool:
    """Poll ``pred`` until it holds or ``timeout`` seconds pass: a hostile server's handler thread notices a
    closed connection a moment after the client closed it."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


# ------------------------------------------------------------------------------------------------ hostile
MB = 2**20
_BLOCK = b" " * MB  # one megabyte, reused: the hostile server never holds more than this


class HostileServer:
    """A raw-socket HTTP server on 127.0.0.1 that answers the way an attacker's server would, for the client's
    limits: every connection is counted (``connections``), every request line kept (``requests``), every byte
    sent counted (``sent``), and ``open`` is the number of connections the client has not closed yet (a handler
    waits on its socket until the client hangs up). Big replies are a generator of one reused megabyte, so the
    test process itself stays small.

    Modes: huge (1 GB JSON without a length), huge_declared (Content-Length 1 GB), long_line (an SSE stream whose
    first line is 300 MB), flood (valid 16 KB events without end), drip (one byte every ``drip_s``), keepalive (SSE comments only, every 0.2 s), silent
    (reads the request, answers nothing), redirect (302 to ``location``), gzip (a gzip bomb: 1 GB of spaces in a
    ~1 MB body, Content-Encoding gzip), headers (1 MB of headers), secret (a 200 HTML page, a 500 with a text
    body, and a non-JSON stream, all containing SECRET)."""

    SECRET = "SECRET-internal-admin-token"

    def __init__(self, mode: str, drip_s: float = 0.5, location: str = ""):
        import gzip

        self.mode, self.drip_s, self.location = mode, drip_s, location
        self.requests: list[str] = []
        self.connections = 0
        self.open = 0
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bomb = gzip.compress(_BLOCK * 64, 9) if mode == "gzip" else b""  # 64 MB inflated, ~64 KB sent
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.sock.close()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self.open += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _send(self, conn, data: bytes) -> None:
        conn.sendall(data)
        with self._lock:
            self.sent += len(data)

    def _read_request(self, conn) -> tuple[str, str]:
        buf = b""
        while b"\r\n\r\n" not in buf:
            got = conn.recv(65536)
            if not got:
                raise ConnectionError("closed")
            buf += got
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        n = next((int(v.split(":", 1)[1]) for v in lines if v.lower().startswith("content-length:")), 0)
        while len(rest) < n:
            rest += conn.recv(65536)
        method, path = lines[0].split(" ")[:2]
        with self._lock:
            self.requests.append(f"{method} {path}")
        return method, path

    def _wait_close(self, conn) -> None:
        conn.settimeout(None)
        while conn.recv(65536):
            pass

    def _serve(self, conn):
        try:
            method, path = self._read_request(conn)
            getattr(self, f"_{self.mode}")(conn, method, path)
            self._wait_close(conn)
        except OSError:
            pass
        finally:
            conn.close()
            with self._lock:
                self.open -= 1

    def _head(self, conn, code="200 OK", ctype="application/json", extra=""):
        self._send(conn, f"HTTP/1.1 {code}\r\nContent-Type: {ctype}\r\n{extra}\r\n".encode())

    def _forever(self, conn, total: int, first: bytes = b"") -> None:
        self._send(conn, first)
        left = total - len(first)
        while left > 0 and not self._stop.is_set():
            self._send(conn, _BLOCK[:min(MB, left)])
            left -= MB

    def _huge(self, conn, method, path):
        self._head(conn, extra="Connection: close\r\n")
        self._forever(conn, 1024 * MB, b'{"data": [{"id": "')

    def _huge_declared(self, conn, method, path):
        self._head(conn, extra=f"Content-Length: {1024 * MB}\r\n")
        self._forever(conn, 1024 * MB, b'{"data": "')

    def _long_line(self, conn, method, path):
        self._head(conn, ctype="text/event-stream", extra="Connection: close\r\n")
        self._forever(conn, 300 * MB, b'data: {"choices": [{"text": "')

    def _drip(self, conn, method, path):
        ctype = "text/event-stream" if method == "POST" else "application/json"
        self._head(conn, ctype=ctype, extra="Connection: close\r\n")
        while not self._stop.is_set():
            self._send(conn, b" ")
            time.sleep(self.drip_s)

    def _keepalive(self, conn, method, path):
        self._head(conn, ctype="text/event-stream", extra="Connection: close\r\n")
        while not self._stop.is_set():
            self._send(conn, b": ping\n\n")
            time.sleep(0.2)

    def _flood(self, conn, method, path):
        """Valid events without end, 16 KB of text each."""
        self._head(conn, ctype="text/event-stream", extra="Connection: close\r\n")
        event = b'data: {"choices": [{"text": "' + b"x" * 16384 + b'", "index": 0}]}\n\n'
        burst = event * 64
        while not self._stop.is_set():
            self._send(conn, burst)

    def _silent(self, conn, method, path):
        pass  # the handler then waits for the client to hang up

    def _redirect(self, conn, method, path):
        self._head(conn, "302 Found", extra=f"Location: {self.location}{path}\r\nContent-Length: 0\r\n")

    def _gzip(self, conn, method, path):
        self._head(conn, extra=f"Content-Encoding: gzip\r\nContent-Length: {len(self._bomb)}\r\n")
        self._send(conn, self._bomb)

    def _headers(self, conn, method, path):
        self._send(conn, b"HTTP/1.1 200 OK\r\n")
        for i in range(1024):
            self._send(conn, f"X-Pad-{i}: {'a' * 1000}\r\n".encode())
        self._send(conn, b"Content-Length: 2\r\n\r\n{}")

    def _secret(self, conn, method, path):
        page = f"<html><body>{self.SECRET}</body></html>".encode()
        if path == "/v1/models":
            self._head(conn, ctype="text/html", extra=f"Content-Length: {len(page)}\r\n")
        elif path == "/metrics":
            self._head(conn, "500 Internal Server Error", "text/plain", f"Content-Length: {len(page)}\r\n")
        else:
            self._head(conn, ctype="text/event-stream", extra="Connection: close\r\n")
            page = f"data: {self.SECRET}\n\n".encode()
        self._send(conn, page)
