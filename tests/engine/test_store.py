"""engine/store.py: the one bounded store. The least recently used goes first (a read is a use), an entry older
than its time limit is gone, the bound holds with 8 threads writing at once, and get_or_put makes a value once."""
import pickle
import threading

import pytest

from engine.store import BoundedStore


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_least_recently_used_goes_first_and_a_read_is_a_use():
    s = BoundedStore("t", 3)
    for k in "abc":
        s.put(k, k.upper())
    assert s.get("a") == "A"  # a is now the most recently used: b is the oldest
    s.put("d", "D")
    assert [k for k, _ in s.items()] == ["c", "a", "d"] and s.get("b") is None and len(s) == 3
    s.put("c", "C2")  # a put replaces and counts as a use
    s.put("e", "E")
    assert s.items() == [("d", "D"), ("c", "C2"), ("e", "E")]
    assert "a" not in s and "e" in s
    assert s.pop("c") == "C2" and s.pop("c", "gone") == "gone" and len(s) == 2


def test_membership_is_not_a_use():
    s = BoundedStore("t", 2)
    s.put("a", 1)
    s.put("b", 2)
    assert "a" in s
    s.put("c", 3)
    assert "a" not in s and "b" in s  # `in` left a the oldest


def test_a_stored_none_or_falsy_value_is_a_value():
    s = BoundedStore("t", 2)
    s.put("zero", 0)
    calls = []
    assert s.get_or_put("zero", lambda: calls.append(1) or 5) == 0 and calls == []


def test_an_entry_expires_its_ttl_after_it_was_put():
    clock = Clock()
    s = BoundedStore("t", 4, ttl_s=60, clock=clock)
    s.put("a", 1)
    clock.now += 30
    s.put("b", 2)
    assert s.get("a") == 1  # a read does not renew the time limit
    clock.now += 30
    assert s.get("a") is None and "a" not in s and s.get("b") == 2 and len(s) == 1
    assert s.get_or_put("a", lambda: 3) == 3  # made again once expired
    clock.now += 30
    assert s.items() == [("a", 3)] and s.pop("b") is None


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="max_entries"):
        BoundedStore("t", 0)
    with pytest.raises(ValueError, match="ttl_s"):
        BoundedStore("t", 1, ttl_s=0)


def test_eight_threads_at_once_keep_the_bound_and_every_last_write():
    s = BoundedStore("t", 16)
    start = threading.Barrier(8)
    errors = []

    def writer(t):
        try:
            start.wait()
            for i in range(2000):
                s.put((t, i % 40), i)
                s.get((t, (i * 7) % 40))
                if i % 50 == 0:
                    s.items()
                    s.pop((t, i % 40))
                assert len(s) <= 16
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(s) == 16
    assert all(v == max(i for i in range(2000) if i % 40 == k[1]) for k, v in s.items())


def test_get_or_put_makes_a_value_once_while_eight_threads_ask():
    s = BoundedStore("t", 4)
    made, start, release = [], threading.Barrier(8), threading.Event()
    got = []

    def make():
        made.append(1)
        release.wait(5)  # the others arrive while it is being made
        return object()

    def ask():
        start.wait()
        got.append(s.get_or_put("k", make))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    s.put("other", 1)  # the store is not locked while a value is made
    release.set()
    for t in threads:
        t.join()
    assert len(made) == 1 and len(got) == 8 and all(g is got[0] for g in got)


def test_a_failed_make_keeps_nothing_and_the_next_caller_tries():
    s = BoundedStore("t", 4)

    def boom():
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        s.get_or_put("k", boom)
    assert "k" not in s and s.get_or_put("k", lambda: 7) == 7


def test_a_store_pickles_with_its_entries():
    s = BoundedStore("t", 2)
    s.put("a", 1)
    s.put("b", 2)
    t = pickle.loads(pickle.dumps(s))
    assert t.items() == s.items() and t.name == "t"
    t.put("c", 3)
    assert [k for k, _ in t.items()] == ["b", "c"] and len(s) == 2
