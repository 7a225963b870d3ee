"""Which server and how to reach it: the URL rules (``normalize_base_url``: what a person typed, made a server root;
keys and query strings refused), one server's settings (``ServerConfig``), and the limits every request keeps
whatever the server sends (sizes, deadlines)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpx2 as httpx

from engine.serving.errors import BadURL, snippet

MAX_TOKENS = 512  # one request never asks for more new tokens than this
MAX_REPLY_BYTES = 4 * 2**20  # one whole (non-streamed) reply: /v1/models, /metrics, /tokenize
MAX_STREAM_BYTES = 16 * 2**20  # one streamed request, all events together (512 tokens x 20 logprobs is ~2 MB)
MAX_SWEEP_STREAM_BYTES = 2 * 2**20  # one request of a sweep (<= 256 tokens, no logprobs: ~100 KB): 32 at once
MAX_KEPT_TEXT = 64 * 2**10  # characters of a reply's text kept in its record (shown in an expander)
MAX_LINE_BYTES = 256 * 2**10  # one line of a server-sent-event stream
MAX_ERROR_BYTES = 64 * 2**10  # an error reply is read this far (for its "message"), no further
SLICE_S = 0.2  # sockets wait at most this long between checks of the deadline and the cancel flag
PROBE_TIMEOUT_S = 20.0  # a whole GET (/v1/models, /metrics, /tokenize), however the bytes arrive
MAX_TOP_LOGPROBS = 20  # the OpenAI API's own cap (and vLLM's default --max-logprobs)
MAX_PROMPT_CHARS = 200_000


def normalize_base_url(url: str) -> str:
    """The server root ('http://host:port' or with a path prefix), from what a person typed.

    A trailing '/v1' (as OpenAI SDK users write it) is removed: the client adds '/v1/...' itself, and '/metrics'
    lives beside '/v1', not under it. User names, passwords and query strings are refused, so a key can never
    travel inside the URL (and so never into a shared link)."""
    raw = (url or "").strip()
    if not raw:
        raise BadURL("Type the server's base URL, for example http://127.0.0.1:8000.")
    if "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise BadURL(f"'{snippet(url, 80)}' is not a valid URL ({exc}).") from None
    if parts.scheme not in ("http", "https"):
        raise BadURL(f"The base URL must start with http:// or https://, not {parts.scheme}://.")
    if not parts.hostname:
        raise BadURL(f"'{snippet(url, 80)}' has no host name.")
    if parts.username or parts.password:
        raise BadURL("Put the API key in the API key field, not in the URL (a URL ends up in links and logs).")
    if parts.query or parts.fragment:
        raise BadURL("The base URL takes no '?' query or '#' part; give only scheme, host, port and path.")
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/completions", "/models", "/v1"):
        if path.endswith(tail):
            path = path[: -len(tail)].rstrip("/")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, path, "", ""))


@dataclass(frozen=True)
class ServerConfig:
    """Where the server is and how long to wait for it. The API key is never part of repr() or to_dict().

    ``label`` (class mode): the name the teacher gave the server; messages say it instead of the address, which
    never reaches a page. ``fenced``: the client connects to this server's own host and port and nowhere else."""

    base_url: str
    model: str = ""
    api_key: str = field(default="", repr=False)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0  # longest wait for the next event (includes a long prefill); keep-alives don't count
    request_timeout_s: float = 180.0  # longest whole request, however steadily the bytes arrive
    api: str = "completions"  # "completions" (raw prompt) or "chat" (/v1/chat/completions)
    label: str = ""
    fenced: bool = False

    def __post_init__(self):
        object.__setattr__(self, "base_url", normalize_base_url(self.base_url))
        object.__setattr__(self, "model", (self.model or "").strip()[:300])
        object.__setattr__(self, "label", (self.label or "").strip()[:100])
        if self.api not in ("completions", "chat"):
            raise BadURL(f"api must be 'completions' or 'chat', not '{snippet(self.api, 40)}'.")
        for name in ("connect_timeout_s", "read_timeout_s", "request_timeout_s"):
            v = float(getattr(self, name))
            if not (v > 0 and math.isfinite(v)):
                raise BadURL(f"{name} must be a positive number of seconds.")

    @property
    def where(self) -> str:
        """How messages name the server: its label when it has one (class mode), else its address."""
        return f"'{self.label}'" if self.label else self.base_url

    def url(self, path: str) -> str:
        return self.base_url + path

    def host_port(self) -> tuple[str, int]:
        parts = urlsplit(self.base_url)
        return (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)

    def headers(self) -> dict:
        # identity: a compressed reply would be inflated past any byte cap (a gzip bomb); it is refused instead
        h = {"Accept": "application/json, text/event-stream", "Accept-Encoding": "identity"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect_timeout_s, read=self.read_timeout_s, write=10.0, pool=30.0)

    def to_dict(self) -> dict:
        return {"base_url": self.label or self.base_url, "model": self.model, "api": self.api,
                "api_key_set": bool(self.api_key)}


_SSL: list = []


def ssl_context():
    """One TLS context for every client (building one costs ~0.1 to 0.5 s: it loads the system's certificates)."""
    if not _SSL:
        import ssl

        _SSL.append(ssl.create_default_context())
    return _SSL[0]
