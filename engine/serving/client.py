"""A client for a serving engine's OpenAI-compatible HTTP API (vLLM, SGLang, TGI, llama.cpp's server).

One function per request kind; every failure is turned into a ``ServingError`` subclass whose message is
written for the person who typed the URL (what happened, what to check). Streaming requests record the
arrival time of every server-sent-event chunk on ``time.perf_counter()``, which is what the timeline and the
sweeps in ``engine.serving.measure`` are made of.

HTTP is httpx2 (Pydantic's maintained continuation of httpx; transformers' huggingface_hub already depends on
it, so it adds nothing to the install).
"""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx2 as httpx

MAX_TOKENS = 512  # one request never asks for more new tokens than this
MAX_TOP_LOGPROBS = 20  # the OpenAI API's own cap (and vLLM's default --max-logprobs)
MAX_PROMPT_CHARS = 200_000


# ------------------------------------------------------------------------------------------------ errors
class ServingError(RuntimeError):
    """Something went wrong talking to the server; ``str(e)`` is a complete sentence for the user."""

    kind = "error"


class BadURL(ServingError):
    kind = "bad URL"


class ServerUnreachable(ServingError):
    kind = "unreachable"


class ServerTimeout(ServingError):
    kind = "timeout"


class AuthFailed(ServingError):
    kind = "API key"


class ModelNotFound(ServingError):
    kind = "model not found"


class EndpointNotFound(ServingError):
    kind = "endpoint not found"


class NotStreaming(ServingError):
    kind = "not streaming"


class UnexpectedReply(ServingError):
    kind = "unexpected reply"


class NoLogprobs(ServingError):
    kind = "no logprobs"


class ServerError(ServingError):
    kind = "server error"


class Cancelled(ServingError):
    kind = "cancelled"


