"""Command line: python -m engine info | trace | race | replay | verify | bench NAME | serve-bench | prepare  (add --json for machine-readable output).

Each benchmark lives beside its topic (``engine/<topic>/bench.py``; BENCHES below maps the names) with its
``BENCH``, a ``Bench`` record (engine/bench.py: name, run, arguments, summary, the engine modes it supports); each
compares against a peer measured in the same run. Every command that loads a model takes ``--mode eager|compiled``
(the engine mode, engine.core.compiled); a command whose work runs eager in any mode says so in one line (its
``Bench`` record's ``eager_because``) and runs eager.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import re
import sys

# Only what builds the parser is imported here, none of it torch: every --help answers in well under a second, and
# the work of a command (torch, transformers, the model) is imported once its arguments are read.
from engine.cli_args import GREEDY_NOTE, add_run_arguments, add_save_argument, bold, sampling_settings
from engine.core.loaded import DEFAULT_MODE, MODES, PRECISIONS, ModelLoadError, ModelRef, described
from engine.models import catalog
from engine.models.names import EMBEDDED
from engine.record import cli as record_cli
import engine.settings as settings


# python -m engine bench NAME -> the module that runs it (imported only when that benchmark is asked for)
BENCHES = {
    "attention": "engine.attention.bench",
    "batching": "engine.batching.bench",
    "classroom": "engine.batching.bench_classroom",
    "decode": "engine.timeline.bench_decode",
    "hostile": "engine.batching.bench_hostile",
    "kv": "engine.kv_cache.bench",
    "precision": "engine.precision.bench",
    "profile": "engine.timeline.bench_profile",
    "specdec": "engine.speculative.bench",
    "threads": "engine.timeline.bench_threads",
    "timeline": "engine.timeline.bench",
}


def _emit(args, result: dict, text: str) -> None:
    from engine.record.values import strict  # JSON has no NaN or infinity: a ratio with nothing to divide is null

    out = json.dumps(strict(result), ensure_ascii=False, allow_nan=False)
    print(out if args.json else text)
    if getattr(args, "out", None):
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(out)


def bench_of(name: str):
    """Benchmark ``name``'s record (engine.bench.Bench), its module imported now (its imports take seconds)."""
    bench = importlib.import_module(BENCHES[name]).BENCH
    assert bench.name == name, f"{BENCHES[name]} declares the benchmark {bench.name!r}, not {name!r}"
    return bench


def bench_summary(name: str) -> str:
    """The first sentence of benchmark ``name``'s module docstring, read from its source without importing it (its
    imports take seconds), for ``bench --help``."""
    spec = importlib.util.find_spec(BENCHES[name])
    with open(spec.origin, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    first = re.split(r"(?<=\.)\s", " ".join(doc.split("\n\n")[0].split()), maxsplit=1)[0]
    return re.sub(r"^Benchmark:\s*", "", first).replace("``", "")


def build_parser(argv=()) -> argparse.ArgumentParser:
    """The command line; a benchmark's own arguments are added only for the one ``argv`` names (``bench NAME``), so
    building it imports no benchmark and no torch."""
    argv = list(argv)
    ap = argparse.ArgumentParser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, precision: bool = True):
        packaged = ", ".join(f"'{r.name}' ({'default, ' * (r.name == EMBEDDED)}{r.title})" for r in catalog.rows())
        p.add_argument("--model", default=EMBEDDED, help=f"{packaged}, 'tiny-random', a folder or a hub id")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
        if precision:  # bench threads has its own --precision (each candidate's, in its own process)
            p.add_argument("--precision", dest="load_precision", choices=PRECISIONS, default=None,
                           help="float32, bfloat16, float16 (CUDA) or int8 (default: the device's own)")
        p.add_argument("--out", default=None, help="also write the JSON result to this file")
        p.add_argument("--mode", choices=MODES, default=DEFAULT_MODE,
                       help="engine mode: eager (default), or compiled: a static KV cache and torch.compile around "
                            "the decode step (a CUDA graph on a GPU) and the prompt's prefill (padded to a bucket), "
                            "compiled once before anything is timed")

    common(sub.add_parser("info", help="model facts"))
    tr = sub.add_parser("trace", help="run the loop once and print the record",
                        description=f"Run the loop once and print the record. {GREEDY_NOTE}")
    common(tr)
    add_run_arguments(tr)
    tr.add_argument("--no-attentions", action="store_true", help="leave attention weights out of the JSON")
    add_save_argument(tr)
    if importlib.util.find_spec("engine.speculative.cli") is not None:
        race_cli = importlib.import_module("engine.speculative.cli")
        rp = sub.add_parser("race", help="plain vs speculative decoding",
                            description=f"Plain vs speculative decoding on one prompt, measured in one run. "
                                        f"{GREEDY_NOTE}")
        common(rp)
        race_cli.add_arguments(rp)
    bench = sub.add_parser("bench", help="benchmarks against a peer measured in the same run")
    bsub = bench.add_subparsers(dest="bench", required=True, metavar="NAME")
    for name in sorted(BENCHES):
        summary = bench_summary(name)
        bp = bsub.add_parser(name, help=summary, description=summary)
        common(bp, precision=name != "threads")
        if argv[:2] == ["bench", name] and bench_of(name).arguments is not None:
            bench_of(name).arguments(bp)
    sub.add_parser("prepare", help="convert the packaged models once: python -m engine prepare [--model "
                                   + "|".join((*catalog.names(), "all")) + "]")
    sub.add_parser("replay", help="a saved run as one self-contained HTML page: python -m engine replay RUN.json "
                                  "--html OUT.html (no model loaded)")
    sub.add_parser("settings", help="rewrite docs/settings.md's table of environment variables from engine/settings.py")
    sub.add_parser("verify", help="run a saved run again here and compare: python -m engine verify RUN.json [--json]")
    sub.add_parser("serve-bench", help="a serving engine (vLLM, SGLang, llama.cpp, ...) over its OpenAI API; "
                                       "loads no local model")
    return ap


