"""AppTest: every page on tiny random models of three other architectures, loaded by path from a
folder as a person would: Gemma 3 (sliding-window and global layers, one KV head, QK-norm, two RoPE bases),
Falcon (multi-query attention, its own attention code: loaded with eager attention so its weights can be
recorded, checked at load) and
GPT-2 (learned positions, Conv1D layers). Each page renders with no exception; refusals are one line."""
import pytest

from tests.app.test_pages import PAGES, errors, run_page

ARCHS = ("gemma3", "falcon", "gpt2")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from engine.models.tiny import make_tiny_arch

    out = {}
    for name in ARCHS:
        model, tok = make_tiny_arch(name)
        path = tmp_path_factory.mktemp(f"tiny-{name}")
        model.save_pretrained(path, safe_serialization=True)
        tok.save_pretrained(path)
        out[name] = str(path)
    return out


@pytest.mark.parametrize("path", PAGES)
@pytest.mark.parametrize("name", ARCHS)
def test_every_page_renders_on_other_architectures(folders, name, path):
    at = run_page(path, model=folders[name], max_new_tokens="6", timeout=120)
    assert not errors(at), errors(at)
    shown = [e.value for e in at.error]
    assert not any("Something went wrong" in e for e in shown), shown  # no unexpected error either
    assert at.title


def _text(at) -> str:
    parts = [e.value for e in at.info] + [m.value for m in at.markdown] + [c.value for c in at.caption]
    return "\n".join(str(p) for p in parts)


def test_gemma3_pages_teach_its_windows(folders):
    at = run_page("pages/attention.py", model=folders["gemma3"], max_new_tokens="6", timeout=120)
    text = _text(at)
    assert "1 sliding-window (local) layer (0): a window of 8 tokens" in text
    assert "1 global layer (1): each token sees every earlier token" in text
    at = run_page("pages/kv_cache.py", model=folders["gemma3"], max_new_tokens="6", timeout=120)
    text = _text(at)
    assert "summed per layer" in text
    assert "1 sliding layer (0): 1 × 2 × 16 × 7 × 4 = 896 B each" in text  # the window keeps 7 past tokens
    assert not [e.value for e in at.error]  # measured = formula at every step: no "differ" error box


def test_gpt2_loop_page_names_its_learned_positions_and_refuses_the_walk(folders):
    at = run_page("pages/loop.py", model=folders["gpt2"], max_new_tokens="6", timeout=120)
    text = _text(at)
    assert "learned position vector" in text
    assert "is not broken down here" in text and "LayerNorm" in text
