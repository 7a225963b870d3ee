"""Saved runs handed in by someone hostile (issue 49): a file built to cost memory or time is refused quickly with
bounded memory; nesting too deep or ids past the model's vocabulary end in one line, never a traceback."""
import json
import resource
import threading
import time

import pytest

from engine.record import format as F


@pytest.fixture(scope="module")
def record_bytes(tiny_lm) -> bytes:
    import torch

    from engine.core.sampling import SamplingSettings
    from engine.core.trace import run_trace
    from engine.record import build

    tr = run_trace(tiny_lm, "The capital of France is", SamplingSettings(), max_new_tokens=4, seed=0)
    machine = build.machine_facts(str(tiny_lm.device), torch.get_num_threads())
    return F.dumps(build.trace_record(tr, tiny_lm.tokenizer, build.model_identity(tiny_lm), machine, "test"))


def _sealed(data: bytes, edit) -> bytes:
    rec = json.loads(data)
    edit(rec)
    return F.dumps({k: v for k, v in rec.items() if k != "content_sha256"})


class _PeakRss:
    """The process's resident memory, sampled every 5 ms while the block runs (MB above the start)."""

    def __enter__(self):
        self.start = self.peak = self._rss()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        self.t0 = time.perf_counter()
        return self

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    def _watch(self):
        while not self.done.wait(0.005):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.done.set()
        self.thread.join()
        self.grew_mb = (max(self.peak, self._rss()) - self.start) / 2**20


@pytest.mark.parametrize("n, words", [(900_000, "items (no list in this format has more than 8,192)"),
                                      (1_000_000, "far more than any saved run")])
def test_a_million_invalid_prompt_ids_are_refused_quickly_in_bounded_memory(record_bytes, n, words):
    """Before: 1,000,000 ids of -1 (a 2.9 MB sealed file) took 124 s and +3.4 GB here to refuse, every schema error
    built before the first was said. 900,000 stays under the comma count, so the array cap is what refuses it."""
    data = _sealed(record_bytes, lambda r: r["trace"]["prompt"].__setitem__("ids", [-1] * n))
    assert len(data) < 4 * 2**20
    with _PeakRss() as m, pytest.raises(F.RecordError) as exc:
        F.load(data)
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert m.seconds < 10 and m.grew_mb < 400, (m.seconds, m.grew_mb)


def test_a_large_wrong_branch_is_refused_at_its_first_errors(record_bytes):
    """Under a oneOf (the analysis, or null) jsonschema listed every error of the failing branch: 960,000 bad ids in
    120 lists, each under the array cap, built ~a million error objects. Now the first few are built, and named."""
    data = _sealed(record_bytes, lambda r: r["trace"]["analysis"]["positions"].__setitem__(
        "ids", [[-1] * 8000 for _ in range(120)]))
    with _PeakRss() as m, pytest.raises(F.RecordError, match="trace/analysis/positions/ids/0/0: -1 is out of bounds"):
        F.load(data)
    assert m.seconds < 20 and m.grew_mb < 400, (m.seconds, m.grew_mb)


def _nested(data: bytes, depth: int) -> bytes:
    """The model's ``arch`` (which holds any JSON object) given ``depth`` more levels of nesting."""
    out = data.replace(b'"arch":{', b'"arch":{"deep":' + b'{"a":' * depth + b"{}" + b"}" * depth + b",", 1)
    assert out != data
    return out


def test_json_nested_deeper_than_any_record_is_refused(record_bytes):
    with pytest.raises(F.RecordError, match="nested far too deep"):
        F.load(_nested(record_bytes, 200))


@pytest.mark.parametrize("command", ["replay", "verify"])
def test_json_nested_a_thousand_deep_is_one_line_from_the_command_line(record_bytes, tmp_path, command):
    """Nested ~980 deep a record loaded from a shallow stack (as a person runs the command; pytest's deeper stack
    already overflowed in the parser), and replay and verify then ended in a RecursionError traceback."""
    import subprocess
    import sys

    from tests.browser.harness import ROOT

    p = tmp_path / "deep.json"
    p.write_bytes(_nested(record_bytes, 975))
    argv = [sys.executable, "-m", "engine", command, str(p)] + (["--html", str(tmp_path / "r.html")]
                                                                 if command == "replay" else [])
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "nested far too deep" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1


def test_an_object_with_a_million_fields_is_refused_before_the_schema(record_bytes):
    data = _sealed(record_bytes, lambda r: r["model"]["identity"].__setitem__(
        "files", {f"f{i}": {"size": 1, "sha256": "0" * 64} for i in range(100_000)}))
    with _PeakRss() as m, pytest.raises(F.RecordError, match="model/identity/files: 100,000 fields"):
        F.load(data)
    assert m.seconds < 10, m.seconds


def test_the_servers_upload_limit_is_the_saved_runs_cap():
    """Streamlit's upload endpoint checks server.maxUploadSize (default 200 MB), not the uploader's own limit, which
    only the browser applies: every start (scripts/start.sh, a plain `streamlit run`, the browser tests) reads
    .streamlit/config.toml from the project folder."""
    import tomllib

    from tests.browser.harness import ROOT

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] * 2**20 == F.MAX_BYTES
    start = (ROOT / "scripts" / "start.sh").read_text()
    assert "maxUploadSize" not in start and 'cd "$(dirname "$0")/.."' in start  # the project's config, not overridden