def _serve_bench(argv) -> int:
    """serve-bench parsed on its own, with its own arguments."""
    sb = argparse.ArgumentParser(prog="python -m engine serve-bench",
                                 description="A serving engine measured over its OpenAI-compatible API.")
    mod = importlib.import_module("engine.serving.bench")
    mod.add_arguments(sb)
    return mod.cli(sb.parse_args(argv), _emit)


def _prepare(argv) -> int:
    """Convert the packaged models to their safetensors copies in the user cache, once (no model is loaded)."""
    pp = argparse.ArgumentParser(prog="python -m engine prepare",
                                 description="Convert the packaged models once (the app and the tests load them fast "
                                             "afterwards).")
    pp.add_argument("--model", choices=[*catalog.names(), "all"], default="all")
    pp.add_argument("--parent", type=int, default=None,
                    help="end when this process (the app that started the preparation) is gone")
    args = pp.parse_args(argv)
    from engine.models import packaged

    if args.parent is not None:
        from engine.models.background import exit_with_parent

        exit_with_parent(args.parent)
    try:
        for r in catalog.rows():
            if args.model in (r.name, "all") and not packaged.is_converted(r):
                packaged.prepare(r)
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _settings(argv) -> int:
    """Rewrite docs/settings.md's table from engine/settings.py (no model); --help and unknown arguments are
    argparse's, before anything is written."""
    argparse.ArgumentParser(prog="python -m engine settings",
                            description="Rewrite the table of environment variables in docs/settings.md from "
                                        "engine/settings.py (a test fails while the file is not current).",
                            ).parse_args(argv)
    print(f"wrote the settings table into {settings.write_docs()}")
    return 0


def in_mode(lm, mode: str, eager_because: str = ""):
    """``lm`` in the engine ``mode`` asked for; where that mode cannot run (the model, the machine, or the command's
    own work: ``eager_because``), one line on stderr and the eager model."""
    from engine.core.compiled import ModeError, to_mode

    if mode == DEFAULT_MODE:
        return lm
    if eager_because:
        print(f"compiled mode: {eager_because}; eager runs.", file=sys.stderr)
        return lm
    try:
        return to_mode(lm, mode)
    except ModeError as exc:
        print(f"{exc} Eager runs.", file=sys.stderr)
        return lm


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve-bench"]:
        return _serve_bench(argv[1:])
    if argv[:1] == ["prepare"]:
        return _prepare(argv[1:])
    if argv[:1] == ["settings"]:
        return _settings(argv[1:])
    if argv[:1] in (["replay"], ["verify"]):  # parsed on their own: replay loads no model, verify the record's
        return (record_cli.replay_main if argv[0] == "replay" else record_cli.verify_main)(argv[1:])
    args = build_parser(argv).parse_args(argv)
    from engine.core.prompt import PromptError
    from engine.measure.threads import apply_policy
    from engine.models.loading import load_model

    apply_policy()  # the same CPU thread policy as the app, so CLI and page figures compare
    try:
        lm = load_model(ModelRef(args.model, getattr(args, "load_precision", None) or ""), device=args.device)
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    lm = in_mode(lm, args.mode, bench_of(args.bench).eager_because if args.cmd == "bench" else "")
    if args.cmd == "info":
        i = lm.info
        d = described(lm.ref, i)
        arch_d = d.pop("arch", None) or {}
        refusals = arch_d.pop("refusals", {}) if arch_d else {}
        text = "\n".join(f"{k}: {v}" for k, v in d.items())
        if i.arch is not None:
            text += f"\narchitecture: {i.arch.describe()}\n" + "\n".join(
                f"{k}: {v}" for k, v in arch_d.items())
            text += "".join(f"\nnot shown: {k}: {v}" for k, v in refusals.items())
        _emit(args, described(lm.ref, i), text)
        return 0
    if args.cmd == "trace":
        from engine.core.trace import run_trace, warm_run
        from engine.measure import noise

        s = sampling_settings(args)
        try:
            warm_run(lm, args.prompt, args.max_new_tokens, not args.no_chat_template)  # compiled: its graphs, untimed
            with noise.calibrated() as cal:
                t = run_trace(lm, args.prompt, s, args.max_new_tokens, args.seed, not args.no_chat_template)
        except PromptError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.save and record_cli.save_trace(lm, t, cal.result, args.save, "python -m engine trace"):
            return 2
        text = (f"{t.encoded.text}{bold(t.generated_text)}\n\n{len(t.prompt_ids)} prompt tokens, "
                f"{len(t.generated_ids)} new; time to first token {t.ttft * 1000:.0f} ms; "
                f"{t.tokens_per_second:.1f} tokens/s ({t.stop_reason}); engine: {t.engine_mode}, prefill: {t.prefill_mode}")
        _emit(args, t.to_dict(lm.tokenizer, attentions=not args.no_attentions), text)
        return 0
    if args.cmd == "race":
        return importlib.import_module("engine.speculative.cli").cli(lm, args, _emit, record_cli.save_race)
    bench = bench_of(args.bench)
    result = bench.run(lm, args)
    _emit(args, result, bench.summary(result) if bench.summary is not None else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
