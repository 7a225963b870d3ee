"""AppTest: every chart each page shows (as sent to the browser) has tick labels of at least 14 px in a dark
colour, and no minor ticks on its log axes (tests/ui/test_tick_fonts.py holds the rule)."""
import json

import pytest

from tests.app.test_pages import errors, run_page
from tests.ui.test_tick_fonts import assert_readable

PAGES = ["pages/loop.py", "pages/tokenization.py", "pages/embeddings.py", "pages/attention.py",
         "pages/sampling.py", "pages/kv_cache.py", "pages/timeline.py"]


@pytest.mark.parametrize("path", PAGES)
def test_every_chart_on_the_page_is_readable(path):
    at = run_page(path, model="tiny-random", max_new_tokens="4")
    assert not errors(at), errors(at)
    charts = at.get("plotly_chart")
    assert charts, f"{path} shows no chart"
    for i, c in enumerate(charts):
        assert_readable(json.loads(c.proto.spec), f"{path} chart {i}")
