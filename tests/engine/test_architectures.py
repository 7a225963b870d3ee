"""The architecture matrix: tiny random models built here from the config classes of many families
(engine.models.tiny.make_tiny_arch: 2 blocks, hidden 64, windows of 8 tokens, smaller than the prompt), each run through
the engine paths the pages use. Each path gives correct numbers (checked against an independent computation:
a plain forward pass, ``model.generate``, the cache's own tensors) or refuses in one line; none crashes."""
import numpy as np
import pytest
import torch

from engine.core import arch, archfacts, instrument, kv, loop, trace
from engine.speculative import decoding as speculative
from engine.sampling import stepper
from engine.models.precision import PrecisionError, to_precision, weight_bytes
from engine.core.sampling import SamplingSettings
from engine.embeddings import analysis as E
from engine.loop import inspect as I
from engine.kv_cache import snapshot as kv_snapshot
from engine.attention import lens
from engine.models.loading import load_tiny_arch
from engine.models.tiny import TINY_ARCHS, TINY_WINDOW

PROMPT = ("The capital of France is Paris. The capital of Italy is Rome. Once upon a time there was a small model "
          "that learned")
GREEDY = SamplingSettings(temperature=0.0)
NEW = 10
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=TINY_ARCHS)
def case(request):
    lm = load_tiny_arch(request.param)
    ids = list(lm.tokenizer(PROMPT)["input_ids"])
    assert len(ids) > 2 * TINY_WINDOW  # every window is crossed by the prompt alone
    tr = trace.run_trace(lm, PROMPT, GREEDY, max_new_tokens=NEW, use_chat_template=False, seed=0)
    return request.param, lm, ids, tr


def one_line(reason):
    assert isinstance(reason, str) and reason and "\n" not in reason and len(reason) < 300
    return True


def test_facts_are_measured_not_assumed(case):
    name, lm, ids, tr = case
    f = lm.info.arch
    assert f.n_blocks == len(arch.blocks(lm.model)) == lm.info.n_layers
    cache = loop.new_cache(lm)
    loop.prefill(lm, torch.tensor([ids]), cache)
    for i, _k, _v in kv.cache_tensors(cache):  # KV heads and head dim as the cache really holds them
        assert _k.shape[1] == f.kv_heads[i] and _k.shape[-1] == f.head_dim
    assert f.attention == ("MLA" if name == "deepseek_v3" else "MQA" if set(f.kv_heads) == {1} else
                           "MHA" if set(f.kv_heads) == {f.n_heads} else "GQA")
    expected_windows = {"gemma3": (TINY_WINDOW, None), "gemma2": (TINY_WINDOW, None), "gpt_oss": (TINY_WINDOW, None),
                        "mistral": (TINY_WINDOW, TINY_WINDOW)}.get(name, (None, None))
    assert f.windows == expected_windows
    assert f.position == {"gpt2": "learned", "opt": "learned", "gpt_bigcode": "learned", "bloom": "alibi",
                          "mpt": "alibi"}.get(name, "rope")
    if name == "gpt_bigcode":
        assert f.attention == "MQA"
    if name == "smollm3":  # layer 1 skips RoPE: no base claimed for it, and the facts say so
        assert f.rope_bases[0] and f.rope_bases[1] is None and "NoPE" in f.describe()
    if name == "deepseek_v3":  # MLA: a latent of kv_lora_rank (16) and a shared RoPE key (8) cached per token
        assert (f.head_dim, f.value_dim, f.attention) == (16, 8, "MLA") and one_line(f.refused("gqa"))
    if name == "cohere":
        assert f.parallel_residual
    if name == "falcon":
        assert f.attention == "MQA" and lm.info.n_kv_heads == 1
    if name in ("gpt_neox", "phi", "stablelm"):
        assert f.rotary_fraction < 1
    if name == "gemma3":
        assert f.qk_norm and len({b for b in f.rope_bases}) == 2  # local and global RoPE bases
    for reason in f.refusals.values():
        one_line(reason)
    assert name.split("-")[0] in f.describe()


