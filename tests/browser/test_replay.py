"""The replay page of a saved run, opened from disk in headless Chromium with the network off: every chart drawn,
no console error, no request but the file itself, the sampling sliders re-sample the recorded logits exactly as
the engine does, the attention selects show the recorded layer and head, the race replays, and a hostile prompt
stays text."""
import numpy as np
import pytest
import torch

from engine.core.prompt import encode_prompt
from engine.core.sampling import SamplingSettings, sampling_probs
from engine.core.trace import run_trace
from engine.measure import noise
from engine.record import build, format as F
from engine.record.values import decode_array
from ui.record.replay import replay_html
from tests.browser.harness import SHOTS

HOSTILE = 'Say hi <img src=x onerror="alert(1)"></script><script>alert(2)</script> &amp; bye'


def _machine(lm):
    return build.machine_facts(str(lm.device), torch.get_num_threads())


def open_page(browser, path, name):
    """The page from disk, offline, every request but the file itself refused and recorded."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    ctx.set_offline(True)
    page = ctx.new_page()
    seen = {"requests": [], "console": [], "dialogs": []}
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.on("console", lambda m: seen["console"].append(f"{m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: seen["console"].append(f"pageerror: {e}"))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort())
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"replay-{name}.png"), full_page=True)
    return ctx, page, seen


def all_drawn(page) -> list[str]:
    """Chart ids whose plotly graph has no SVG or no trace."""
    return page.evaluate("""Array.from(document.querySelectorAll('.chart')).filter(
        d => !d.querySelector('.main-svg') || !d.data || !d.data.length).map(d => d.id)""")


@pytest.fixture(scope="module")
def trace_page(embedded_lm, tmp_path_factory):
    lm = embedded_lm
    tr = run_trace(lm, HOSTILE, SamplingSettings(0.7, 40, 0.9), max_new_tokens=8, seed=3)
    rec = F.load(F.dumps(build.trace_record(tr, lm.tokenizer, build.model_identity(lm), _machine(lm), "test")))
    path = tmp_path_factory.mktemp("replay") / "run.html"
    path.write_text(replay_html(rec), encoding="utf-8")
    return path, rec


def test_a_saved_run_replays_offline_with_working_sliders(browser, trace_page):
    path, rec = trace_page
    t, model = rec["trace"], rec["model"]
    ctx, page, seen = open_page(browser, path, "trace")
    try:
        assert all_drawn(page) == []
        assert set(page.evaluate("Array.from(document.querySelectorAll('.chart')).map(d => d.id)")) == {
            "chart-embeddings", "chart-attention", "chart-lens", "chart-sampling", "chart-timeline", "chart-kv"}
        # every chart says what its numbers are, and a measured one when and where
        captions = page.locator(".caption").all_inner_texts()
        assert len(captions) >= 7
        assert all(c.startswith(("Measured on ", "Real values from the model.", "Derived from a formula."))
                   for c in captions), captions
        assert any(c.startswith(f"Measured on {rec['machine']['device_name']} (cpu") for c in captions)

        # the prompt is text: no element, no script, no dialog came from it
        assert page.locator("#prompt-text").inner_text() == HOSTILE
        assert page.locator("img").count() == 0 and seen["dialogs"] == []

        def after(values):
            for name, v in values.items():
                page.evaluate("([id, v]) => { const e = document.getElementById(id); e.value = v; "
                              "e.dispatchEvent(new Event('input')); }", [name, str(v)])
            return page.evaluate("document.getElementById('chart-sampling').data[1].x")

        # the page starts at the run's own settings
        assert float(page.locator("#temperature").input_value()) == pytest.approx(0.7)
        one = after({"temperature": 1.0, "top-k": 1, "top-p": 1.0})
        assert sorted(one)[-1] == pytest.approx(1.0) and sum(1 for x in one if x > 0) == 1
        greedy = after({"temperature": 0, "top-k": 0})
        assert greedy[-1] == pytest.approx(1.0)  # the most likely token (drawn last: bars read top down)
        wide = after({"temperature": 2.0, "top-k": 0, "top-p": 1.0})
        assert 0 < max(wide) < 1
        assert f"{model['vocab_size']:,} of {model['vocab_size']:,} tokens" in page.content()

        page.click("#draw-one")
        assert page.locator("#drawn").inner_text().startswith("Drawn: ")
        page.click("#draw-many")
        shares = page.evaluate("document.getElementById('chart-sampling').data[2].x")
        assert 0 < sum(shares) <= 1.0 + 1e-9

        # the sliders' filters are the engine's (engine/core/sampling.py) on the same recorded logits
        logits = decode_array(t["first_logits"]["values"], "l")
        for temp, k, p in [(1.0, 0, 1.0), (0.7, 40, 0.9), (1.5, 0, 0.5), (0.3, 5, 1.0), (2.0, 200, 0.95)]:
            js = page.evaluate("""([T, k, p]) => {
                const R = JSON.parse(document.getElementById('record').textContent);
                const b = atob(R.trace.first_logits.values.base64), u = new Uint8Array(b.length);
                for (let i = 0; i < b.length; i++) u[i] = b.charCodeAt(i);
                const v = new DataView(u.buffer), n = u.length / 4, lg = new Float32Array(n);
                for (let i = 0; i < n; i++) lg[i] = v.getFloat32(4 * i, true);
                const order = Array.from(lg.keys()).sort((a, b) => lg[b] - lg[a]);
                const r = window.__replaySampling(lg, order, T, k, p);
                return {kept: r.kept, probs: order.slice(0, 300).map(i => [i, r.probs[i]])};
            }""", [temp, k, p])
            ref = sampling_probs(torch.tensor(logits), SamplingSettings(temp, k, p)).numpy()
            assert js["kept"] == int((ref > 0).sum()), (temp, k, p)
            ids, probs = zip(*js["probs"])
            assert np.allclose(probs, ref[list(ids)], atol=1e-5), (temp, k, p)

        # the attention selects show the recorded weights of that layer and head
        att = decode_array(t["analysis"]["attentions"], "a")  # [layers, heads, m, m]
        last_l, last_h = att.shape[0] - 1, att.shape[1] - 1
        page.select_option("#layer", str(last_l))
        page.select_option("#head", str(last_h))
        z = page.evaluate("document.getElementById('chart-attention').data[0].z")
        shown = np.array([[np.nan if v is None else v for v in row] for row in z], dtype=np.float32)
        expect = np.where(np.triu(np.ones_like(att[last_l, last_h]), 1) > 0, np.nan, att[last_l, last_h])
        assert np.allclose(shown, expect, atol=1e-6, equal_nan=True)
        assert f"layer {last_l}" in page.evaluate("document.getElementById('chart-attention').layout.title.text")
        page.screenshot(path=str(SHOTS / "replay-trace-after.png"), full_page=True)

        assert seen["console"] == [], seen["console"]
        assert seen["requests"] == [path.as_uri()], seen["requests"]
    finally:
        ctx.close()


def _lasting(run, plain_s: float, spec_s: float):
    """``run`` with each lane's measured times scaled to last ``plain_s`` and ``spec_s`` seconds in all (the tiny
    model races in milliseconds, where both clocks would read 0.0x s and could not tell the lanes' ends apart)."""
    from engine.speculative.records import SpecRun

    fp, fs = plain_s / run.plain_seconds, spec_s / run.spec_seconds
    rounds = tuple(r.__class__(**{**r.__dict__, "draft_seconds": r.draft_seconds * fs,
                                  "verify_seconds": r.verify_seconds * fs}) for r in run.rounds)
    return SpecRun(**{**run.__dict__, "plain_step_seconds": tuple(x * fp for x in run.plain_step_seconds),
                      "plain_steps": (), "spec_prefill_seconds": run.spec_prefill_seconds * fs, "rounds": rounds})


