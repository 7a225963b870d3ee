"""A client for a serving engine's OpenAI-compatible HTTP API (vLLM, SGLang, llama.cpp's server, and others).

One function per request kind; every failure is turned into a ``ServingError`` subclass whose message is
written for the person who typed the URL (what happened, what to check). Streaming requests record the
arrival time of every server-sent-event chunk on ``time.perf_counter()``, which is what the timeline and the
sweeps in ``engine.serving.measure`` are made of.

HTTP is httpx2 (Pydantic's maintained continuation of httpx; transformers' huggingface_hub already depends on
it, so it adds nothing to the install).

Whatever the server sends, the client stays bounded (a server is not trusted, whoever runs it):
- every read has a size cap (``MAX_REPLY_BYTES`` for a whole reply, ``MAX_STREAM_BYTES`` for a stream,
  ``MAX_LINE_BYTES`` for one line of it; headers: h11's 100 KB); bytes are read raw, compressed replies are
  refused (no gzip bomb is ever inflated), redirects are never followed;
- every request has a total deadline (``request_timeout_s``) that holds however slowly or steadily bytes drip
  in: the sockets are read in short slices (``SLICE_S``) and each slice checks the deadline and ``cancel``;
- ``cancel`` (a threading.Event, e.g. ``engine.jobs.job.cancel_event()`` of the job running the request) ends
  connecting, sending and reading within a slice, and the connection is closed;
- a client can be fenced to a set of (host, port) pairs (class mode's list of servers): any other target is
  refused before a socket is opened;
- error messages never repeat a reply's body (only the short "message" of an OpenAI-style JSON error) and
  never tell a refused port from a silent one.
"""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

import httpx2 as httpx

from engine.serving import sse
from engine.serving.config import (MAX_ERROR_BYTES, MAX_PROMPT_CHARS, MAX_REPLY_BYTES, MAX_STREAM_BYTES,
                                   MAX_TOKENS, MAX_TOP_LOGPROBS, PROBE_TIMEOUT_S, ServerConfig)
from engine.serving.errors import (AuthFailed, BadURL, EndpointNotFound, ModelNotFound, NoLogprobs, NotStreaming,
                                   RequestCancelled, ServerError, ServerTimeout, ServerUnreachable, ServingError,
                                   UnexpectedReply, snippet)
from engine.serving.fence import RequestDeadline, make_client


# ------------------------------------------------------------------------------------------------ transport
def _explain(exc: Exception, cfg: ServerConfig, what: str) -> ServingError:
    """A sentence for an httpx error. A refused port, an unknown host and a silent host read the same: the app
    must not be a port scanner, and the text of the error (which may quote the reply) is never repeated."""
    where = cfg.where
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        tls = " and, for https, is its certificate trusted here" if cfg.base_url.startswith("https:") else ""
        return ServerUnreachable(f"Could not connect to {where} (within {cfg.connect_timeout_s:g} s). Is the server "
                                 f"running, are the host and port right{tls}?")
    if isinstance(exc, httpx.ReadTimeout):
        return ServerTimeout(f"{where} sent nothing for {cfg.read_timeout_s:g} s during the {what}. It may be "
                             "overloaded, or still loading the model.")
    if isinstance(exc, httpx.TimeoutException):
        return ServerTimeout(f"Timed out talking to {where} ({type(exc).__name__}).")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return ServerError(f"The {what} to {where} failed: the connection broke or the reply was not valid HTTP "
                           "(for example headers over 100 KB). The server may have crashed or restarted.")
    if isinstance(exc, httpx.UnsupportedProtocol):
        return BadURL(f"{where}: only http:// and https:// are supported.")
    return ServerError(f"HTTP error talking to {where} ({type(exc).__name__}).")


