"""Reading a server-sent-event stream (the OpenAI API's streamed completions) within bounds: its lines read raw,
each at most ``MAX_LINE_BYTES`` and all together at most a cap, then its events' ``data`` fields."""
from __future__ import annotations

from typing import Callable, Iterator

import httpx2 as httpx

from engine.serving.config import MAX_LINE_BYTES, MAX_STREAM_BYTES
from engine.serving.errors import UnexpectedReply


def lines(resp: httpx.Response, tick: Callable[[], None], max_bytes: int = MAX_STREAM_BYTES) -> Iterator[str]:
    """The reply's lines, read raw in chunks; a line longer than MAX_LINE_BYTES or a stream longer than
    ``max_bytes`` is refused as soon as it passes the cap. ``tick`` runs after every chunk (the clock)."""
    buf = bytearray()
    total = 0
    for raw in resp.iter_raw():
        total += len(raw)
        if total > max_bytes:
            raise UnexpectedReply(f"The stream ran past {max_bytes / 2**20:g} MB; stopped reading it.")
        buf += raw
        start = 0
        while (i := buf.find(b"\n", start)) >= 0:
            yield bytes(buf[start:i]).rstrip(b"\r").decode("utf-8", "replace")
            start = i + 1
        del buf[:start]
        if len(buf) > MAX_LINE_BYTES:
            raise UnexpectedReply(f"A line of the stream ran past {MAX_LINE_BYTES // 2**10} KB; stopped reading it.")
        tick()
    if buf:
        yield bytes(buf).rstrip(b"\r").decode("utf-8", "replace")


def events(lines: Iterator[str]) -> Iterator[str]:
    """The data fields of server-sent events, one per event (multi-line data joined with newlines)."""
    data: list[str] = []
    size = 0
    for line in lines:
        if line == "":
            if data:
                yield "\n".join(data)
                data, size = [], 0
            continue
        if line.startswith(":"):
            continue  # a comment / keep-alive ping
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
            size += len(value)
            if size > MAX_LINE_BYTES:
                raise UnexpectedReply(f"An event of the stream ran past {MAX_LINE_BYTES // 2**10} KB; stopped "
                                      "reading it.")
    if data:
        yield "\n".join(data)
