"""The replay page draws a saved run's own words as text, Plotly included (issue 49): its attention chart's title drew
a live link from model.arch.layer_kinds, and clicking it opened the attacker's URL."""
import torch

from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.record import build, format as F
from ui.record.replay import replay_html
from tests.browser.test_replay import all_drawn, open_page

LINK = '<a href="https://evil.example/">click</a><img src="https://evil.example/i.png">'


def test_a_records_strings_draw_no_link_or_image_on_the_replay_page(browser, tiny_lm, tmp_path):
    tr = run_trace(tiny_lm, "The capital of France is", SamplingSettings(), max_new_tokens=4, seed=0)
    machine = {**build.machine_facts(str(tiny_lm.device), torch.get_num_threads()), "device_name": LINK}
    rec = build.trace_record(tr, tiny_lm.tokenizer, build.model_identity(tiny_lm), machine, "test")
    arch = rec["model"]["arch"]
    arch["layer_kinds"] = [LINK] * len(arch["layer_kinds"])
    rec = F.load(F.dumps(rec))
    path = tmp_path / "run.html"
    path.write_text(replay_html(rec), encoding="utf-8")
    ctx, page, seen = open_page(browser, path, "inert")
    try:
        assert all_drawn(page) == []
        title = page.evaluate("document.querySelector('#chart-attention .gtitle').textContent")
        assert "evil.example" in title and "<a href" in title  # the record's words, shown as the characters
        assert page.locator(".chart a, .chart img, main a, main img").count() == 0
        assert page.locator("text=evil.example").count() > 0
        assert seen["requests"] == [path.as_uri()], seen["requests"]
    finally:
        ctx.close()
