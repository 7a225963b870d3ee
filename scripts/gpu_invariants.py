"""The engine's invariants on whatever device is present (a GPU when scripts/gpu_check.sh runs it on a lent machine),
on a model loaded through the app's own loader in the device's default precision. Prints one line per check and
exits non-zero if any failed. Random weights are fine: every check compares the engine with itself or with
transformers on the same weights.

Two groups, which gpu_check.sh runs as two processes side by side: ``eager`` (greedy = generate, KV formula, cache
parity, speculative = plain, class batch = solo) and ``compiled`` (compiled = eager per precision; in float32 the
compiled race's output = plain's with both lanes compiled, and a compiled class batch = each student alone). The
JSON is rewritten after every check, so a group stopped by its time limit keeps the checks it finished.

    python scripts/gpu_invariants.py MODEL [--only eager|compiled] [--json OUT.json]"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.core.request import RunRequest  # noqa: E402
from engine.jobs.classbatch import ANSWER, AnswerRequest  # noqa: E402
from engine.core.kv import kv_bytes_for  # noqa: E402
from engine.core.loaded import Mode, ModelRef  # noqa: E402
from engine.models.loading import load_model  # noqa: E402
from engine.core.sampling import SamplingSettings  # noqa: E402
from engine.core.trace import run_trace  # noqa: E402
from engine.batching.bench_classroom import own_worker, submitted_together  # noqa: E402
from engine.speculative.decoding import race  # noqa: E402

import torch  # noqa: E402  after the engine (imported first above): its thread policy is set before torch loads

GREEDY = SamplingSettings(0.0)
PROMPTS = ["What is the capital of France?", "Name a primary colour.", "What is 2 + 3?", "Say hello in Spanish.",
           "What animal says moo?", "Tell me a long story about a lighthouse keeper and her cat."]
failed: list[str] = []
results: list[dict] = []
JSON_OUT: list[str] = []  # where the results are rewritten after every check (--json)


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    results.append({"check": name, "ok": bool(ok), "detail": detail})
    if not ok:
        failed.append(name)
    for path in JSON_OUT:
        Path(path).write_text(json.dumps({"checks": results, "failed": failed}, indent=1))


def guarded(fn):
    try:
        fn()
    except Exception:  # noqa: BLE001 - a crash is a failed check, the others still run
        check(fn.__name__, False, traceback.format_exc(limit=6))


def main(model_dir: str, only: str = "") -> int:
    lm = load_model(ModelRef(model_dir), device="cuda" if torch.cuda.is_available() else "cpu")
    print(f"loaded {model_dir} on {lm.device}, dtype {next(lm.model.parameters()).dtype}, {lm.info.n_layers} layers, "
          f"{lm.info.n_kv_heads} KV heads of {lm.info.head_dim}", flush=True)

    def engine_equals_generate():
        t = run_trace(lm, PROMPTS[5], GREEDY, 24, 0, True, analyse=False)
        ids = torch.tensor([t.prompt_ids], device=lm.device)
        with torch.no_grad():
            ref = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                                    min_new_tokens=24, pad_token_id=lm.tokenizer.pad_token_id or 0)
        ref = ref[0, ids.shape[1]:].tolist()[:len(t.generated_ids)]
        same = sum(a == b for a, b in zip(t.generated_ids, ref))
        check("greedy: engine tokens = model.generate", list(t.generated_ids) == ref,
              f"{same}/{len(ref)} equal{'' if list(t.generated_ids) == ref else f' engine {t.generated_ids} generate {ref}'}")

    def kv_formula():
        t = run_trace(lm, PROMPTS[0], GREEDY, 8, 0, True, analyse=False)
        bad = [i for i, s in enumerate(t.steps) if s.kv_bytes != kv_bytes_for(lm.info, s.kv_tokens)]
        check("KV bytes measured = formula at every step", not bad and len(t.steps) == 8,
              f"{t.steps[-1].kv_bytes:,} B at {t.steps[-1].kv_tokens} tokens; bad steps {bad}")

    def cache_parity():
        from engine.core.loop import full_pass

        t = run_trace(lm, PROMPTS[1], GREEDY, 8, 0, True, analyse=False)
        seq = list(t.prompt_ids) + list(t.generated_ids[:-1])
        with torch.inference_mode():
            logits = full_pass(lm, torch.tensor([seq], device=lm.device))
        logits = logits.logits if hasattr(logits, "logits") else logits
        full = logits[0, len(t.prompt_ids) - 1:].float().argmax(-1).tolist()
        check("cache parity: cached decode = one uncached pass (argmax per position)", full == list(t.generated_ids),
              f"cached {t.generated_ids} uncached {full}")

    def speculative_greedy():
        ids = lm.tokenizer(PROMPTS[5])["input_ids"]
        for spec, k in (("lookup", 4), (f"early-exit:{max(1, lm.info.n_layers // 2)}", 3)):
            r = race(lm, ids, spec, k, GREEDY, 20, 0, stop_at_eos=False)
            check(f"speculative greedy = plain greedy ({spec}, k={k})", r.identical,
                  f"{r.target_passes} target passes for {len(r.spec_ids)} tokens")

    def class_batch():
        for p, t in zip(PROMPTS, batch_of(lm)):
            solo = run_trace(lm, p, GREEDY, 8, 0, True, analyse=False).generated_ids
            check(f"class batch (of {t.largest_batch}) = solo: {p[:24]!r}", t.generated_ids == solo,
                  "" if t.generated_ids == solo else f"batched {t.generated_ids} solo {solo}")

    def compiled_equals_eager():
        """float32: the compiled mode's greedy tokens must equal eager's; in half precision a near tie may flip,
        so the first difference is reported, not failed."""
        from engine.core.compiled import ModeError, to_mode
        from engine.models.precision import lm_precision, to_precision

        for m in (lm, to_precision(lm, "float32")):
            try:
                c = to_mode(m, Mode.COMPILED)
            except ModeError as exc:
                check(f"compiled = eager ({lm_precision(m)})", False, str(exc))
                continue
            for p in PROMPTS[:3]:
                e = run_trace(m, p, GREEDY, 24, 0, True, analyse=False).generated_ids
                t = run_trace(c, p, GREEDY, 24, 0, True, analyse=False)
                diff = next((i for i, (a, b) in enumerate(zip(e, t.generated_ids)) if a != b), None)
                half = lm_precision(m) in ("bfloat16", "float16")
                check(f"compiled = eager greedy ({lm_precision(m)}): {p[:24]!r}",
                      (diff is None or half) and t.engine_mode == Mode.COMPILED,
                      "same tokens" if diff is None else f"first difference at token {diff + 1} (near tie in "
                      f"{lm_precision(m)}: reported, not failed)" if half else f"differ from token {diff + 1}")

    def compiled_race_float32():
        """Issue 50's race goal: in float32 the compiled race's speculative output equals plain greedy token for
        token, both lanes compiled."""
        c = compiled32()
        if c is None:
            return
        r = race(c, lm.tokenizer(PROMPTS[5])["input_ids"], "lookup", 4, GREEDY, 64, 0, stop_at_eos=False)
        lanes = f"plain lane {r.plain_mode}, speculative lane {r.spec_mode}"
        check("compiled race (float32, lookup, k=4): speculative = plain, both lanes compiled",
              r.identical and r.plain_mode == r.spec_mode == Mode.COMPILED,
              f"{lanes}; {len(r.spec_ids)} tokens in {r.target_passes} target passes; identical {r.identical}")

    def compiled_class_batch_float32():
        """Issue 50's class goal: a compiled class batch's answers equal each student's alone (float32). The first
        batch meets its padded sizes eager while they compile in the background; the second is timed by none and
        must run compiled."""
        from engine.core.background_compile import COMPILER

        c = compiled32()
        if c is None:
            return
        for _ in range(2):
            traces = batch_of(c)
            COMPILER.wait_idle(c.ref, timeout=600)
        steps = [s for t in traces for s in t.steps[1:]]
        ran = sum(bool(s.compiled) for s in steps)
        for p, t in zip(PROMPTS, traces):
            solo = run_trace(c, p, GREEDY, 8, 0, True, analyse=False).generated_ids
            check(f"compiled class batch (float32, of {t.largest_batch}) = solo: {p[:24]!r}",
                  t.generated_ids == solo and ran == len(steps),
                  f"{ran} of {len(steps)} decode step records compiled"
                  + ("" if t.generated_ids == solo else f"; batched {t.generated_ids} solo {solo}"))

    kept: dict = {}

    def compiled32():
        """The model in float32, compiled (made once); None, with a failed check, where compiled mode is refused."""
        from engine.core.compiled import ModeError, to_mode
        from engine.models.precision import to_precision

        if "c" not in kept:
            try:
                kept["c"] = to_mode(to_precision(lm, "float32"), Mode.COMPILED)
            except ModeError as exc:
                kept["c"] = None
                check("compiled mode in float32", False, str(exc))
        return kept["c"]

    groups = {"eager": (engine_equals_generate, kv_formula, cache_parity, speculative_greedy, class_batch),
              "compiled": (compiled_equals_eager, compiled_race_float32, compiled_class_batch_float32)}
    for name, fns in groups.items():
        if only in ("", name):
            for fn in fns:
                guarded(fn)
    print(f"{len(failed)} failed: {failed}" if failed else "all invariants held", flush=True)
    return 1 if failed else 0


def batch_of(lm) -> list:
    """Every prompt as one student's answer, submitted together to a held worker so that they meet as one batch."""
    with own_worker() as w:
        _, jobs = submitted_together(w, lambda: [
            w.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, p, True, 8, GREEDY, 0), analyse=False),
                  session=f"s{i}") for i, p in enumerate(PROMPTS)])
        return [j.result(600) for j in jobs]


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--json" in argv:
        JSON_OUT.append(argv[argv.index("--json") + 1])
    raise SystemExit(main(argv[0], argv[argv.index("--only") + 1] if "--only" in argv else ""))
