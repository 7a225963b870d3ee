"""A workaround of Streamlit internals: uploaded files kept within a bound, and dropped once the page has read them.

Streamlit keeps every file PUT to its upload endpoint (/_stcore/upload_file/<session>/<file id>) in memory until
the browser deletes it or the session ends, and the endpoint takes any number of files under ids the script never
asked for. ``server.maxUploadSize`` bounds one file only: one session that uploaded 20 files of 60 MB held 1.6 GB
of the server's memory, and 10 sessions of 3 files each 1.8 GB more (a served app on 2026-11-29). Streamlit 1.67
has no setting that bounds what it keeps. So, once per process, at the server's first run (app.py):

- the upload manager keeps at most ``PER_SESSION`` file per session (the app's one uploader takes one file; a newer
  upload replaces the older) and ``BUDGET`` bytes over all sessions, the oldest file out first
  (``BoundedUploads``, swapped in as the class of Streamlit's own manager instance: its upload route holds that
  instance, so no other object could take its place);
- ``read_and_drop`` hands the page a file's bytes and drops them from the server at once: after the page has
  checked the file, only what it shows of it stays (the page keeps its checked record), and ``named`` still gives
  the file's id on later runs, where the uploader returns None for a file whose bytes are gone.

tests/ui/test_uploads.py fails the day Streamlit's manager bounds what it keeps (then this module can go), and
tests/app/test_upload_memory.py measures the served app's memory under many uploads.
"""
from __future__ import annotations

import logging
from collections import OrderedDict

from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager

from engine.record.format import MAX_BYTES

logger = logging.getLogger(__name__)

PER_SESSION = 1  # files one session keeps: the saved-run page's uploader takes one
BUDGET = 2 * MAX_BYTES  # bytes kept over all sessions: two files at the saved run's cap


class BoundedUploads(MemoryUploadedFileManager):
    """Streamlit's in-memory manager with ``PER_SESSION`` files per session and ``BUDGET`` bytes in all, the oldest
    out first. A file dropped before its page read it reads as deleted there (the page says so)."""

    def __init__(self, upload_endpoint: str) -> None:
        super().__init__(upload_endpoint)
        self.added: OrderedDict = OrderedDict()  # (session, file id) -> bytes, oldest first

    def add_file(self, session_id, file) -> None:
        super().add_file(session_id, file)
        for victim in self.over_bounds((session_id, file.file_id)):
            self.remove_file(*victim)
            logger.info(f"an upload dropped: over {PER_SESSION} per session or {BUDGET / 2**20:.0f} MB in all",
                        extra={"channel": "app"})

    def over_bounds(self, newest: tuple[str, str]) -> list[tuple[str, str]]:
        """(session, file id) of the files to drop now that ``newest`` was added: its session's older files, then
        the oldest files of any session while all of them together are over the budget."""
        with self._lock:
            self.added.pop(newest, None)
            rec = self.file_storage.get(newest[0], {}).get(newest[1])
            if rec is None:  # deleted by the browser in the meantime
                return []
            self.added[newest] = len(rec.data)
            for key in [k for k in self.added if k[1] not in self.file_storage.get(k[0], {})]:
                del self.added[key]  # deleted by the browser, or gone with its session
            same = [k for k in self.added if k[0] == newest[0]]  # oldest first: ``newest`` is last
            victims = same[:-PER_SESSION]
            total = sum(size for k, size in self.added.items() if k not in victims)
            for key, size in self.added.items():
                if total <= BUDGET:
                    break
                if key != newest and key not in victims:
                    victims.append(key)
                    total -= size
            return victims


def bound_uploads() -> None:
    """From now on the server keeps uploads within the bounds above (once per process; app.py, every run). Files
    already kept are brought within them at once."""
    from streamlit.runtime import Runtime

    if not Runtime.exists():  # AppTest: no server, no upload endpoint
        return
    mgr = Runtime.instance().uploaded_file_mgr
    if type(mgr) is not MemoryUploadedFileManager:  # bounded already, or a manager this module does not know
        return
    with mgr._lock:
        mgr.added = OrderedDict()
        mgr.__class__ = BoundedUploads
        kept = [(s, f) for s, files in mgr.file_storage.items() for f in files]
    for session, file_id in kept:
        if file_id in mgr.file_storage.get(session, {}):
            for victim in mgr.over_bounds((session, file_id)):
                mgr.remove_file(*victim)


def named(key: str):
    """The file the uploader with widget key ``key`` names in this run (after it was drawn): Streamlit's
    ``UploadedFile`` while its bytes are on the server, its ``DeletedFile`` (the file id only) once they were read
    and dropped or let go (the uploader itself then returns None), or None when it names no file."""
    import streamlit as st

    return st.session_state.get(key)


def read_and_drop(uploaded) -> bytes:
    """The bytes of ``uploaded`` (what ``st.file_uploader`` returned in this run), which the server then no longer
    keeps: neither its upload manager nor the widget's value, which Streamlit keeps until the session's next run (its
    buffer is emptied, not closed: AppTest reads it again; name, size and file id stay)."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    data = uploaded.getvalue()
    uploaded.truncate(0)
    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is not None and ctx.uploaded_file_mgr is not None:
        ctx.uploaded_file_mgr.remove_file(ctx.session_id, uploaded.file_id)
    return data
