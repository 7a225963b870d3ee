"""Who may take a seat in the class batch now, and why a request waits: the share of the batch that one client and
one session may hold.

The class batch has ``max_batch`` seats (rows). Without bounds one client took them all: a script opened 34
sessions on one address, each a 12,000-character paste asking for 256 tokens, and a student's 24-token question
waited 175 s for a row to leave. A row cannot be taken back once admitted (its KV cache is work already done), so
the bounds apply when a request joins:

- **Weight.** A request costs ``(prompt tokens + new tokens) / WEIGHT_TOKENS`` of a share, at least 1: a short
  question weighs 1; a 512-token paste asking for 256 tokens weighs 6. Long prompts and long answers hold a seat
  longer and make every decode step of the batch slower (their keys and values are read at each one).
- **One seat per session.** A tab's next request waits for its previous one to leave the batch.
- **Seats kept for short questions.** ``short_seats(max_batch)`` seats take only short requests (weight 1), so a
  short question joins at the next round however many long rows there are.
- **Long rows per client.** One client (one address: every tab of one machine is one client) holds at most
  ``long_seats_per_client(max_batch)`` long rows, whether or not anyone else is waiting: rows that run for
  hundreds of steps would otherwise fill the long seats while nobody else was there and keep them.
- **A fair share while others wait.** While another client has a request waiting, a client already holding at
  least ``max_batch / clients`` of weight adds nothing more; a client that holds nothing may always join. While
  nobody else waits the free seats are used (a batch is not kept empty for nobody).

The order in which waiting requests are considered is the worker's (engine/jobs/worker.py): the client holding
the least weight first, then the client served least recently, then the session, then the submit time.

Everything here is plain values: a ``Seat`` per request, the seats held, the clients waiting. ``refusal`` returns
None (it may join) or why not, as a reason code and its numbers, for the waiting page to put in words.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence

WEIGHT_TOKENS = 128  # prompt + new tokens that weigh one share: the app's default question and answer fit in it


@dataclass(frozen=True)
class Seat:
    """A request as the policy sees it: whose it is and what it weighs."""

    client: Hashable  # the address it came from (every tab of one machine: one client)
    session: Hashable  # its tab
    weight: float  # weight(prompt tokens, new tokens)


def weight(prompt_tokens: int, new_tokens: int) -> float:
    """Shares a request costs: (prompt tokens + new tokens) / WEIGHT_TOKENS, at least 1."""
    return max(1.0, (max(0, int(prompt_tokens)) + max(0, int(new_tokens))) / WEIGHT_TOKENS)


def is_short(w: float) -> bool:
    return w <= 1.0


def short_seats(max_batch: int) -> int:
    """Seats that only short requests may take: a quarter of the batch, at least one (none in a batch of one)."""
    return 0 if max_batch <= 1 else max(1, max_batch // 4)


def long_seats_per_client(max_batch: int) -> int:
    """Long rows one client may hold: an eighth of the seats long rows may take (3 of 24 in a batch of 32), at
    least one. Each long row makes every decode step of the batch slower (its keys and values are read at each
    one), and a student has one tab asking at a time, or two."""
    return max(1, (max_batch - short_seats(max_batch)) // 8)


def refusal(want: Seat, held: Sequence[Seat], waiting: Iterable[Hashable], max_batch: int) -> dict | None:
    """None when ``want`` may take a seat beside ``held`` (the batch's rows); otherwise why not:
    ``{"reason": code, ...numbers}``. ``waiting``: the other clients with a request waiting for this batch.

    Reasons: ``full`` (every seat taken), ``session`` (this tab already has a row), ``long`` (the seats long
    requests may take are taken), ``client_long`` (this client holds its most long rows), ``share`` (this client
    holds its fair share while others wait)."""
    if any(s.session == want.session for s in held):
        return {"reason": "session"}
    if len(held) >= max_batch:
        return {"reason": "full", "seats": max_batch}
    if not is_short(want.weight):
        kept = short_seats(max_batch)
        longs = sum(not is_short(s.weight) for s in held)
        if longs >= max_batch - kept:
            return {"reason": "long", "seats": max_batch, "kept": kept}
        cap = long_seats_per_client(max_batch)
        if sum(s.client == want.client and not is_short(s.weight) for s in held) >= cap:
            return {"reason": "client_long", "limit": cap}
    others = {c for c in waiting if c != want.client}
    mine = sum(s.weight for s in held if s.client == want.client)
    if others and mine > 0:
        clients = len(others | {s.client for s in held} | {want.client})
        share = max_batch / clients
        if mine >= share:
            return {"reason": "share", "clients": clients}
    return None


def held_weight(held: Iterable[Seat]) -> dict:
    """Weight held per client."""
    out: dict = {}
    for s in held:
        out[s.client] = out.get(s.client, 0.0) + s.weight
    return out
