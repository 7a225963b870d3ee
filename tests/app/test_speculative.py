"""AppTest for the speculative race page: it races on load, answers every drafter, and refuses clearly."""
from tests.app.test_pages import errors, run_page

PAGE = "pages/speculative.py"


def _metric(at, label):
    return next(m.value for m in at.metric if m.label == label)


def test_race_runs_and_reports_on_tiny_model():
    at = run_page(PAGE, model="tiny-random")
    assert not errors(at), errors(at)
    assert _metric(at, "Identical output") == "yes"  # temperature 0 by default
    assert float(_metric(at, "Tokens per target pass")) >= 1.0
    # switching the drafter re-races; the target as its own draft accepts everything at temperature 0
    at.radio(key="speculative_drafter").set_value("model:self").run()
    assert not errors(at), errors(at)
    assert _metric(at, "Acceptance rate a") == "100%"
    # sampled run: the page explains why the lanes differ
    at.slider(key="speculative_temperature").set_value(0.8).run()
    assert not errors(at), errors(at)
    assert any("min(1, p/q)" in i.value for i in at.info)


def test_other_model_with_another_tokenizer_is_refused(embedded_lm):
    at = run_page(PAGE, model="tiny-random")
    at.radio(key="speculative_drafter").set_value("model:other").run()
    at.text_input(key="speculative_other").set_value("embedded").run()
    assert not errors(at), errors(at)
    assert any("different tokenizer" in e.value for e in at.error)


def test_k_sweep_on_demand(monkeypatch):
    at = run_page(PAGE, model="tiny-random")
    at.number_input(key="speculative_tokens").set_value(8).run()
    assert not any("Best k" in m.value or "No k" in m.value for m in at.markdown)
    next(b for b in at.button if b.key == "speculative_sweep").click().run()
    assert not errors(at), errors(at)
    assert any("Best k" in m.value or "No k made" in m.value for m in at.markdown)
