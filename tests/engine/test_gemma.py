"""The real Gemma 3 270M (model tier; one session fixture loads it once): the facts the issue measured, the KV
cache past its 512-token window step by step, its converted copy, and its tokenizer against SmolLM2's."""
import json
import math

import pytest
import torch

from engine.compare import analysis as C
from engine.core import kv, loop
from engine.models import catalog, packaged
from engine.tokenization import tokens as T

WINDOW = 512
pytestmark = pytest.mark.model  # the real Gemma 3 270M: never in the fast unit tier


def test_facts_read_from_the_real_model(gemma_lm):
    i, f = gemma_lm.info, gemma_lm.info.arch
    assert (i.n_layers, i.hidden_size, i.n_heads, i.n_kv_heads, i.head_dim, i.vocab_size) == (18, 640, 4, 1, 256,
                                                                                               262144)
    assert f.attention == "MQA" and f.qk_norm and i.tied_embeddings and not i.has_chat_template
    assert [k for k, kind in enumerate(f.layer_kinds) if kind == "global"] == [5, 11, 17]
    assert {f.windows[k] for k in f.sliding_layers} == {WINDOW}
    assert {f.rope_bases[k] for k in f.sliding_layers} == {10_000.0} and f.rope_bases[5] == 1_000_000.0
    assert f.embedding_scale == pytest.approx(math.sqrt(640), rel=1e-3)
    parts = C.param_split(gemma_lm.model)
    assert sum(parts.values()) == i.n_params and 0.6 < parts["embedding"] / i.n_params < 0.66


def test_greedy_paris(gemma_lm):
    top = C.next_token_top(gemma_lm, "Question: What is the capital of France?\nAnswer:")
    assert top.tokens[0] == " Paris"


def test_kv_bytes_equal_the_per_layer_formula_at_every_step_past_the_window(gemma_lm):
    """Prefill to just under the window, then one decode step at a time across it; a chunk to 590 tokens, then one
    step at a time to 600: at every step the cache's measured bytes equal the per-layer formula, and past the
    window only the 3 global layers grow."""
    lm, f = gemma_lm, gemma_lm.info.arch
    cache = loop.new_cache(lm)
    sizes = []

    def steps_to(n):
        while kv.kv_tokens(cache) < n:
            t = kv.kv_tokens(cache)
            assert kv.layer_bytes(cache) == kv.layer_bytes_formula(lm.info, t), t
            sizes.append(kv.kv_bytes(cache))
            loop.decode_step(lm, torch.tensor([[t % 1000 + 100]]), cache)

    with torch.inference_mode():
        loop.prefill(lm, (torch.arange(WINDOW - 6)[None] * 7 + 11) % 262144, cache)
        steps_to(WINDOW + 6)
        before_window = sizes[1] - sizes[0]
        loop.prefill(lm, (torch.arange(590 - kv.kv_tokens(cache))[None] * 5 + 13) % 262144, cache)
        steps_to(600)
    lb = kv.layer_bytes(cache)
    assert kv.kv_tokens(cache) == 600 and lb == kv.layer_bytes_formula(lm.info, 600)
    for k in f.sliding_layers:  # capped at window - 1 tokens: 2 x 1 KV head x 256 x 511 x 4 bytes
        assert lb[k] == 2 * 1 * 256 * (WINDOW - 1) * 4
    assert sizes[-1] - sizes[-2] == 3 * 2 * 256 * 4  # one new token past the window: the global layers only
    assert before_window == 18 * 2 * 256 * 4  # before it: every layer


def test_converted_copy_has_its_tokenizer_and_no_chat_template(gemma_lm):
    folder = packaged.copy_dir(catalog.row(catalog.GEMMA))
    assert packaged.is_converted(catalog.row(catalog.GEMMA)) and (folder / "tokenizer.json").is_file()
    assert not list(folder.glob("chat_template*"))
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    assert not cfg.get("chat_template")
    assert "tokenizer.json" in json.loads((folder / "checksum.json").read_text())  # the tokenizer is checked too


def test_two_real_tokenizers_contrasted(embedded_lm, gemma_lm):
    rows = T.contrast("SmolLM2", embedded_lm.tokenizer, "Gemma 3", gemma_lm.tokenizer)
    assert len(rows) == len(T.CONTRAST_TEXTS)
    for r in rows:  # both decode back to the text they were given
        assert "".join(r.a.texts) == r.text or embedded_lm.tokenizer.decode(list(r.a.ids)) == r.text
        assert gemma_lm.tokenizer.decode(list(r.b.ids)) == r.text
    gaps = [abs(math.log(r.ratio)) for r in rows]
    assert gaps == sorted(gaps, reverse=True)  # the largest disagreement first
    hindi = next(r for r in rows if r.kind == "Hindi")
    assert hindi.ratio > 2  # SmolLM2's English-centred 49k BPE needs many more tokens than Gemma's 262k vocabulary
