"""Token chips, the chat-template view and the tokenization charts: escaped, complete, consistent."""
import html
import re

from engine.tokenization import tokens as T
from ui.frame.figures import token_label as label
from ui.tokenization.figures import bytes_per_token_bar, compare_bar, template_view, token_chips

NASTY = "<script>alert(1)</script> <b>x</b> \U0001f642 \u6771\u4eac \u05e9\u05dc\u05d5\u05dd a\u200bb\u200f"


def _unescaped_tags(markup: str) -> set[str]:
    return set(re.findall(r"<\s*([a-zA-Z]+)", markup))


def test_chips_escape_everything_and_show_every_token(tiny_lm):
    table = T.prompt_table(tiny_lm.tokenizer, NASTY, True)
    out = token_chips(table)
    assert _unescaped_tags(out) <= {"div", "span"}  # no <script>, <b>, <img> made from the text
    assert out.count('class="tok-chip"') == len(table.rows)
    assert "&lt;|im_start|&gt;" in out
    partial = [r for r in table.rows if r.partial]
    assert partial and all(html.escape(f"\u27e8{r.bytes_hex}\u27e9") in out for r in partial)
    raw = token_chips(table, raw_pieces=True, show_ids=False)
    assert "\u0120" in raw and "font-size:0.6875rem" not in raw  # raw pieces; no id lines, no byte notes
    assert out.count("font-size:0.6875rem") == len(table.rows) + len(partial)  # an id under every chip


def test_invisible_characters_get_names():
    assert label("a\u200bb") == "a\u27e8U+200B\u27e9b"
    assert label("\u200f") == "\u27e8U+200F\u27e9"  # right-to-left mark
    assert label(" \n") == "\u00b7\u21b5"
    assert label("\u05e9\u05dc\u05d5\u05dd \U0001f642") == "\u05e9\u05dc\u05d5\u05dd\u00b7\U0001f642"


def test_template_view_is_the_exact_text_with_specials_marked(embedded_lm):
    table = T.prompt_table(embedded_lm.tokenizer, NASTY, True)
    segs = T.segments(embedded_lm.tokenizer, table.ids)
    out = template_view(segs)
    assert _unescaped_tags(out) <= {"div", "span"}
    assert out.count("<span") == sum(s.special for s in segs) > 0
    text = html.unescape(re.sub(r"<[^>]+>", "", out))
    assert text == table.text


def test_bytes_bar_adds_up_to_the_text(tiny_lm):
    table = T.prompt_table(tiny_lm.tokenizer, NASTY, True)
    fig = bytes_per_token_bar(table)
    assert sum(fig.data[0].y) == table.n_bytes
    assert fig.layout.xaxis.title.text and "bytes" in fig.layout.yaxis.title.text
    short = bytes_per_token_bar(T.prompt_table(tiny_lm.tokenizer, "Hi there", True))
    assert short.layout.xaxis.dtick == 1  # three positions were ticked -0.5, 0.5, 1.5 (a walkthrough, Gemma)


def test_compare_bar_one_bar_per_tokenizer(tiny_lm, embedded_lm):
    counts = [T.count_tokens("tiny-random", tiny_lm.tokenizer, NASTY),
              T.count_tokens("embedded", embedded_lm.tokenizer, NASTY)]
    fig = compare_bar(counts, "embedded")
    bar = fig.data[0]
    assert sorted(bar.x) == sorted(c.n_tokens for c in counts)
    assert list(bar.x) == sorted(bar.x, reverse=True)  # fewest tokens drawn at the top
    assert fig.layout.xaxis.title.text == "tokens (count)"


def test_a_variation_selector_is_a_named_chip_with_a_caption(embedded_lm):
    """SmolLM2 cuts "❤️" into ❤'s three bytes and U+FE0F (variation selector-16, id 31752), which draws nothing on
    its own: its chip was blank, with nothing to say why (walkthrough 2026-11-29)."""
    from ui.tokenization.view import EXAMPLES

    table = T.prompt_table(embedded_lm.tokenizer, EXAMPLES["Many scripts: emoji, CJK, right-to-left"], True)
    selector = [r for r in table.rows if r.text == "\ufe0f"]
    assert [r.id for r in selector] == [31752]
    out = token_chips(table)
    assert "<span>\u27e8U+FE0F\u27e9</span>" in out and "variation selector-16" in out
    assert label("\ufe0f") == "\u27e8U+FE0F\u27e9" and label("\u034f") == "\u27e8U+034F\u27e9"
    assert label("\u0928\u092e\u0938\u094d\u0924\u0947") == "\u0928\u092e\u0938\u094d\u0924\u0947"  # Hindi's marks stay
    from ui.tokenization.view import invisible_note

    note = invisible_note(table)
    assert note and "\u27e8U+FE0F\u27e9 variation selector-16" in note
    assert invisible_note(T.prompt_table(embedded_lm.tokenizer, "plain words", True)) is None


def test_the_raw_pieces_toggle_names_this_tokenizers_own_space_mark(tiny_lm, embedded_lm):
    """SmolLM2's byte-level pieces spell a space as Ġ; SentencePiece (Gemma) marks it with ▁ and has no Ġ: the label
    said "Ġ = space" on Gemma too."""
    import dataclasses

    from ui.tokenization.view import raw_toggle

    smol = T.prompt_table(embedded_lm.tokenizer, "Hi there", True)
    assert smol.byte_level and "\u0120 = space" in raw_toggle(smol)[0]
    spm = dataclasses.replace(smol, byte_level=False)
    label, why = raw_toggle(spm)
    assert "\u2581 = space" in label and "\u0120" not in label and "SentencePiece" in why
