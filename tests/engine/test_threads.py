"""The thread policy under a busy neighbour: a decode step stays within 3x of its quiet time, and the noise
guard flags the disturbed run. Both figures are measured in this test, alternating quiet and busy phases."""
import statistics
import time

import pytest
import torch

from engine.measure import noise, threads
from engine.measure.busy import start_load, stop_load
from engine.core.loop import decode_step, new_cache, prefill, warm_up
from engine.core.prompt import encode_prompt


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


def _threads_seen_by_forward(lm, ids: torch.Tensor) -> int:
    """The torch thread count in force while the model's forward runs for ``ids`` via engine.core.loop.forward."""
    from engine.core.loop import forward

    seen = []
    hook = lm.model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    try:
        forward(lm, ids, new_cache(lm))
    finally:
        hook.remove()
    return seen[0]


def test_small_passes_run_on_one_thread_and_large_ones_on_the_policys(tiny_lm, monkeypatch):
    monkeypatch.delenv("ILE_SMALL_PASS_ROWS", raising=False)
    monkeypatch.delenv("ILE_THREAD_POLICY", raising=False)
    monkeypatch.setenv("ILE_ADAPTIVE_THREADS", "off")  # the free-core rule has its own test below
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        rows = threads.small_pass_rows()
        assert rows == threads.SMALL_PASS_ROWS >= 1
        assert _threads_seen_by_forward(tiny_lm, torch.zeros(1, 1, dtype=torch.long)) == 1  # a decode step
        assert _threads_seen_by_forward(tiny_lm, torch.zeros(rows, 1, dtype=torch.long)) == 1  # a batch of rows
        assert _threads_seen_by_forward(tiny_lm, torch.zeros(1, rows + 1, dtype=torch.long)) == 2  # a prompt
        assert torch.get_num_threads() == 2  # the caller's count is back after each pass
        monkeypatch.setenv("ILE_SMALL_PASS_ROWS", "0")  # the override turns the rule off
        assert _threads_seen_by_forward(tiny_lm, torch.zeros(1, 1, dtype=torch.long)) == 2
        monkeypatch.setenv("ILE_SMALL_PASS_ROWS", "")
        monkeypatch.setenv("ILE_THREAD_POLICY", "off")  # torch's defaults: no rule either
        assert threads.small_pass_rows() == 0
        assert _threads_seen_by_forward(tiny_lm, torch.zeros(1, 1, dtype=torch.long)) == 2
    finally:
        torch.set_num_threads(before)


def test_large_passes_use_the_cores_other_programs_leave_free(tiny_lm, monkeypatch):
    """A prompt pass on a 2-core machine: both threads when nothing else runs, one when another program keeps a
    core busy (two threads then wait on each other at every op: engine/measure/threads.py's measurements)."""
    monkeypatch.delenv("ILE_SMALL_PASS_ROWS", raising=False)
    monkeypatch.delenv("ILE_THREAD_POLICY", raising=False)
    monkeypatch.delenv("ILE_THREADS", raising=False)
    monkeypatch.delenv("ILE_ADAPTIVE_THREADS", raising=False)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    busy = {"cores": 0.0}
    monkeypatch.setattr(threads.OTHER_LOAD, "cores_busy", lambda: busy["cores"])
    prompt = torch.zeros(1, threads.SMALL_PASS_ROWS + 1, dtype=torch.long)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert _threads_seen_by_forward(tiny_lm, prompt) == 2
        busy["cores"] = 0.3  # a browser drawing now and then
        assert _threads_seen_by_forward(tiny_lm, prompt) == 2
        busy["cores"] = 1.0  # a busy loop on one core
        assert _threads_seen_by_forward(tiny_lm, prompt) == 1
        assert torch.get_num_threads() == 2  # the caller's count is back after the pass
        busy["cores"] = 2.0  # never fewer than one
        assert _threads_seen_by_forward(tiny_lm, prompt) == 1
        busy["cores"] = None  # /proc unreadable: the policy's count
        assert _threads_seen_by_forward(tiny_lm, prompt) == 2
        busy["cores"] = 1.0
        monkeypatch.setenv("ILE_ADAPTIVE_THREADS", "off")
        assert _threads_seen_by_forward(tiny_lm, prompt) == 2
        monkeypatch.delenv("ILE_ADAPTIVE_THREADS")
        monkeypatch.setenv("ILE_THREADS", "2")  # an explicit count is kept as asked
        assert _threads_seen_by_forward(tiny_lm, prompt) == 2
    finally:
        torch.set_num_threads(before)


