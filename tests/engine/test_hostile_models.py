"""Hostile model names, sizes and cache folders: refused with a short message before anything is
allocated or converted; what is built is built once; a damaged converted copy is detected by its checksum."""
import json
import os
import shutil
import time

import pytest
import torch

from engine.models import catalog, convert, packaged

from engine.models import loading
from engine.speculative.drafters import DrafterError, make_drafter
from engine.core.loaded import ModelLoadError
from engine.models.loading import load_model


# --- names -------------------------------------------------------------------------------------------------

def test_a_name_over_255_bytes_is_refused_with_a_short_message():
    with pytest.raises(ModelLoadError) as err:
        load_model("a" * 256, device="cpu")
    msg = str(err.value)
    assert "too long" in msg and len(msg) < 200 and "a" * 100 not in msg


@pytest.mark.parametrize("name", ["b" * 200 + "/" + "c" * 54, "~nosuchuser_ile/x", "x\x00y"])
def test_odd_paths_give_a_model_load_error_not_an_os_error(name):
    with pytest.raises(ModelLoadError):
        load_model(name, device="cpu")


# --- sizes -------------------------------------------------------------------------------------------------

def test_parameter_estimate_matches_the_embedded_model(embedded_lm):
    est = loading.estimate_params(embedded_lm.model.config.to_dict())
    assert abs(est - embedded_lm.info.n_params) / embedded_lm.info.n_params < 0.01


def test_a_folder_whose_config_claims_a_huge_model_is_refused_before_loading(tmp_path):
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8192,
           "intermediate_size": 28672, "num_hidden_layers": 4000, "num_attention_heads": 64,
           "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 4096}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    t0 = time.perf_counter()
    with pytest.raises(ModelLoadError, match=r"would need about [\d,.]+ GB"):
        load_model(str(tmp_path), device="cpu")
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("bad", [-5, "nan", "12x", True])
def test_a_config_with_a_nonsense_size_is_refused(tmp_path, bad):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                                      "num_hidden_layers": bad, "vocab_size": 10}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="num_hidden_layers"):
        load_model(str(tmp_path), device="cpu")


@pytest.mark.parametrize("spec", ["model:random:3000", "model:random:-5", "model:random:0"])
def test_random_draft_depth_is_capped_by_the_target(tiny_lm, spec):
    with pytest.raises(DrafterError, match="from 1 to 2"):
        make_drafter(tiny_lm, spec)


def test_a_random_draft_bigger_than_memory_is_refused_before_building():
    from engine.speculative.drafters import random_draft_model
    from engine.models.tiny import make_tiny

    model, tok = make_tiny()
    lm = loading.finish_load("tiny-hostile", "a private tiny model", model, tok, torch.device("cpu"))
    # Its config as a hostile folder could claim it: 10^6 x 10^6 matrices (4 TB each in float32).
    lm.model.config.hidden_size = lm.model.config.intermediate_size = lm.model.config.vocab_size = 10**6
    with pytest.raises(DrafterError, match="would need about"):
        random_draft_model(lm, 1)


def test_the_same_random_draft_is_built_once(tiny_lm):
    a = make_drafter(tiny_lm, "model:random:1")
    b = make_drafter(tiny_lm, "model:random:1")
    assert a.model is b.model and a.name == "model:random:1"
    assert make_drafter(tiny_lm, "model:random:2").model is not a.model


def test_a_random_draft_kept_for_an_earlier_load_of_the_name_is_not_served_to_a_new_one():
    from engine.speculative.drafters import random_draft_model
    from engine.models.tiny import make_tiny

    def load():
        model, tok = make_tiny()
        return loading.finish_load("tiny-reloaded", "a private tiny model", model, tok, torch.device("cpu"))

    first, second = load(), load()
    a = random_draft_model(first, 1)
    b = random_draft_model(second, 1)
    assert b is not a and random_draft_model(second, 1) is b


# --- sampling settings from the command line -------------------------------------------------------------

@pytest.mark.parametrize("flag,value", [("--temperature", "nan"), ("--temperature", "inf"),
                                        ("--temperature", "-1"), ("--top-p", "nan"), ("--top-k", "-3"),
                                        ("--max-new-tokens", "0")])
def test_cli_refuses_nonsense_sampling_settings_with_a_message(capsys, flag, value):
    from engine.__main__ import main

    with pytest.raises(SystemExit) as ex:
        main(["trace", "--model", "tiny-random", "--prompt", "hi", flag, value])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err


def test_nan_sampling_settings_are_refused_in_the_engine():
    from engine.core.sampling import SamplingSettings

    with pytest.raises(ValueError, match="nan"):
        SamplingSettings(temperature=float("nan"))


# --- the converted-model cache folder ----------------------------------------------------------------------

