"""ui/frame/uploads.py bounds what Streamlit's upload manager keeps, because Streamlit keeps every file PUT to its
endpoint until the session ends. The first test fails the day Streamlit's own manager bounds what a session keeps:
then remove the module and its call in app.py. The served app's memory under many uploads:
tests/app/test_upload_memory.py."""
from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
from streamlit.runtime.uploaded_file_manager import UploadedFileRec

from ui.frame import uploads


def _rec(file_id: str, size: int) -> UploadedFileRec:
    return UploadedFileRec(file_id=file_id, name=f"{file_id}.json", type="application/json", data=b" " * size)


def _kept(mgr) -> dict[str, list[str]]:
    return {s: list(files) for s, files in mgr.file_storage.items() if files}


def test_streamlits_own_manager_still_keeps_every_file_of_a_session():
    mgr = MemoryUploadedFileManager("/_stcore/upload_file")
    for i in range(5):
        mgr.add_file("s", _rec(f"f{i}", 10))
    assert len(mgr.get_files("s", [f"f{i}" for i in range(5)])) == 5, (
        "Streamlit's upload manager bounds what a session keeps now: remove ui/frame/uploads.py if its bounds "
        "hold without it (tests/app/test_upload_memory.py)")


def test_a_session_keeps_its_newest_file_and_all_keep_at_most_the_budget(monkeypatch):
    monkeypatch.setattr(uploads, "BUDGET", 100)
    mgr = uploads.BoundedUploads("/_stcore/upload_file")
    mgr.add_file("a", _rec("a1", 30))
    mgr.add_file("a", _rec("a2", 30))
    assert _kept(mgr) == {"a": ["a2"]}  # the older file of the same session went
    mgr.add_file("b", _rec("b1", 40))
    mgr.add_file("c", _rec("c1", 20))
    assert _kept(mgr) == {"a": ["a2"], "b": ["b1"], "c": ["c1"]}  # 90 bytes: within the budget
    mgr.add_file("d", _rec("d1", 50))
    assert _kept(mgr) == {"c": ["c1"], "d": ["d1"]}  # oldest out first until within the budget (70 bytes)
    mgr.add_file("e", _rec("e1", 150))
    assert _kept(mgr) == {"e": ["e1"]}  # a file over the budget alone is kept (the page reads it and drops it)


def test_files_the_browser_deleted_count_no_more(monkeypatch):
    monkeypatch.setattr(uploads, "BUDGET", 100)
    mgr = uploads.BoundedUploads("/_stcore/upload_file")
    mgr.add_file("a", _rec("a1", 60))
    mgr.remove_file("a", "a1")  # the browser's DELETE
    mgr.add_file("b", _rec("b1", 60))
    mgr.add_file("c", _rec("c1", 40))
    assert _kept(mgr) == {"b": ["b1"], "c": ["c1"]} and list(mgr.added) == [("b", "b1"), ("c", "c1")]
    mgr.remove_session_files("b")  # the session ended
    mgr.add_file("d", _rec("d1", 60))
    assert _kept(mgr) == {"c": ["c1"], "d": ["d1"]}