def test_other_programs_load_is_read_from_the_kernel():
    """A busy loop in another process reads as about one core busy (it can only read higher on a loaded machine)."""
    import subprocess
    import sys
    import time

    if threads._OtherLoad()._sample() is None:
        pytest.skip("no /proc here")
    load = threads._OtherLoad()
    load.cores_busy()
    spin = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 30\nwhile time.time() < end: pass"])
    try:
        time.sleep(threads.FREE_CORES_WINDOW_S * 1.6)
        seen = load.cores_busy()
        # our own process's time is not counted: a busy loop here changes nothing
        assert seen is not None and seen >= 0.6, seen
    finally:
        spin.kill()
        spin.wait()


def test_a_lower_priority_program_leaves_its_cores_to_the_app():
    """The same busy loop at nice 19 reads as no load: the kernel gives its core to the app's thread on waking (a
    planted version that counts the nice time reads about one core here)."""
    import os
    import subprocess
    import sys
    import time

    if threads._OtherLoad()._sample() is None or not hasattr(os, "nice"):
        pytest.skip("no /proc or nice here")
    load = threads._OtherLoad()
    load.cores_busy()
    spin = subprocess.Popen([sys.executable, "-c", "import os, time\nos.nice(19)\nend = time.time() + 30\n"
                             "while time.time() < end: pass"])
    try:
        time.sleep(threads.FREE_CORES_WINDOW_S * 1.6)
        seen = load.cores_busy()
        assert seen is not None and seen < 0.4, seen
    finally:
        spin.kill()
        spin.wait()


def test_the_rule_is_said_where_the_policy_is_shown(monkeypatch):
    monkeypatch.delenv("ILE_SMALL_PASS_ROWS", raising=False)
    monkeypatch.setenv("ILE_ADAPTIVE_THREADS", "off")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert f"passes of at most {threads.SMALL_PASS_ROWS} rows (decode steps) on 1 thread" in \
            str(threads.describe_policy())
        assert threads.threads_said(2) == f"2 threads (passes of at most {threads.SMALL_PASS_ROWS} rows, such as a " \
                                          "decode step, on 1)"
        assert threads.threads_said(1) == "1 thread"
        monkeypatch.setenv("ILE_SMALL_PASS_ROWS", "0")
        assert "1 thread" not in str(threads.describe_policy())
        assert threads.threads_said(2) == "2 threads"
        monkeypatch.setenv("ILE_ADAPTIVE_THREADS", "on")
        assert "larger passes (prompts) on the cores other programs leave free" in str(threads.describe_policy())
        assert threads.threads_said(2) == "2 threads (larger ones on the cores other programs left free)"
    finally:
        torch.set_num_threads(before)


def test_a_peers_generate_follows_the_same_rule_inside_the_block(tiny_lm, monkeypatch):
    """The benchmarks' peer (model.generate) gets the engine's thread rule, so their ratio compares loops."""
    from transformers import GenerationConfig

    monkeypatch.setenv("ILE_ADAPTIVE_THREADS", "off")  # prompt passes on the policy's count, however busy
    monkeypatch.delenv("ILE_SMALL_PASS_ROWS", raising=False)
    monkeypatch.delenv("ILE_THREAD_POLICY", raising=False)
    before = torch.get_num_threads()
    seen = []
    inner = tiny_lm.model.model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    try:
        torch.set_num_threads(2)
        x = torch.arange(threads.SMALL_PASS_ROWS + 4).unsqueeze(0)  # [1, n]: the prompt pass is not small
        cfg = GenerationConfig(max_new_tokens=3, do_sample=False, eos_token_id=[], pad_token_id=0)
        with threads.rule_for_every_pass(tiny_lm.model):
            tiny_lm.model.generate(x, generation_config=cfg, attention_mask=torch.ones_like(x))
        assert seen == [2, 1, 1], seen  # prompt on the policy's threads, each decode step on one
        assert torch.get_num_threads() == 2
        seen.clear()
        tiny_lm.model.generate(x, generation_config=cfg, attention_mask=torch.ones_like(x))
        assert seen == [2, 2, 2], seen  # outside the block the hooks are gone
    finally:
        inner.remove()
        torch.set_num_threads(before)
