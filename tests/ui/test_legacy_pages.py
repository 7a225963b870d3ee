"""The workaround in ui/frame/legacy_pages.py is needed while Streamlit still puts an app with a pages/ folder
beside its main script in the legacy multipage mode. This test fails the day it no longer does: then remove the
module, its call in app.py and nav.through_router() in every page."""
from pathlib import Path

from streamlit.runtime.pages_manager import PagesManager

ROOT = Path(__file__).resolve().parents[2]


def test_streamlit_still_enters_legacy_mode_beside_a_pages_folder(tmp_path):
    before = PagesManager.__dict__.get("uses_pages_directory", "missing")
    assert before != "missing", "Streamlit dropped its legacy pages/ flag: ui/frame/legacy_pages.py can go"
    try:
        PagesManager.uses_pages_directory = None  # as in a fresh server process
        PagesManager(str(ROOT / "app.py"))
        assert PagesManager.uses_pages_directory is True, (
            "Streamlit no longer enters its legacy mode beside pages/: ui/frame/legacy_pages.py can go")
        PagesManager.uses_pages_directory = None  # the check can fail: no pages/ folder, no legacy mode
        (tmp_path / "app.py").write_text("")
        PagesManager(str(tmp_path / "app.py"))
        assert PagesManager.uses_pages_directory is False
    finally:
        PagesManager.uses_pages_directory = before


def test_app_and_every_page_use_the_workaround_only_through_its_module():
    offenders = [p.relative_to(ROOT).as_posix() for p in [ROOT / "app.py", *ROOT.glob("pages/*.py"),
                                                          *ROOT.glob("ui/**/*.py")]
                 if "PagesManager" in p.read_text(encoding="utf-8") and p.name != "legacy_pages.py"]
    assert offenders == [], offenders
