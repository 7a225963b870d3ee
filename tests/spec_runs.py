"""SpecRun records built by hand for tests (pure arithmetic, no model): the rounds as (drafted, accepted, draft
seconds) and a plain step time."""
from engine.core.sampling import SamplingSettings
from engine.speculative.records import SpecRound, SpecRun


def spec_run(rounds, step=0.04, k=4) -> SpecRun:
    """A race whose round i drafted ``rounds[i][0]`` tokens, accepted ``rounds[i][1]`` and drafted for
    ``rounds[i][2]`` seconds; every verify pass and plain step takes ``step`` seconds, each prefill 0.1 s."""
    rs = tuple(SpecRound(i, tuple(range(m)), (1.0,) * min(m, acc + 1), (1.0,) * min(m, acc + 1), acc, 7,
                         "bonus" if acc == m else "correction", "", (), (), d, step)
               for i, (m, acc, d) in enumerate(rounds))
    n = 1 + sum(r.accepted + 1 for r in rs)
    return SpecRun("m", "lookup", k, SamplingSettings(), 0, n, 1, (1, 2), tuple(range(n)), (0.1,) + (step,) * (n - 1),
                   tuple(range(n)), 0.1, rs)
