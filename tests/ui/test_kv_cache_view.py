"""View builders of the KV-cache page: the run's cache against the formula, the calculator's tables and texts."""
from types import SimpleNamespace

from engine.core.kv import kv_bytes_for
from engine.kv_cache import presets as kp
from ui.kv_cache import view as KV

INFO = SimpleNamespace(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, bytes_per_value=2, dtype="bfloat16",
                       max_positions=1024, source="tiny", position_encoding="rope")


def _trace(measured_off_by: int = 0):
    steps = [SimpleNamespace(index=i, phase="prefill" if i == 0 else "decode", token="x", tokens_in=5 if i == 0 else 1,
                             kv_tokens=5 + i, kv_bytes=kv_bytes_for(INFO, 5 + i)) for i in range(4)]
    steps[2].kv_bytes += measured_off_by
    return SimpleNamespace(steps=steps)


def test_run_cache_flags_a_step_where_measured_and_formula_differ():
    rc = KV.run_cache(INFO, _trace())
    assert rc.all_equal and rc.per_token == 2 * 2 * 2 * 8 * 2 and (rc.fed, rc.without) == (8, 5 + 6 + 7 + 8)
    assert KV.size_metrics(rc)[2][1] == "4 of 4"
    bad = KV.run_cache(INFO, _trace(measured_off_by=1))
    assert not bad.all_equal and KV.size_metrics(bad)[2][1] == "3 of 4"
    assert list(KV.steps_table(_trace(1), bad)["equal"]) == [True, True, False, True]


def test_calculator_fit_table_and_mistake():
    p = kp.preset("Llama-3-8B")  # 16.06 GB of bf16 weights; 32 x 8192 tokens of cache = 34.36 GB
    c = KV.Calc(p.name, p, 8192, 32, "bf16", "bf16", kp.budget(p, 8192, 32, "bf16", "bf16"))
    verdicts = dict(zip(KV.fit_table(c)["GPU memory"], KV.fit_table(c)["this setup"]))
    room = dict(c.b.gpu_fit_tokens)[24]
    assert verdicts["24 GB"] == f"does not fit: room for only {room:,} cached tokens ({room // 32:,} per sequence)"
    assert verdicts["80 GB"].startswith("fits; room for")
    big = kp.preset("Llama-3-70B")
    c70 = KV.Calc(big.name, big, 8192, 1, "bf16", "bf16", kp.budget(big, 8192, 1, "bf16", "bf16"))
    assert set(KV.fit_table(c70)["this setup"]) == {"the weights alone do not fit"}  # 141 GB of weights
    assert "**320.0 KiB per token**" in KV.mistake() and "**2.50 MiB per token**" in KV.mistake()
    sweep, totals = KV.sweep_of(c)
    assert 8192 in sweep and totals[sweep.index(8192)] == c.b.kv_total
