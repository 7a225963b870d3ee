"""Saved runs (engine/record): the file round-trips; anything damaged, edited, newer or hostile is refused in one line;
an unchanged record re-runs to identical tokens and logits; an edit that keeps the JSON valid (and even recomputes
the content hash) is caught by the re-run."""
import copy
import json
import re

import numpy as np
import pytest
import torch

from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.record import build, format as F, verify as V
from engine.record.consistency import ROW_SUM_TOLERANCE
from engine.record.values import decode_array, encode_array
from engine.record.speculative import spec_run
from ui.record.replay import replay_html

PROMPT = "The capital of France is <b>Paris</b> </script><script>alert(1)</script>"


def machine_of(lm, cal=None):
    return build.machine_facts(str(lm.device), torch.get_num_threads(), cal)


@pytest.fixture(scope="module")
def trace_rec(tiny_lm):
    tr = run_trace(tiny_lm, PROMPT, SamplingSettings(), max_new_tokens=6, seed=0)
    return F.seal(build.trace_record(tr, tiny_lm.tokenizer, build.model_identity(tiny_lm), machine_of(tiny_lm), "test"))


@pytest.fixture(scope="module")
def race_rec(tiny_lm):
    from engine.core.prompt import encode_prompt
    from engine.measure import noise
    from engine.speculative.decoding import race

    text = "the cat sat on the mat, the cat sat on the mat, the cat sat on the"
    enc = encode_prompt(tiny_lm.tokenizer, text, False)
    run = race(tiny_lm, list(enc.ids), "model:random:1", 3, SamplingSettings(), 12, 0)
    check = noise.check_speedup(run.speedup, run.k, run.accepted, run.tokens_per_pass)
    return F.seal(build.race_record(run, check, text, enc, tiny_lm.tokenizer, tiny_lm.ref, tiny_lm.info,
                                    build.model_identity(tiny_lm), machine_of(tiny_lm), "test"))


def _bytes(rec) -> bytes:
    return json.dumps(rec, ensure_ascii=False).encode()


def _resealed(rec) -> bytes:
    """An edit whose author also recomputed the content hash (the hash is not a signature)."""
    return F.dumps({k: v for k, v in rec.items() if k != "content_sha256"})


# ------------------------------------------------------------------------------------------------ the file


def test_a_trace_record_round_trips(tiny_lm, trace_rec):
    back = F.load(F.dumps(trace_rec))
    assert back == trace_rec
    t = back["trace"]
    assert t["generated_ids"] == [s["token_id"] for s in t["steps"]]
    att = decode_array(t["analysis"]["attentions"], "a")  # [layers, heads, m, m]
    assert att.shape == (tiny_lm.info.n_layers, tiny_lm.info.n_heads, len(t["prompt"]["ids"]),
                         len(t["prompt"]["ids"]))
    assert np.allclose(att.sum(-1), 1, atol=ROW_SUM_TOLERANCE) and np.triu(att, 1).max() == 0
    logits = decode_array(t["first_logits"]["values"], "l")
    assert logits.shape == (tiny_lm.info.vocab_size,)
    assert t["first_logits"]["top_ids"][0] == int(np.argmax(logits)) == t["generated_ids"][0]  # greedy
    assert [s["kv_bytes"] for s in t["steps"]] == t["kv_formula_bytes"]  # measured = derived (Llama layout)
    assert back["model"]["engine_mode"] == "eager" and back["model"]["identity"]["weights_sha256"]


def test_the_steps_keep_the_logits_their_probabilities_came_from(trace_rec):
    for s in trace_rec["trace"]["steps"]:
        lg, p = np.array(s["top_logits"]), np.array(s["top_probs"])
        assert np.allclose(np.log(p / p[0]), lg - lg[0], atol=1e-4)


def test_a_race_record_round_trips_and_its_summary_is_the_engines(race_rec):
    back = F.load(F.dumps(race_rec))
    run = spec_run(back["race"], back["model"]["name"])
    assert back["race"]["summary"]["speedup"] == pytest.approx(run.speedup)
    assert back["race"]["plain"]["ids"] == back["race"]["speculative"]["ids"]  # greedy: identical output
    assert any(r["accepted"] < len(r["drafted"]) for r in back["race"]["speculative"]["rounds"])  # rejections too


