"""All torch work of the app runs on the engine worker's one thread, never on Streamlit's script threads:
the sampling page's stage and draw computations and every model load or precision copy are jobs on the worker.
The thread count of a script thread is then never touched (the old one_thread / restore_threads dance is gone)."""
import threading

import numpy as np
import torch

from engine.jobs import worker
from engine.core.sampling import SamplingSettings
from engine.sampling import stages as S


def _on_worker_spy(fn, seen: list):
    def wrapped(*args, **kwargs):
        seen.append(worker.get_worker().owns(threading.current_thread()))
        return fn(*args, **kwargs)
    return wrapped


def test_sampling_stages_and_draws_run_on_the_engine_worker(monkeypatch):
    from ui.sampling import controls

    seen: list[bool] = []
    monkeypatch.setattr(controls, "stages_and_draw", _on_worker_spy(S.stages_and_draw, seen))
    monkeypatch.setattr(controls, "draw_counts", _on_worker_spy(S.draw_counts, seen))
    logits = np.random.default_rng(0).normal(size=300).astype(np.float32)
    s = SamplingSettings(0.8, 20, 0.9)
    before = torch.get_num_threads()
    sg, tok = controls.stages_of(logits, s, seed=3, step=2, show=10)
    d = controls.draws_of(logits, s, 500, seed=1)
    assert seen == [True, True]
    assert torch.get_num_threads() == before  # the caller's count untouched
    ref = S.stages(logits, s, show=10)
    assert np.array_equal(sg.ids, ref.ids) and np.array_equal(sg.final, ref.final)
    assert tok == S.draw_at(logits, s, 3, 2)
    assert d.n == 500 and np.array_equal(d.counts, S.draw_counts(logits, s, 500, 1).counts)
    other = logits.copy()
    other[0] += 1.0  # another vector is another job (the key hashes the bytes, not a cut repr)
    assert not np.array_equal(controls.stages_of(other, s, 3, 2, 10)[0].logits, sg.logits) or sg.ids[0] != 0


def test_model_loads_run_on_the_engine_worker(monkeypatch):
    from ui.frame import models as M

    seen: list[bool] = []
    monkeypatch.setattr(M, "load_model", _on_worker_spy(M.load_model, seen))
    lm = M._load("tiny-random-on-worker-test", "tiny-random", None)
    assert seen == [True] and lm.info.n_layers > 0
    # called on the worker itself (a job that needs a model), it runs inline instead of waiting on itself
    job = worker.get_worker().submit(worker.run, lambda: threading.current_thread().name)
    assert job.result(30) == worker.get_worker().thread.name
