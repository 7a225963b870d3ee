"""engine/core/loop.py is the only module that hands a KV cache to a model (``past_key_values=``)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_only_loop_passes_past_key_values():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("tests/", ".venv", "venv/")) or "/site-packages/" in rel:
            continue
        if re.search(r"past_key_values\s*=", path.read_text(encoding="utf-8", errors="replace")):
            offenders.append(rel)
    # the decode benchmark's peer hands transformers' own generate its static cache: the peer is measured outside the
    # engine on purpose (one cache length for every prompt, so one compile)
    assert offenders == ["engine/core/loop.py", "engine/timeline/bench_peer.py"], offenders


def test_loop_crop_and_decode(tiny_lm):
    import torch

    from engine.core.loop import crop, decode, new_cache, prefill

    cache = new_cache(tiny_lm)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    first = int(prefill(tiny_lm, ids, cache)[0].argmax())
    seen = []
    out, reason = decode(tiny_lm, first, cache, 4, on_step=lambda i, t, lg, s: seen.append((i, t, s >= 0)))
    assert reason == "max_new_tokens" and len(out) == 4 and [s[1] for s in seen] == out
    assert cache.get_seq_length() == 5 + 4  # every fed token, not the last picked one
    crop(cache, 6)
    assert cache.get_seq_length() == 6
    # decoding again from the cropped cache gives the same tokens as the first time
    again, _ = decode(tiny_lm, out[0], cache, 3)
    assert again == out[1:4]
    # EOS: stop at the first stop token, and say so
    out2, reason2 = decode(tiny_lm, first, new_cache_prefilled(tiny_lm, ids), 6, stops={out[1]})
    assert reason2 == "eos" and out2[-1] == out[1]


def new_cache_prefilled(lm, ids):
    from engine.core.loop import new_cache, prefill

    cache = new_cache(lm)
    prefill(lm, ids, cache)
    return cache


def test_timed_greedy_is_the_loops_greedy_decode(tiny_lm):
    """The one timed greedy loop (timeline, precision, bench threads): the same tokens as prefill + decode, one
    time per pass."""
    import torch

    from engine.core.loop import decode, greedy, new_cache, prefill, timed_greedy

    ids = [1, 2, 3, 4, 5]
    out, t_prefill, steps = timed_greedy(tiny_lm, ids, 6)
    cache = new_cache(tiny_lm)
    first = greedy(prefill(tiny_lm, torch.tensor([ids]), cache)[0])
    rest, _ = decode(tiny_lm, first, cache, 5)
    assert out == [first, *rest] and len(steps) == 5 and t_prefill > 0 and all(s > 0 for s in steps)
    assert timed_greedy(tiny_lm, ids, 1)[0] == [first] and timed_greedy(tiny_lm, ids, 1)[2] == []
