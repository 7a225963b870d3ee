"""Compiled mode's warm-up, watched: torch's own compile steps reach the progress box as phrases, from the compiling
thread only, and each warm-up's time is kept for the next one (the box stayed at "Step 1 of 3" through a 204 s
compile, with nothing to compare the clock with)."""
import threading

import torch

from engine.core import compile_watch as W
from engine.core import compiled as C
from engine.core import compile_record as CR


def test_torch_step_messages_become_phrases():
    assert W.phrase("Step 1: torchdynamo start tracing step /x.py:10").startswith("tracing the decode step")
    assert W.phrase("Step 3: torchinductor compiling FORWARDS graph 0").startswith("inductor writes")
    assert W.phrase("Step 2: done compiler function inductor") == W.GRAPH_DONE
    assert W.phrase("Step 2: something else") is None and W.phrase("") is None


def test_a_real_compile_on_this_thread_is_heard_and_another_threads_is_not():
    heard: list[str] = []

    def scale(x):
        return torch.sin(x) * 3.0 + 1.0

    with W.watched(heard.append):
        other = threading.Thread(target=lambda: torch.compile(lambda x: x * 5 - 2, dynamic=False)(torch.ones(4)))
        other.start()
        other.join()
        assert heard == []  # another thread's compile is not this warm-up's
        torch.compile(scale, dynamic=False)(torch.ones(4))
    assert any(h.startswith("tracing the decode step") for h in heard), heard
    assert heard[-1] == f"{W.GRAPH_DONE} (torch graphs in this compile: 1)", heard
    before = list(heard)
    torch.compile(lambda x: x - 7, dynamic=False)(torch.ones(4))
    assert heard == before  # listening ends with the block


def test_a_compile_warm_up_says_its_steps_and_keeps_its_time(tiny_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("ILE_CACHE_DIR", str(tmp_path))
    lm = C.to_mode(tiny_lm, "compiled")
    heard: list[str] = []
    W.compile_warm_up(lm, 40, progress=heard.append)
    assert [h[:6] for h in heard if h.startswith("Step ")] == ["Step 1", "Step 2", "Step 3"], heard
    kept = CR.last_compile_s(lm, CR.decode_name(256))  # one record of compile times (engine.core.compiled)
    assert kept is not None and kept >= C.graph_of(lm).compile_s[256] - 0.05
