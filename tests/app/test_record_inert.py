"""AppTest: strings from a saved run are inert on the saved-run page (issue 49): the machine line went into a chart's
markdown caption unescaped (a live link, a remote image fetched on open), and a Plotly legend drew <a href> from the
record's device name. Plotly draws a subset of HTML in titles, legends, hover and annotations."""
import json
import re

import pytest
import torch

from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.record import build, format as F
from tests.app.test_pages import errors, shown
from tests.app.test_record import open_record
from tests.record_edits import strings

LINKS = ('<a href="http://evil.example/x">click</a> <img src="http://evil.example/i.png"> '
         '[md](http://evil.example/m) ![im](http://evil.example/i.png)')
HTML = re.compile(r"<\s*(a|img)\b", re.I)
MARKUP = re.compile(r"(?<!\\)<\s*(a|img)\b|\]\(http", re.I)  # not escaped: markdown's "\<" and plotly's "&lt;" are text




@pytest.fixture(scope="module")
def hostile_record(tiny_lm) -> bytes:
    tr = run_trace(tiny_lm, "The capital of France is", SamplingSettings(), max_new_tokens=4, seed=0)
    machine = build.machine_facts("cpu", torch.get_num_threads())
    machine["device_name"] = LINKS
    machine["libraries"] = {**machine["libraries"], "torch": LINKS[:200]}
    return F.dumps(build.trace_record(tr, tiny_lm.tokenizer, build.model_identity(tiny_lm), machine, "test"))


def test_a_records_machine_line_and_names_draw_no_link_or_image(hostile_record):
    at = open_record(hostile_record)
    assert any("evil.example" in shown(t.value) for t in at.caption), "the machine line is shown (as text)"
    at.button(key="record_run_here").click().run()
    assert not errors(at), errors(at)
    said = [shown(x.value) for x in [*at.success, *at.info, *at.warning, *at.error]]
    assert any(s.startswith("Reproduced") for s in said), said  # its torch "version" differs: within tolerance
    texts = [c.value for c in at.caption] + [m.value for m in at.markdown]
    assert not [t for t in texts if MARKUP.search(t)], [t for t in texts if MARKUP.search(t)]
    charts = at.get("plotly_chart")
    assert len(charts) >= 2
    for c in charts:
        fig = json.loads(c.proto.spec)
        bad = [s for s in strings(fig) if HTML.search(s)]  # plotly draws no markdown, only its HTML subset
        assert not bad, bad
    assert any("evil.example" in s for c in charts for s in strings(json.loads(c.proto.spec)))  # shown, escaped
