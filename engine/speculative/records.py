"""What a race of plain against speculative decoding measured (engine/speculative/decoding.py), in the paper's
letters (Leviathan, Kalman and Matias 2023): p = the target's distribution, q = the draft's, a = the per-token
acceptance rate, c = draft cost / target step cost, k = the draft length.

The records define what was tested (a round's tested drafts, their p and q, what was kept) and derive every metric
from it as a property, its formula in the docstring. Plain values (no torch), so a saved race (engine/record) and
the pages read them without the model.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.sampling import SamplingSettings


@dataclass(frozen=True)
class SpecRound:
    """One draft-and-verify round. Lists over drafted tokens hold only the *tested* ones (up to and including
    the first rejection): later drafts were conditioned on a rejected token and were never judged."""

    index: int
    drafted: tuple[int, ...]  # what the drafter proposed (may be fewer than k, even none)
    q: tuple[float, ...]  # q(x_i): draft probability of each tested token (1.0 for a deterministic drafter)
    p: tuple[float, ...]  # p(x_i): target probability of each tested token, same sampling settings
    accepted: int  # how many drafted tokens were kept
    token: int  # the target's own token after them: a correction (after a rejection) or a bonus
    kind: str  # "correction" | "bonus" | "plain" (nothing was drafted: an ordinary decode step)
    source: str  # where that token came from, in words
    target_top_ids: tuple[int, ...]  # target's top tokens at the correction/bonus position (sampling dist.)
    target_top_probs: tuple[float, ...]
    draft_seconds: float
    verify_seconds: float  # target pass + accept/reject + cache rollback
    compiled: bool = False  # the verify pass ran as a compiled graph (k + 1 tokens, drafts padded; compiled mode)

    @property
    def accept_probs(self) -> tuple[float, ...]:
        """min(1, p/q) for each tested token."""
        return tuple(min(1.0, p / q) if q > 0 else 0.0 for p, q in zip(self.p, self.q))

    @property
    def emitted(self) -> tuple[int, ...]:
        return self.drafted[: self.accepted] + (self.token,)

    @property
    def rejected(self) -> tuple[int, ...]:
        return self.drafted[self.accepted:]


@dataclass(frozen=True)
class SpecRun:
    """Plain decoding and speculative decoding on the same prompt and settings, measured in one run."""

    model: str
    drafter: str
    k: int
    settings: SamplingSettings
    seed: int
    max_new_tokens: int
    threads: int
    prompt_ids: tuple[int, ...]
    plain_ids: tuple[int, ...]
    plain_step_seconds: tuple[float, ...]  # prefill first, then each decode step (forward + sampling)
    spec_ids: tuple[int, ...]
    spec_prefill_seconds: float
    rounds: tuple[SpecRound, ...]
    plain_tokens: tuple[str, ...] = ()
    spec_tokens: tuple[str, ...] = ()
    # The plain lane's step records (top-k logits, KV bytes) when it was decoded in this race; empty when an earlier
    # plain run was reused (a k sweep). A saved race is checked against them (engine/record).
    plain_steps: tuple = ()
    plain_mode: str = ""  # how the plain lane ran: "compiled" | "eager" ("" when an earlier plain run was reused)
    plain_prefill: str = ""  # how each lane's prefill ran (engine.core.prefill_buckets.PrefillMode.line)
    spec_prefill: str = ""

    @property
    def spec_mode(self) -> str:
        """How the speculative lane's verify passes ran: "compiled", "eager", or "mixed" (some of each)."""
        kinds = {r.compiled for r in self.rounds}
        return "mixed" if len(kinds) > 1 else "compiled" if kinds == {True} else "eager"

    @property
    def plain_seconds(self) -> float:
        return float(sum(self.plain_step_seconds))

    @property
    def spec_seconds(self) -> float:
        return self.spec_prefill_seconds + sum(r.draft_seconds + r.verify_seconds for r in self.rounds)

    @property
    def plain_tokens_per_second(self) -> float:
        return len(self.plain_ids) / self.plain_seconds if self.plain_seconds > 0 else float("nan")

    @property
    def spec_tokens_per_second(self) -> float:
        return len(self.spec_ids) / self.spec_seconds if self.spec_seconds > 0 else float("nan")

    @property
    def speedup(self) -> float:
        """Measured, wall clock: speculative tokens/s over plain tokens/s (equal token counts at temperature 0)."""
        return self.spec_tokens_per_second / self.plain_tokens_per_second

    @property
    def predicted(self) -> "Predicted":
        """What the paper's formula predicts for this run, step by step toward the measured speedups."""
        return Predicted.of(self)

    @property
    def drafted(self) -> int:
        return sum(len(r.drafted) for r in self.rounds)

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.rounds)

    @property
    def tested(self) -> int:
        return sum(len(r.p) for r in self.rounds)

    @property
    def acceptance_rate(self) -> float:
        """a: accepted / tested drafted tokens (a rejection ends a round, so later drafts are never tested);
        the maximum-likelihood estimate of the paper's per-token acceptance rate."""
        return self.accepted / self.tested if self.tested else 0.0

    @property
    def target_passes(self) -> int:
        return 1 + len(self.rounds)

    @property
    def tokens_per_pass(self) -> float:
        """New tokens per target forward pass, prefill included (plain decoding: exactly 1)."""
        return len(self.spec_ids) / self.target_passes

    @property
    def target_step_seconds(self) -> float:
        steps = self.plain_step_seconds[1:]
        return statistics.median(steps) if steps else float("nan")

    @property
    def c(self) -> float:
        """Measured cost ratio: draft seconds per drafted token / median plain decode step."""
        drafted = max(1, self.drafted)
        return sum(r.draft_seconds for r in self.rounds) / drafted / self.target_step_seconds

    @property
    def measurable(self) -> bool:
        """Can this run's speed be compared at all? It needs at least one plain decode step (the first token
        comes from the prefill in both lanes) and one drafted token, else c and the formula are 0/0 and a
        "speedup" is the ratio of two prefills (noise)."""
        return len(self.plain_step_seconds) >= 2 and self.drafted > 0 and math.isfinite(self.c)

    @property
    def verify_cost_ratio(self) -> float:
        """Measured: median verify pass (rounds that drafted something) / median plain decode step. The paper's
        formula takes it as 1; NaN when no round drafted anything."""
        v = [r.verify_seconds for r in self.rounds if r.drafted]
        return statistics.median(v) / self.target_step_seconds if v else float("nan")

    @property
    def plain_decode_seconds(self) -> float:
        """The plain lane's time after its first token (the first comes from the prefill)."""
        return float(sum(self.plain_step_seconds[1:]))

    @property
    def spec_decode_seconds(self) -> float:
        """The speculative lane's time after its first token: every round's drafting and verify pass."""
        return float(sum(r.draft_seconds + r.verify_seconds for r in self.rounds))

    @property
    def decode_speedup(self) -> float:
        """Measured, decode only: tokens after the first per second of each lane's time after its first token.
        Both lanes pay the same prefill inside the wall clock, which pulls ``speedup`` toward 1; the paper's
        formula counts decode rounds only, so this is the number to set beside it. NaN when a lane decoded
        nothing."""
        pn, sn = len(self.plain_ids) - 1, len(self.spec_ids) - 1
        if pn < 1 or sn < 1 or not self.plain_decode_seconds > 0 or not self.spec_decode_seconds > 0:
            return float("nan")
        return (sn / self.spec_decode_seconds) / (pn / self.plain_decode_seconds)

    @property
    def plain_prefill_share(self) -> float:
        """Share of the plain lane's wall clock spent in the prefill (first token)."""
        return self.plain_step_seconds[0] / self.plain_seconds if self.plain_seconds > 0 else float("nan")

    @property
    def spec_prefill_share(self) -> float:
        """Share of the speculative lane's wall clock spent in the prefill (first token)."""
        return self.spec_prefill_seconds / self.spec_seconds if self.spec_seconds > 0 else float("nan")

    @property
    def drafted_per_round(self) -> float:
        """Mean drafted tokens per round (k when the drafter always proposes a full draft)."""
        return self.drafted / len(self.rounds) if self.rounds else 0.0

    @property
    def rounds_with_drafts(self) -> int:
        return sum(1 for r in self.rounds if r.drafted)

    @property
    def identical(self) -> bool:
        return self.plain_ids == self.spec_ids

    @property
    def same_work(self) -> bool:
        """Both lanes did the same work: no round drafted anything, so every speculative round was one target pass
        for one token, as every plain step is (the same passes over the same tokens). Their clocks then differ by
        noise only (engine.measure.noise.same_work_gap)."""
        return self.drafted == 0 and len(self.spec_ids) == len(self.plain_ids)

    def to_dict(self) -> dict:
        return {
            "model": self.model, "drafter": self.drafter, "k": self.k, "settings": asdict(self.settings),
            "seed": self.seed, "max_new_tokens": self.max_new_tokens, "threads": self.threads,
            "prompt_tokens": len(self.prompt_ids),
            "plain": {"ids": list(self.plain_ids), "tokens": list(self.plain_tokens), "seconds": self.plain_seconds,
                      "tokens_per_second": self.plain_tokens_per_second, "mode": self.plain_mode},
            "speculative": {"ids": list(self.spec_ids), "tokens": list(self.spec_tokens), "mode": self.spec_mode,
                            "seconds": self.spec_seconds, "tokens_per_second": self.spec_tokens_per_second,
                            "prefill_seconds": self.spec_prefill_seconds,
                            "rounds": [dict(asdict(r), accept_probs=list(r.accept_probs)) for r in self.rounds]},
            "acceptance_rate": self.acceptance_rate, "drafted": self.drafted, "accepted": self.accepted,
            "target_passes": self.target_passes, "tokens_per_target_pass": self.tokens_per_pass,
            "target_step_seconds": self.target_step_seconds, "c": self.c, "measured_speedup": self.speedup,
            **self.predicted.to_dict(), "verify_cost_ratio": self.verify_cost_ratio,
            "drafted_per_round": self.drafted_per_round, "decode_speedup": self.decode_speedup,
            "plain_prefill_share": self.plain_prefill_share, "spec_prefill_share": self.spec_prefill_share,
            "identical_output": self.identical, "same_work": self.same_work,
        }


