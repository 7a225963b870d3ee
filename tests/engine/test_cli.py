"""The command line's own behaviour: help without torch, what each help says, output for terminals and files."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.__main__ import BENCHES

ROOT = Path(__file__).resolve().parents[2]

# Every command's --help, every benchmark's included (its own arguments come from its module, which imports its work
# only when it runs).
HELPS = [[], ["trace"], ["race"], ["info"], ["bench"], ["prepare"], ["replay"], ["verify"], ["settings"],
         ["serve-bench"], *(["bench", name] for name in sorted(BENCHES))]

# Runs each help through main() in one fresh interpreter and says, after each, which heavy packages it had imported.
PROBE = """
import json, sys
from engine.__main__ import main
out = []
for argv in json.loads(sys.argv[1]):
    try:
        main([*argv, "--help"])
        code = None
    except SystemExit as exc:
        code = exc.code
    out.append([argv, code, sorted(m for m in ("torch", "transformers") if m in sys.modules)])
print(json.dumps(out))
"""


def test_every_help_answers_without_importing_torch():
    """torch and transformers take seconds to import (5-21 s a help on a loaded 2-core machine): a help needs neither.
    Checked by what was imported, not by a clock."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HELPS)], capture_output=True, text=True,
                          cwd=str(ROOT), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert [code for _, code, _ in rows] == [0] * len(HELPS)
    assert [(argv, heavy) for argv, _, heavy in rows if heavy] == []


def test_settings_help_and_bad_arguments_leave_the_docs_alone(capsys):
    """`settings --help` prints help and `settings --bogus` is refused, neither rewriting docs/settings.md."""
    import engine.settings as settings
    from engine.__main__ import main

    before = settings.DOCS.stat().st_mtime_ns
    with pytest.raises(SystemExit) as exc:
        main(["settings", "--help"])
    assert exc.value.code == 0 and "docs/settings.md" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["settings", "--bogus"])
    assert exc.value.code == 2 and "--bogus" in capsys.readouterr().err
    assert settings.DOCS.stat().st_mtime_ns == before


def test_bench_help_describes_every_benchmark(capsys):
    from engine.__main__ import BENCHES, bench_summary, main

    summaries = {name: bench_summary(name) for name in BENCHES}
    assert all(10 < len(s) <= 110 and "\n" not in s for s in summaries.values()), summaries
    assert len(set(summaries.values())) == len(BENCHES)
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert all(s in shown for s in summaries.values())


@pytest.mark.parametrize("command,new_tokens", [("trace", 16), ("race", 64)])
def test_trace_and_race_help_show_defaults_and_say_greedy_unlike_the_app(capsys, command, new_tokens):
    from engine.__main__ import main
    from engine.cli_args import GREEDY_NOTE

    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert " ".join(GREEDY_NOTE.split()) in shown
    for default in (f"default: {new_tokens}", "default: 0.0 (the app starts at 0.7)", "default: 1.0 (the app starts at "
                    "0.95)", "default: 0 (the app starts at 50)"):
        assert default in shown
    if command == "race":
        assert "default: lookup" in shown and "default: 4" in shown


def test_the_app_sampling_the_command_line_names_is_the_apps():
    from engine.cli_args import APP_SAMPLING
    from ui.frame.state import FIELDS

    assert APP_SAMPLING == {name: FIELDS[name][1] for name in APP_SAMPLING}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bold_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    from engine.cli_args import bold

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert bold("Paris", io.StringIO()) == "Paris"
    assert bold("Paris", _Terminal()) == "\x1b[1mParis\x1b[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert bold("Paris", _Terminal()) == "Paris"


def test_trace_into_a_file_has_no_escape_codes(capsys, monkeypatch):
    from engine.__main__ import main

    monkeypatch.delenv("NO_COLOR", raising=False)
    code = main(["trace", "--model", "tiny-random", "--prompt", "hello", "--max-new-tokens", "2"])
    out = capsys.readouterr().out
    assert code == 0 and "prompt tokens" in out and "\x1b" not in out


def test_race_k_out_of_range_is_one_line_before_any_model_loads(capsys):
    from engine.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["race", "--model", "no-such-model", "--prompt", "hi", "--k", "17"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--k" in err and "Traceback" not in err


def test_race_labels_each_lanes_text_and_writes_no_escape_codes_into_a_file(capsys, monkeypatch):
    """`race` printed the speculative lane's text under the numbers with no label (and not the plain lane's): a text
    of several lines read as more output. Each lane's text now sits under its label, indented."""
    from engine.__main__ import main

    monkeypatch.delenv("NO_COLOR", raising=False)
    code = main(["race", "--model", "tiny-random", "--prompt", "the cat sat on the mat", "--max-new-tokens", "4",
                 "--repeats", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "\x1b" not in out
    assert "\nplain lane's text:\n  " in out and "\nspeculative lane's text (lookup, k=4):\n  " in out
    from engine.speculative.cli import lane_texts

    assert lane_texts("one\ntwo", "", "lookup, k=4").splitlines() == [
        "", "plain lane's text:", "  one", "  two", "", "speculative lane's text (lookup, k=4):", "  (no text)"]
