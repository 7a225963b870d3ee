"""Prefill vs decode measurements: records agree with the trace, greedy with/without cache agree, sane sizes."""
import argparse
import math

import pytest
import torch

from engine.timeline import bench as bench_timeline
from engine.timeline import experiment as T
from engine.timeline import memory as M
from engine.timeline import roofline as R
from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.measure.spread import LESSON_RUNS


@pytest.fixture(scope="module")
def tiny_trace(tiny_lm):
    return run_trace(tiny_lm, "The capital of France is", SamplingSettings(0.8, 20, 0.9), 6, seed=3,
                     use_chat_template=False, analyse=False)


def test_timeline_matches_trace(tiny_trace):
    tr = tiny_trace
    tl = T.timeline(tr)
    assert len(tl.bars) == len(tr.steps) == len(tr.generated_ids) == tl.new_tokens
    assert tl.prompt_tokens == len(tr.prompt_ids) == tl.bars[0].tokens_in
    assert tl.bars[0].phase == "prefill" and all(b.phase == "decode" and b.tokens_in == 1 for b in tl.bars[1:])
    for a, b in zip(tl.bars, tl.bars[1:]):  # end to end, to scale
        assert b.start_ms == pytest.approx(a.start_ms + a.ms)
    assert [b.ms for b in tl.bars] == pytest.approx([s.seconds * 1000 for s in tr.steps])
    assert tl.total_ms == pytest.approx(sum(s.seconds for s in tr.steps) * 1000)
    assert tl.ttft_ms == pytest.approx(tl.bars[0].ms)
    assert tl.tpot_ms.n == len(tr.generated_ids) - 1
    assert tl.tpot_ms.lo <= tl.tpot_ms.median <= tl.tpot_ms.hi
    assert tl.tokens_per_s == pytest.approx(tr.tokens_per_second)


def test_cache_comparison_same_tokens_tiny(tiny_lm):
    ids = list(range(5, 25))
    cc = T.cache_comparison(tiny_lm, ids, 6)
    assert cc.identical and cc.first_difference is None
    assert len(cc.cached_ids) == len(cc.recompute_ids) == len(cc.cached_ms) == len(cc.recompute_ms) == 6
    assert all(t > 0 for t in cc.cached_ms + cc.recompute_ms)
    # and equal to the app's own greedy loop
    tr = run_trace(tiny_lm, tiny_lm.tokenizer.decode(ids), SamplingSettings(), 6, use_chat_template=False,
                   analyse=False)
    assert list(tr.prompt_ids) == ids  # byte-level tiny tokenizer: the ids round-trip, so the comparison runs
    assert tuple(tr.generated_ids) == cc.cached_ids


def test_cache_comparison_same_tokens_embedded(embedded_lm):
    ids = list(T.sweep_prompt(embedded_lm, 12))
    cc = T.cache_comparison(embedded_lm, ids, 4)
    assert cc.identical, (cc.cached_ids, cc.recompute_ids)
    assert len(cc.tokens) == 4


def test_sweep_small(tiny_lm):
    sw = T.prompt_length_sweep(tiny_lm, (24, 6), new_tokens=3, repeats=2)
    assert [r.prompt_tokens for r in sw.rows] == [6, 24]
    assert len(T.sweep_prompt(tiny_lm, 24)) == 24
    for r in sw.rows:
        for s in (r.ttft_ms, r.tpot_ms):
            assert s.n == 2 and 0 < s.lo <= s.median <= s.hi


def test_stage_breakdown_tiny(tiny_lm):
    seen = []

    def hooks():  # transformers may keep hooks of its own on these modules; ours must all be gone afterwards
        return [(id(m), len(m._forward_hooks), len(m._forward_pre_hooks)) for _, m in T.stage_modules(tiny_lm.model)]

    before = hooks()
    bd = T.stage_breakdown(tiny_lm, list(range(5, 21)), repeats=2, progress=lambda f, m: seen.append(f))
    L = tiny_lm.info.n_layers
    assert bd.module_counts == {"embedding": 1, "attention": L, "MLP": L, "norms": 2 * L + 1, "output projection": 1}
    assert bd.prefill.tokens_in == 16 and bd.decode.tokens_in == 1
    for p in (bd.prefill, bd.decode):
        assert set(p.stage_ms) == set(T.STAGES)
        assert all(s.n == 2 and s.median >= 0 for s in p.stage_ms.values())
        assert p.stage_ms["attention"].median > 0 and p.stage_ms["sampling"].median > 0
        assert sum(p.shares().values()) == pytest.approx(1.0)
    assert seen and seen[-1] == 1.0
    assert hooks() == before  # the timing hooks are gone afterwards


