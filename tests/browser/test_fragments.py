"""Real browser: page-local controls rerun only their own part of the page (st.fragment). Each test
moves a control with the keyboard, as a person on a projector laptop does, checks the section followed, and
counts full script runs through the run log (app_server.runs()): a fragment rerun is not one."""
import re

from tests.browser.harness import assert_no_error, wait_idle
from ui.frame import nav


def _url(path: str) -> str:
    return next(p.url for p in nav.PAGES if p.path == path)


def _metric(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text()


def _arrows(page, slider_name, presses: int = 3, key: str = "ArrowRight") -> None:
    thumb = page.get_by_role("slider", name=slider_name).last
    thumb.focus()
    for _ in range(presses):
        thumb.press(key)
        page.wait_for_timeout(300)
    wait_idle(page)


def test_sampling_dice_rerun_only_their_sections(app_server, page):
    page.goto(f"{app_server.url}/{_url('pages/sampling.py')}?temperature=0.7&max_new_tokens=2")
    wait_idle(page)
    assert_no_error(page)
    before = app_server.runs()
    entropy = _metric(page, "Entropy drawn from")
    _arrows(page, re.compile("Temperature"))
    assert_no_error(page)
    assert _metric(page, "Entropy drawn from") != entropy, "section 2 did not follow the temperature"
    cut = re.search(r"Top-p = ([\d.]+) keeps", page.inner_text("body")).group(1)
    _arrows(page, re.compile("Top-p"), key="ArrowLeft")
    assert re.search(r"Top-p = ([\d.]+) keeps", page.inner_text("body")).group(1) != cut, "section 3 did not follow"
    _arrows(page, "Number of draws", presses=2)
    assert "5,000 independent draws" in page.inner_text("body"), "section 4 did not follow the number of draws"
    # appending a token changes the position strip (section 1) and the steps (section 5): both in the fragment
    page.get_by_role("button", name=re.compile(r"^Append")).click()
    wait_idle(page)
    body = page.inner_text("body")
    assert "Text generated here so far" in body and "forward passes taken here: 1" in body
    assert_no_error(page)
    assert app_server.runs() == before, "a page-local sampling control reran the whole page script"


def _pick(page, label, typed: str, option) -> None:
    """Open a selectbox, type to narrow its options and click one, as a person does (a long list only draws
    the options near the one selected)."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text(label, exact=True)).first
    box.locator("input").click()
    page.keyboard.type(typed)
    page.get_by_role("option", name=option).first.click(timeout=20_000)
    page.wait_for_timeout(300)
    wait_idle(page)


def _titles(page) -> str:
    return " | ".join(page.locator("text.gtitle").all_text_contents())


def _lens_columns(page) -> int:
    lens = page.locator('[data-testid="stPlotlyChart"]').filter(has=page.locator("text.gtitle", has_text="Logit lens"))
    return lens.first.locator(".xtick").count()


def test_attention_pickers_rerun_only_their_sections(app_server, page):
    page.goto(f"{app_server.url}/{_url('pages/attention.py')}?max_new_tokens=2")
    wait_idle(page)
    assert_no_error(page)
    before = app_server.runs()
    _pick(page, "Head", "2", re.compile(r"^2$"))
    header = page.locator("h2", has_text="who looks at whom").first.inner_text()
    assert re.match(r"2\. Layer \d+, head 2", header), header  # section 2 follows the head
    assert "Head 2 reads K/V head" in page.inner_text("body")  # and section 3
    assert "head=2" in page.url, page.url  # the share link follows the head on view, with no full run
    _pick(page, "Layer", "3", re.compile(r"^3$"))
    header = page.locator("h2", has_text="who looks at whom").first.inner_text()
    assert header.startswith("2. Layer 3, head 2"), (header, page.url)
    assert "layer=3" in page.url and "head=2" in page.url, page.url
    _pick(page, "Query token (the one doing the looking)", "1: ", re.compile(r"^1: "))
    assert "(position 1) looks, layer 3, head 2" in _titles(page), _titles(page)
    cols = _lens_columns(page)
    _arrows(page, re.compile("Positions shown"), key="ArrowLeft")
    assert _lens_columns(page) == cols - 3, (cols, _lens_columns(page))
    assert_no_error(page)
    assert app_server.runs() == before, "an attention picker reran the whole page script"


def test_kv_cache_controls_rerun_only_their_sections(app_server, page):
    page.goto(f"{app_server.url}/{_url('pages/kv_cache.py')}?max_new_tokens=2")
    wait_idle(page)
    assert_no_error(page)
    before = app_server.runs()
    layer = re.search(r"Layer (\d+), KV head", _titles(page)).group(1)
    _arrows(page, "Layer", key="ArrowLeft")
    assert f"Layer {int(layer) - 3}, KV head" in _titles(page), _titles(page)  # section 1's heatmap follows
    per_token = _metric(page, "KV per token")
    page.get_by_label("Model (published config)").click()
    page.keyboard.type("Llama-3-70B")
    page.keyboard.press("Enter")
    wait_idle(page)
    assert _metric(page, "KV per token") != per_token and "320.0 KiB" in _metric(page, "KV per token")
    assert "Llama-3-70B" in page.inner_text("body")  # the paging totals (section 4) name the calculator's model
    held = _metric(page, "Tokens held")
    _arrows(page, "Requests")
    assert _metric(page, "Tokens held") != held, "section 4 did not follow the number of requests"
    assert_no_error(page)
    assert app_server.runs() == before, "a KV-cache control reran the whole page script"


def _chart_ticks(page, title: str, axis: str) -> list[str]:
    box = page.locator('[data-testid="stPlotlyChart"]').filter(has=page.locator("text.gtitle", has_text=title))
    return box.first.locator(f".{axis}tick text").all_text_contents()


def test_embeddings_pickers_rerun_only_their_sections(app_server, page):
    page.goto(f"{app_server.url}/{_url('pages/embeddings.py')}?max_new_tokens=2")
    wait_idle(page)
    assert_no_error(page)
    before = app_server.runs()
    _pick(page, "Nearest tokens to", "capital", re.compile("capital"))
    titles = [t for t in _titles(page).split(" | ") if t.startswith("Nearest tokens to")]
    assert titles and "capital" in titles[0], titles  # the neighbours follow the pick
    assert re.search(r"First values of token '[^']*capital'", page.inner_text("body"))  # and section 4
    n = len(_chart_ticks(page, "Nearest tokens to", "y"))
    _arrows(page, "How many neighbours")
    assert len(_chart_ticks(page, "Nearest tokens to", "y")) == n + 3
    ticks = _chart_ticks(page, "RoPE rotation angle", "y")  # positions run down the y axis
    _arrows(page, "Positions to show")
    assert _chart_ticks(page, "RoPE rotation angle", "y") != ticks, "section 3 did not follow the positions slider"
    assert_no_error(page)
    assert app_server.runs() == before, "an embeddings picker reran the whole page script"
