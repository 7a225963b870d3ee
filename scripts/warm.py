"""Warm a freshly started app before its first visitor: open one session over Streamlit's own websocket, run the
home page with its default settings, and leave.

Why: the first page after a start imports torch and every module, loads the model and runs the default prompt
(about 100 s once on a busy laptop). This does that work right after the start, in the server itself, so the run is
in the app's caches when a person (or a class opening the teacher's link) arrives. It draws nothing and changes no
setting. Uses only what Streamlit itself depends on (its protobuf messages and the websockets client).

    python scripts/warm.py [--url http://127.0.0.1:8501] [--timeout 900] [--streamlit-args ARGS...]

scripts/start.sh runs it in the background with the arguments it gives `streamlit run` (the port and base path are
read from them); ILE_WARM=off skips it.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import urllib.request


def _healthy(url: str) -> bool:
    try:
        return urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


async def _run_home(url: str, timeout: float) -> bool:
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.asyncio.client import connect

    msg = BackMsg()
    msg.rerun_script.query_string = ""
    msg.rerun_script.page_script_hash = ""
    deadline = time.monotonic() + timeout
    async with connect(url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                       max_size=None) as ws:
        await ws.send(msg.SerializeToString())
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(ws.recv(), timeout=max(1.0, deadline - time.monotonic()))
            fwd = ForwardMsg()
            fwd.ParseFromString(raw)
            if fwd.WhichOneof("type") == "script_finished":
                return True
    return False


def url_from_streamlit_args(args: list[str]) -> str:
    """The local address of a server started with these `streamlit run` arguments (port and base path)."""
    opts = {}
    it = iter(args)
    for a in it:
        if a.startswith("--server.") or a.startswith("--server_"):
            key, eq, value = a.partition("=")
            opts[key.replace("_", ".", 1)] = value if eq else next(it, "")
    port = opts.get("--server.port", "8501")
    base = opts.get("--server.baseUrlPath", "").strip("/")
    host = opts.get("--server.address", "") or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}" + (f"/{base}" if base else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=None, help="the app's address (default: from --streamlit-args, else :8501)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the server and the run")
    ap.add_argument("--streamlit-args", nargs=argparse.REMAINDER, default=[],
                    help="the arguments given to `streamlit run` (last on the line)")
    args = ap.parse_args()
    if os.environ.get("ILE_WARM", "on").lower() in ("off", "0", "no"):
        return 0
    url = (args.url or url_from_streamlit_args(args.streamlit_args)).rstrip("/")
    t0 = time.monotonic()
    parent = os.getppid()  # under start.sh: the server itself (start.sh execs it); gone means nothing to warm
    while not _healthy(url):
        if time.monotonic() - t0 > args.timeout or os.getppid() != parent:
            print("[warm] the app did not start; nothing warmed", file=sys.stderr)
            return 1
        time.sleep(1)
    try:
        ok = asyncio.run(_run_home(url, args.timeout - (time.monotonic() - t0)))
    except Exception as exc:  # noqa: BLE001  warming is a courtesy: say why, never fail the start
        print(f"[warm] could not warm the app: {exc!r}", file=sys.stderr)
        return 1
    took = time.monotonic() - t0
    print(f"[warm] the home page ran {took:.0f} s after the start: the first visitor's page is ready" if ok else
          f"[warm] the home page run did not finish within {took:.0f} s", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