@dataclass(frozen=True)
class Predicted:
    """The paper's predicted speedup for a run (Leviathan et al. 2023, thm. 3.8), then one assumption replaced by
    what the run measured at each step, toward the measured ``SpecRun.decode_speedup`` (the same scope: decode
    rounds, no prefill). Each is NaN where the run gives nothing to compute it from."""

    paper: float  # thm. 3.8 with the measured a, k and c; a verify pass costs one plain step
    measured_verify: float  # thm. 3.8 with the measured verify cost (SpecRun.verify_cost_ratio) in place of 1
    # Round by round as the rounds happened: a round that drafted m tokens expects (1 - a^(m+1)) / (1 - a) tokens
    # (m = 0: one, an ordinary decode step) and costs its measured drafting time / plain step + 1 verify pass;
    # the sum of expected tokens over the sum of costs. Equals ``paper`` when every round drafts k tokens at cost c;
    # unlike it, it respects a drafter that drafted nothing in most rounds and a draft cut short by the tokens
    # requested.
    rounds: float
    # ``rounds`` with each round's measured verify time in place of one plain step: everything measured but the
    # luck of acceptance (the expected tokens per round still come from a). It predicts SpecRun.decode_speedup.
    as_run: float

    # the names a saved race (engine/record) and the benchmarks' JSON give them
    KEYS = {"paper": "expected_speedup", "measured_verify": "expected_speedup_measured_verify",
            "rounds": "expected_speedup_drafted", "as_run": "expected_speedup_as_run"}

    @classmethod
    def of(cls, run: "SpecRun") -> "Predicted":
        a, k, c = run.acceptance_rate, run.k, run.c
        nan = float("nan")
        step = run.target_step_seconds
        if not run.rounds or not step > 0:
            return cls(expected_speedup(a, k, c), expected_speedup(a, k, c, run.verify_cost_ratio), nan, nan)
        a = min(max(a, 0.0), 1.0)
        tokens = sum(len(r.drafted) + 1 if a >= 1.0 else (1 - a ** (len(r.drafted) + 1)) / (1 - a)
                     for r in run.rounds)
        cost = sum(r.draft_seconds / step + 1.0 for r in run.rounds)
        return cls(expected_speedup(run.acceptance_rate, k, c), expected_speedup(run.acceptance_rate, k, c,
                                                                                 run.verify_cost_ratio),
                   tokens / cost, tokens / (run.spec_decode_seconds / step))

    def to_dict(self) -> dict:
        return {key: getattr(self, name) for name, key in self.KEYS.items()}


def expected_speedup(a: float, k: int, c: float, verify: float = 1.0) -> float:
    """Leviathan et al. 2023, thm. 3.8: (1 - a^(k+1)) / ((1 - a)(k c + 1)); the a -> 1 limit is (k+1)/(kc+1).
    ``verify`` is the cost of one verify pass in plain decode steps: the paper takes 1; pass the measured
    ratio to get k c + verify in the denominator."""
    a = min(max(float(a), 0.0), 1.0)
    tokens = k + 1 if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)
    return tokens / (k * c + verify)


@dataclass(frozen=True)
class SweepPoint:
    k: int
    acceptance_rate: float
    tokens_per_pass: float
    c: float
    measured_speedup: float
    expected_speedup: float  # the paper's formula round by round (SpecRun.predicted.rounds)
    identical: bool
    accepted: int = 0
    decode_speedup: float = float("nan")  # measured, each lane's time after its first token (SpecRun.decode_speedup)
    plain_decode_seconds: float = float("nan")  # the plain lane, re-measured for this k: the same work at every k
