"""The class's predictions: one anonymous pick per voter and question, counted per choice, in this server's
memory. Pure Python (no Streamlit): ui/frame/predict.py passes in the voter and its client.

A voter is one browser tab's random id (ui/frame/state.py ``voter_id``), kept in the page address, so a reload (a
new Streamlit session at the same address) is the same voter: its pick stays counted, shows as its own and is
changed in place, never cast twice. The id is random and says nothing about a person.

Bounded and safe by construction:

- a pick is one entry keyed (question, voter): a thousand clicks from one tab are one entry, changed in place,
  and only a choice the lesson file lists for a question it has is taken (anything else is refused);
- one client (one address: every tab of one machine, or a whole room behind one proxy) casts at most
  ``per_client`` picks per question, the class batch's seat count (engine/jobs/seats.py bounds a client's seats by
  the same batch): one machine cannot vote as a crowd beyond a class's size, however many voter ids it forges;
- every pick lives in a ``BoundedStore`` ("class picks": at most ``MAX_PICKS`` entries, gone ``CLASS_TTL_S``
  after it was made, i.e. after the class ends); "New round" clears them all; picking closes at the reveal;
- what leaves this module is counts per choice: no voter, no address.
"""
from __future__ import annotations

import enum
import threading
import time
from typing import Callable, Hashable

from engine.store import BoundedStore
from ui.frame.questions import Question

MAX_PICKS = 20_000  # entries over every question: 30 students x 15 questions is 450
CLASS_TTL_S = 4 * 3600.0  # a pick older than this belongs to a class that ended


class Pick(enum.Enum):
    COUNTED = "counted"  # a first pick, or a changed one
    SAME = "same"  # the voter's pick already (a repeated click)
    NO_SUCH_CHOICE = "no such choice"  # a forged or stale value: not one of the question's choices
    CLOSED = "closed"  # revealed: picks are closed until a new round
    CROWD = "crowd"  # this client already casts its ``per_client`` picks for this question


class Tally:
    def __init__(self, max_picks: int = MAX_PICKS, ttl_s: float = CLASS_TTL_S,
                 clock: Callable[[], float] = time.monotonic):
        # (question id, voter) -> (client, choice key)
        self._picks: BoundedStore[tuple, tuple] = BoundedStore("class picks", max_picks, ttl_s=ttl_s, clock=clock)
        self._revealed: set[str] = set()  # question ids; only ids of lesson questions enter (bounded by them)
        self._lock = threading.Lock()
        self.round = 1

    def pick(self, q: Question, voter: Hashable, client: Hashable, choice: object, per_client: int) -> Pick:
        """Record ``voter``'s pick for ``q``; returns what happened (never raises on a forged value)."""
        if not isinstance(choice, str) or choice not in q.keys:
            return Pick.NO_SUCH_CHOICE
        with self._lock:
            if q.id in self._revealed:
                return Pick.CLOSED
            key = (q.id, voter)
            had = self._picks.get(key)
            if had is not None and had[1] == choice:
                return Pick.SAME
            if had is None:
                others = sum(1 for (qid, _), (c, _) in self._picks.items() if qid == q.id and c == client)
                if others >= per_client:
                    return Pick.CROWD
            self._picks.put(key, (client, choice))
            return Pick.COUNTED

    def mine(self, q: Question, voter: Hashable) -> str | None:
        had = self._picks.get((q.id, voter))
        return None if had is None else had[1]

    def counts(self, q: Question) -> dict[str, int]:
        """Picks per choice key, in the lesson's order."""
        out = dict.fromkeys(q.keys, 0)
        for (qid, _), (_, choice) in self._picks.items():
            if qid == q.id and choice in out:
                out[choice] += 1
        return out

    def asked(self) -> set[str]:
        """Question ids with at least one pick this round."""
        return {qid for (qid, _), _ in self._picks.items()}

    def reveal(self, q: Question) -> None:
        with self._lock:
            self._revealed.add(q.id)

    def revealed(self, q: Question) -> bool:
        return q.id in self._revealed

    def new_round(self) -> None:
        """Clear every pick and reveal: the next question starts from nothing."""
        with self._lock:
            self._picks.clear()
            self._revealed.clear()
            self.round += 1

    def __len__(self) -> int:
        return len(self._picks)


TALLY = Tally()  # this server's one tally (every session of the process shares it)
