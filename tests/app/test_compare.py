"""AppTest of the two-models page (SmolLM2 vs Gemma 3 270M) and of the tokenization page's two real tokenizers.
Marked model: it loads both real models (Gemma once per session, through the gemma_lm fixture)."""
import pytest

from tests.app.test_pages import errors, run_page

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def gemma_installed():
    """The page loads Gemma through the app's own cache; a fixture copy would be a second 1 GB model in memory."""
    from engine.models import catalog, packaged

    if not packaged.installed(catalog.row(catalog.GEMMA)):
        pytest.skip("Gemma 3 270M is not installed (scripts/install.sh installs it)")


def test_compare_page_shows_both_models_measured(embedded_lm, gemma_installed):
    at = run_page("pages/compare.py", max_new_tokens="4")
    assert not errors(at), errors(at)
    assert [h.value for h in at.header][:5] == [
        "1. The architecture facts, differences shaded", "2. Where the parameters are",
        "3. KV cache: bytes per token and at longer contexts", "4. One decode step: time, stages, bytes read",
        "5. The same prompt, the next token"]
    params, kv, decode = (d.value for d in at.dataframe[:3])
    row = at.table[0].value.set_index("Fact")
    assert row.loc["Vocabulary", "gemma3-270m"] == "262,144" and row.loc["Vocabulary", "Differs"] == "≠"
    assert row.loc["Tied embedding / head", "Differs"] == ""  # both tied: not shaded
    assert row.loc["Attention kind", "embedded"] == "GQA" and row.loc["Attention kind", "gemma3-270m"] == "MQA"
    share = float(params.set_index("Model").loc["gemma3-270m", "embedding"].split("(")[1].rstrip("%)"))
    assert 60 < share < 66  # 168 M of 268 M parameters
    measured = [v for col in ("embedded", "gemma3-270m") for v in kv[col] if "measured" in v]
    assert len(measured) == 12 and all("= formula" in v for v in measured)
    assert "1,024" in list(kv["Tokens"]) and kv.set_index("Tokens").loc["32,768", "embedded"] == ""  # past its context
    assert list(decode["Model"]) == ["embedded", "gemma3-270m"]
    captions = " ".join(c.value for c in at.caption)
    assert "Measured on this machine" in captions and "(derived)" in " ".join(kv["gemma3-270m"])


def test_compare_pair_can_be_changed_and_same_model_is_refused(embedded_lm):
    at = run_page("pages/compare.py", model="tiny-random", max_new_tokens="4")
    assert not errors(at), errors(at)
    assert any("Pick two different models" in i.value for i in at.info)  # tiny vs tiny by default: nothing run


def test_tokenization_contrasts_smollm2_and_gemma(embedded_lm, gemma_installed):
    at = run_page("pages/tokenization.py", max_new_tokens="4")
    assert not errors(at), errors(at)
    assert any(h.value.startswith("Two real tokenizers") for h in at.header)
    table = next(d.value for d in at.dataframe if "Ratio" in d.value.columns)
    assert set(table["Text"]) >= {"Hindi", "Emoji", "Numbers", "Python code", "Your text"}
    ratios = [abs(__import__("math").log(float(r.rstrip("x")))) for r in table["Ratio"]]
    assert ratios == sorted(ratios, reverse=True)


def test_attention_on_gemma_shows_a_sliding_and_a_global_layer_past_the_window(gemma_installed):
    at = run_page("pages/attention.py", model="gemma3-270m", max_new_tokens="2")
    assert not errors(at), errors(at)
    assert any(h.value == "Local and global layers past the window" for h in at.header)
    at.toggle(key="attention_window_run").set_value(True).run()
    assert not errors(at), errors(at)
    m = {x.label: x.value for x in at.metric}
    assert m["Layer 0: attention on keys 512+ back"] == "0.0%"  # the window masks them
    assert float(m["Layer 5: attention on keys 512+ back"].rstrip("%")) > 0.5  # a global layer reads them


def test_kv_cache_on_gemma_measures_past_the_window(gemma_installed):
    at = run_page("pages/kv_cache.py", model="gemma3-270m", max_new_tokens="2")
    assert not errors(at), errors(at)
    assert any(h.value.startswith("6. Past the sliding window") for h in at.header)
    kv = next(d.value for d in at.dataframe if "Tokens" in d.value.columns and "gemma3-270m" in d.value.columns)
    measured = [v for v in kv["gemma3-270m"] if "measured" in v]
    assert len(measured) == 6 and all("= formula" in v for v in measured)


def test_embeddings_on_gemma_show_the_scale_and_both_rope_bases(gemma_installed):
    at = run_page("pages/embeddings.py", model="gemma3-270m", max_new_tokens="2")
    assert not errors(at), errors(at)
    assert any("scales its embeddings" in i.value and "25.30" in i.value for i in at.info)
    import json

    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    wave = next(f for f in figs if "full turn" in f["layout"]["title"]["text"])
    names = [t.get("name", "") for t in wave["data"]]
    assert len(wave["data"]) == 2 and any("1,000,000" in n for n in names) and any("10,000" in n for n in names)


def test_kv_cache_on_gemma_past_the_window_says_what_its_run_measured(gemma_installed):
    """A run longer than the window: the page's per-token answer, chart title and cache shape are this run's
    (only the global layers grow; the sliding ones hold window - 1 tokens), not the all-layers formula."""
    at = run_page("pages/kv_cache.py", model="gemma3-270m", max_new_tokens="3", temperature="0",
                  prompt="word " * 530)
    assert not errors(at), errors(at)
    steps = next(d.value for d in at.dataframe if "measured (bytes)" in d.value.columns)
    assert min(steps["tokens cached"]) > 511
    growth = set(steps["measured (bytes)"].diff().dropna().astype(int))
    assert len(growth) == 1
    import json

    text = " ".join(m.value for m in at.markdown)
    titles = " ".join(json.dumps(json.loads(el.proto.spec).get("layout", {}).get("title", ""))
                      for el in at.get("plotly_chart"))
    # as measured: 6,144 B (3 global layers), in the growth chart's title (the question's answer says it on reveal)
    assert f"+{growth.pop():,} B per decode step" in titles
    assert "[1, 1, 511, 256]" in text and "15 sliding layers" in text and "3 global layers (5, 11, 17)" in text
