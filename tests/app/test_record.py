"""AppTest: saving and opening runs. The loop and race pages offer both files after a run; the saved-run page checks
an upload before it trusts it (an edited or broken file is refused in one line, a hostile prompt stays text), runs
it again here only on request and only on a model this server offers, and shows the verdict beside the record."""
import json

import pytest
import torch

from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.record import build, format as F
from tests.app.test_pages import errors, run_page, shown

PAGE = "pages/record.py"
HOSTILE = "Hi <img src=x onerror=alert(1)> **bold** [link](http://x.y) :red[red]"


@pytest.fixture(scope="module")
def tiny_record(tiny_lm) -> bytes:
    tr = run_trace(tiny_lm, HOSTILE, SamplingSettings(), max_new_tokens=5, seed=0)
    machine = build.machine_facts("cpu", torch.get_num_threads())
    return F.dumps(build.trace_record(tr, tiny_lm.tokenizer, build.model_identity(tiny_lm), machine, "test"))


def open_record(data: bytes, passes=None, **query):
    """The saved-run page with ``data`` uploaded; ``passes`` (the forward-pass counter) restarts at the upload."""
    at = run_page(PAGE, model="tiny-random", **query)
    assert not errors(at), errors(at)
    if passes is not None:
        passes["n"] = 0  # the page's first run loaded the sidebar's model (its load-time checks run passes)
    at.file_uploader(key="record_upload").set_value(("run.json", data, "application/json")).run()
    assert not errors(at), errors(at)
    return at


def _downloads(at) -> set[str]:
    return {b.key for b in at.get("download_button")}


def test_the_loop_page_offers_the_run_as_a_file_and_as_a_page():
    at = run_page("pages/loop.py", model="tiny-random", max_new_tokens="3")
    assert not errors(at), errors(at)
    assert {"loop_save_json", "loop_save_html"} <= _downloads(at)


def test_the_race_page_offers_its_race_after_it_ran():
    at = run_page("pages/speculative.py", model="tiny-random", max_new_tokens="6")
    assert not {"speculative_save_json", "speculative_save_html"} & _downloads(at)  # nothing raced yet
    next(b for b in at.button if b.key == "speculative_go").click().run()
    assert not errors(at), errors(at)
    assert {"speculative_save_json", "speculative_save_html"} <= _downloads(at)


def test_the_files_the_buttons_build_load_and_replay(tiny_lm):
    from ui.record import runs

    tr = run_trace(tiny_lm, "hello there", SamplingSettings(), max_new_tokens=3)
    make = lambda: runs.trace_record(tr, tiny_lm)  # noqa: E731
    rec = F.load(runs.json_bytes(make))
    assert rec["saved_by"] == "the app: the loop page" and rec["trace"]["generated_ids"] == list(tr.generated_ids)
    assert rec["machine"]["calibration"] is None and rec["machine"]["load_avg_at_save"] is not None
    page = runs.page_bytes(make)
    assert page.startswith(b"<!DOCTYPE html>") and len(page) > 1_000_000


def test_an_upload_is_shown_and_runs_here_only_on_request(tiny_record, passes):
    at = open_record(tiny_record, passes)
    assert passes["n"] == 0  # showing a record runs no model
    assert HOSTILE in [c.value for c in at.code]  # the prompt as text, in a code block
    assert {"record_save_html"} <= _downloads(at) and "record_save_json" not in _downloads(at)
    at.button(key="record_run_here").click().run()
    assert not errors(at), errors(at)
    assert passes["n"] > 0
    assert any(shown(s.value).startswith("Reproduced: identical tokens") for s in at.success), \
        [shown(x.value) for x in [*at.success, *at.info, *at.warning]]
    assert len(at.get("plotly_chart")) >= 2  # the record's steps, the timings side by side (and the logits)


