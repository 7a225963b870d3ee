"""Right after a start: print the links a teacher needs once the server answers, then warm the app before its first
visitor (open one session over Streamlit's own websocket, run the home page with its default settings, and leave).

Why warm: the first page after a start imports torch and every module, loads the model and runs the default prompt
(about 100 s once on a busy laptop). This does that work right after the start, in the server itself, so the run is
in the app's caches when a person (or a class opening the teacher's link) arrives. It draws nothing and changes no
setting, and the server knows its session as the warm-up (the ``X-ILE-Warm-Up`` header, whose value is this start's
``ILE_WARM_SECRET``: scripts/start.sh gives it to the server and to this script only): the class view never
counts it as a student's answer, and it never shares a batch with one. Uses only what Streamlit itself depends on
(its protobuf messages and the websockets client) and the app's stdlib address helper (ui/frame/address.py).

    python scripts/warm.py [--url http://127.0.0.1:8501] [--timeout 900] [--server-pid PID]
                           [--streamlit-args ARGS...]

scripts/start.sh runs it in the background with the arguments it gives `streamlit run` (the address, port and base
path are read from them) and the server's process id (it gives up when that process is gone); ILE_WARM=off skips
the warming (the links are printed all the same).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import engine.settings as settings  # noqa: E402  (standard library only: no torch)
from ui.frame.address import for_others  # noqa: E402

WARM_HEADER = "X-ILE-Warm-Up"  # the server's side: ui/frame/work.py


def say(line: str) -> None:
    """One line in one write: the server writes to the same terminal, and print()'s text and newline, two writes
    when Python is unbuffered, let another process's line in between (two lines glued, then an empty one)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _healthy(url: str) -> bool:
    try:
        return urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


async def _run_home(url: str, timeout: float, query: str = "") -> bool:
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.asyncio.client import connect

    msg = BackMsg()
    msg.rerun_script.query_string = query
    msg.rerun_script.page_script_hash = ""
    deadline = time.monotonic() + timeout
    async with connect(url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"],
                       additional_headers={WARM_HEADER: settings.WARM_SECRET.get()}, max_size=None) as ws:
        await ws.send(msg.SerializeToString())
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(ws.recv(), timeout=max(1.0, deadline - time.monotonic()))
            fwd = ForwardMsg()
            fwd.ParseFromString(raw)
            if fwd.WhichOneof("type") == "script_finished":
                return True
    return False


def streamlit_options(args: list[str]) -> dict[str, str]:
    """``--server.port 9000 --server.address=0.0.0.0`` -> {"--server.port": "9000", ...} (the last one given wins,
    as for `streamlit run`)."""
    opts = {}
    it = iter(args)
    for a in it:
        if a.startswith("--server.") or a.startswith("--server_"):
            key, eq, value = a.partition("=")
            opts[key.replace("_", ".", 1)] = value if eq else next(it, "")
    return opts


def url_from_streamlit_args(args: list[str]) -> str:
    """The local address of a server started with these `streamlit run` arguments (port and base path)."""
    opts = streamlit_options(args)
    port = opts.get("--server.port", "8501")
    base = opts.get("--server.baseUrlPath", "").strip("/")
    host = opts.get("--server.address", "") or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}" + (f"/{base}" if base else "")


def start_lines(args: list[str], token: str, server_pid: int | None = None, lan: str | None = None) -> list[str]:
    """What the start prints once the server answers: where to open the app, how to stop it, and the teacher's
    class view as a link another machine can open (this machine's network address when the server listens beyond
    it; when it does not, a line that says so). ``lan``: this machine's network address (default: looked up)."""
    opts = streamlit_options(args)
    port = int(opts.get("--server.port") or 8501)
    reach = for_others(opts.get("--server.address", "127.0.0.1"), port, opts.get("--server.baseUrlPath", ""), lan=lan)
    stop = "stop it with Ctrl+C here" + (f" or `kill {server_pid}`" if server_pid else "")
    if reach.problem:
        lines = [f"[start] The app: {reach.url}/ on this machine ({stop})."]
    else:
        lines = [f"[start] The app for the room: {reach.url}/ ({stop}). Your class view gives the class link."]
    if token:
        lines.append(f"[start] Class view for the teacher (keep this link to yourself): {reach.url}/batching?teacher={token}")
    if reach.problem:
        lines.append(f"[start] {reach.problem}")
    return lines


def _alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process has that id now: ours is gone
        return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=None, help="the app's address (default: from --streamlit-args, else :8501)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the server and the run")
    ap.add_argument("--server-pid", type=int, default=None, help="give up when this process (the server) is gone")
    ap.add_argument("--streamlit-args", nargs=argparse.REMAINDER, default=[],
                    help="the arguments given to `streamlit run` (last on the line)")
    args = ap.parse_args()
    url = (args.url or url_from_streamlit_args(args.streamlit_args)).rstrip("/")
    t0 = time.monotonic()
    while not _healthy(url):
        if time.monotonic() - t0 > args.timeout or not _alive(args.server_pid):
            say("[warm] the app did not start; nothing warmed")
            return 1
        time.sleep(1)
    if args.streamlit_args or args.server_pid:  # started by scripts/start.sh (by hand: the server's log has them)
        for line in start_lines(args.streamlit_args, settings.TEACHER_TOKEN.get(), args.server_pid):
            say(line)
    if not settings.WARM.get():
        return 0
    try:
        ok = asyncio.run(_run_home(url, args.timeout - (time.monotonic() - t0)))
    except Exception as exc:  # noqa: BLE001  warming is a courtesy: say why, never fail the start
        say(f"[warm] could not warm the app: {exc!r}")
        return 1
    took = time.monotonic() - t0
    say(f"[warm] the home page ran {took:.0f} s after the start: the first visitor's page is ready" if ok else
        f"[warm] the home page run did not finish within {took:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
