"""The timeline page's hardware probe allocates about 512 MiB: it is measured once per process and shared."""
import threading

from engine.store import BoundedStore
from engine.timeline import roofline as R
from ui.timeline import runs as timeline_runs


def test_concurrent_first_calls_measure_once(monkeypatch):
    calls = []
    real = R.hardware_probe

    def counted(device=None, **kw):  # the real measurement, on a small buffer, counted
        calls.append(device)
        return real(device, buffer_mb=4, matmul_n=64, repeats=1)

    monkeypatch.setattr(R, "hardware_probe", counted)
    monkeypatch.setattr(timeline_runs, "_PROBES", BoundedStore("hardware probes", 4))
    start = threading.Barrier(8)
    got = []

    def visit():
        start.wait()
        got.append(timeline_runs.shared_probe("cpu"))

    threads = [threading.Thread(target=visit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["cpu"] and len(got) == 8 and all(g is got[0] for g in got)
    fresh = timeline_runs.shared_probe("cpu", remeasure=True)  # the button measures again, once
    assert calls == ["cpu", "cpu"] and fresh is not got[0] and timeline_runs.shared_probe("cpu") is fresh
