"""The suite's two phases cover everything once: scripts/test.sh runs `not browser and not serial` on several
workers, then `browser or serial` alone; every module named serial exists (a renamed timing test would otherwise
drift into the parallel phase unnoticed)."""
import re

import pytest

from tests.conftest import ROOT, SERIAL_MODULES

pytestmark = pytest.mark.unit


def test_every_serial_module_exists():
    missing = sorted(m for m in SERIAL_MODULES if not (ROOT / m).is_file())
    assert not missing, f"tests/conftest.py SERIAL_MODULES names modules that are gone: {missing}"


def test_the_two_phases_are_complements():
    script = (ROOT / "scripts" / "test.sh").read_text()
    phases = re.findall(r'-m "([^"]+)"', script)
    assert phases == ["not browser and not serial", "browser or serial"], phases
    ini = (ROOT / "pytest.ini").read_text()
    assert re.search(r"^\s+serial:", ini, re.M), "pytest.ini registers the serial marker"


def test_a_clock_bound_in_the_parallel_phase_is_named_serial():  # a module in SERIAL_MODULES, or the test marked
    # the modules whose assertions compare a measured duration with a fixed number of seconds
    bound = re.compile(r"assert[^\n]*\b(took|elapsed|waited)\b[^\n]*[<>]=?\s*[\d.]+")
    offenders = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("tests/browser/") or rel in SERIAL_MODULES:
            continue
        text = path.read_text()
        for m in bound.finditer(text):  # the test function holding the assertion must be marked serial
            head = text.rfind("\ndef test_", 0, m.start())
            if head < 0 or "@pytest.mark.serial" not in text[max(0, text.rfind("\n\n", 0, head)):head]:
                offenders.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}")
    assert not offenders, f"a timing bound outside SERIAL_MODULES (tests/conftest.py): {offenders}"