def test_greedy_engine_output_equals_model_generate(case):
    _, lm, ids, tr = case
    out = lm.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                            max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    assert out[0, len(ids):].tolist() == list(tr.generated_ids)


def test_analysis_pass_equals_a_plain_forward_and_attention_is_causal_and_windowed(case):
    _, lm, ids, tr = case
    a = tr.analysis
    plain = lm.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    probs = plain.softmax(-1)
    top = torch.topk(probs, trace.TOP_K_RECORD, dim=-1)
    np.testing.assert_array_equal(a.top_ids[:, 0], top.indices[:, 0].numpy())
    np.testing.assert_allclose(a.top_probs, top.values.numpy(), atol=1e-5)
    f = lm.info.arch
    if f.refused("analysis") or f.refused("attention"):
        one_line(f.refused("analysis") or f.refused("attention"))
        assert a.attentions.shape[0] == 0  # nothing shown rather than a wrong number
        return
    att = a.attentions.astype(np.float32)  # [L, H, m, m]
    m = att.shape[-1]
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=2e-3)
    for layer in range(att.shape[0]):
        outside = ~archfacts.window_mask(m, f.windows[layer]).numpy()
        assert np.abs(att[layer][:, outside]).max() == 0.0, f"layer {layer} looks outside its window"
        if f.windows[layer]:
            assert m > f.windows[layer]  # the window really cut something


def test_residual_stream_and_logit_lens(case):
    _, lm, ids, tr = case
    a = tr.analysis
    x = torch.tensor([ids])
    with torch.inference_mode(), instrument.residual_stream(lm.model) as got:
        lm.model(input_ids=x, use_cache=False)
    # row 0 is block 0's real input (GPT-2's learned positions included, Gemma's scaling included)
    blk0_in = []
    h = arch.blocks(lm.model)[0].register_forward_pre_hook(
        lambda m, args, kw: blk0_in.append(arch.block_input(args, kw)), with_kwargs=True)
    with torch.inference_mode():
        lm.model(input_ids=x, use_cache=False)
    h.remove()
    torch.testing.assert_close(got[0], blk0_in[0])
    assert a.residual_norms.shape == (lm.info.n_layers + 1, len(ids))
    reason = lm.info.refused("lens")
    if reason:
        one_line(reason)
        assert a.lens_resid is None and a.lens_ids.shape[0] == 0
        return
    grid = lens.lens_from_residual(lm, ids, a.lens_resid)
    plain = lm.model(input_ids=x, use_cache=False).logits[0, -grid.top_ids.shape[1]:].float()
    np.testing.assert_array_equal(grid.top_ids[-1, :, 0], plain.argmax(-1).numpy())  # last row = the model


def test_glance_reads_the_models_own_last_logits(case):
    from engine.loop.glance import last_position

    _, lm, ids, tr = case
    g = last_position(lm, ids)
    plain = lm.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()
    np.testing.assert_allclose(g.top_logits, torch.topk(plain, 5).values.numpy(), rtol=1e-5, atol=1e-5)


