"""The one bounded store: every cache the code keeps by hand (outside ``st.cache_data`` / ``st.cache_resource``
and ``functools.lru_cache``) is a ``BoundedStore``, so each has a bound, one eviction rule and one lock, and
docs/architecture.md lists it under its ``name`` (tests/ui/test_caches_listed.py checks that).

A map that keeps at most ``max_entries`` entries and drops the least recently used first (a read counts as a use),
as ``functools.lru_cache`` and ``st.cache_data(max_entries=...)`` do; with ``ttl_s``, an entry older than that
(counted from when it was put) is gone, as with ``st.cache_data(ttl=...)``. Thread-safe: the pages of every
session and the engine worker share the process's stores. No Streamlit here: engine code uses it too.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING = object()


class BoundedStore(Generic[K, V]):
    """At most ``max_entries`` entries, least recently used out first; optional ``ttl_s``; one lock.

    ``clock`` (seconds, monotonic) is what the time limit is measured with; tests pass their own."""

    def __init__(self, name: str, max_entries: int, ttl_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if max_entries < 1:
            raise ValueError(f"store {name!r}: max_entries must be at least 1, not {max_entries}")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"store {name!r}: ttl_s must be positive (or None for no time limit), not {ttl_s}")
        self.name, self.max_entries, self.ttl_s, self._clock = name, int(max_entries), ttl_s, clock
        self._entries: OrderedDict = OrderedDict()  # key -> (value, time it was put), oldest use first
        self._making: dict = {}  # key -> Event set when the get_or_put computing it is done
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BoundedStore({self.name!r}, {len(self)}/{self.max_entries}" + (
            f", ttl {self.ttl_s:g} s)" if self.ttl_s else ")")

    def _live(self, key):
        """The entry's value (now the most recently used), or _MISSING; an expired entry is dropped. Lock held."""
        entry = self._entries.get(key, _MISSING)
        if entry is _MISSING:
            return _MISSING
        if self.ttl_s is not None and self._clock() - entry[1] >= self.ttl_s:
            del self._entries[key]
            return _MISSING
        self._entries.move_to_end(key)
        return entry[0]

    def _put(self, key, value) -> None:
        self._entries[key] = (value, self._clock())
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value kept for ``key`` (counts as a use), or ``default`` when there is none or it expired."""
        with self._lock:
            value = self._live(key)
        return default if value is _MISSING else value

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` for ``key`` as the most recently used (the oldest goes when full); returns ``value``."""
        with self._lock:
            self._put(key, value)
        return value

    def get_or_put(self, key: K, make: Callable[[], V]) -> V:
        """The kept value, or ``make()``'s, kept. ``make`` runs outside the store's lock (other keys are served
        meanwhile) and once at a time per key: a caller asking for a key being made waits for that value instead
        of making a second one. When ``make`` raises, nothing is kept and the next waiter tries."""
        while True:
            with self._lock:
                value = self._live(key)
                if value is not _MISSING:
                    return value
                pending = self._making.get(key)
                mine = pending is None
                if mine:
                    pending = self._making[key] = threading.Event()
            if not mine:
                pending.wait()
                continue
            try:
                value = make()
                with self._lock:
                    self._put(key, value)
                return value
            finally:
                with self._lock:
                    del self._making[key]
                pending.set()

    def pop(self, key: K, default: V | None = None) -> V | None:
        """Drop ``key``'s entry; its value (``default`` when there was none or it had expired)."""
        with self._lock:
            value = self._live(key)
            self._entries.pop(key, None)
        return default if value is _MISSING else value

    def items(self) -> list[tuple[K, V]]:
        """The live (key, value) pairs, least recently used first (a copy: safe to iterate while others write)."""
        with self._lock:
            now = self._clock()
            if self.ttl_s is not None:
                for k in [k for k, (_, at) in self._entries.items() if now - at >= self.ttl_s]:
                    del self._entries[k]
            return [(k, v) for k, (v, _) in self._entries.items()]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self.items())

    def __contains__(self, key: object) -> bool:
        """Is there a live entry for ``key``? (Not a use: the order is unchanged.)"""
        with self._lock:
            entry = self._entries.get(key, _MISSING)
            return entry is not _MISSING and (self.ttl_s is None or self._clock() - entry[1] < self.ttl_s)

    def __getstate__(self) -> dict:
        """Picklable (a session's store may be serialized): the entries and settings, not the lock."""
        with self._lock:
            state = dict(self.__dict__, _entries=OrderedDict(self._entries), _making={})
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
