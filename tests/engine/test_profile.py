"""The kernel-level view of a step (engine.timeline.profile): lanes inside the step, busy time a union (never more
than the step), top operators in order, a compiled step running fewer operators than eager, and the regime named from
the numbers, each way."""
import argparse
import json

import pytest

from engine.core import compiled as C
from engine.timeline import profile as P

IDS = [5, 6, 7, 8, 9, 10, 11, 12]


@pytest.fixture(scope="module")
def steps(tiny_lm):
    eager = P.profile_steps(tiny_lm, IDS, repeats=1)
    comp = P.profile_steps(C.to_mode(tiny_lm, "compiled"), IDS, repeats=1)
    return eager, comp


def test_union_counts_overlaps_once():
    assert P._union_ms([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20
    assert P._union_ms([]) == 0


def test_a_step_profile_is_consistent(steps):
    for p in [*steps[0], *steps[1]]:
        assert p.ops > 0 and p.wall_ms > 0 and p.plain_ms > 0
        assert 0 < p.device_busy_ms <= p.wall_ms + 1e-6 and 0 < p.device_busy_fraction <= 1
        device = [s for s in p.spans if s.lane == "device"]
        assert len(device) == min(p.ops, P.MAX_SPANS) and any(s.lane == "host" for s in p.spans)
        assert all(s.start_ms >= -1e-6 and s.ms >= 0 for s in p.spans)
        assert p.device_busy_ms <= sum(s.ms for s in device) + 1e-6  # a union, not a sum
        tops = [o.ms for o in p.top_ops]
        assert tops == sorted(tops, reverse=True) and len(tops) <= P.TOP
        assert p.op_word == "operators"  # a CPU: no kernels of its own


def test_compiled_decode_runs_fewer_operators_and_prefill_stays_eager(steps):
    (e_pre, e_dec), (c_pre, c_dec) = steps
    assert (e_dec.mode, c_dec.mode, c_pre.mode) == ("eager", "compiled", "compiled")
    assert (e_dec.graph, c_dec.graph, c_pre.graph) == (False, True, False)
    assert c_dec.ops < e_dec.ops  # fused kernels
    assert e_pre.tokens_in == len(IDS) and e_dec.tokens_in == 1 and e_dec.context == len(IDS) + 1


def test_the_cpu_device_lane_holds_the_matrix_multiplies_and_no_views(steps):
    """On a CPU aten::mm calls aten::resolve_conj: the innermost operator that computes is the multiply itself."""
    device = {s.name for s in steps[0][1].spans if s.lane == "device"}
    assert any(n in device for n in ("aten::mm", "aten::addmm", "aten::bmm")), sorted(device)
    assert not device & P.METADATA


def _profile(busy: float, plain: float = 10.0) -> P.StepProfile:
    return P.StepProfile("decode", "eager", "cuda", 1, 10, 10.0, plain, 500, busy * 10.0, (), ())


def test_regime_is_named_from_the_numbers():
    assert P.regime(_profile(0.2), floor_ms=0.1, intensity=1.0, ridge=100).name == "launch/dispatch-bound"
    assert "500 kernels" in P.regime(_profile(0.2), 0.1, 1.0, 100).reason
    assert P.regime(_profile(0.9), floor_ms=0.1, intensity=300.0, ridge=100).name == "compute-bound"
    bw = P.regime(_profile(0.9, plain=0.15), floor_ms=0.1, intensity=1.0, ridge=100)
    assert bw.name == "bandwidth-bound" and "close to its floor" in bw.reason
    far = P.regime(_profile(0.9, plain=1.0), floor_ms=0.1, intensity=1.0, ridge=100)
    assert far.name == "bandwidth-bound" and "only part" in far.reason


def test_bench_profile_prints_ops_busy_and_top_ops_per_mode(tiny_lm):
    from engine.timeline import bench_profile

    r = bench_profile.run(tiny_lm, argparse.Namespace(modes="eager,compiled", prompt="Hi there", repeats=1,
                                                      probe_mb=16))
    json.dumps(r)
    assert set(r["modes"]) == {"eager", "compiled"}
    for row in r["modes"].values():
        for phase in ("prefill", "decode"):
            p = row[phase]
            assert p["ops_per_step"] > 0 and 0 < p["device_busy_fraction"] <= 1 and p["top_ops"]
            assert p["regime"] in ("launch/dispatch-bound", "compute-bound", "bandwidth-bound")
            assert p["floor_ms"] > 0 and p["pace"] == pytest.approx(p["floor_ms"] / p["plain_ms"])
            assert p["plain_runs"] == 1 and p["plain_ms_range"][0] <= p["plain_ms"] <= p["plain_ms_range"][1]
            assert any("only 1 run(s)" in f for f in p["flags"])  # --repeats 1: no lesson, and it says so
    assert r["matmul_dtype"] == tiny_lm.info.dtype  # the ridge of the model's own dtype
    assert bench_profile.summary(r).count("decode:") == 2 and "of its floor's pace" in bench_profile.summary(r)


def test_the_ridge_of_a_bfloat16_model_is_a_bfloat16_matmul(tiny_lm):
    from engine.models.precision import to_precision
    from engine.timeline import bench_profile

    r = bench_profile.run(to_precision(tiny_lm, "bfloat16"), argparse.Namespace(modes="eager", prompt="Hi", repeats=1,
                                                                                probe_mb=16))
    assert r["matmul_dtype"] == "bfloat16" and "bfloat16 matmul" in bench_profile.summary(r)


def test_a_cpu_kernel_is_an_operator_doing_its_own_work():
    from types import SimpleNamespace as E

    def ev(name, start, end, self_us, children=()):
        return E(name=name, time_range=E(start=start, end=end), self_cpu_time_total=self_us, cpu_children=list(children))

    clone = ev("aten::clone", 0, 10, 10)
    mm = ev("aten::mm", 0, 100, 90, [clone, ev("aten::resolve_conj", 95, 96, 1)])  # clones a strided input first
    linear = ev("aten::linear", 0, 101, 1, [mm])  # all its time is aten::mm's
    assert P._cpu_kernel(mm) and P._cpu_kernel(clone)
    assert not P._cpu_kernel(linear) and not P._cpu_kernel(ev("aten::view", 0, 5, 5))
    assert not P._cpu_kernel(ev("Torch-Compiled Region: 0/0", 0, 200, 150))


def _cuda_trace(with_activity_type: bool = True):
    """A decode step as torch.profiler records it on a GPU: the step's own range on the host and again on the
    device (a "gpu_user_annotation" of device type CUDA, spanning the whole step), a user range of its own on the
    device, 40 short kernels with idle gaps between them and one memcpy. Built with the attributes the summariser
    reads, since CI has no GPU."""
    from types import SimpleNamespace as E

    import torch

    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA

    def ev(name, start, end, device, annotation=False, kind="cpu_op", parent=None):
        e = E(name=name, time_range=E(start=start, end=end), device_type=device, is_user_annotation=annotation,
              cpu_parent=parent, cpu_children=[], self_cpu_time_total=end - start)
        if with_activity_type:
            e.activity_type = kind
        return e

    step = ev(P.STEP, 0.0, 20_000.0, cpu, True, "user_annotation")
    host = [ev("aten::linear", 100.0 + 480 * i, 400.0 + 480 * i, cpu, parent=step) for i in range(40)]
    # where the event has a kind, the kind alone must keep an annotation out: libkineto spells it
    # "gpu_user_Annotation" in its name table, and does not always flag it as a user annotation
    flagged = not with_activity_type
    events = [step, *host,
              ev(P.STEP, 50.0, 20_050.0, cuda, flagged, "gpu_user_Annotation"),  # the step's own range, on the GPU
              ev("my_range", 60.0, 10_000.0, cuda, flagged, "gpu_user_annotation"),  # a user's range, on the GPU
              *([ev("cudaDeviceSynchronize", 19_950.0, 20_000.0, cuda, kind="cuda_sync")] if with_activity_type
                else [])]
    events += [ev("void gemv_kernel<bf16>", 300.0 + 480 * i, 340.0 + 480 * i, cuda, kind="kernel")
               for i in range(40)]
    events.append(ev("Memcpy DtoH (Device -> Pinned)", 19_900.0, 19_920.0, cuda, kind="gpu_memcpy"))
    return events


@pytest.mark.parametrize("with_activity_type", [True, False], ids=["activity_type", "older torch"])
def test_a_cuda_trace_counts_kernels_and_copies_never_the_annotations(with_activity_type):
    """On a GPU the step's own record_function range is also a CUDA event: counted as a kernel it was listed first
    and its span became the busy time (eager decode read "GPU busy 92%" where kernels fill 7-10%)."""
    p = P.summarise(_cuda_trace(with_activity_type), "decode", "eager", "cuda", 1, 40, plain_ms=20.0)
    names = {o.name for o in p.top_ops} | {s.name for s in p.spans if s.lane == "device"}
    assert P.STEP not in names and "my_range" not in names
    assert p.ops == 41 and p.op_word == "kernels"  # 40 kernels and the memcpy
    assert p.top_ops[0].name == "void gemv_kernel<bf16>" and p.top_ops[0].count == 40
    assert p.device_busy_ms == pytest.approx((40 * 40 + 20) / 1000.0)
    assert p.wall_ms == pytest.approx(20.0) and p.device_busy_fraction == pytest.approx(1.62 / 20.0)  # 8%, not ~100%
    # 0.5% of its floor's pace with the device idle: launch-bound, even at an intensity past the ridge
    r = P.regime(p, floor_ms=0.1, intensity=500.0, ridge=300.0)
    assert r.name == "launch/dispatch-bound" and "0.5% of its floor's pace" in r.reason and "41 kernels" in r.reason


def test_a_step_near_its_floor_is_named_by_its_roof_even_when_the_trace_looks_idle():
    """The pace is read first: the profiler's bookkeeping can leave a traced step's device idle while the untraced
    step runs near its floor."""
    near = _profile(0.3, plain=0.15)  # 67% of the floor's pace
    assert P.regime(near, floor_ms=0.1, intensity=1.0, ridge=100).name == "bandwidth-bound"
    assert P.regime(near, floor_ms=0.1, intensity=300.0, ridge=100).name == "compute-bound"
    assert P.regime(_profile(0.3, plain=1.0), floor_ms=0.1, intensity=300.0, ridge=100).name == \
        "launch/dispatch-bound"


def test_kernels_are_sorted_into_kinds_by_name():
    """Inductor names a fused kernel after what it fused: a norm with a residual add is a norm, the rotary and KV
    write kernel a copy; a library's matmul and attention are theirs whatever their prefix."""
    kinds = {"aten::mm": "matmul", "mkl::_mkl_linear": "matmul", "ampere_sgemm_128x64_tn": "matmul",
             "aten::_scaled_dot_product_flash_attention_for_cpu": "attention", "flash_fwd_kernel": "attention",
             "graph_0_cpp_fused__unsafe_view_add_mean_mul_pow_rsqrt_7": "norm",
             "triton_red_fused_add_mean_mul_pow_rsqrt_3": "norm",
             "graph_0_cpp_fused__scaled_dot_product_flash_attention_for_cpu__to_copy_cat_index_copy_where_5": "copy",
             "aten::copy_": "copy", "Memcpy DtoD (Device -> Device)": "copy",
             "graph_0_cpp_fused__unsafe_view_mul_silu_slice_3": "elementwise", "aten::silu": "elementwise",
             "aten::native_layer_norm": "norm"}
    for name, kind in kinds.items():
        assert P.kind_of(name) == kind, name
    assert set(kinds.values()) == set(P.KINDS)
