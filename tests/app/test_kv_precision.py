"""AppTest: the KV cache page shows the cache at the sidebar's precision, measured bytes equal to the formula."""
from tests.app.test_pages import errors, run_page

PAGE = "pages/kv_cache.py"


def _metric(at, start):
    return next(m.value for m in at.metric if m.label.startswith(start))


def test_kv_page_at_each_precision_on_tiny_model():
    for precision, bpv in (("bfloat16", 2), ("int8", 4), ("float32", 4)):
        at = run_page(PAGE, model="tiny-random", max_new_tokens="4", precision=precision)
        assert not errors(at), errors(at)
        assert _metric(at, "Steps where they agree") == "4 of 4"
        assert _metric(at, "Measured after the last step") == _metric(at, "Formula at")
        note = next(c.value for c in at.caption if "Precision (sidebar)" in c.value)
        assert f"{bpv} bytes per value" in note and precision in note
    at.selectbox(key="kv_preset").set_value("Llama-3-70B").run()
    at.selectbox(key="kv_dtype").set_value("int8").run()
    assert _metric(at, "KV per token") == "160.0 KiB"