def test_hardware_probe_and_roofline(tiny_lm):
    hp = R.hardware_probe("cpu", buffer_mb=16, matmul_n=256, repeats=2)
    for s in (hp.read_gb_s, hp.copy_gb_s, hp.matmul_gflop_s):
        assert s.n == 2 and 0 < s.lo <= s.median <= s.hi and math.isfinite(s.hi)
    info = tiny_lm.info
    assert R.weight_bytes(tiny_lm) == info.n_params * info.bytes_per_value  # tiny: untied, nothing shared
    emb = tiny_lm.model.get_input_embeddings().weight
    assert R.decode_weight_bytes(tiny_lm) == R.weight_bytes(tiny_lm) - emb.numel() * emb.element_size()
    pre = R.roofline_point(tiny_lm, "prefill", 64, 0, 10.0)
    dec = R.roofline_point(tiny_lm, "decode", 1, 64, 2.0)
    assert pre.flops < 64 * dec.flops  # the head once, not at every position (test_a_pass_counts_the_output_head_once)
    assert pre.intensity > 10 * dec.intensity
    assert R.decode_floor_ms(tiny_lm, 2.0) == pytest.approx(R.decode_weight_bytes(tiny_lm) / 2e9 * 1000)


def test_training_keeps_activations_inference_does_not(tiny_lm):
    ids = list(range(5, 37))
    mem = M.training_vs_inference_memory(tiny_lm, ids)
    assert mem.inference_saved_bytes == 0
    assert mem.saved_for_backward_bytes > 0 and mem.saved_tensor_count > 0
    assert mem.training_peak_bytes > mem.inference_peak_bytes >= mem.logits_bytes
    assert mem.training_held_bytes >= mem.logits_bytes + mem.saved_for_backward_bytes - 8 * len(ids)
    assert mem.inference_held_bytes == mem.logits_bytes  # only the output survives inference mode
    assert not any(p.requires_grad for p in tiny_lm.model.parameters())  # restored


def test_bench_tiny_settings_returns_documented_keys(tiny_lm):
    p = argparse.ArgumentParser()
    bench_timeline.add_arguments(p)
    args = p.parse_args(["--lengths", "4,12", "--new-tokens", "2", "--repeats", "1", "--breakdown-repeats", "1",
                         "--probe-mb", "8"])
    r = bench_timeline.run(tiny_lm, args)
    for key in ("benchmark", "model", "device", "dtype", "threads", "new_tokens", "repeats", "sweep", "ttft_growth",
                "tpot_growth", "breakdown", "hardware", "decode_weight_bytes", "decode_floor_ms", "decode_step_ms",
                "bandwidth_utilisation", "note", "extended", "climb_started_at", "memory_short_at", "floor_check"):
        assert key in r, key
    lengths = [row["prompt_tokens"] for row in r["sweep"]]  # doubled from 12 while prefill had not climbed
    assert lengths[:2] == [4, 12] and lengths[2:] == r["extended"] == [12 * 2**i for i in range(1, len(lengths) - 1)]
    assert set(r["breakdown"]) == {"prefill", "decode"}
    assert set(r["breakdown"]["decode"]["stage_ms"]) == set(T.STAGES)
    assert r["bandwidth_utilisation"] > 0 and r["floor_check"]["step_ms"]["n"] == LESSON_RUNS
    assert r["decode_step_ms"] == round(r["floor_check"]["step_ms"]["median"], 3)  # the step measured beside the probe
    assert "TTFT" in bench_timeline.summary(r) and "measured beside it" in bench_timeline.summary(r)


