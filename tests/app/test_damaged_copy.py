"""A damaged converted copy of the embedded model (its files no longer match their checksum) is converted again,
and the page says that, not "First start" (after a corrupted cache the status read "First start")."""
import shutil

import pytest

from engine.models import catalog, packaged
import ui.frame.models
from tests.app.test_pages import errors, run_page
from tests.engine.test_model_cache import cache_copy  # noqa: F401  the fixture below builds on it


@pytest.fixture
def private_cache(cache_copy, monkeypatch):
    """test_model_cache's private cache (a copy of the real converted model; the conversion replaced by a copy,
    which the page's preparation calls too)."""
    return cache_copy


@pytest.fixture
def status_labels(monkeypatch):
    labels = []
    real = ui.frame.models.st.status
    monkeypatch.setattr(ui.frame.models.st, "status", lambda label, **kw: labels.append(label) or real(label, **kw))
    return labels


@pytest.mark.parametrize("state", ["damaged", "missing"])
def test_the_status_says_why_the_model_is_converted(private_cache, status_labels, state):
    folder = packaged.copy_dir(catalog.row(catalog.EMBEDDED))
    if state == "damaged":
        data = (folder / "config.json").read_bytes()
        (folder / "config.json").write_bytes(data.replace(b'"num_hidden_layers": 30', b'"num_hidden_layers": 10', 1))
    else:
        shutil.rmtree(folder)
    assert packaged.copy_state(catalog.row(catalog.EMBEDDED)) == state
    at = run_page("pages/loop.py", max_new_tokens="2")
    assert not errors(at), errors(at)
    assert private_cache == [1], "converted again"
    first = next(label for label in status_labels if "convert" in label)
    if state == "damaged":
        assert "damaged" in first and "First start" not in first, first
    else:
        assert first.startswith("First start"), first
    assert packaged.copy_state(catalog.row(catalog.EMBEDDED)) == "ready"
