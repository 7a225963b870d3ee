"""The race command and the specdec benchmark run end to end with tiny settings and print sound JSON."""
import json

import torch

from engine.__main__ import main


def _json(capsys, argv):
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # invariants only; avoids OpenMP stalls on an oversubscribed shared CPU
    try:
        assert main(argv) == 0
    finally:
        torch.set_num_threads(before)
    return json.loads(capsys.readouterr().out, parse_constant=_no_nan)


def _no_nan(name):
    raise AssertionError(f"{name} is not JSON: the command line must write null instead")


def test_bench_specdec_tiny(capsys):
    r = _json(capsys, ["bench", "specdec", "--model", "tiny-random", "--json", "--new-tokens", "6", "--repeats", "1",
                       "--ks", "2", "--prompts", "1", "--drafters", "lookup,model:/no/such/model"])
    rows = [x for x in r["rows"] if "error" not in x]
    assert rows and all(x["identical_output"] and x["speedup"] > 0 and x["tokens_per_target_pass"] >= 1 for x in rows)
    assert "generate_assisted_speedup" in rows[0] or "generate_assisted_error" in rows[0]
    assert any("error" in x for x in r["rows"])  # an unloadable drafter is reported, not raised
    assert "extractive" in r["best"]


def test_race_cli_tiny(capsys):
    d = _json(capsys, ["race", "--model", "tiny-random", "--json", "--prompt", "Say hi", "--drafter", "early-exit:1",
                       "--k", "3", "--max-new-tokens", "8"])
    assert d["identical_output"] is True
    assert d["plain"]["ids"] == d["speculative"]["ids"]
    assert 0.0 <= d["acceptance_rate"] <= 1.0 and d["tokens_per_target_pass"] >= 1.0
    assert all(len(r["p"]) == len(r["q"]) == len(r["accept_probs"]) for r in d["speculative"]["rounds"])
    assert d["verify_cost_ratio"] is None or d["verify_cost_ratio"] > 0


def test_race_cli_writes_null_when_nothing_was_drafted(capsys):
    d = _json(capsys, ["race", "--model", "tiny-random", "--json", "--prompt", "Say hi", "--drafter", "lookup:3-3",
                       "--k", "2", "--max-new-tokens", "1"])
    assert d["speculative"]["rounds"] == [] and d["verify_cost_ratio"] is None
    assert d["expected_speedup_measured_verify"] is None


def test_race_cli_refuses_bad_drafter(capsys):
    assert main(["race", "--model", "tiny-random", "--prompt", "hi", "--drafter", "bogus"]) == 2
    assert "Unknown drafter" in capsys.readouterr().err
