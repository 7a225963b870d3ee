"""The replay page's sampling chain (ui/record/page/replay.js, ``samplingProbs``) against the engine's
(engine/core/sampling.py) over a grid of settings, min-p included: the same tokens kept and the same probabilities.
The function is taken from the page's own script and run in Node, the JavaScript engine the browser tier's Chromium
shares; the browser test (tests/browser/test_replay.py) checks it again inside the page."""
import json
import re
import shutil
import subprocess
from itertools import product
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.core.sampling import SamplingSettings, filter_logits, sampling_probs
from engine.settings import CI

SCRIPT = Path(__file__).resolve().parents[2] / "ui" / "record" / "page" / "replay.js"
GRID = list(product((0.0, 0.3, 0.7, 1.0, 1.6), (0, 1, 5, 40), (1.0, 0.9, 0.5, 0.05), (0.0, 0.02, 0.1, 0.5, 1.0)))


def chain_source() -> str:
    """``samplingProbs`` as the page's script defines it (to its closing brace at the same indent)."""
    found = re.search(r"^( *)function samplingProbs\(.*?^\1\}$", SCRIPT.read_text(encoding="utf-8"), re.M | re.S)
    assert found, "replay.js no longer defines samplingProbs"
    return found.group(0)


def run_in_node(source: str, logits: np.ndarray, grid) -> list[dict]:
    node = shutil.which("node")
    if node is None:
        if CI.get():
            pytest.fail("node is missing: the replay page's sampling chain is not tested")
        pytest.skip("node is not installed")
    program = source + """
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = [];
for (const row of input.logits) {
  const lg = Float32Array.from(row);
  const order = Array.from(lg.keys()).sort((a, b) => lg[b] - lg[a]);
  for (const [T, k, p, m] of input.grid) {
    const r = samplingProbs(lg, order, T, k, p, m);
    out.push({kept: r.kept, probs: Array.from(r.probs)});
  }
}
process.stdout.write(JSON.stringify(out));
"""
    done = subprocess.run([node, "-e", program], input=json.dumps({"logits": logits.tolist(), "grid": grid}),
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def kept(row: torch.Tensor, s: SamplingSettings) -> int:
    """How many tokens the engine's filters let through (a token left with a probability below float32's smallest
    number is still drawable: it is counted, as the page's float64 counts it)."""
    return 1 if s.greedy else int(torch.isfinite(filter_logits(row, s)).sum())


def test_the_replay_pages_sampling_chain_is_the_engines_min_p_included():
    gen = torch.Generator().manual_seed(0)
    # recorded float32 logits (no exact ties: which of two tied tokens a nucleus keeps is the sort's choice)
    logits = torch.cat([torch.randn(2, 300, generator=gen) * 3, torch.randn(1, 300, generator=gen) * 8]).float()
    got = run_in_node(chain_source(), logits.numpy(), GRID)
    assert len(got) == len(logits) * len(GRID)
    min_p_cut = 0  # settings where min-p removed a token top-k and top-p had kept: the grid tests min-p itself
    for i, (row, (t, k, p, m)) in enumerate(product(logits, GRID)):
        s = SamplingSettings(t, k, p, m)
        ref = sampling_probs(row, s).numpy()
        js = got[i]
        assert js["kept"] == kept(row, s), (t, k, p, m)
        assert np.allclose(js["probs"], ref, atol=1e-5), (t, k, p, m)
        if m > 0 and t > 0:
            min_p_cut += int(kept(row, SamplingSettings(t, k, p, 0.0)) > kept(row, s))
    assert min_p_cut > 20, "the grid never had min-p remove a token"


def test_the_chain_without_min_p_fails_the_comparison():
    """The test can fail: the chain as it was before min-p (the ``m`` argument ignored) is caught."""
    source = chain_source().replace("if (m > 0)", "if (false)")
    logits = (torch.randn(1, 300, generator=torch.Generator().manual_seed(1)) * 3).float()
    grid = [(1.0, 0, 1.0, 0.1)]
    js = run_in_node(source, logits.numpy(), grid)[0]
    assert js["kept"] != kept(logits[0], SamplingSettings(*grid[0]))
