"""Where other machines reach this server: the address a link for a student (or the teacher's class view) carries.

A link copied from the teacher's own browser carries whatever address that browser used; on the teacher's laptop
that is usually localhost, which on a student's machine means the student's own machine. So a link for others is
built from where the server listens: its network address when it listens beyond this machine, and a plain
statement when no other machine can reach it.

Standard library and Streamlit's own address lookup only: scripts/warm.py prints the start's links with it before
the app's modules are loaded.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

WILDCARD = ("", "0.0.0.0", "::", "[::]")  # listening on every interface (Streamlit with no address does too)
LOCAL_NAMES = ("localhost", "::1", "[::1]")


def is_local(host: str | None) -> bool:
    """Does this host name or address mean "this machine" (so on another machine, that machine)?"""
    h = (host or "").strip().lower()
    return h.startswith("127.") or h in LOCAL_NAMES or h.endswith(".localhost")


def lan_address() -> str | None:
    """This machine's address on its network (the source address of its default route, what Streamlit's banner
    prints as "Network URL"), or None when it has none."""
    try:
        from streamlit.net_util import get_internal_ip

        ip = get_internal_ip()
    except Exception:  # another Streamlit: no address rather than a guess
        return None
    return None if not ip or is_local(ip) else ip


def _url(host: str, port: int, base_path: str = "") -> str:
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    base = base_path.strip("/")
    return f"http://{host}:{int(port)}" + (f"/{base}" if base else "")


@dataclass(frozen=True)
class Reach:
    """The root URL to put in a link for others, and, when no other machine can open it, why (else "")."""
    url: str
    problem: str = ""


def for_others(bind: str | None, port: int, base_path: str = "", lan: str | None = None) -> Reach:
    """Where a machine on the network opens a server listening on ``bind``:``port``. ``lan``: this machine's
    network address (default: looked up)."""
    b = (bind or "").strip()
    if is_local(b):
        return Reach(_url("localhost", port, base_path),
                     f"This server listens on this machine only ({b}): no other machine can open it. To serve a "
                     "class, start it with --server.address 0.0.0.0 (README, \"A class in five steps\").")
    if b.lower() not in WILDCARD:
        return Reach(_url(b, port, base_path))  # one address given: the one others reach it by
    lan = lan if lan is not None else lan_address()
    if lan:
        return Reach(_url(lan, port, base_path))
    return Reach(_url("localhost", port, base_path),
                 "This machine has no network address right now (no network connection?): only this machine can "
                 "open the server until it joins the class's network.")


def for_others_from(browser_url: str | None, bind: str | None, port: int, base_path: str = "",
                    lan: str | None = None) -> Reach:
    """As ``for_others``, unless the teacher's browser already reached the server by a name or address that is not
    this machine's own (a LAN address, a host name, an HTTPS proxy): then that one, as it evidently works."""
    try:
        u = urlsplit(browser_url or "")
        host = u.hostname
    except ValueError:
        u, host = None, None
    if u is not None and host and not is_local(host) and u.scheme in ("http", "https"):
        base = base_path.strip("/")
        return Reach(f"{u.scheme}://{u.netloc}" + (f"/{base}" if base else ""))
    return for_others(bind, port, base_path, lan)