def test_block_walk_lands_on_the_block_output_or_refuses(case):
    _, lm, ids, tr = case
    for layer in range(lm.info.n_layers):
        walk = I.block_walk(lm, ids, layer)
        if walk is None:
            continue  # the page says in one line that this block is not the pre-norm layout the walk shows
        assert walk[0].name.startswith("input") and walk[-1].name.startswith("add")
    # a class's walks of one block run as one right-padded pass: each prompt's walk is its solo walk
    short = ids[: max(1, len(ids) // 2)]
    for layer in range(lm.info.n_layers):
        together = I.block_walks(lm, [short, ids], layer)
        for got, solo in zip(together, (I.block_walk(lm, short, layer), I.block_walk(lm, ids, layer))):
            assert (got is None) == (solo is None), layer
            for g, o in zip(got or (), solo or ()):
                assert np.allclose(g.preview, o.preview, atol=1e-3), (layer, g.name)


def test_positions_rope_or_learned_or_refused(case):
    name, lm, ids, tr = case
    reason = E.rope_refusal(lm)
    if lm.info.position_encoding == "rope" and reason is None:
        for layer in range(lm.info.n_layers):
            if lm.info.arch.rope_bases[layer] is None:  # a NoPE layer: refused in one line, not drawn as RoPE
                with pytest.raises(ValueError, match="NoPE"):
                    E.rope_angles(lm, 32, layer=layer)
                continue
            r = E.rope_angles(lm, 32, layer=layer)
            assert r.module_max_diff < 1e-4 and r.base == lm.info.arch.rope_bases[layer]
            assert (r.scaling == "llama3") == (name == "llama-scaled-rope") or name == "gpt_oss"
            assert ("2i and 2i + 1 rotate together" in r.pairing) == (name == "cohere")
        demo = E.relative_demo(lm, ids[0], ids[1], n_positions=24)
        assert demo.max_spread < 1e-3 * max(demo.value_range, 1e-6)
        if lm.info.arch.qk_norm and demo.source.startswith("real"):
            assert "QK-norm" in demo.source
    else:
        one_line(reason)
        with pytest.raises(ValueError):
            E.rope_angles(lm)
    if lm.info.position_encoding == "learned":
        lp = E.learned_positions(lm, 16)
        table = archfacts.position_table(lm.model)
        off = int(getattr(table, "offset", 0) or 0)
        np.testing.assert_array_equal(lp.vectors, table.weight[off:off + 16].detach().numpy())


def test_kv_bytes_equal_the_per_layer_formula_at_every_step(case):
    _, lm, ids, tr = case
    f = lm.info.arch
    cache = loop.new_cache(lm)
    loop.prefill(lm, torch.tensor([ids]), cache)
    for step, tok in enumerate([*tr.generated_ids[:-1], None]):
        t = kv.kv_tokens(cache)
        assert kv.layer_bytes(cache) == kv.layer_bytes_formula(lm.info, t), f"step {step}"
        assert kv.kv_bytes(cache) == kv.kv_bytes_for(lm.info, t)
        if tok is not None:
            loop.decode_step(lm, torch.tensor([[tok]]), cache)
    assert kv.kv_tokens(cache) == len(ids) + len(tr.generated_ids) - 1
    for s in tr.steps:  # the run's own records
        assert s.kv_bytes == kv.kv_bytes_for(lm.info, s.kv_tokens)
    if f.has_windows:  # sliding layers stopped growing at the window
        lb = kv.layer_bytes(cache)
        for i in f.sliding_layers:
            assert lb[i] == 2 * f.kv_heads[i] * f.head_dim * (f.windows[i] - 1) * 4


def test_kv_snapshot_holds_the_real_tensors(case):
    _, lm, ids, tr = case
    snap = kv_snapshot.cache_snapshot(lm, tr.prompt_ids, tr.generated_ids)
    assert snap.measured_bytes == kv.kv_bytes_for(lm.info, snap.tokens) == sum(snap.layer_bytes)
    f = lm.info.arch
    for i, held in enumerate(snap.layer_tokens):
        assert held == f.held_tokens(i, snap.tokens)
        assert np.isnan(snap.keys[i, :, : snap.tokens - held]).all()  # dropped by the window: not shown
        assert not np.isnan(snap.keys[i, :, snap.tokens - held:]).any()


class HalfRight:
    """Drafts the right next token (known from a plain run), then a wrong one: every round is partly rejected,
    so the target's cache is cropped in every round, past the window too."""

    name, deterministic, cost_layers = "half-right", True, 0

    def __init__(self, answer: list[int], n_prompt: int):
        self.answer, self.n_prompt = answer, n_prompt

    def start(self, prompt_ids, settings, generator):
        pass

    def propose(self, context, k):
        done = len(context) - self.n_prompt
        right = self.answer[done:done + 1]
        return (right + [(right[0] + 1) % 300] * (k - 1))[:k] if right else [], None

    def update(self, accepted):
        pass


def test_race_with_rejected_drafts_matches_plain_decoding(case):
    _, lm, ids, tr = case
    plain = list(trace.generate_tokens(lm, ids, GREEDY, 16, 0, stop_at_eos=False, record=False)[0])
    r = speculative.race(lm, ids, "half-right", 4, GREEDY, 16, 0, stop_at_eos=False, drafter=HalfRight(plain, len(ids)))
    assert r.drafted > r.accepted > 0  # drafts were rejected every round
    assert r.identical and list(r.spec_ids) == plain
    e = speculative.race(lm, ids, "early-exit:1", 4, GREEDY, 16, 0, stop_at_eos=False)  # a draft with its own cache
    assert e.identical
    short = ids[:2]  # a prompt inside the window: a verify pass crosses it, then most of that pass is rejected
    plain = list(trace.generate_tokens(lm, short, GREEDY, 16, 0, stop_at_eos=False, record=False)[0])
    r = speculative.race(lm, short, "half-right", 6, GREEDY, 16, 0, stop_at_eos=False,
                         drafter=HalfRight(plain, len(short)))
    assert r.drafted > r.accepted and list(r.spec_ids) == plain


def test_stepper_back_past_the_window_gives_the_same_distribution(case):
    _, lm, ids, tr = case
    s = stepper.Stepper(ids)
    s.start(lm)
    for tok in tr.generated_ids[:6]:
        s.append(lm, tok)
    s.restart(2)
    again = s.append(lm, 7)
    fresh = stepper.Stepper(ids)
    fresh.start(lm)
    for tok in tr.generated_ids[:2]:
        fresh.append(lm, tok)
    np.testing.assert_allclose(again, fresh.append(lm, 7), atol=1e-4)


def test_batched_serving_gives_each_request_its_solo_tokens(case):
    from engine.batching import experiment as B
    from engine.batching.workload import WorkloadSettings, make_workload

    _, lm, ids, tr = case
    reqs = make_workload(lm.tokenizer, WorkloadSettings(n_requests=3, rate_per_s=50, min_new_tokens=6,
                                                        max_new_tokens=10, chat=False))
    r = B.serve(lm, reqs, "continuous", 3)
    for rec in r.requests:  # left-padded rows, merged caches (sliding layers too): same tokens as alone
        assert list(rec.token_ids) == B.solo_tokens(lm, reqs[rec.rid])[: len(rec.token_ids)]


def test_attention_time_is_measured_or_refused_never_zero(case):
    from engine.attention.analysis import measure_forward

    _, lm, ids, tr = case
    p = measure_forward(lm, 12, repeats=1, warmup=0)
    if lm.info.refused("attention_time"):
        one_line(lm.info.refused("attention_time"))
        assert np.isnan(p.attention_s).all()
    else:
        assert 0 < p.attention_median < p.forward_median


def test_int8_never_grows_the_model_and_says_what_stays_float(case):
    _, lm, ids, tr = case
    try:
        q = to_precision(lm, "int8")
    except PrecisionError as exc:
        one_line(str(exc))
        return
    assert weight_bytes(q.model) < weight_bytes(lm.model)
    assert q.info.int8_float and all(one_line(n) for n in q.info.int8_float)
    out = q.model(input_ids=torch.tensor([ids]), use_cache=False).logits
    assert torch.isfinite(out).all()


def test_a_recording_pass_that_differs_from_the_model_is_refused_not_shown():
    """Falcon has its own attention code; run through SDPA, its weight-recording branch is not the pass that
    produced the output. The load-time check must catch that: attention refused in one line, and the other
    analysis numbers (per-position predictions, residual stream) taken from a plain pass, still right."""
    from transformers import AutoModelForCausalLM

    from engine.models.loading import finish_load
    from engine.models.tiny import arch_configs, make_tiny_tokenizer

    tok = make_tiny_tokenizer()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(arch_configs(len(tok), {})["falcon"](), attn_implementation="sdpa")
    lm = finish_load("tiny-falcon-sdpa", "tiny Falcon run through SDPA", model, tok, torch.device("cpu"))
    one_line(lm.info.refused("analysis"))
    tr = trace.run_trace(lm, PROMPT, GREEDY, max_new_tokens=3, use_chat_template=False)
    assert tr.analysis.attentions.shape[0] == 0
    ids = list(tr.prompt_ids)
    plain = lm.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    np.testing.assert_array_equal(tr.analysis.top_ids[:, 0], plain.argmax(-1).numpy())


def test_an_unknown_layout_is_a_one_line_load_error():
    from engine.core.loaded import ModelLoadError
    from engine.models.loading import finish_load
    from engine.models.tiny import make_tiny_tokenizer

    class Odd(torch.nn.Module):  # no blocks anywhere
        def __init__(self):
            super().__init__()
            from transformers import LlamaConfig

            self.config = LlamaConfig(num_hidden_layers=2)
            self.emb = torch.nn.Embedding(10, 4)

        def get_input_embeddings(self):
            return self.emb

    with pytest.raises(ModelLoadError) as err:
        finish_load("odd", "odd", Odd(), make_tiny_tokenizer(), torch.device("cpu"))
    one_line(str(err.value))


def test_the_batched_worker_gives_each_request_its_solo_record(case):
    """The class batcher (engine.jobs.classbatch) serves requests of different lengths together: each gets
    its solo tokens, and its KV bytes per step equal its solo run's (counted layer by layer: a padded batch once
    counted every layer as holding every token). Models with sliding windows run alone there (a batched tiny
    Mistral changed its tokens): this checks that, and that the solo path then gives the same records."""
    from engine.core.request import RunRequest
    from engine.jobs.classbatch import ANSWER, AnswerRequest, group
    from engine.jobs.worker import Worker

    name, lm, _, _ = case
    if lm.info.arch.has_windows:  # such models are served one request at a time (classbatch.group)
        assert group(lm) is None
    prompts = [PROMPT, "Once upon a time", PROMPT + " and then it learned some more."]
    w = Worker()
    jobs = [w.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, p, False, NEW, GREEDY, 0), analyse=False),
                  session=f"s{i}",
                  key=("gen", p)) for i, p in enumerate(prompts)]
    for p, j in zip(prompts, jobs):
        t = j.result(120)
        solo = trace.run_trace(lm, p, GREEDY, max_new_tokens=NEW, use_chat_template=False, seed=0, analyse=False)
        assert t.generated_ids == solo.generated_ids, f"{name}: {p!r}"
        assert [s.kv_bytes for s in t.steps] == [s.kv_bytes for s in solo.steps], f"{name}: {p!r}"


def test_the_attention_implementation_follows_the_family():
    """Families whose attention goes through transformers' AttentionInterface get SDPA (the measuring attention is
    installed there); Falcon, with attention code of its own, gets eager; a config without a causal-LM class is
    left to the load to refuse (SDPA here)."""
    from transformers import PretrainedConfig

    from engine.core.loaded import attention_implementation
    from engine.models.tiny import arch_configs

    cfgs = arch_configs(64, {})
    assert attention_implementation(cfgs["falcon"]()) == "eager"
    assert {n: attention_implementation(cfgs[n]()) for n in ("llama", "gemma3", "mistral")} == dict.fromkeys(
        ("llama", "gemma3", "mistral"), "sdpa")
    assert attention_implementation(PretrainedConfig()) == "sdpa"
