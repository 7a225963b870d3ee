"""AppTest: the KV-cache page agrees with its formula and its calculator reacts to the widgets."""
from tests.app.test_pages import errors, run_page

PAGE = "pages/kv_cache.py"


def _metric(at, start):
    return next(m.value for m in at.metric if m.label.startswith(start))


def test_kv_page_on_tiny_model_and_calculator():
    at = run_page(PAGE, model="tiny-random", max_new_tokens="5")
    assert not errors(at), errors(at)
    agree = _metric(at, "Steps where they agree")
    assert agree == "5 of 5"
    assert _metric(at, "Measured after the last step") == _metric(at, "Formula at")
    assert any("agree exactly" in s.value for s in at.success)
    # the common-mistake lesson is a neutral teaching note, not an error or warning box
    mistake = [m.value for m in at.markdown if "A common mistake" in m.value]
    assert len(mistake) == 1 and "320.0 KiB per token" in mistake[0] and "2.50 MiB" in mistake[0], mistake
    assert not any("common mistake" in b.value.lower() for b in [*at.warning, *at.error]), "drawn as a failure box"

    at.selectbox(key="kv_preset").set_value("Llama-3-70B").run()
    assert _metric(at, "KV per token") == "320.0 KiB"
    at.selectbox(key="kv_dtype").set_value("fp8").run()
    assert _metric(at, "KV per token") == "160.0 KiB"
    at.selectbox(key="kv_preset").set_value("DeepSeek-V3").run()
    assert _metric(at, "KV per token") == "34.3 KiB"  # MLA: 61 layers x 576 values x 1 byte
    at.selectbox(key="kv_dtype").set_value("bf16").run()
    assert _metric(at, "KV per token") == "68.6 KiB"
    at.slider(key="kv_requests").set_value(4).run()
    assert not errors(at), errors(at)
    assert int(_metric(at, "Empty slots, paged").replace(",", "")) < 4 * 16
