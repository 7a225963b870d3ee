"""Pages that must agree with each other about one model: Gemma 3 270M's layout, written as its facts
are read at load (engine.core.archfacts), through every page's text builders. Global layers are named with one
numbering (from 0, as on the charts), its one KV head has one name (MQA), its window says both what a token sees
(512) and what the cache keeps (511), the attention page's caption states the bars' own numbers, and the KV page's
per-token growth is the one its run measured."""
import re
from types import SimpleNamespace

from engine.compare.analysis import fact_rows
from engine.core.archfacts import ArchFacts
from engine.core.kv import kv_bytes_for
from engine.core.loaded import ModelInfo
from ui.attention import view as AV
from ui.attention.figures import kv_saving_bar
from ui.compare import view as CV
from ui.kv_cache import view as KV

N, WINDOW, GLOBAL = 18, 512, (5, 11, 17)


def gemma_like() -> ModelInfo:
    """Gemma 3 270M's layout as its facts are read from the model: 18 blocks, every sixth global, 4 query heads
    over 1 KV head of 256, a 512-token window held by transformers' DynamicSlidingWindowLayer, float32."""
    kinds = tuple("global" if i in GLOBAL else "sliding" for i in range(N))
    facts = ArchFacts(
        family="gemma3_text", blocks_path="model.layers", n_blocks=N, layer_kinds=kinds,
        windows=tuple(None if k == "global" else WINDOW for k in kinds), n_heads=4, kv_heads=(1,) * N, head_dim=256,
        attention="MQA", position="rope", rope_bases=tuple(1e6 if k == "global" else 1e4 for k in kinds),
        rotary_fraction=1.0, qk_norm=True, norm="RMSNorm, pre- and post-norm around attention and MLP",
        parallel_residual=False, tied_embeddings=True, embedding_scale=25.3, logit_softcap=None, attn_softcap=None,
        cache_layers=tuple("DynamicLayer" if k == "global" else "DynamicSlidingWindowLayer" for k in kinds))
    return ModelInfo(source="Gemma 3 270M", device="cpu", dtype="float32", n_params=268_098_176,
                     n_layers=N, n_heads=4, n_kv_heads=1, head_dim=256, hidden_size=640, intermediate_size=2048,
                     vocab_size=262_144, max_positions=32_768, model_type="gemma3_text", tied_embeddings=True,
                     has_chat_template=False, position_encoding="rope", rope_theta=1e6, arch=facts)


def smollm_like() -> ModelInfo:
    return ModelInfo(source="SmolLM2-135M", device="cpu", dtype="float32", n_params=134_515_008,
                     n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64, hidden_size=576, intermediate_size=1536,
                     vocab_size=49_152, max_positions=8192, model_type="llama", tied_embeddings=True,
                     has_chat_template=True, position_encoding="rope", rope_theta=1e5)


def past_the_window(info, prompt: int = 517, new: int = 4):
    """A run's record past the window: measured bytes after each step equal to the per-layer formula, as the
    real cache measures them (tests/engine/test_gemma.py checks that equality on the real model)."""
    steps = [SimpleNamespace(index=i, phase="prefill" if i == 0 else "decode", token="x", tokens_in=prompt if i == 0
                             else 1, kv_tokens=prompt + i, kv_bytes=kv_bytes_for(info, prompt + i))
             for i in range(new)]
    return SimpleNamespace(steps=steps, prompt_ids=list(range(prompt)), generated_ids=list(range(new)))


def global_lists(text: str) -> list[str]:
    """Every layer list a text gives for the global layers ("global (layers 5, 11, 17)", "global layers, 5, 11,
    17", "global layers (5, 11, 17)")."""
    return re.findall(r"global (?:layers?)?[ ,(]*(?:layers )?(\d+(?:, \d+)*)", text)


def test_one_layer_numbering_on_every_page():
    info = gemma_like()
    rc = KV.run_cache(info, past_the_window(info))
    rows = {r.fact: r for r in fact_rows(info, smollm_like())}
    texts = {"compare": rows["Layer kinds"].a, "attention": AV.window_note(info),
             "kv formula": KV.formula_text(info, rc), "kv holds": KV.holds_text(info, rc),
             "kv answer": KV.token_question(info, rc)[1], "kv section 6": KV.cache_words(info)}
    for page, text in texts.items():
        lists = global_lists(text)
        assert lists and set(lists) == {"5, 11, 17"}, (page, text)
    assert "0-4, 6-10, 12-16" in KV.cache_words(info) + AV.window_note(info)  # the sliding ones, the same way


def test_gemma_one_kv_head_has_one_name():
    info = gemma_like()
    tr = past_the_window(info)
    rc = KV.run_cache(info, tr)
    g = AV.gqa(info, tr, 0)
    texts = [AV.gqa_header(info), g.text, KV.what_you_see(info, rc), KV.cache_words(info)]
    for text in texts:
        assert "MQA" in text and "grouped-query" not in text.lower(), text
    assert {r.fact: r for r in fact_rows(info, smollm_like())}["Attention kind"].a == "MQA"


