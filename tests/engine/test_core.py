"""Engine core invariants, on the tiny random model (fast) and the real embedded model."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.core.kv import kv_bytes_for
from engine.core.loaded import ModelLoadError
from engine.core.loaded import ModelRef
from engine.models.loading import load_model
from engine.core.prompt import PromptError, encode_prompt
from engine.core.sampling import SamplingSettings
from engine.core.trace import ATTN_MAX, run_trace
from engine.core.loop import decode_step, new_cache, prefill


def full_logits(lm, ids):
    with torch.inference_mode():
        return lm.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]


@pytest.mark.parametrize("lm_name", ["tiny_lm", "embedded_lm"])
def test_kv_cache_decoding_matches_full_forward(lm_name, request):
    """Decoding token by token with the cache gives the logits of a fresh pass over the whole sequence."""
    lm = request.getfixturevalue(lm_name)
    ids = list(encode_prompt(lm.tokenizer, "The capital of France is", False).ids)
    cache = new_cache(lm)
    logits = prefill(lm, torch.tensor([ids]), cache)[0]
    seq = list(ids)
    for _ in range(5):
        tok = int(logits.argmax())
        seq.append(tok)
        logits = decode_step(lm, torch.tensor([[tok]]), cache)[0]
        ref = full_logits(lm, seq)
        torch.testing.assert_close(logits, ref, atol=2e-4, rtol=1e-4)
        assert int(logits.argmax()) == int(ref.argmax())


def test_greedy_continuation_mentions_paris(embedded_lm):
    tr = run_trace(embedded_lm, "The capital of France is", SamplingSettings(temperature=0), 8,
                   use_chat_template=False)
    assert "Paris" in tr.generated_text


def test_chat_answer_mentions_paris(embedded_lm):
    tr = run_trace(embedded_lm, "What is the capital of France?", SamplingSettings(temperature=0), 12)
    assert tr.encoded.chat_applied and "<|im_start|>assistant" in tr.encoded.text
    assert "Paris" in tr.generated_text


@pytest.mark.parametrize("lm_name", ["tiny_lm", "embedded_lm"])
def test_attention_rows_sum_to_one_and_are_causal(lm_name, request):
    lm = request.getfixturevalue(lm_name)
    tr = run_trace(lm, "Attention looks back at every earlier token.", max_new_tokens=1, use_chat_template=False)
    att = tr.analysis.attentions.astype(np.float32)  # [L, H, n, n]
    n = len(tr.prompt_ids)
    assert att.shape == (lm.info.n_layers, lm.info.n_heads, n, n)
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=3e-3)
    assert np.all(att[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0)


def test_attention_of_long_prompt_is_capped_and_exact(tiny_lm):
    """Past ATTN_MAX positions only the first ATTN_MAX are kept; causality makes them equal the short pass."""
    text = "one two three four five six seven eight nine ten " * 40
    long = run_trace(tiny_lm, text, max_new_tokens=1, use_chat_template=False)
    assert len(long.prompt_ids) > ATTN_MAX
    assert long.analysis.attentions.shape[-1] == ATTN_MAX
    assert long.analysis.top_ids.shape[0] == len(long.prompt_ids)
    short_text = tiny_lm.tokenizer.decode(long.prompt_ids[:ATTN_MAX])
    short = run_trace(tiny_lm, short_text, max_new_tokens=1, use_chat_template=False)
    # the tiny tokenizer is byte-level, so the first ATTN_MAX ids decode and re-encode to themselves: the
    # comparison below always runs (it used to sit under an `if` and could pass without comparing anything)
    assert list(short.prompt_ids) == list(long.prompt_ids[:ATTN_MAX])
    np.testing.assert_allclose(short.analysis.attentions.astype(np.float32),
                               long.analysis.attentions.astype(np.float32), atol=2e-3)


def test_seeded_sampling_is_reproducible(tiny_lm):
    s = SamplingSettings(temperature=1.0, top_k=50, top_p=0.9)
    a = run_trace(tiny_lm, "Once upon a time", s, 12, seed=7, use_chat_template=False)
    b = run_trace(tiny_lm, "Once upon a time", s, 12, seed=7, use_chat_template=False)
    c = run_trace(tiny_lm, "Once upon a time", s, 12, seed=8, use_chat_template=False)
    assert a.generated_ids == b.generated_ids
    assert a.generated_ids != c.generated_ids


def test_seeded_sampling_is_reproducible_on_embedded(embedded_lm):
    s = SamplingSettings(temperature=0.9)
    a = run_trace(embedded_lm, "Tell me a story.", s, 6, seed=3)
    b = run_trace(embedded_lm, "Tell me a story.", s, 6, seed=3)
    assert a.generated_ids == b.generated_ids


@pytest.mark.parametrize("lm_name", ["tiny_lm", "embedded_lm"])
def test_trace_record_is_consistent(lm_name, request):
    lm = request.getfixturevalue(lm_name)
    tr = run_trace(lm, "Hello there", SamplingSettings(temperature=0), 6, use_chat_template=False)
    n = len(tr.prompt_ids)
    assert [s.phase for s in tr.steps] == ["prefill"] + ["decode"] * (len(tr.steps) - 1)
    assert tr.steps[0].tokens_in == n and all(s.tokens_in == 1 for s in tr.steps[1:])
    assert [s.token_id for s in tr.steps] == list(tr.generated_ids)
    for i, s in enumerate(tr.steps):
        assert s.kv_tokens == n + i
        assert s.kv_bytes == kv_bytes_for(lm.info, n + i)  # measured == 2*L*kv_heads*head_dim*tokens*bytes
        assert s.seconds > 0
        assert s.token_id == s.top_ids[0]  # greedy picks the most likely token
        # the top-k of a softmax: each a probability, together at most 1, most likely first
        assert all(0 < p <= 1 for p in s.top_probs) and sum(s.top_probs) <= 1 + 1e-5
        assert s.top_probs == tuple(sorted(s.top_probs, reverse=True))
    # ... and exactly the plain softmax of the logits (temperature 1) at the first step
    first = torch.softmax(torch.from_numpy(tr.first_logits).double(), -1)
    top = first.topk(len(tr.steps[0].top_probs))
    np.testing.assert_allclose(tr.steps[0].top_probs, top.values.numpy(), rtol=1e-4, atol=1e-6)
    assert list(tr.steps[0].top_ids) == top.indices.tolist()
    assert int(np.argmax(tr.first_logits)) == tr.generated_ids[0]
    # The analysis pass predicts the same next token at the last prompt position as the timed prefill.
    assert int(tr.analysis.top_ids[-1, 0]) == tr.generated_ids[0]
    assert int(tr.analysis.lens_ids[-1, 0]) == tr.generated_ids[0]
    json.loads(tr.to_json(lm.tokenizer))


def test_stops_at_end_of_turn(embedded_lm):
    tr = run_trace(embedded_lm, "Say only the word yes.", SamplingSettings(temperature=0), 40)
    assert tr.stop_reason == "eos" and len(tr.generated_ids) < 40


@pytest.mark.parametrize("prompt", ["", "   \n\t "])
def test_empty_prompt_is_a_clear_error(tiny_lm, prompt):
    with pytest.raises(PromptError, match="empty"):
        run_trace(tiny_lm, prompt)


def test_huge_prompt_is_truncated_with_a_note(tiny_lm):
    tr = run_trace(tiny_lm, "word " * 50_000, max_new_tokens=2, use_chat_template=False)
    assert tr.encoded.truncated and tr.encoded.notes
    assert len(tr.prompt_ids) <= 512


def test_odd_unicode_and_html_round_trip(tiny_lm):
    text = "<script>alert(1)</script> 😀 你好 שלום a\u200bb \x07"
    tr = run_trace(tiny_lm, text, max_new_tokens=2, use_chat_template=False)
    assert tiny_lm.tokenizer.decode(tr.prompt_ids) == text


def test_model_without_chat_template_falls_back_with_a_note(tiny_lm):
    from engine.models.tiny import make_tiny_tokenizer

    tok = make_tiny_tokenizer(chat_template=False)
    enc = encode_prompt(tok, "hello", use_chat_template=True)
    assert not enc.chat_applied and any("no chat template" in n for n in enc.notes)


@pytest.mark.parametrize("name, message", [
    ("no/such-model-xyz-123", "Could not load"),
    ("not a model id!!", "neither a local model folder"),
    ("/tmp", "not a model folder"),
])
def test_unknown_models_give_clear_errors(name, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(ModelRef(name))


def test_folder_without_safetensors_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(ModelRef(str(tmp_path)))


def test_local_folder_loads(tmp_path, tiny_lm):
    tiny_lm.model.save_pretrained(tmp_path)
    tiny_lm.tokenizer.save_pretrained(tmp_path)
    lm = load_model(ModelRef(str(tmp_path)))
    assert lm.info.n_layers == tiny_lm.info.n_layers and "local folder" in lm.info.source
    assert run_trace(lm, "hi", max_new_tokens=2, use_chat_template=False).generated_ids


def test_embedded_model_facts(embedded_lm):
    i = embedded_lm.info
    assert (i.n_layers, i.n_heads, i.n_kv_heads, i.head_dim, i.vocab_size) == (30, 9, 3, 64, 49152)
    assert i.tied_embeddings and i.has_chat_template and i.position_encoding == "rope"
    assert 130e6 < i.n_params < 140e6


ROOT = Path(__file__).resolve().parents[2]  # the repository (no ui import: engine tests never load streamlit)


def cli(*args, timeout=300):
    import os

    env = dict(os.environ, HF_HUB_OFFLINE="1")  # an unknown name is refused at once, not after a network probe
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=str(ROOT), env=env)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """The command line's main() in this process (a subprocess re-imports torch and transformers: ~10 s each)."""
    from engine.__main__ import main

    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_info_and_trace_json(capsys):
    code, out, _ = run_cli(capsys, "info", "--json", "--model", "tiny-random")
    info = json.loads(out)
    assert code == 0 and info["n_layers"] == 2 and info["vocab_size"] == 320
    code, out, _ = run_cli(capsys, "trace", "--model", "tiny-random", "--prompt", "hello", "--max-new-tokens", "3",
                           "--json", "--temperature", "0.8", "--top-k", "20", "--top-p", "0.9", "--seed", "1",
                           "--no-chat-template")
    rec = json.loads(out)
    assert code == 0 and len(rec["generated_ids"]) == 3 and len(rec["steps"]) == 3 and rec["settings"]["top_k"] == 20
    assert len(rec["positions"]) == len(rec["prompt_ids"]) and "attentions" in rec