@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ILE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_tmp_left(root):
    return not root.exists() or not [p for p in root.parent.rglob("*.tmp*")]


def _convert_fails_fast(match):
    t0 = time.perf_counter()
    with pytest.raises(ModelLoadError, match=match) as err:
        packaged.prepare(catalog.row(catalog.EMBEDDED), progress=lambda msg: None)
    assert time.perf_counter() - t0 < 10, "the fault was found only after the conversion"
    assert "ILE_CACHE_DIR" in str(err.value)
    return str(err.value)


def test_a_file_where_the_cache_folder_should_be(private_cache):
    private_cache.write_text("not a folder")
    _convert_fails_fast("a file is in the way")
    assert _no_tmp_left(private_cache)


def test_a_file_where_the_converted_folder_should_be(private_cache):
    private_cache.mkdir()
    packaged.copy_dir(catalog.row(catalog.EMBEDDED)).write_text("not a folder")
    _convert_fails_fast("a file is in the way")
    assert sorted(p.name for p in private_cache.iterdir()) == [packaged.copy_dir(catalog.row(catalog.EMBEDDED)).name]


def test_a_read_only_cache_folder(monkeypatch):
    ro = "/sys/ile-test-cache"
    try:
        os.mkdir(ro)
        os.rmdir(ro)
        pytest.skip("/sys is writable here")
    except OSError:
        pass
    monkeypatch.setenv("ILE_CACHE_DIR", ro)
    _convert_fails_fast("cannot be written")


def test_not_enough_free_space_is_said_before_converting(private_cache):
    free = shutil.disk_usage(private_cache.parent).free
    with pytest.raises(ModelLoadError, match="MB free"):
        convert.prepare_cache(packaged.copy_dir(catalog.row(catalog.EMBEDDED)), need_bytes=free * 2)
    assert _no_tmp_left(private_cache)


def test_temporary_folders_of_dead_processes_are_removed(private_cache):
    target = packaged.copy_dir(catalog.row(catalog.EMBEDDED))
    private_cache.mkdir()
    dead = private_cache / f"{target.name}.tmp999999999"
    alive = private_cache / f"{target.name}.tmp{os.getppid()}"  # another live process may be converting
    dead.mkdir()
    alive.mkdir()
    tmp = convert.prepare_cache(target)
    assert not dead.exists() and alive.exists() and tmp.is_dir() and tmp.name.endswith(f".tmp{os.getpid()}")


def test_a_failed_conversion_removes_its_temporary_folder(private_cache):
    def cancel(msg):
        raise KeyboardInterrupt  # e.g. Ctrl+C, or a session that left, during the conversion

    with pytest.raises(KeyboardInterrupt):
        packaged.prepare(catalog.row(catalog.EMBEDDED), progress=cancel)
    lock = packaged.lock_path(catalog.row(catalog.EMBEDDED))  # where every preparation meets: it stays
    assert private_cache.is_dir() and not [p for p in private_cache.iterdir() if p != lock]


# --- the checksum of the converted weights -----------------------------------------------------------------

@pytest.fixture(scope="module")
def converted_copy(tmp_path_factory, embedded_lm):
    """A private copy of the converted model (the shared cache in ~/.cache is never modified)."""
    root = tmp_path_factory.mktemp("ile-cache")
    src = packaged.copy_dir(catalog.row(catalog.EMBEDDED))
    dst = root / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(convert.CHECKSUM_FILE))
    return root


def test_a_cache_without_checksum_gets_one_recorded_not_reconverted(converted_copy, monkeypatch):
    monkeypatch.setenv("ILE_CACHE_DIR", str(converted_copy))
    record = packaged.copy_dir(catalog.row(catalog.EMBEDDED)) / convert.CHECKSUM_FILE
    record.unlink(missing_ok=True)
    assert packaged.is_converted(catalog.row(catalog.EMBEDDED))
    want = json.loads(record.read_text())
    assert want["model.safetensors"]["size"] == (packaged.copy_dir(catalog.row(catalog.EMBEDDED)) / "model.safetensors").stat().st_size
    assert packaged.is_converted(catalog.row(catalog.EMBEDDED))


def test_same_size_corruption_of_the_weights_is_detected(converted_copy, monkeypatch):
    monkeypatch.setenv("ILE_CACHE_DIR", str(converted_copy))
    assert packaged.is_converted(catalog.row(catalog.EMBEDDED))  # records the checksum if the test above did not run
    weights = packaged.copy_dir(catalog.row(catalog.EMBEDDED)) / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:  # overwrite 4 KiB in the middle of the tensors, size unchanged
        f.seek(size // 2)
        f.write(os.urandom(4096))
    assert weights.stat().st_size == size
    assert not packaged.is_converted(catalog.row(catalog.EMBEDDED))
