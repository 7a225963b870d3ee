"""The KV cache's measured bytes equal 2 x layers x kv_heads x head_dim x tokens x bytes at every step."""
import numpy as np
import torch

from engine.__main__ import main
from engine.kv_cache.bench import measure_steps
from engine.core.kv import kv_bytes_for
from engine.kv_cache.snapshot import cache_snapshot
from engine.core.sampling import SamplingSettings
from engine.core.trace import generate_tokens, run_trace
from engine.core.loop import new_cache, prefill


def _check_steps(lm, steps, prompt_len):
    assert steps, "no steps recorded"
    for i, s in enumerate(steps):
        assert s.kv_tokens == prompt_len + i  # prefill caches the prompt, each decode step adds one token
        assert s.kv_bytes == kv_bytes_for(lm.info, s.kv_tokens), f"step {i}"


def test_tiny_measured_equals_formula_every_step(tiny_lm):
    ids = list(range(5, 17))
    _, steps, _, _ = generate_tokens(tiny_lm, ids, SamplingSettings(temperature=1.0), 7, seed=3, stop_at_eos=False)
    assert len(steps) == 7
    _check_steps(tiny_lm, steps, len(ids))
    i = tiny_lm.info
    assert steps[-1].kv_bytes == 2 * i.n_layers * i.n_kv_heads * i.head_dim * steps[-1].kv_tokens * 4


def test_embedded_measured_equals_formula_every_step(embedded_lm):
    t = run_trace(embedded_lm, "The capital of France is", SamplingSettings(temperature=0.0), 4, analyse=False,
                  use_chat_template=False)
    _check_steps(embedded_lm, t.steps, len(t.prompt_ids))
    assert kv_bytes_for(embedded_lm.info, 1) == 2 * 30 * 3 * 64 * 4  # SmolLM2-135M in float32


def test_batched_cache_scales_with_batch(tiny_lm):
    rows = measure_steps(tiny_lm, [3, 4, 5, 6], 3, batch=3)
    assert [r["tokens"] for r in rows] == [4, 5, 6]
    assert all(r["equal"] for r in rows)
    assert rows[0]["measured_bytes"] == 3 * kv_bytes_for(tiny_lm.info, 4)


def test_cache_holds_only_kv_heads_under_gqa(tiny_lm):
    i = tiny_lm.info
    assert i.n_kv_heads < i.n_heads  # the tiny model is GQA: 4 query heads, 2 KV heads
    cache = new_cache(tiny_lm)
    prefill(tiny_lm, torch.tensor([[1, 2, 3, 4, 5]]), cache)
    k = cache.layers[0].keys
    assert tuple(k.shape) == (1, i.n_kv_heads, 5, i.head_dim)


def test_snapshot_is_the_runs_cache(tiny_lm):
    t = run_trace(tiny_lm, "Hello there", SamplingSettings(temperature=0.0), 5, analyse=False)
    snap = cache_snapshot(tiny_lm, t.prompt_ids, t.generated_ids)
    i = tiny_lm.info
    last = t.steps[-1]
    assert snap.measured_bytes == last.kv_bytes
    assert snap.tokens == last.kv_tokens == len(t.prompt_ids) + len(t.generated_ids) - 1
    assert snap.keys.shape == snap.values.shape == (i.n_layers, i.n_kv_heads, snap.tokens, i.head_dim)
    assert snap.layer_shape == (1, i.n_kv_heads, snap.tokens, i.head_dim)
    assert snap.token_ids == tuple(t.prompt_ids) + tuple(t.generated_ids[:-1])
    # The prompt's cached keys equal those a fresh prefill of the prompt alone writes (causality).
    cache = new_cache(tiny_lm)
    prefill(tiny_lm, torch.tensor([list(t.prompt_ids)]), cache)
    fresh = cache.layers[1].keys[0].numpy()  # [kv_heads, n, head_dim]
    np.testing.assert_allclose(snap.keys[1, :, : len(t.prompt_ids)], fresh, atol=1e-5)
    assert not np.allclose(snap.keys, snap.values)


def test_bench_kv_cli_json(tiny_lm, capsys):
    import json

    assert main(["bench", "kv", "--model", "tiny-random", "--json", "--new-tokens", "3", "--batch", "2"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["benchmark"] == "kv" and r["all_equal"] is True and r["batch"] == 2
    assert [s["step"] for s in r["steps"]] == [0, 1, 2]
    assert all(s["measured_bytes"] == s["formula_bytes"] for s in r["steps"])
    assert r["steps"][1]["measured_bytes"] - r["steps"][0]["measured_bytes"] == 2 * r["bytes_per_token"]
