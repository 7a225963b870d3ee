"""Real browser: HTML or script typed as a prompt is shown as text on the tokenization page, never run."""
from urllib.parse import quote

from tests.browser.harness import assert_no_error, screenshot, wait_idle
from ui.frame import nav

PROMPT = "<script>alert(1)</script> <b>x</b> \U0001f642 \u6771\u4eac \u05e9\u05dc\u05d5\u05dd a\u200bb"


def test_script_and_markup_are_literal(app_server, page):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    url = next(p.url for p in nav.available() if p.path == "pages/tokenization.py")
    page.goto(f"{app_server.url}/{url}?max_new_tokens=1&prompt={quote(PROMPT)}")
    wait_idle(page)
    assert_no_error(page)
    chips = page.locator(".tok-chips")
    chips.wait_for(state="visible", timeout=60_000)  # st.html mounts lazily
    page.locator(".tok-template").wait_for(state="visible", timeout=60_000)
    assert chips.count() == 1
    # nothing in the token views became an element: no <script>, no <b> made from the typed text
    for view in (".tok-chips", ".tok-template"):
        assert page.locator(f"{view} script").count() == 0
        assert page.locator(f"{view} b").count() == 0
    assert page.evaluate("() => [...document.querySelectorAll('b')].filter(e => e.textContent === 'x').length") == 0
    assert page.evaluate("() => [...document.scripts].some(s => s.textContent.includes('alert(1)'))") is False
    assert dialogs == []
    template = page.locator(".tok-template").inner_text()
    assert "<script>alert(1)</script> <b>x</b>" in template  # the literal text, as typed
    assert "\U0001f642" in template and "\u6771\u4eac" in template and "\u05e9\u05dc\u05d5\u05dd" in template
    assert "\u27e8U+200B\u27e9" in chips.inner_text()  # the zero-width space is named, not lost
    assert "<|im_start|>" in chips.inner_text()
    screenshot(page, "tokenization-literal")


# Draws ``text`` in the font of the element matching ``sel`` and returns its pixels as a string: a script with no
# font on this machine draws every character as the same missing-glyph box (U+0378 is unassigned: always that box).
_GLYPH = """([sel, text]) => {
    const el = document.querySelector(sel);
    const c = document.createElement('canvas'); c.width = 64; c.height = 48;
    const g = c.getContext('2d'); g.font = '32px ' + getComputedStyle(el).fontFamily; g.fillText(text, 4, 36);
    return Array.from(g.getImageData(0, 0, 64, 48).data).join(','); }"""


def test_hindi_is_drawn_in_a_devanagari_font(app_server, page):
    """The comparison's Hindi row showed as boxes: no Devanagari font was installed beside the CJK one
    (scripts/install.sh --test installs fonts-noto-core)."""
    page.goto(f"{app_server.url}/tokenization?model=tiny-random")
    wait_idle(page)
    assert_no_error(page)
    sel = '[data-testid="stMarkdownContainer"]'
    box = page.evaluate(_GLYPH, [sel, "\u0378"])
    for ch in "\u0915\u0930\u0940":  # क र ी
        assert page.evaluate(_GLYPH, [sel, ch]) != box, f"{ch!r} is drawn as a missing-glyph box"
    assert page.evaluate(_GLYPH, [sel, "\u4e2d"]) != box  # CJK too


def test_no_chip_is_blank_in_the_many_scripts_sample(app_server, page):
    """The "many scripts" sample's U+FE0F (after ❤, id 31752) drew an empty chip on SmolLM2 with nothing to say
    why: every chip now shows ink, and a caption line says what a ⟨U+...⟩ chip is."""
    page.goto(f"{app_server.url}/tokenization?max_new_tokens=1")
    wait_idle(page)
    page.get_by_role("radio", name="Many scripts: emoji, CJK, right-to-left").click()
    wait_idle(page)
    page.get_by_text("variation selector-16").first.wait_for(timeout=60_000)
    assert_no_error(page)
    widths = page.evaluate("() => [...document.querySelectorAll('.tok-chip > span')].map("
                           "s => [s.textContent, s.getBoundingClientRect().width])")
    # the blank chip's text was 0 px wide; a narrow letter (Hebrew vav) is 4 px
    assert len(widths) > 40 and all(w >= 2 for _, w in widths), [tw for tw in widths if tw[1] < 2]
    assert "\u27e8U+FE0F\u27e9 variation selector-16" in page.inner_text('[data-testid="stMain"]')
