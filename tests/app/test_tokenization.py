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


def _everything(at) -> str:
    parts = [e.value for kind in ("markdown", "caption", "info", "warning", "error", "text") for e in getattr(at, kind)]
    parts += [e.label for e in at.expander] + [str(s.options) for s in at.selectbox]
    parts += [str(c.proto.spec) for c in at.get("plotly_chart")] + [_html(at)]
    return " ".join(parts)


def _hub_cache_with_a_secret(tmp_path, tiny_lm) -> str:
    """A server's Hugging Face cache holding a model that is not on the class allow-list, and a broken entry."""
    snap = tmp_path / "models--acme--secret-exam-answers-finetune" / "snapshots" / "r1"
    snap.mkdir(parents=True)
    tiny_lm.tokenizer.save_pretrained(snap)
    broken = tmp_path / "models--acme--broken-private-thing" / "snapshots" / "r1"
    broken.mkdir(parents=True)
    (broken / "tokenizer.json").write_text("{not json at /srv/private/path")
    return str(tmp_path)


def test_class_mode_reads_and_names_only_allow_listed_tokenizers(monkeypatch, tmp_path, tiny_lm):
    """In class mode the comparison lists and loads only the allow-list's models, never what else sits
    in the server's Hugging Face cache (in open mode the same cache is listed: the test can tell)."""
    from ui.tokenization import runs

    monkeypatch.setenv("HF_HUB_CACHE", _hub_cache_with_a_secret(tmp_path, tiny_lm))
    loaded = []
    real = T.load_tokenizer
    monkeypatch.setattr(T, "load_tokenizer", lambda path: loaded.append(str(path)) or real(path))
    runs._cached_sources.clear()
    opened = run_page(PAGE, model="tiny-random", max_new_tokens="1", prompt="hello")
    assert not errors(opened), errors(opened)
    assert "secret-exam-answers" in _everything(opened), "open mode lists the local cache (the check can fail)"

    monkeypatch.setenv("ILE_CLASS_MODE", "on")
    monkeypatch.setenv("ILE_MODELS", "tiny-random")
    loaded.clear()
    runs._cached_sources.clear()
    at = run_page(PAGE, model="tiny-random", max_new_tokens="1", prompt="hello there")
    assert not errors(at), errors(at)
    page = _everything(at)
    for secret in ("secret-exam", "acme", "broken-private", "/srv/private", str(tmp_path), "MiniLM", "gemma", "Gemma 3 (262k)"):
        assert secret not in page, f"class mode shows {secret!r}"
    assert not [p for p in loaded if str(tmp_path) in p], f"class mode read unlisted tokenizers: {loaded}"
    assert "tiny-random" in page