def _error_message(body: str) -> str:
    """The 'message' of an OpenAI-style error body ({"error": {"message": ...}} or {"message": ...} or
    {"detail": ...}), shortened; '' for anything else: a reply's body is never repeated as such."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return ""
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            for k in ("message", "detail", "error"):
                if isinstance(err.get(k), str):
                    return snippet(err[k])
        elif isinstance(err, str):
            return snippet(err)
        if isinstance(data.get("detail"), str):
            return snippet(data["detail"])
    return ""


def _check_status(code: int, cfg: ServerConfig, path: str, body: str) -> None:
    if code < 300:
        return
    if code < 400:
        raise UnexpectedReply(f"{cfg.where} answered {path} with a redirect ({code}). Redirects are not followed: "
                              "give the server's own address.")
    msg = _error_message(body)
    said = f": {msg}" if msg else ""
    if code in (401, 403):
        raise AuthFailed(f"The server refused the request ({code}){said}. "
                         + ("Check the API key." if cfg.api_key else "It wants an API key: type it in the API key field."))
    if "logprob" in msg.lower():
        raise NoLogprobs(f"The server refused to return log-probabilities ({code}){said}")
    if code == 404:
        low = msg.lower()
        if "model" in low and path != "/v1/models":
            raise ModelNotFound(f"The server has no model named '{snippet(cfg.model, 80)}' ({code}{said}). "
                                "Pick one of the names it lists under /v1/models.")
        raise EndpointNotFound(f"{path} does not exist on {cfg.where} (404). Is the base URL the server's root "
                               "(for example http://host:8000), and does it speak the OpenAI API?")
    if code in (400, 422):
        raise UnexpectedReply(f"The server rejected the request ({code}){said}")
    if code == 503:
        raise ServerError(f"The server is not ready ({code}){said}. It may still be loading the model.")
    raise ServerError(f"The server answered {code}{said}")


def _read_capped(resp: httpx.Response, cap: int, what: str) -> bytes:
    """The raw body (transfer-decoded, never decompressed), refused past ``cap`` bytes without reading on."""
    n = resp.headers.get("content-length", "")
    if n.isdigit() and int(n) > cap:
        raise UnexpectedReply(f"The reply to {what} would be {int(n):,} bytes; replies over {cap:,} bytes are "
                              "not read.")
    out = bytearray()
    for raw in resp.iter_raw():
        out += raw
        if len(out) > cap:
            raise UnexpectedReply(f"The reply to {what} ran past {cap:,} bytes; stopped reading it.")
    return bytes(out)


def _head(resp: httpx.Response, cfg: ServerConfig, path: str) -> None:
    """Status (errors read up to MAX_ERROR_BYTES for their message) and encoding checks of a reply."""
    if resp.status_code >= 300:
        body = b""
        if resp.status_code >= 400:
            try:
                body = _read_capped(resp, MAX_ERROR_BYTES, path)
            except UnexpectedReply:
                body = b""
        _check_status(resp.status_code, cfg, path, body.decode("utf-8", "replace"))
    enc = resp.headers.get("content-encoding", "").strip().lower()
    if enc not in ("", "identity"):
        raise UnexpectedReply(f"{cfg.where} sent a compressed reply to {path} although it was asked not to; "
                              "compressed replies are not read.")


def _get(cfg: ServerConfig, path: str, client: httpx.Client | None, cancel, raise_status: bool = True
         ) -> tuple[int, bytes]:
    own = client is None
    client = client or make_client(cfg, 2, cancel=cancel)
    try:
        with RequestDeadline(min(PROBE_TIMEOUT_S, cfg.request_timeout_s)):
            with client.stream("GET", cfg.url(path)) as resp:
                code = resp.status_code
                if not raise_status and code >= 400:
                    return code, b""
                _head(resp, cfg, path)
                return code, _read_capped(resp, MAX_REPLY_BYTES, f"GET {path}")
    except httpx.HTTPError as exc:
        raise _explain(exc, cfg, f"GET {path}") from None
    finally:
        if own:
            client.close()


def _json(body: bytes, what: str):
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise UnexpectedReply(f"{what} did not answer JSON. Is this an OpenAI-compatible server?") from None


def get_json(cfg: ServerConfig, path: str, client: httpx.Client | None = None, cancel=None):
    return _json(_get(cfg, path, client, cancel)[1], f"GET {path}")


def get_text(cfg: ServerConfig, path: str, client: httpx.Client | None = None, cancel=None) -> tuple[int, str]:
    """(status code, body) without raising on 4xx (the body is then empty): used for /metrics, which many
    servers do not have."""
    code, body = _get(cfg, path, client, cancel, raise_status=False)
    return code, body.decode("utf-8", "replace")


MAX_MODELS = 200


def list_models(cfg: ServerConfig, client: httpx.Client | None = None, cancel=None) -> list[dict]:
    """The server's /v1/models entries ({id, owned_by, ...}); at most MAX_MODELS, ids shortened to 200 chars."""
    data = get_json(cfg, "/v1/models", client, cancel)
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in items):
        raise UnexpectedReply("/v1/models answered something other than a model list. Is this an "
                              "OpenAI-compatible server?")
    return [{**m, "id": m["id"][:200]} for m in items[:MAX_MODELS]]


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