def test_cli_trace_json_writes_every_token_string(capsys):
    """Every predicted token in ``positions`` and the logit lens is its real string, the tokenizer's own decoding
    of its id (not a stand-in such as "<8897>" for a token neither the prompt nor a step's top-k spelled)."""
    from engine.core.prompt import token_text

    code, out, _ = run_cli(capsys, "trace", "--model", "tiny-random", "--prompt", "The capital of France is",
                           "--max-new-tokens", "2", "--json", "--temperature", "0", "--no-attentions")
    rec = json.loads(out)
    tok = load_model(ModelRef("tiny-random")).tokenizer
    rows = rec["positions"] + rec["logit_lens_last_position"]
    ids = [i for r in rows for i in r["top_ids"]]
    assert code == 0 and len(set(ids)) > len(set(rec["prompt_ids"]) | set(rec["generated_ids"]))  # ids beyond both
    for r in rows:
        assert r["top_tokens"] == token_text(tok, r["top_ids"]), r


def test_cli_unknown_model_is_a_clear_error():
    """The real entry point (python -m engine): exit status 2 and one line, no traceback."""
    out = cli("info", "--model", "definitely/not-a-model-xyz")
    assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr


def test_cli_bench_decode_runs(capsys):
    code, out, _ = run_cli(capsys, "bench", "decode", "--model", "tiny-random", "--json", "--new-tokens", "8",
                           "--repeats", "1")
    r = json.loads(out)
    assert code == 0 and r["ratio_engine_vs_generate"] > 0 and all(p["same_tokens"] for p in r["prompts"])