@pytest.mark.parametrize("damage, words", [
    (lambda b: b.replace(b'"seed":0', b'"seed":3', 1), "changed after it was saved"),
    (lambda b: b[:-100], "ends early"),
    (lambda b: b.replace(b'"version":1', b'"version":9', 1), "newer than this app reads"),
    (lambda b: b"<html><script>alert(1)</script></html>", "not valid JSON"),
])
def test_a_bad_upload_is_refused_in_one_line(tiny_record, damage, words, passes):
    at = open_record(damage(tiny_record), passes)
    said = [shown(e.value) for e in at.error]
    assert len(said) == 1 and words in said[0], said
    assert not at.get("plotly_chart") and passes["n"] == 0


def test_a_class_server_runs_only_the_models_it_offers(tiny_record, monkeypatch, passes):
    rec = json.loads(tiny_record)
    rec["model"]["name"] = "/home/someone/secret-model"
    data = F.dumps({k: v for k, v in rec.items() if k != "content_sha256"})
    monkeypatch.setenv("ILE_CLASS_MODE", "on")
    monkeypatch.setenv("ILE_MODELS", "tiny-random")
    at = open_record(data, passes)
    said = " ".join(shown(i.value) for i in at.info)
    assert "does not offer the model" in said and "needs no model" in said
    assert not [b for b in at.button if b.key == "record_run_here"] and passes["n"] == 0


def test_a_race_record_runs_here_beside_the_record(tiny_lm):
    from engine.core.prompt import encode_prompt
    from engine.measure import noise
    from engine.speculative.decoding import race

    text = "the cat sat on the mat, the cat sat on the mat, the cat sat on the"
    enc = encode_prompt(tiny_lm.tokenizer, text, False)
    run = race(tiny_lm, list(enc.ids), "model:random:1", 3, SamplingSettings(), 10, 0)
    own = f"{run.speedup:.2f}x"
    check = noise.SpeedupCheck(run.speedup, own, False)  # the median of the races read as this race's own
    data = F.dumps(build.race_record(run, check, text, enc, tiny_lm.tokenizer, tiny_lm.ref, tiny_lm.info,
                                     build.model_identity(tiny_lm), build.machine_facts("cpu", 2), "test"))
    at = open_record(data)
    line = next(shown(m.value) for m in at.markdown if "A race of plain decoding" in shown(m.value))
    assert line.count(own) == 1, line  # once: it read "3.00x (3.00x on the wall clock)"
    at.button(key="record_run_here").click().run()
    assert not errors(at), errors(at)
    said = [shown(s.value) for s in at.success]
    assert said and said[0].startswith("Reproduced: identical tokens"), said
    assert any("Both lanes wrote the same" in shown(m.value) for m in at.markdown)


def test_a_model_this_machine_lacks_is_named_and_the_replay_offered(tiny_record):
    rec = json.loads(tiny_record)
    rec["model"]["name"] = "/nonexistent/not-here"
    at = open_record(F.dumps({k: v for k, v in rec.items() if k != "content_sha256"}))
    at.button(key="record_run_here").click().run()
    assert not errors(at), errors(at)
    said = " ".join(shown(e.value) for e in at.error)
    assert "not-here" in said and "needs no model" in said
    assert "record_save_html" in _downloads(at)


def test_a_record_asking_for_more_work_than_any_page_is_not_run(tiny_record, passes):
    rec = json.loads(tiny_record)
    t = rec["trace"]
    t["prompt"]["ids"] = t["prompt"]["ids"] * 40  # a valid record of a 1,000+ token prompt
    t["prompt"]["tokens"] = t["prompt"]["tokens"] * 40
    t["steps"][0]["tokens_in"] = len(t["prompt"]["ids"])
    t["analysis"] = None
    at = open_record(F.dumps({k: v for k, v in rec.items() if k != "content_sha256"}), passes)
    said = " ".join(shown(i.value) for i in at.info)
    assert "this server runs at most" in said and passes["n"] == 0
    assert not [b for b in at.button if b.key == "record_run_here"]
