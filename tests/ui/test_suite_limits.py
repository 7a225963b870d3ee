"""The suite's own limits, read from pytest.ini by a pytest run of its own: a passing test's temporary folder is
removed when it ends (several tests hold a 0.5 GB copy of the converted model, and pytest's default keeps every
folder of the last three runs: 6 GB of scratch a full run left behind, enough to fill a CI disk), a failing test's
stays to be looked at; and a test that hangs fails with its stack instead of holding the run until CI kills it
with no report."""
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit

INNER = '''
import time

def test_passes(tmp_path):
    (tmp_path / "kept-if-failed.bin").write_bytes(b"x" * 4096)

def test_fails(tmp_path):
    (tmp_path / "kept-if-failed.bin").write_bytes(b"x" * 4096)
    assert False

def test_hangs():
    time.sleep(60)
'''


def _inner_run(tmp_path, *options):
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "test_inner.py").write_text(INNER)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "PYTEST_ADDOPTS": ""}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pytest.ini"), "--rootdir",
                          str(tmp_path / "inner"), "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=",
                          *options, str(tmp_path / "inner")],
                         cwd=tmp_path / "inner", env=env, capture_output=True, text=True, timeout=120)
    left = sorted(p.parent.name for p in scratch.rglob("kept-if-failed.bin"))
    return run, left


def test_only_a_failing_tests_folder_is_kept(tmp_path):
    run, left = _inner_run(tmp_path, "-k", "passes or fails")
    assert run.returncode == 1, run.stdout[-2000:]
    assert left == ["test_fails0"], f"pytest.ini's tmp_path_retention_policy should keep only a failure's folder: {left}"


def test_a_hanging_test_fails_with_its_stack(tmp_path):
    # pytest.ini's own limit is minutes; the mechanism (pytest-timeout, from requirements-dev.txt) is what is checked
    run, _ = _inner_run(tmp_path, "-k", "hangs", "-o", "timeout=1")
    assert run.returncode == 1 and "Timeout" in run.stdout and "time.sleep(60)" in run.stdout, run.stdout[-2000:]


def test_the_suites_limit_is_set_and_far_above_its_longest_test():
    ini = (ROOT / "pytest.ini").read_text()
    limit = int(next(line.split("=", 1)[1] for line in ini.splitlines() if line.startswith("timeout =")))
    assert 300 <= limit <= 1200, "a limit a slow machine's longest test (about 2 min, retries included) stays under"


def _scratch_check(tmp_path, available_kib: int):
    """scripts/scratch_check.sh with ``df`` answering ``available_kib`` free."""
    stub = tmp_path / "bin"
    stub.mkdir(exist_ok=True)
    (stub / "df").write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                             f"echo '/dev/disk 10485760 1000 {available_kib} 99% /tmp'\n")
    (stub / "df").chmod(0o755)
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(ROOT / "scripts" / "scratch_check.sh")], env=env, capture_output=True,
                          text=True, timeout=30)


def test_the_test_command_stops_at_once_on_a_full_scratch_disk(tmp_path):
    """A disk with 200 MiB left gets one line saying so, before anything is installed (scripts/test.sh runs the check
    first), not an install and then a run of errors from pytest's own temporary files; 2 GiB free passes."""
    full, roomy = _scratch_check(tmp_path, 204800), _scratch_check(tmp_path, 2 * 1024 * 1024)
    assert full.returncode == 1 and "200 MiB free" in full.stderr, (full.returncode, full.stderr)
    assert roomy.returncode == 0 and not roomy.stderr, roomy.stderr
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert 0 <= script.index("scripts/scratch_check.sh") < script.index("scripts/venv.sh"), \
        "scripts/test.sh checks the scratch space before it installs anything"