def test_block_walk_adds_up(embedded_lm):
    """Inside a block: input + attention = first add; its output equals the model's hidden state there."""
    from engine.loop.inspect import block_walk

    ids = list(encode_prompt(embedded_lm.tokenizer, "The capital of France is", False).ids)
    walk = block_walk(embedded_lm, ids, layer=3)
    names = [s.name for s in walk]
    assert names == ["input (residual stream)", "norm (RMSNorm)", "attention", "add (residual)", "norm (RMSNorm)",
                     "MLP", "add (residual)"]
    inp, att, add1, mlp, add2 = (np.array(walk[i].preview) for i in (0, 2, 3, 5, 6))
    np.testing.assert_allclose(inp + att, add1, atol=2e-3)
    np.testing.assert_allclose(add1 + mlp, add2, atol=2e-3)
    with torch.inference_mode():
        hs = embedded_lm.model(torch.tensor([ids]), output_hidden_states=True).hidden_states
    np.testing.assert_allclose(hs[4][0, -1, :6].numpy(), add2, atol=2e-3)


def test_block_walk_stops_at_its_block_and_refuses_what_the_model_does_not_compute(tiny_lm, monkeypatch):
    """The walk re-applies the block's own modules to the recorded input and must land on the recorded output;
    when the recorded output differs from what those modules give (here: shifted after the pass), it refuses."""
    from contextlib import contextmanager

    from engine.core import instrument
    from engine.loop.inspect import block_walk

    ids = [1, 2, 3, 4, 5, 6]
    seen = []
    hooks = [b.register_forward_hook(lambda m, i, o, n=n: seen.append(n)) for n, b in enumerate(tiny_lm.model.model.layers)]
    try:
        walk = block_walk(tiny_lm, ids, layer=0)
    finally:
        for h in hooks:
            h.remove()
    assert seen == [0], "the pass stops after the block it shows"
    assert walk is not None and len(walk) == 7
    hooks_before = sum(len(b._forward_hooks) for b in tiny_lm.model.model.layers)
    walk = block_walk(tiny_lm, ids, layer=1)
    assert walk is not None and len(walk) == 7
    assert sum(len(b._forward_hooks) for b in tiny_lm.model.model.layers) == hooks_before, "its stop hook is gone"
    real = instrument.residual_stream

    @contextmanager
    def shifted(model, select=lambda t: t):
        with real(model, select) as stream:
            yield stream
            stream[2] = stream[2] + 1.0  # block 1's recorded output, moved off what the block computes

    monkeypatch.setattr(instrument, "residual_stream", shifted)
    assert block_walk(tiny_lm, ids, layer=1) is None
