"""The engine mode a session runs in is a Mode wherever it is read: the sidebar's setting (from a link or the
engine box) and the class room's mode (ILE_CLASS_ENGINE, then the teacher's pick)."""
from __future__ import annotations

import pytest

from engine.core.loaded import Mode
from ui.frame import state, teacher


def test_the_settings_mode_is_a_mode_and_other_text_the_default():
    assert state.parse("mode", "compiled") is Mode.COMPILED
    assert state.parse("mode", Mode.EAGER) is Mode.EAGER
    for bad in ("turbo", "Compiled", " compiled", "1"):
        assert state.parse("mode", bad) is Mode.EAGER
    assert state.FIELDS["mode"][1] is Mode.EAGER


@pytest.fixture
def no_room_mode(monkeypatch):
    monkeypatch.setattr(teacher, "_ROOM_MODE", {})


def test_the_rooms_mode_is_a_mode(no_room_mode, monkeypatch):
    monkeypatch.setenv("ILE_CLASS_ENGINE", "compiled")
    assert teacher.room_mode() is Mode.COMPILED  # from the setting until the teacher picks
    teacher.set_room_mode(Mode.EAGER)
    assert teacher.room_mode() is Mode.EAGER