@pytest.mark.parametrize("damage, words", [
    (lambda b: b[: len(b) // 2], "ends early"),
    (lambda b: b"\xff\xfe" + b, "not text"),
    (lambda b: b"[1, 2, 3]", "not a saved run"),
    (lambda b: b"[" * 100_000 + b"]" * 100_000, "nested"),
    (lambda b: b.replace(b'"seed":0', b'"seed":NaN', 1), "NaN"),
    (lambda b: b.replace(b'"seed":0', b'"seed":1e999', 1), "too large"),
    (lambda b: b.replace(b'"seed":0', b'"seed":0,"seed":0', 1), "appears twice"),
    (lambda b: b.replace(b'"version":1', b'"version":2', 1), "newer than this app reads"),
    (lambda b: b.replace(b'"format":"inference-loop-explorer/run"', b'"format":"x"', 1), "not a saved run"),
    (lambda b: b.replace(b'"seed":0', b'"seed":1', 1), "changed after it was saved"),
])
def test_a_damaged_or_edited_file_is_refused_in_one_line(trace_rec, damage, words):
    data = damage(F.dumps(trace_rec))
    with pytest.raises(F.RecordError) as exc:
        F.load(data)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_a_file_over_the_size_cap_is_refused_before_it_is_parsed(monkeypatch, trace_rec, tmp_path):
    monkeypatch.setattr(F, "MAX_BYTES", 1000)
    p = tmp_path / "big.json"
    p.write_bytes(F.dumps(trace_rec))
    for given in (p, p.read_bytes()):
        with pytest.raises(F.RecordError, match="at most"):
            F.load(given)


def _edit(rec, fn):
    rec = copy.deepcopy(rec)
    fn(rec)
    return rec


@pytest.mark.parametrize("edit, words", [
    (lambda r: r["trace"]["steps"][2]["top_logits"].__setitem__(1, r["trace"]["steps"][2]["top_logits"][1] + 0.5),
     "do not follow from its logits"),
    (lambda r: r["trace"]["generated_ids"].__setitem__(1, r["trace"]["generated_ids"][1] + 1),
     "not the generated token"),
    (lambda r: r["trace"]["steps"][0].__setitem__("seconds", -1.0), "trace/steps/0/seconds: -1.0 is out of bounds"),
    (lambda r: r["trace"]["steps"][1].__setitem__("token", "<b>" * 5000), "a text of 15,000 characters (at most"),
    (lambda r: r["model"].__setitem__("vocab_size", 10), "outside the model's vocabulary"),
    (lambda r: r["trace"].__setitem__("extra", "<script>"), "a field this format does not have ('extra')"),
    (lambda r: r["trace"]["analysis"]["attentions"].__setitem__("shape", [1, 1, 1, 1]), "is not [layers"),
    (lambda r: r["trace"]["first_logits"]["values"].__setitem__("base64", "!!!"), "damaged"),
])
def test_an_inconsistent_record_is_refused_even_with_a_fresh_hash(trace_rec, edit, words):
    with pytest.raises(F.RecordError, match=re.escape(words)):
        F.load(_resealed(_edit(trace_rec, edit)))


def test_non_causal_attention_is_refused(trace_rec):
    def future(r):
        a = decode_array(r["trace"]["analysis"]["attentions"], "a")
        a[0, 0, 0, :] = 1.0 / a.shape[-1]  # the first query attends to every later position
        r["trace"]["analysis"]["attentions"] = encode_array(a, "float16")

    with pytest.raises(F.RecordError, match="not causal"):
        F.load(_resealed(_edit(trace_rec, future)))


def test_an_edited_race_summary_is_refused(race_rec):
    with pytest.raises(F.RecordError, match="race/summary/speedup"):
        F.load(_resealed(_edit(race_rec, lambda r: r["race"]["summary"].__setitem__("speedup", 9.0))))


# ------------------------------------------------------------------------------------------------ verify


def test_an_unchanged_record_reproduces_identically(tiny_lm, trace_rec):
    v = V.verify(F.load(F.dumps(trace_rec)), tiny_lm)
    assert v.status == "identical" and v.ok, v.verdict
    assert v.tokens["same"] and v.logits["largest"] == 0.0 and v.attention["largest"] == 0.0
    assert v.weights["same"] is True and v.prompt["same_ids"] and v.kv["same"]
    assert {t.what for t in v.timings} >= {"prefill (time to first token)", "whole run"}
    assert all(t.ratio > 0 for t in v.timings)


def test_teacher_forcing_gives_the_loops_own_logits(tiny_lm, trace_rec):
    t = trace_rec["trace"]
    here = V.forced_logits(tiny_lm, t["prompt"]["ids"], t["generated_ids"], [s["top_ids"] for s in t["steps"]])
    for s, h in zip(t["steps"], here):
        assert np.array_equal(np.float32(s["top_logits"]), h)


def test_an_edit_that_keeps_the_file_valid_is_caught_by_the_rerun(tiny_lm, trace_rec):
    """Shifting one step's logits together keeps every probability and the hash valid: only the re-run sees it."""
    def shift(r):
        s = r["trace"]["steps"][3]
        s["top_logits"] = [x + 0.5 for x in s["top_logits"]]

    forged = F.load(_resealed(_edit(trace_rec, shift)))
    v = V.verify(forged, tiny_lm)
    assert v.status == "different" and not v.ok and v.logits["at_step"] == 3
    assert v.logits["largest"] == pytest.approx(0.5, abs=1e-5)


def test_an_edited_prompt_or_token_is_caught(tiny_lm, trace_rec):
    prompt = V.verify(F.load(_resealed(_edit(
        trace_rec, lambda r: r["trace"]["prompt"].__setitem__("text", "The capital of Italy is")))), tiny_lm)
    assert prompt.status == "different" and "prompt" in prompt.verdict

    def other_token(r):  # the last step's second choice, made the chosen one (and sampled, so it may be)
        t = r["trace"]
        t["settings"]["temperature"] = 1.0
        s = t["steps"][-1]
        s["token_id"], s["token"] = s["top_ids"][1], s["top_tokens"][1]
        t["generated_ids"][-1], t["generated_tokens"][-1] = s["token_id"], s["token"]

    token = V.verify(F.load(_resealed(_edit(trace_rec, other_token))), tiny_lm)
    assert not token.tokens["same"] and token.status == "different"


def test_other_weights_are_not_comparable(tiny_lm, trace_rec):
    def other(r):
        files = r["model"]["identity"]["files"]
        files["parameters (in memory)"]["sha256"] = "0" * 64

    v = V.verify(F.load(_resealed(_edit(trace_rec, other))), tiny_lm)
    assert v.status == "not comparable" and v.weights["files"]["parameters (in memory)"] == "differs"


def test_a_race_reproduces_identically(tiny_lm, race_rec):
    v = V.verify(F.load(F.dumps(race_rec)), tiny_lm)
    assert v.status == "identical", v.verdict
    assert v.tokens["plain"]["same"] and v.tokens["speculative"]["same"] and v.tokens["same_rounds"]
    assert any(t.what.startswith("round 1") for t in v.timings)


def test_tolerances_follow_what_differs():
    model = {"precision": "float32", "engine_mode": "eager"}
    machine = {"device": "cpu", "libraries": {"torch": "2.13.0+cpu", "transformers": "5.23.0"}}
    same = V.tolerance(model, machine, model, {**machine, "libraries": {"torch": "2.13.1", "transformers": "5.23.2"}})
    assert same.same_setup and same.logit == V.TOLERANCE_SAME["float32"]
    bf16 = V.tolerance(model, machine, {**model, "precision": "bfloat16"}, machine)
    assert not bf16.same_setup and bf16.logit == V.TOLERANCE_OTHER["bfloat16"] and "precision" in bf16.why
    gpu = V.tolerance(model, machine, model, {**machine, "device": "cuda"})
    assert not gpu.same_setup and gpu.logit == V.TOLERANCE_OTHER["float32"] < bf16.logit
    newer = V.tolerance(model, machine, model, {**machine, "libraries": {"torch": "2.14.0", "transformers": "5.23.0"}})
    assert not newer.same_setup and "torch" in newer.why


# ------------------------------------------------------------------------------------------------ identity


def test_the_tiny_models_identity_is_its_weights(tiny_lm):
    a = build.model_identity(tiny_lm)
    assert a == build.model_identity(tiny_lm)
    p = next(tiny_lm.model.parameters())
    with torch.no_grad():
        p.view(-1)[0] += 1.0
        try:
            b = build.model_identity(tiny_lm)
        finally:
            p.view(-1)[0] -= 1.0
    assert b["weights_sha256"] != a["weights_sha256"] and b["tokenizer_sha256"] == a["tokenizer_sha256"]


# ------------------------------------------------------------------------------------------------ the page


def _page_record(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="record">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def test_the_page_holds_the_record_and_no_markup_from_it(trace_rec):
    html = replay_html(trace_rec)
    assert _page_record(html) == trace_rec
    data = re.search(r'id="record">(.*?)</script>', html, re.S).group(1)
    assert "<" not in data and ">" not in data  # a recorded "</script>" cannot end the element
    assert html.count("<script") == 3  # plotly.js, the record, the page's script: nothing from the prompt
    assert "connect-src 'none'" in html and "https://" not in html.split("<script>", 1)[0]


# ------------------------------------------------------------------------------------------------ the command line


def test_the_command_line_refuses_an_edited_record(tmp_path, trace_rec, capsys):
    from engine.__main__ import main

    p = tmp_path / "run.json"
    p.write_bytes(F.dumps(trace_rec).replace(b'"seed":0', b'"seed":7', 1))
    assert main(["replay", str(p), "--html", str(tmp_path / "r.html")]) == 2
    assert "changed after it was saved" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
    assert main(["verify", str(p), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "refused" and not out["ok"]


def test_the_command_line_saves_replays_and_verifies(tmp_path, capsys):
    from engine.__main__ import main

    run, page = tmp_path / "run.json", tmp_path / "run.html"
    assert main(["trace", "--model", "tiny-random", "--prompt", "Hello there", "--max-new-tokens", "4",
                 "--save", str(run)]) == 0
    assert F.load(run)["machine"]["calibration"] is not None  # the trace was measured under the noise guard
    assert main(["replay", str(run), "--html", str(page)]) == 0 and page.stat().st_size > 1_000_000
    capsys.readouterr()
    assert main(["verify", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "identical" and out["ok"] and out["tokens"]["same"]
    raced = tmp_path / "race.json"
    assert main(["race", "--model", "tiny-random", "--prompt", "a b a b a b a b", "--max-new-tokens", "6",
                 "--no-chat-template", "--save", str(raced)]) == 0
    rec = F.load(raced)
    assert rec["kind"] == "race" and rec["machine"]["calibration"] is not None and rec["race"]["plain"]["steps"]
    capsys.readouterr()
    assert main(["verify", str(raced)]) == 0
    assert capsys.readouterr().out.startswith("Reproduced: identical tokens")


def test_a_model_this_machine_lacks_is_named_and_the_replay_offered(tmp_path, trace_rec, capsys):
    from engine.__main__ import main

    rec = _edit(trace_rec, lambda r: r["model"].__setitem__("name", str(tmp_path / "no-such-model")))
    p = tmp_path / "run.json"
    p.write_bytes(_resealed(rec))
    assert main(["verify", str(p)]) == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and "python -m engine replay" in err


def test_an_answer_served_in_a_class_batch_saves_and_verifies_alone(tiny_lm, one_thread):
    """The home page's answers are often timed in a class batch: the record says so per step, and the solo re-run
    reproduces its tokens and logits (float32 batching computes what a pass alone computes)."""
    import threading

    from engine.core.request import RunRequest
    from engine.jobs.classbatch import ANSWER, AnswerRequest
    from engine.jobs.worker import Worker

    w = Worker()
    started, release = threading.Event(), threading.Event()
    w.submit(lambda: (started.set(), release.wait(30)), session="teacher")
    started.wait(10)
    prompts = ["hello there", "a longer prompt with several more words", "x"]
    jobs = [w.ask(ANSWER, AnswerRequest(tiny_lm, RunRequest(tiny_lm.ref, p, False, 5, SamplingSettings(), 0),
                                        analyse=True),
                  session=f"s{i}", key=("rec", p)) for i, p in enumerate(prompts)]
    release.set()
    for job in jobs:
        tr = job.result(60)
        rec = F.load(F.dumps(build.trace_record(tr, tiny_lm.tokenizer, build.model_identity(tiny_lm),
                                                machine_of(tiny_lm), "test")))
        assert rec["trace"]["timed_in_batcher"] and max(s["batch_size"] for s in rec["trace"]["steps"]) > 1
        v = V.verify(rec, tiny_lm)
        assert v.status == "identical", v.verdict
        assert any("class batch" in n for n in v.notes)


@pytest.mark.parametrize("family", __import__("engine.models.tiny", fromlist=["TINY_ARCHS"]).TINY_ARCHS)
def test_every_family_saves_a_valid_record_that_reproduces(family, one_thread):
    """Nothing in the format assumes the Llama layout: sliding windows, learned positions, ALiBi, MQA, MLA, refused
    features all save, load (every consistency check passes) and reproduce identically."""
    from engine.models.loading import load_tiny_arch

    lm = load_tiny_arch(family)
    tr = run_trace(lm, "The capital of France is Paris. The capital of Italy is Rome. Once upon a time",
                   SamplingSettings(), max_new_tokens=5, use_chat_template=False)
    rec = F.load(F.dumps(build.trace_record(tr, lm.tokenizer, build.model_identity(lm), machine_of(lm), "test")))
    assert rec["model"]["model_type"] == lm.info.model_type and rec["model"]["identity"]["weights_sha256"]
    v = V.verify(rec, lm)
    assert v.status == "identical" and v.weights["same"], (family, v.verdict)
    assert "<script" not in replay_html(rec).split('id="record">', 1)[1].split("</script>", 1)[0]


def test_an_int8_copy_saves_and_reproduces(tiny_lm):
    from engine.models.precision import to_precision

    lm = to_precision(tiny_lm, "int8")
    tr = run_trace(lm, "hello there", SamplingSettings(), max_new_tokens=4)
    rec = F.load(F.dumps(build.trace_record(tr, lm.tokenizer, build.model_identity(lm), machine_of(lm), "test")))
    assert rec["model"]["precision"] == "int8" and rec["model"]["name"] == "tiny-random"
    v = V.verify(rec, lm)
    assert v.status == "identical" and v.tolerance.logit == V.TOLERANCE_SAME["int8"], v.verdict
