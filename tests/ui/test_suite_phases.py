"""The suite's two phases cover everything once: scripts/test.sh runs `not browser and not serial` on several
workers at idle priority, beside `browser or serial` one at a time; the tests marked alone come last and wait for
the first phase to end; every module named serial or alone exists (a renamed timing test would otherwise drift into
the parallel phase unnoticed)."""
import re
import subprocess
import sys
from contextlib import contextmanager

import pytest

from tests import conftest
from tests.conftest import ALONE_MODULES, ROOT, SERIAL_MODULES

pytestmark = pytest.mark.unit


def test_every_serial_and_alone_module_exists():
    missing = sorted(m for m in SERIAL_MODULES | ALONE_MODULES if not (ROOT / m).is_file())
    assert not missing, f"tests/conftest.py SERIAL_MODULES or ALONE_MODULES names modules that are gone: {missing}"


def test_the_alone_modules_are_out_of_the_parallel_phase():
    stray = sorted(m for m in ALONE_MODULES if not m.startswith("tests/browser/") and m not in SERIAL_MODULES)
    assert not stray, f"ALONE_MODULES must be browser or serial modules (phase 2): {stray}"


BUSY_LOOP = "start" + "_load("  # engine.measure.busy's busy loop (split: this file is not one)


def test_a_module_that_starts_a_busy_loop_runs_alone():
    # a busy loop beside the app is a lesson's measured condition: the parallel phase must not add to it
    offenders = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
                       if BUSY_LOOP in p.read_text() and p.relative_to(ROOT).as_posix() not in ALONE_MODULES)
    assert not offenders, f"busy-loop tests outside ALONE_MODULES (tests/conftest.py): {offenders}"


def test_phase_one_runs_at_idle_priority_beside_phase_two():
    script = (ROOT / "scripts" / "test.sh").read_text()
    first = next(line for line in script.splitlines() if '-m "not browser and not serial"' in line)
    second = next(line for line in script.splitlines() if '-m "browser or serial"' in line)
    assert first.startswith('"${low[@]}"') and first.rstrip().endswith("&"), first  # low priority, in the background
    assert "nice -n 19" in script and "chrt --idle 0" in script
    assert second.startswith("ILE_TEST_BESIDE_PID=$phase1 "), second  # the alone tests know whom to wait for


class _Capture:
    @contextmanager
    def global_and_fixture_disabled(self):
        yield


class _Config:
    class pluginmanager:  # noqa: N801  the one plugin the wait asks for
        @staticmethod
        def getplugin(name):
            return _Capture()


def test_the_alone_tests_wait_until_the_parallel_phase_has_ended(monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    monkeypatch.setenv("ILE_TEST_BESIDE_PID", str(child.pid))
    monkeypatch.setattr(conftest, "_parallel_phase_over", False)
    conftest.wait_for_the_parallel_phase(_Config)  # the child exits unreaped (a zombie): that counts as ended
    assert child.poll() is not None
    still = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monkeypatch.setenv("ILE_TEST_BESIDE_PID", str(still.pid))
        conftest.wait_for_the_parallel_phase(_Config)  # once it has ended, the later tests do not wait again
        assert still.poll() is None
    finally:
        still.kill()
        still.wait()