def test_every_window_text_says_what_a_token_sees_and_what_the_cache_keeps():
    info = gemma_like()
    rc = KV.run_cache(info, past_the_window(info))
    for text in (AV.window_note(info), KV.formula_text(info, rc), KV.cache_words(info),
                 CV.kv_growth_words("gemma3-270m", info)):
        assert "512" in text and "511" in text, text
        assert "last 512" not in text and "holds 512" not in text and "at 512 tokens" not in text, text


def test_attention_kv_caption_states_the_bars_numbers_window_capped():
    info = gemma_like()
    tr = past_the_window(info)
    g = AV.gqa(info, tr, 0)
    caption = AV.saving_caption(info, g)
    fig = kv_saving_bar(g.contexts, g.bytes_gqa, g.bytes_mha, info.n_heads, info.n_kv_heads)
    for bar in fig.data:
        for text in bar.text:
            assert text in caption, (text, caption)
    assert g.bytes_gqa == [kv_bytes_for(info, c) for c in g.contexts]  # the bars: sliding layers capped
    full = 2 * N * 256 * 4 * 32_768  # the uncapped formula at the longest context: 1,152 MiB, not what is cached
    assert "1,152" not in caption and g.bytes_gqa[-1] < full / 5


def test_kv_growth_text_is_what_the_run_measured_past_the_window():
    info = gemma_like()
    tr = past_the_window(info)
    rc = KV.run_cache(info, tr)
    measured = {b.kv_bytes - a.kv_bytes for a, b in zip(tr.steps, tr.steps[1:])}
    assert measured == {3 * 2 * 256 * 4}  # only the 3 global layers still grow: 6,144 B
    question, answer = KV.token_question(info, rc)
    assert "same number of bytes" not in question
    assert "+6,144 B per decode step" in answer and "6,144 bytes" in answer and "36,864 bytes" in answer
    assert "+6,144 B per decode step" in KV.growth_words(rc)
    holds = KV.holds_text(info, rc)
    assert "[1, 1, 511, 256]" in holds and "[1, 1, 520, 256]" in holds  # 15 layers hold 511, 3 hold all 520
    assert "15 sliding layers" in holds and "3 global layers" in holds


def test_kv_growth_text_below_the_window_is_the_plain_formula():
    info = smollm_like()
    rc = KV.run_cache(info, past_the_window(info, prompt=20))
    question, answer = KV.token_question(info, rc)
    per_token = 2 * 30 * 3 * 64 * 4
    assert "same number of bytes" in question and f"{per_token:,} bytes" in answer
    assert f"+{per_token:,} B per decode step" in answer


def test_two_models_page_sizes_are_binary():
    info = gemma_like()
    pts = [SimpleNamespace(tokens=t, measured=kv_bytes_for(info, t), formula=kv_bytes_for(info, t))
           for t in (64, 600)]
    table = CV.kv_table({"gemma3-270m": pts}, {"gemma3-270m": [(32_768, kv_bytes_for(info, 32_768))]})
    cells = " ".join(table["gemma3-270m"])
    assert "MiB" in cells and not re.search(r"\bMB\b", cells), cells
    assert "18.49 MiB (measured, = formula)" in cells  # 19,384,320 B at 600 tokens


def test_charts_of_the_residual_stream_name_layers_as_the_overview_does():
    """The logit lens and the residual-stream charts read the stream after each layer: the row or point after
    Gemma's first global layer is "5", as that layer is in the overview's axis and every picker."""
    import numpy as np

    from engine.attention.analysis import kv_groups
    from ui.attention.figures import final_prob_line, head_overview, lens_grid, residual_norms_chart
    from ui.loop.figures import residual_norm_line

    info = gemma_like()
    overview = head_overview(np.ones((N, 4)), "entropy", "bits", (0, 0), kv_groups(4, 1), info.arch.windows)
    assert "5 global" in list(overview.layout.yaxis.ticktext)
    probs = np.full((N + 1, 2, 3), 0.3, dtype=np.float32)
    toks = tuple(tuple(("a", "b", "c") for _ in range(2)) for _ in range(N + 1))
    lens = lens_grid(toks, probs, ["x", "y"], [0, 1])
    assert list(lens.data[0].y)[:7] == ["embed", "layer 0", "layer 1", "layer 2", "layer 3", "layer 4", "layer 5"]
    norms = np.ones((N + 1, 3))
    for fig in (residual_norms_chart(norms), residual_norm_line(norms[:, -1], "x"), final_prob_line(norms[:, 0], "x")):
        assert list(fig.data[-1].x) == ["embed"] + [str(i) for i in range(N)]
        assert "numbered from 0" in fig.layout.xaxis.title.text
