"""The converted-model cache: a corrupt or partial copy is rebuilt instead of crashing."""
import json
import shutil

import pytest

import engine.models as models


@pytest.fixture
def cache_copy(tmp_path, monkeypatch, embedded_lm):
    """A private cache dir holding a copy of the real converted model; conversion is replaced by a copy."""
    src = models.converted_dir()
    monkeypatch.setenv("ILE_CACHE_DIR", str(tmp_path))
    shutil.copytree(src, models.converted_dir())
    calls = []

    def fake_convert(progress=models.log):
        calls.append(1)
        shutil.rmtree(models.converted_dir(), ignore_errors=True)
        shutil.copytree(src, models.converted_dir())
        return models.converted_dir()

    monkeypatch.setattr(models, "convert_embedded", fake_convert)
    return calls


def test_valid_cache_is_reused(cache_copy):
    assert models.embedded_is_converted()
    models.load_embedded("cpu")
    assert cache_copy == []


def test_corrupt_weights_are_rebuilt(cache_copy):
    (models.converted_dir() / "model.safetensors").write_bytes(b"not a safetensors file")
    lm = models.load_embedded("cpu")
    assert cache_copy == [1] and lm.info.n_layers == 30


def test_partial_cache_without_marker_is_rebuilt(cache_copy):
    (models.converted_dir() / models._CONVERTED_MARKER).unlink()
    assert not models.embedded_is_converted()
    models.load_embedded("cpu")
    assert cache_copy == [1]


def test_marker_for_another_gguf_is_rebuilt(cache_copy):
    marker = models.converted_dir() / models._CONVERTED_MARKER
    marker.write_text(json.dumps({"gguf": "elsewhere", "size": 1, "mtime": 0}))
    assert not models.embedded_is_converted()


def test_trust_remote_code_is_never_enabled():
    import inspect

    src = inspect.getsource(models)
    assert "trust_remote_code=True" not in src and src.count("trust_remote_code=False") >= 2
    assert "use_safetensors=True" in src
