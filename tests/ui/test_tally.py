"""The class tally: one pick per voter and question, forged choices refused, a client's picks bounded (however
many voter ids it makes), a reload (the same voter) neither dropped nor counted twice, closed at the reveal,
cleared by a new round, bounded in memory."""
from ui.frame.questions import Question, by_id
from ui.frame.tally import Pick, Tally

Q = by_id("timeline.try-this")
OTHER = by_id("loop.try-this")


def test_a_thousand_clicks_count_once_and_a_change_moves_the_pick():
    t = Tally()
    results = [t.pick(Q, "s1", "10.0.0.1", "narrower" if i % 2 else "wider", per_client=32) for i in range(1000)]
    assert results.count(Pick.COUNTED) == 1000  # each click changes the pick: still one entry
    assert len(t) == 1 and sum(t.counts(Q).values()) == 1 and t.counts(Q)["narrower"] == 1
    assert t.pick(Q, "s1", "10.0.0.1", "narrower", per_client=32) is Pick.SAME


def test_forged_choices_are_refused_without_an_error():
    t = Tally()
    for forged in ("", "NARROWER ", "vocab", None, 3, ["narrower"], "<script>", "x" * 10_000):
        assert t.pick(Q, "s1", "c", forged, per_client=32) is Pick.NO_SUCH_CHOICE
    assert len(t) == 0 and t.counts(Q) == {"narrower": 0, "as wide": 0, "wider": 0}


def test_one_client_cannot_vote_as_a_crowd():
    t = Tally()
    got = [t.pick(Q, f"s{i}", "10.0.0.9", "wider", per_client=5) for i in range(40)]
    assert got.count(Pick.COUNTED) == 5 and got.count(Pick.CROWD) == 35
    assert t.pick(Q, "s99", "10.0.0.10", "wider", per_client=5) is Pick.COUNTED  # another client is not blocked
    assert t.pick(Q, "s0", "10.0.0.9", "narrower", per_client=5) is Pick.COUNTED  # a seated session may change
    assert t.pick(OTHER, "s7", "10.0.0.9", "vocab", per_client=5) is Pick.COUNTED  # the bound is per question


def test_a_reload_keeps_its_pick_and_does_not_vote_twice():
    """A reload is a new session at the same address, so the same voter: its pick is still counted and its own,
    and picking again changes it in place."""
    t = Tally()
    t.pick(Q, "voter-a", "c", "wider", per_client=1)
    assert t.counts(Q)["wider"] == 1 and t.mine(Q, "voter-a") == "wider"  # the reloaded tab reads it back
    assert t.pick(Q, "voter-a", "c", "wider", per_client=1) is Pick.SAME
    assert t.pick(Q, "voter-a", "c", "narrower", per_client=1) is Pick.COUNTED
    assert t.counts(Q) == {"narrower": 1, "as wide": 0, "wider": 0}


def test_fresh_voter_ids_from_one_client_stay_within_its_seats():
    """Closing a tab keeps its pick: a script that makes a new voter id per session still casts at most the
    client's seats."""
    t = Tally()
    got = [t.pick(Q, f"forged-{i}", "10.0.0.9", "wider", per_client=3) for i in range(100)]
    assert got.count(Pick.COUNTED) == 3 and t.counts(Q)["wider"] == 3


def test_reveal_closes_picks_and_a_new_round_clears():
    t = Tally()
    t.pick(Q, "s1", "c", "wider", per_client=32)
    t.reveal(Q)
    assert t.revealed(Q) and not t.revealed(OTHER)
    assert t.pick(Q, "s2", "c", "wider", per_client=32) is Pick.CLOSED
    assert t.pick(OTHER, "s2", "c", "vocab", per_client=32) is Pick.COUNTED
    r = t.round
    t.new_round()
    assert len(t) == 0 and not t.revealed(Q) and t.round == r + 1 and t.asked() == set()


def test_memory_is_bounded_and_old_picks_expire():
    now = [0.0]
    t = Tally(max_picks=50, ttl_s=100.0, clock=lambda: now[0])
    for i in range(500):
        t.pick(Q, f"s{i}", f"c{i}", "wider", per_client=32)
    assert len(t) == 50
    now[0] = 101.0
    assert sum(t.counts(Q).values()) == 0


def test_counts_carry_nothing_identifying():
    t = Tally()
    t.pick(Q, "session-abc", "192.168.1.7", "narrower", per_client=32)
    assert "192.168.1.7" not in repr(t.counts(Q)) and "session-abc" not in repr(t.counts(Q))
    assert isinstance(Q, Question) and t.mine(Q, "session-abc") == "narrower"


def test_memory_is_flat_over_ten_rounds():
    """A class of 30 answering every question, ten rounds: the objects the process holds after the tenth round are
    those after the second (a new round frees every pick; 30 x 15 picks left behind per round would be thousands
    of objects). Counted with the garbage collector: tracemalloc also counts the interpreter's tuple free lists."""
    import gc

    from ui.frame.questions import all_questions

    t = Tally()
    qs = list(all_questions().values())
    held = []
    for r in range(10):
        for q in qs:
            for s in range(30):
                t.pick(q, f"r{r}-s{s}", f"10.0.0.{s}", q.keys[s % len(q.keys)], per_client=32)
            t.reveal(q)
        assert len(t) == 30 * len(qs)
        t.new_round()
        gc.collect()
        held.append(len(gc.get_objects()))
    assert len(t) == 0 and not t.asked()
    assert held[-1] - held[1] < 100, held