def _clocks(page) -> list[str]:
    """Each lane's clock, seconds only ("0.90"), plain first."""
    return [t.split()[1] for t in page.locator(".clock").all_inner_texts()]


def test_a_saved_race_replays_both_lanes_offline(browser, tiny_lm, tmp_path):
    """Both lanes replay at the recorded pace, and each lane's clock stops at its own end: the speculative clock ran
    on to the plain lane's end, so both read "3.03 s" beside a 1.12x scoreboard."""
    text = "the cat sat on the mat, the cat sat on the mat, the cat sat on the"
    enc = encode_prompt(tiny_lm.tokenizer, text, False)
    from engine.speculative.decoding import race

    run = _lasting(race(tiny_lm, list(enc.ids), "model:random:1", 3, SamplingSettings(), 16, 0), 0.9, 0.3)
    ends = [f"{run.plain_seconds:.2f}", f"{run.spec_seconds:.2f}"]
    assert ends == ["0.90", "0.30"]
    check = noise.check_speedup(run.speedup, run.k, run.accepted, run.tokens_per_pass)
    rec = F.load(F.dumps(build.race_record(run, check, text, enc, tiny_lm.tokenizer, tiny_lm.ref, tiny_lm.info,
                                           build.model_identity(tiny_lm), _machine(tiny_lm), "test")))
    path = tmp_path / "race.html"
    path.write_text(replay_html(rec), encoding="utf-8")
    ctx, page, seen = open_page(browser, path, "race")
    try:
        assert all_drawn(page) == []
        assert _clocks(page) == ends  # the finished race, drawn on load
        spans = page.locator(".lane").nth(1).locator("span")
        full = spans.count()
        assert full == len(run.spec_ids) + sum(len(r.rejected) for r in run.rounds)
        assert page.locator(".lane").nth(0).locator("span").count() == len(run.plain_ids)
        # Replay: both lanes start empty (the first frame, drawn in the click itself), then fill at the recorded pace
        at_start = page.evaluate("""() => { document.getElementById('race-play').click();
            return Array.from(document.querySelectorAll('.lane')).map(l => l.children.length); }""")
        assert at_start == [0, 0]
        states = []
        for _ in range(300):  # polled from here: the page's CSP forbids the eval behind wait_for_function
            states.append(page.evaluate("document.getElementById('race-play').dataset.state"))
            if states[-1] == "done":
                break
            page.wait_for_timeout(100)
        assert states[-1] == "done", states[-5:]
        assert spans.count() == full  # replayed to the end, every piece back
        assert _clocks(page) == ends  # each lane's clock stopped at its own end
        assert page.locator(".lane .r-rejected").count() == sum(len(r.rejected) for r in run.rounds) > 0
        # the speedup once ("2.18x (2.18x)" repeated it), the replayed race's own only where the judged one differs
        own = f"{run.speedup:.2f}x"
        row = page.locator("tr").filter(has_text="Measured speedup (wall clock)").locator("td").nth(1).inner_text()
        assert row == (own if check.shown == own else f"{check.shown} (the race replayed here: {own})"), row
        assert seen["console"] == [] and seen["requests"] == [path.as_uri()], seen
    finally:
        ctx.close()