def stream(cfg: ServerConfig, prompt: str, max_tokens: int = 32, *, top_logprobs: int = 0,
           fixed_length: bool = True, temperature: float = 0.0, seed: int | None = 0,
           client: httpx.Client | None = None, cancel: threading.Event | None = None,
           max_bytes: int = MAX_STREAM_BYTES) -> StreamResult:
    """Send one streaming completion and time every chunk. Raises a ServingError subclass on any problem;
    ``cancel`` (set from another thread) closes the connection within ``SLICE_S``, which tells the server to stop
    generating. The whole request ends by ``cfg.request_timeout_s``, and ``cfg.read_timeout_s`` after the last
    event that carried data (keep-alive comments do not count), whatever the server sends."""
    if not isinstance(prompt, str) or not prompt:
        raise UnexpectedReply("The prompt is empty.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise UnexpectedReply(f"The prompt is {len(prompt):,} characters; the limit here is {MAX_PROMPT_CHARS:,}.")
    max_tokens = int(min(max(1, max_tokens), MAX_TOKENS))
    top_logprobs = int(min(max(0, top_logprobs), MAX_TOP_LOGPROBS))
    path = "/v1/chat/completions" if cfg.api == "chat" else "/v1/completions"
    body = _payload(cfg, prompt, max_tokens, top_logprobs, fixed_length, temperature, seed)
    own = client is None
    client = client or make_client(cfg, 2, cancel=cancel)
    chunks: list[Chunk] = []
    usage = timings = finish = None
    notes: list[str] = []
    t0 = time.perf_counter()
    last_data = [time.monotonic()]

    def tick():
        if cancel is not None and cancel.is_set():
            raise RequestCancelled("Cancelled.")
        if time.monotonic() - last_data[0] > cfg.read_timeout_s:
            raise ServerTimeout(f"{cfg.where} sent no tokens for {cfg.read_timeout_s:g} s (only keep-alive "
                                "comments or stray bytes); stopped the request.")

    try:
        with RequestDeadline(cfg.request_timeout_s), client.stream("POST", cfg.url(path), json=body) as resp:
            _head(resp, cfg, path)
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                raise NotStreaming(
                    "The server answered a streaming request with one whole reply instead of server-sent events, so "
                    "the time of each token cannot be measured. Is streaming turned off on the server?")
            last_data[0] = time.monotonic()
            for data in sse.events(sse.lines(resp, tick, min(max_bytes, MAX_STREAM_BYTES))):
                now = time.perf_counter() - t0
                last_data[0] = time.monotonic()
                if cancel is not None and cancel.is_set():
                    raise RequestCancelled("Cancelled.")
                if now > cfg.request_timeout_s:
                    raise ServerTimeout(f"The request took longer than {cfg.request_timeout_s:g} s in all; stopped it.")
                if data.strip() == "[DONE]":
                    break
                try:
                    msg = json.loads(data)
                except (ValueError, RecursionError):
                    raise UnexpectedReply("A streamed event is not JSON. Is this an OpenAI-compatible server?") from None
                if not isinstance(msg, dict):
                    raise UnexpectedReply("A streamed event is not a JSON object.")
                if "error" in msg:
                    said = _error_message(data)
                    raise ServerError("The server reported an error mid-stream" + (f": {said}" if said else "."))
                if isinstance(msg.get("usage"), dict):
                    usage = {k: v for k, v in list(msg["usage"].items())[:20] if isinstance(v, (int, float))}
                if isinstance(msg.get("timings"), dict):
                    timings = {k: v for k, v in list(msg["timings"].items())[:40] if isinstance(v, (int, float))}
                choices = msg.get("choices")
                if not isinstance(choices, list):
                    raise UnexpectedReply("A streamed event has no 'choices' list.")
                if not choices:
                    continue  # e.g. the final usage-only event
                ch = choices[0]
                if not isinstance(ch, dict):
                    raise UnexpectedReply("A streamed choice is not an object.")
                if cfg.api == "chat":
                    delta = ch.get("delta") if isinstance(ch.get("delta"), dict) else {}
                    text = delta.get("content") or ""
                else:
                    text = ch.get("text") or ""
                if not isinstance(text, str):
                    raise UnexpectedReply("A streamed choice's text is not a string.")
                n, top = _parse_logprobs(ch, cfg.api)
                if text or n:
                    chunks.append(Chunk(now, text, n if n is not None else 1, n is not None, top))
                    if len(chunks) > 4 * MAX_TOKENS:
                        raise UnexpectedReply(f"The server streamed more than {4 * MAX_TOKENS} chunks for at most "
                                              f"{max_tokens} tokens; stopped reading.")
                if ch.get("finish_reason"):
                    finish = str(ch["finish_reason"])[:40]
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


def tokenize_count(cfg: ServerConfig, text: str, client: httpx.Client | None = None, cancel=None) -> int | None:
    """How many tokens the server's own tokenizer makes of ``text``, through whichever tokenize endpoint it
    has (vLLM/SGLang: /tokenize, llama.cpp: /tokenize, llama-cpp-python: /extras/tokenize), else None."""
    own = client is None
    client = client or make_client(cfg, 2, cancel=cancel)
    tries = [("/tokenize", {"model": cfg.model, "prompt": text, "add_special_tokens": False}),
             ("/tokenize", {"content": text}),
             ("/extras/tokenize", {"input": text})]
    try:
        for path, body in tries:
            try:
                with RequestDeadline(min(PROBE_TIMEOUT_S, cfg.request_timeout_s)), \
                        client.stream("POST", cfg.url(path), json=body) as resp:
                    if resp.status_code >= 300:
                        continue
                    _head(resp, cfg, path)
                    raw = _read_capped(resp, MAX_REPLY_BYTES, path)
            except (httpx.HTTPError, UnexpectedReply):
                return None
            try:
                data = json.loads(raw)
            except (ValueError, RecursionError):
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