def test_the_sweep_knows_when_prefill_has_climbed_and_where_it_started():
    from engine.measure.spread import Spread

    def rows(*ttft):
        return [T.SweepRow(16 * 2**i, Spread(t, t, t, 1), Spread(5, 5, 5, 1)) for i, t in enumerate(ttft)]

    assert not T.climbed(rows(10, 12, 14)) and T.climb_start(rows(10, 12, 14)) is None
    assert T.climbed(rows(10, 12, 20)) and T.climb_start(rows(10, 16, 30)) == 32
    assert T.next_length(rows(10, 12), 8192, 8) == 64 and T.next_length(rows(10, 12), 60, 8) is None


def test_a_length_that_runs_out_of_memory_ends_the_sweep_instead_of_failing(tiny_lm, monkeypatch):
    import torch

    def oom(*a, **k):
        raise torch.OutOfMemoryError("no room")

    monkeypatch.setattr(T, "prompt_length_sweep", oom)
    assert T.sweep_length(tiny_lm, 4096, 4, 1) is None


def test_a_pass_counts_the_output_head_once(tiny_lm):
    """The loop keeps only the last position's logits: a prefill of n tokens multiplies by the head once, not n
    times (counting it n times overstated SmolLM2's prefill FLOPs by 26% and Gemma 3's 2.3-2.6x)."""
    i = tiny_lm.info
    head = i.vocab_size * i.hidden_size
    body = i.n_params - head * (1 if i.tied_embeddings else 2)
    pre = R.roofline_point(tiny_lm, "prefill", 40, 0)
    assert pre.flops == pytest.approx(2 * body * 40 + 2 * head) and pre.flops < 2 * i.n_params * 40
    assert R.roofline_point(tiny_lm, "decode", 1, 40).flops == pytest.approx(2 * body + 2 * head)
    floor = R.pass_floor_ms(pre, read_gb_s=10.0, matmul_gflop_s=1e-3)  # a tiny matmul peak: the FLOPs set it
    assert floor == pytest.approx(pre.flops / 1e6 * 1000.0)


def test_the_ridge_is_measured_in_the_models_dtype():
    hp = R.hardware_probe("cpu", buffer_mb=4, matmul_n=64, repeats=1, matmul_dtype="bfloat16")
    assert hp.matmul_dtype == "bfloat16" and hp.ridge == pytest.approx(hp.matmul_gflop_s.median / hp.read_gb_s.median)
    assert R.hardware_probe("cpu", buffer_mb=4, matmul_n=64, repeats=1).matmul_dtype == "float32"


def test_the_floor_is_measured_beside_the_step(tiny_lm):
    """The bandwidth probe alternates with the decode step, round by round after a warm-up (a probe measured at a
    busier moment once made a 69 ms step look faster than its 126.5 ms floor); at least 5 rounds."""
    fc = R.floor_beside_step(tiny_lm, [5, 6, 7, 8], rounds=2)
    assert fc.step_ms.n == fc.read_gb_s.n == fc.floor_ms.n == LESSON_RUNS
    assert fc.weight_bytes == R.decode_weight_bytes(tiny_lm) and fc.probe_mb >= 64
    assert fc.floor_ms.median == pytest.approx(fc.weight_bytes / (fc.read_gb_s.median * 1e9) * 1000, rel=1e-6)
    assert fc.pace == pytest.approx(fc.floor_ms.median / fc.step_ms.median)
    assert all(isinstance(f, str) for f in fc.flags)


def test_counting_the_head_at_every_position_overstated_prefill_by_the_heads_share():
    """The issue's numbers, from each model's own sizes (tied heads): SmolLM2-135M's 49,152 x 576 head is a fifth of
    its parameters (+26%); Gemma 3 270M's 262,144 x 640 head is most of them (about 2.5x at 23-58 tokens)."""
    from types import SimpleNamespace

    def ratio(n_params, vocab, hidden, tokens):
        lm = SimpleNamespace(info=SimpleNamespace(n_params=n_params, vocab_size=vocab, hidden_size=hidden,
                                                  tied_embeddings=True))
        return 2.0 * n_params * tokens / R.pass_flops(lm, tokens)

    assert 1.24 < ratio(134_515_008, 49_152, 576, 40) < 1.27
    assert 2.3 < ratio(268_098_176, 262_144, 640, 23) < ratio(268_098_176, 262_144, 640, 58) < 2.7
