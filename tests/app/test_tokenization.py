"""AppTest of the tokenization page: literal HTML/script, Unicode, CSV export, display options that
recompute nothing."""
import html

import engine.tokenization.tokens as T
from tests.app.test_pages import errors, run_page

PAGE = "pages/tokenization.py"
PROMPT = "<script>alert(1)</script> and <b>x</b> \U0001f642 \u6771\u4eac \u05e9\u05dc\u05d5\u05dd a\u200bb"


def _html(at) -> str:
    return "".join(h.proto.body for h in at.get("html"))


def test_markup_is_literal_and_unicode_survives(monkeypatch):
    calls = []
    real = T.prompt_table
    monkeypatch.setattr(T, "prompt_table", lambda *a, **k: calls.append(a) or real(*a, **k))
    at = run_page(PAGE, model="tiny-random", max_new_tokens="1", prompt=PROMPT)
    assert not errors(at), errors(at)
    body = _html(at)
    assert "<script" not in body and "<b>" not in body and "&lt;script&gt;" in body
    assert "\u27e8U+200B\u27e9" in body  # the zero-width space is named
    # the chat-template view holds the exact text, escaped, Hebrew/CJK/emoji intact
    assert html.escape(PROMPT) in body.replace("\u27e8U+200B\u27e9", "\u200b")
    assert at.get("download_button")[0].label.startswith("Download the token table")
    tokens_metric = next(m for m in at.metric if m.label == "Tokens")
    n = int(tokens_metric.value.replace(",", ""))
    assert n > len("<script>alert(1)</script>") // 4  # the tiny vocabulary splits it into many tokens
    first_calls = len(calls)
    assert first_calls >= 1  # the patch sees the page's tokenization

    # display options: raw pieces on, ids off, another token inspected -> no new tokenization
    at.toggle(key="tokenization_raw").set_value(True).run()
    at.toggle(key="tokenization_ids").set_value(False).run()
    at.selectbox(key="tokenization_pick").set_value(3).run()
    assert not errors(at), errors(at)
    assert len(calls) == first_calls
    assert "\u0120" in _html(at)  # raw byte-level pieces are now shown


def test_example_text_and_chat_off():
    at = run_page(PAGE, model="embedded", max_new_tokens="1", chat="0")
    assert not errors(at), errors(at)
    at.button_group(key="tokenization_source").set_value("Code").run()
    assert not errors(at), errors(at)
    body = _html(at)
    assert "def" in body and "&lt;|im_start|&gt;" not in body  # chat template off: no role markers
    chars = int(next(m for m in at.metric if m.label == "Characters").value.replace(",", ""))
    code = "def add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b  # 4 spaces of indent\n\nprint(add(2, 40))"
    assert chars == len(code)
