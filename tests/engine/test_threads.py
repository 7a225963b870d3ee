"""The thread policy under a busy neighbour: a decode step stays within 3x of its quiet time, and the noise
guard flags the disturbed run. Both figures are measured in this test, alternating quiet and busy phases."""
import statistics
import time

import torch

from engine import noise, threads
from engine.bench.threads import start_load, stop_load
from engine.loop import decode_step, new_cache, prefill, warm_up
from engine.prompt import encode_prompt


def _decode_steps(lm, ids, n):
    cache = new_cache(lm)
    logits = prefill(lm, torch.tensor([ids]), cache)
    times = []
    for _ in range(n + 1):
        tok = logits.argmax(-1, keepdim=True)  # [1, 1]
        t0 = time.perf_counter()
        logits = decode_step(lm, tok, cache)
        times.append(time.perf_counter() - t0)
    return times[1:]


def test_policy_threads_counts():
    assert threads.policy_threads(2) in (1, 2)
    assert threads.policy_threads(1) == 1  # never zero threads
    assert threads.policy_threads(8) >= 7


def test_policy_holds_beside_a_busy_process(embedded_lm):
    lm = embedded_lm
    before = torch.get_num_threads()
    try:
        n = threads.apply_policy()
        assert torch.get_num_threads() == n == threads.policy_threads()
        warm_up(lm)
        ids = list(encode_prompt(lm.tokenizer, "Explain in two sentences why the sky is blue.", True).ids)
        _decode_steps(lm, ids, 2)
        quiet, busy, cals = [], [], []
        for _ in range(2):
            quiet += _decode_steps(lm, ids, 6)
            proc = start_load("spin", 30)  # a busy loop on one core, ends by itself after 30 s at the latest
            try:
                time.sleep(0.3)
                with noise.calibrated() as cal:
                    busy += _decode_steps(lm, ids, 6)
            finally:
                stop_load(proc)
            cals.append(cal.result)
        q, b = statistics.median(quiet), statistics.median(busy)
        print(f"decode step quiet {q * 1000:.1f} ms, busy {b * 1000:.1f} ms (x{b / q:.2f}), {n} threads; "
              f"{cals[0].describe()}")
        assert b <= 3 * q, (q, b)
        assert all(c.disturbed for c in cals), cals
        assert any("Other programs used" in f for c in cals for f in c.flags)
    finally:
        torch.set_num_threads(before)


def test_describe_policy_says_what_is_in_force():
    d = threads.describe_policy()
    assert d.threads == torch.get_num_threads() and d.cores >= 1
    assert d.wait in ("passive", "active", "default")
    assert "cores for torch" in str(d)
