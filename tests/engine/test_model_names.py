"""Model names: every spelling of one model is one canonical name; the class server's allow-list and its
neutral refusals (pure functions, no model loaded)."""
import os

import pytest

from engine.models.names import ModelNotAllowed, ModelPolicy, normalise, parse_allowed, policy_from_env


@pytest.mark.parametrize("typed", [" embedded", "embedded ", "Embedded", "EMBEDDED\t", "\u200bembedded", "", "  "])
def test_spellings_of_embedded_are_one_name(typed):
    assert normalise(typed) == "embedded"


def test_spellings_of_a_folder_are_one_name(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "x").mkdir()
    canon = str(folder.resolve())
    for typed in (str(folder), f"{folder}/", f" {folder}/./ ", str(tmp_path / "x" / ".." / "model")):
        assert normalise(typed) == canon, typed
    assert normalise("org/some-model/") == "org/some-model"  # a hub id keeps its case, loses a trailing slash


def test_open_mode_passes_names_through_normalised():
    assert ModelPolicy(class_mode=False).resolve(" Tiny-Random ") == ("tiny-random", "tiny-random")


def test_allow_list_parsing():
    assert parse_allowed(" Embedded , tiny-random, smol=/models/SmolLM2-360M, SMOL=/elsewhere, ,x=") == (
        ("embedded", "embedded"), ("tiny-random", "tiny-random"), ("smol", "/models/SmolLM2-360M"))


def test_class_mode_honours_the_allow_list_by_label():
    pol = ModelPolicy(True, parse_allowed("tiny-random,smol=/srv/models/smol"))
    assert pol.resolve("tiny-random") == ("tiny-random", "tiny-random")
    assert pol.resolve("  SMOL\u200b") == ("smol", "/srv/models/smol")
    assert pol.labels == ["tiny-random", "smol"]


@pytest.mark.parametrize("typed", ["~/.ssh", "/etc", "/srv/models/smol", "embedded", "HuggingFaceTB/SmolLM2-135M",
                                   "../../etc/passwd", "tiny-random/"])
def test_class_mode_refuses_anything_else_without_saying_what_exists(typed, monkeypatch):
    touched = []
    monkeypatch.setattr(os.path, "exists", lambda p: touched.append(p) or True)
    pol = ModelPolicy(True, parse_allowed("tiny-random,smol=/srv/models/smol"))
    with pytest.raises(ModelNotAllowed) as err:
        pol.resolve(typed)
    msg = str(err.value)
    assert msg == "This server offers only these models: tiny-random, smol. Choose one of them."
    assert not touched  # the file system is never asked about what a student typed


@pytest.mark.parametrize("mode, address, on", [
    (None, "127.0.0.1", False), (None, "localhost", False), (None, "::1", False), (None, "127.0.1.1", False),
    (None, "0.0.0.0", True), (None, "192.168.1.20", True), (None, None, True), (None, "", True),
    ("on", "127.0.0.1", True), ("1", "127.0.0.1", True), ("off", "0.0.0.0", False), ("auto", "0.0.0.0", True),
])
def test_class_mode_setting(mode, address, on):
    env = {} if mode is None else {"ILE_CLASS_MODE": mode}
    pol = policy_from_env(env, address)
    assert pol.class_mode is on
    assert pol.labels == ["embedded", "gemma3-270m", "tiny-random"]  # the default allow-list


def test_empty_allow_list_offers_the_built_in_models():
    assert policy_from_env({"ILE_CLASS_MODE": "on", "ILE_MODELS": " , "}).labels == ["embedded", "gemma3-270m", "tiny-random"]