def snippet(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# ------------------------------------------------------------------------------------------------ settings
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
    """Where the server is and how long to wait for it. The API key is never part of repr() or to_dict()."""

    base_url: str
    model: str = ""
    api_key: str = field(default="", repr=False)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0  # longest silence between two chunks (includes a long prefill)
    request_timeout_s: float = 180.0  # longest whole request, however steadily the chunks arrive
    api: str = "completions"  # "completions" (raw prompt) or "chat" (/v1/chat/completions)

    def __post_init__(self):
        object.__setattr__(self, "base_url", normalize_base_url(self.base_url))
        object.__setattr__(self, "model", (self.model or "").strip()[:300])
        if self.api not in ("completions", "chat"):
            raise BadURL(f"api must be 'completions' or 'chat', not '{snippet(self.api, 40)}'.")

    def url(self, path: str) -> str:
        return self.base_url + path

    def headers(self) -> dict:
        h = {"Accept": "application/json, text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect_timeout_s, read=self.read_timeout_s, write=10.0, pool=30.0)

    def to_dict(self) -> dict:
        return {"base_url": self.base_url, "model": self.model, "api": self.api,
                "api_key_set": bool(self.api_key)}


_SSL: list = []


def _ssl_context():
    """One TLS context for every client (building one costs ~0.1 to 0.5 s: it loads the system's certificates)."""
    if not _SSL:
        import ssl

        _SSL.append(ssl.create_default_context())
    return _SSL[0]


def make_client(cfg: ServerConfig, max_connections: int = 64) -> httpx.Client:
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.Client(timeout=cfg.timeout(), limits=limits, headers=cfg.headers(), trust_env=False,
                        verify=_ssl_context())


# ------------------------------------------------------------------------------------------------ transport
def _explain(exc: Exception, cfg: ServerConfig, what: str) -> ServingError:
    where = cfg.base_url
    if isinstance(exc, httpx.ConnectTimeout):
        return ServerTimeout(f"No answer from {where} within {cfg.connect_timeout_s:g} s while connecting. "
                             "Is the host right, and reachable from this machine?")
    if isinstance(exc, httpx.ReadTimeout):
        return ServerTimeout(f"The server at {where} accepted the {what} but sent nothing for "
                             f"{cfg.read_timeout_s:g} s. It may be overloaded, or still loading the model.")
    if isinstance(exc, httpx.TimeoutException):
        return ServerTimeout(f"Timed out talking to {where} ({type(exc).__name__}).")
    if isinstance(exc, httpx.ConnectError):
        msg = str(exc)
        why = ("connection refused: nothing listens on that port" if "refused" in msg.lower()
               else "the host name could not be resolved" if "name" in msg.lower() and "resol" in msg.lower()
               else snippet(msg, 120))
        return ServerUnreachable(f"Could not connect to {where}: {why}. Is the server running, and are the host "
                                 "and port right?")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return ServerError(f"The connection to {where} broke during the {what} ({snippet(str(exc), 120) or type(exc).__name__}). "
                           "The server may have crashed or restarted.")
    if isinstance(exc, httpx.UnsupportedProtocol):
        return BadURL(f"{where}: {snippet(str(exc), 120)}")
    if isinstance(exc, httpx.HTTPError):
        return ServerError(f"HTTP error talking to {where}: {type(exc).__name__}: {snippet(str(exc), 160)}")
    return ServingError(f"{type(exc).__name__} talking to {where}: {snippet(str(exc), 160)}")


def _error_message(body: str) -> str:
    """The 'message' of an OpenAI-style error body ({"error": {"message": ...}} or {"message": ...} or
    {"detail": ...}), else the body itself, shortened."""
    try:
        data = json.loads(body)
    except ValueError:
        return snippet(body)
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            for k in ("message", "detail", "error"):
                if isinstance(err.get(k), str):
                    return snippet(err[k])
        elif isinstance(err, str):
            return snippet(err)
        if isinstance(data.get("detail"), (str, list)):
            return snippet(json.dumps(data["detail"]) if isinstance(data["detail"], list) else data["detail"])
    return snippet(body)


def _check_status(resp: httpx.Response, cfg: ServerConfig, path: str, body: str) -> None:
    code = resp.status_code
    if code < 400:
        return
    msg = _error_message(body)
    if code in (401, 403):
        raise AuthFailed(f"The server refused the request ({code}): {msg}. "
                         + ("Check the API key." if cfg.api_key else "It wants an API key: type it in the API key field."))
    if "logprob" in msg.lower():
        raise NoLogprobs(f"The server refused to return log-probabilities ({code}): {msg}")
    if code == 404:
        low = msg.lower()
        if "model" in low and path != "/v1/models":
            raise ModelNotFound(f"The server has no model named '{snippet(cfg.model, 80)}' ({code}: {msg}). "
                                "Pick one of the names it lists under /v1/models.")
        raise EndpointNotFound(f"{cfg.base_url}{path} does not exist on this server (404). Is the base URL the "
                               "server's root (for example http://host:8000), and does it speak the OpenAI API?")
    if code in (400, 422):
        raise UnexpectedReply(f"The server rejected the request ({code}): {msg}")
    if code == 503:
        raise ServerError(f"The server is not ready ({code}): {msg}. It may still be loading the model.")
    raise ServerError(f"The server answered {code}: {msg}")


def get_json(cfg: ServerConfig, path: str, client: httpx.Client | None = None):
    own = client is None
    client = client or make_client(cfg, 2)
    try:
        resp = client.get(cfg.url(path))
        body = resp.text
    except httpx.HTTPError as exc:
        raise _explain(exc, cfg, f"GET {path}") from None
    finally:
        if own:
            client.close()
    _check_status(resp, cfg, path, body)
    try:
        return json.loads(body)
    except ValueError:
        raise UnexpectedReply(f"GET {path} did not answer JSON: '{snippet(body, 120)}'. Is this an "
                              "OpenAI-compatible server?") from None


def get_text(cfg: ServerConfig, path: str, client: httpx.Client | None = None) -> tuple[int, str]:
    """(status code, body) without raising on 404: used for /metrics, which many servers do not have."""
    own = client is None
    client = client or make_client(cfg, 2)
    try:
        resp = client.get(cfg.url(path))
        return resp.status_code, resp.text
    except httpx.HTTPError as exc:
        raise _explain(exc, cfg, f"GET {path}") from None
    finally:
        if own:
            client.close()


def list_models(cfg: ServerConfig, client: httpx.Client | None = None) -> list[dict]:
    """The server's /v1/models entries ({id, owned_by, ...})."""
    data = get_json(cfg, "/v1/models", client)
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in items):
        raise UnexpectedReply(f"/v1/models answered something other than a model list: "
                              f"'{snippet(json.dumps(data), 120)}'.")
    return items


# ------------------------------------------------------------------------------------------------ streaming
@dataclass(frozen=True)
class Chunk:
    """One server-sent event that carried text. ``t_s`` is seconds since the request was sent; ``tokens`` is the
    number of tokens it carried when the server says so (logprobs token list), else 1 (see ``counted``)."""

    t_s: float
    text: str
    tokens: int
    counted: bool  # True: token count from the server (logprobs); False: assumed 1 per chunk
    top_logprobs: tuple = ()  # ((token, logprob), ...) for the chunk's first token, when asked for


@dataclass(frozen=True)
class StreamResult:
    """Everything one streamed request returned, in arrival order. Times in seconds since the request was sent."""

    prompt_chars: int
    max_tokens: int
    chunks: tuple[Chunk, ...]
    end_s: float
    finish_reason: str | None
    usage: dict | None  # {"prompt_tokens", "completion_tokens"} when the server sent it
    timings: dict | None  # llama.cpp server's per-request timings (prompt_n, predicted_n, draft_n, ...)
    sent_at: float  # perf_counter() when the request was sent (to line up parallel requests)
    notes: tuple[str, ...] = ()


def _payload(cfg: ServerConfig, prompt: str, max_tokens: int, top_logprobs: int, fixed_length: bool,
             temperature: float, seed: int | None) -> dict:
    body: dict = {"model": cfg.model or None, "max_tokens": int(max_tokens), "stream": True,
                  "temperature": float(temperature),
                  "stream_options": {"include_usage": True}}
    if seed is not None:
        body["seed"] = int(seed)
    if fixed_length:  # generate exactly max_tokens, so lengths are comparable across requests
        body["ignore_eos"] = True
        body["min_tokens"] = int(max_tokens)
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        if top_logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = int(top_logprobs)
    else:
        body["prompt"] = prompt
        if top_logprobs:
            body["logprobs"] = int(top_logprobs)
    if body["model"] is None:
        del body["model"]
    return body


def _parse_logprobs(choice: dict, api: str) -> tuple[int | None, tuple]:
    """(tokens in this chunk or None, top logprobs of its first token) from either API's logprobs shape."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None, ()
    if api == "chat" or "content" in lp:
        content = lp.get("content")
        if not isinstance(content, list):
            return None, ()
        top = ()
        if content and isinstance(content[0], dict):
            top = tuple((str(t.get("token", "")), float(t.get("logprob", -math.inf)))
                        for t in content[0].get("top_logprobs") or [] if isinstance(t, dict))
        return len(content), top
    tokens = lp.get("tokens")
    tops = lp.get("top_logprobs")
    top = ()
    if isinstance(tops, list) and tops and isinstance(tops[0], dict):
        top = tuple(sorted(((str(k), float(v)) for k, v in tops[0].items()), key=lambda kv: -kv[1]))
    return (len(tokens) if isinstance(tokens, list) else None), top


def _events(resp: httpx.Response) -> Iterator[str]:
    """The data fields of server-sent events, one per event (multi-line data joined with newlines)."""
    data: list[str] = []
    for line in resp.iter_lines():
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue  # a comment / keep-alive ping
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def stream(cfg: ServerConfig, prompt: str, max_tokens: int = 32, *, top_logprobs: int = 0,
           fixed_length: bool = True, temperature: float = 0.0, seed: int | None = 0,
           client: httpx.Client | None = None, cancel: threading.Event | None = None) -> StreamResult:
    """Send one streaming completion and time every chunk. Raises a ServingError subclass on any problem;
    ``cancel`` (set from another thread) closes the connection, which tells the server to stop generating."""
    if not isinstance(prompt, str) or not prompt:
        raise UnexpectedReply("The prompt is empty.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise UnexpectedReply(f"The prompt is {len(prompt):,} characters; the limit here is {MAX_PROMPT_CHARS:,}.")
    max_tokens = int(min(max(1, max_tokens), MAX_TOKENS))
    top_logprobs = int(min(max(0, top_logprobs), MAX_TOP_LOGPROBS))
    path = "/v1/chat/completions" if cfg.api == "chat" else "/v1/completions"
    body = _payload(cfg, prompt, max_tokens, top_logprobs, fixed_length, temperature, seed)
    own = client is None
    client = client or make_client(cfg, 2)
    chunks: list[Chunk] = []
    usage = timings = finish = None
    notes: list[str] = []
    t0 = time.perf_counter()
    try:
        with client.stream("POST", cfg.url(path), json=body) as resp:
            if resp.status_code >= 400:
                _check_status(resp, cfg, path, resp.read().decode("utf-8", "replace"))
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                text = resp.read().decode("utf-8", "replace")
                raise NotStreaming(
                    f"The server answered a streaming request with one whole reply ({ctype or 'no content type'}) "
                    "instead of server-sent events, so the time of each token cannot be measured. "
                    f"Reply began: '{snippet(text, 100)}'")
            for data in _events(resp):
                now = time.perf_counter() - t0
                if cancel is not None and cancel.is_set():
                    raise Cancelled("Cancelled.")
                if now > cfg.request_timeout_s:
                    raise ServerTimeout(f"The request took longer than {cfg.request_timeout_s:g} s in all; stopped it.")
                if data.strip() == "[DONE]":
                    break
                try:
                    msg = json.loads(data)
                except ValueError:
                    raise UnexpectedReply(f"A streamed event is not JSON: '{snippet(data, 100)}'.") from None
                if not isinstance(msg, dict):
                    raise UnexpectedReply(f"A streamed event is not a JSON object: '{snippet(data, 100)}'.")
                if "error" in msg:
                    raise ServerError(f"The server reported an error mid-stream: {_error_message(data)}")
                if isinstance(msg.get("usage"), dict):
                    usage = {k: v for k, v in msg["usage"].items() if isinstance(v, (int, float))}
                if isinstance(msg.get("timings"), dict):
                    timings = {k: v for k, v in msg["timings"].items() if isinstance(v, (int, float))}
                choices = msg.get("choices")
                if not isinstance(choices, list):
                    raise UnexpectedReply(f"A streamed event has no 'choices' list: '{snippet(data, 100)}'.")
                if not choices:
                    continue  # e.g. the final usage-only event
                ch = choices[0]
                if not isinstance(ch, dict):
                    raise UnexpectedReply(f"A streamed choice is not an object: '{snippet(data, 100)}'.")
                if cfg.api == "chat":
                    delta = ch.get("delta") if isinstance(ch.get("delta"), dict) else {}
                    text = delta.get("content") or ""
                else:
                    text = ch.get("text") or ""
                if not isinstance(text, str):
                    raise UnexpectedReply(f"A streamed choice's text is not a string: '{snippet(data, 100)}'.")
                n, top = _parse_logprobs(ch, cfg.api)
                if text or n:
                    chunks.append(Chunk(now, text, n if n is not None else 1, n is not None, top))
                if ch.get("finish_reason"):
                    finish = str(ch["finish_reason"])
    except ServingError:
        raise
    except httpx.HTTPError as exc:
        raise _explain(exc, cfg, "completion request") from None
    finally:
        if own:
            client.close()
    end = time.perf_counter() - t0
    if not chunks:
        raise UnexpectedReply("The server streamed no text at all (finish reason: "
                              f"{finish or 'none given'}). Is the model name right?")
    if top_logprobs and not any(c.top_logprobs for c in chunks):
        notes.append("asked for log-probabilities, the server sent none")
    return StreamResult(len(prompt), max_tokens, tuple(chunks), end, finish, usage, timings, t0, tuple(notes))


def tokenize_count(cfg: ServerConfig, text: str, client: httpx.Client | None = None) -> int | None:
    """How many tokens the server's own tokenizer makes of ``text``, through whichever tokenize endpoint it
    has (vLLM/SGLang: /tokenize, llama.cpp: /tokenize, llama-cpp-python: /extras/tokenize), else None."""
    own = client is None
    client = client or make_client(cfg, 2)
    tries = [("/tokenize", {"model": cfg.model, "prompt": text, "add_special_tokens": False}),
             ("/tokenize", {"content": text}),
             ("/extras/tokenize", {"input": text})]
    try:
        for path, body in tries:
            try:
                resp = client.post(cfg.url(path), json=body)
            except httpx.HTTPError:
                return None
            if resp.status_code >= 400:
                continue
            try:
                data = resp.json()
            except ValueError:
                continue
            if isinstance(data, dict):
                if isinstance(data.get("count"), int):
                    return data["count"]
                if isinstance(data.get("tokens"), list):
                    return len(data["tokens"])
        return None
    finally:
        if own:
            client.close()


ProgressFn = Callable[[float, str], None]
