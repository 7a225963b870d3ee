"""The command line of saved runs: ``trace/race --save RUN.json``, ``replay RUN.json --html OUT.html`` and
``verify RUN.json [--json]`` (wired in engine/__main__.py). Replay needs no model and no torch work; verify loads the
model the record names (or ``--model``) and runs it again.

Exit codes: 0 done (verify: reproduced, or within tolerance); 1 verify ran and the record was not reproduced;
2 refused (a damaged, edited or newer record; a model this machine does not have; a file that cannot be written).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REFUSED = 2  # engine.record.format (numpy) is imported where a record is read or written: --help needs neither


def write(record: dict, path: str) -> int:
    """Write a record where --save asked; a line on stderr says where and how big (stdout stays the run's output)."""
    from engine.record.format import save

    try:
        size = save(record, path)
    except OSError as exc:
        print(f"error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return REFUSED
    print(f"saved this run to {path} ({size / 2**20:.2f} MB): python -m engine replay {path} --html RUN.html",
          file=sys.stderr)
    return 0


def save_trace(lm, trace, calibration, path: str, command: str) -> int:
    import torch

    from engine.record.build import machine_facts, model_identity, trace_record

    machine = machine_facts(str(lm.device), torch.get_num_threads(), calibration)
    return write(trace_record(trace, lm.tokenizer, model_identity(lm), machine, command), path)


def save_race(lm, run, check, prompt: str, encoded, calibration, path: str, command: str) -> int:
    from engine.record.build import machine_facts, model_identity, race_record

    machine = machine_facts(str(lm.device), run.threads, calibration)
    return write(race_record(run, check, prompt, encoded, lm.tokenizer, lm.ref, lm.info, model_identity(lm),
                             machine, command), path)


def parser(command: str, description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"python -m engine {command}", description=description)
    ap.add_argument("record", metavar="RUN.json")
    return ap


def load_or_say(path: str):
    from engine.record.format import RecordError, load

    try:
        return load(path)
    except RecordError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def replay_parser() -> argparse.ArgumentParser:
    ap = parser("replay", "Write a saved run as one self-contained HTML page (no server, no network): the run stage "
                          "by stage, every chart drawn offline.")
    ap.add_argument("--html", metavar="OUT.html", required=True, help="the page to write")
    return ap


def replay_main(argv) -> int:
    """``python -m engine replay``: the record is read and checked here (the engine's), the page is the UI's
    (ui/record/replay.py), which the command line runs as a program of its own, as git runs its subcommands, rather
    than importing it: the engine imports no UI."""
    import subprocess

    args = replay_parser().parse_args(argv)
    if load_or_say(args.record) is None:
        return REFUSED
    root = str(Path(__file__).resolve().parents[2])  # the checkout, whatever folder the command was run from
    code = f"import sys; sys.path.insert(0, {root!r}); from ui.record.replay import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.call([sys.executable, "-c", code, args.record, "--html", args.html])


def _short(text: str, n: int = 80) -> str:
    """``text`` within ``n`` characters, cut in the middle: a long folder path keeps its last part, the model's name."""
    return text if len(text) <= n else f"{text[:n // 3]}...{text[-(n - n // 3 - 3):]}"


def _model_missing(record: dict, name: str, exc, args) -> int:
    line = (f"The model this run was recorded with, '{_short(name)}' ({_short(record['model']['source'])}), cannot be "
            f"loaded on this machine: {str(exc)[:300]} Its replay needs no model: python -m engine replay "
            f"{args.record} --html RUN.html")
    if args.json:
        print(json.dumps({"status": "model missing", "ok": False, "verdict": line, "model": name}))
    else:
        print(f"error: {line}", file=sys.stderr)
    return REFUSED


def verify_main(argv) -> int:
    ap = parser("verify", "Run a saved run again on this machine and compare: the weights by hash, the tokens, the "
                           "logits step by step, the timings side by side.")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--model", default=None, help="load this model instead of the one the record names (its files "
                                                  "are still compared with the record's by SHA-256)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    args = ap.parse_args(argv)
    from engine.core.loaded import Mode, ModelLoadError, ModelRef
    from engine.models.loading import load_model
    from engine.models.precision import PRECISIONS, default_precision, unsupported_reason
    from engine.measure.threads import apply_policy

    record = load_or_say(args.record)
    if record is None:
        if args.json:
            print(json.dumps({"status": "refused", "ok": False, "verdict": "The record was refused (see stderr)."}))
        return REFUSED
    apply_policy()
    name = args.model or record["model"]["name"]
    precision = record["model"]["precision"]
    import torch

    from engine.models.loading import default_device

    device = torch.device(args.device) if args.device else default_device()
    note = None
    if precision not in PRECISIONS or unsupported_reason(precision, device):
        note = f"The record's precision {precision} does not run here; compared at {default_precision(device)}."
        precision = None
    try:
        lm = load_model(ModelRef(name, precision or ""), device=device)
    except (ModelLoadError, OSError, ValueError) as exc:
        return _model_missing(record, name, exc, args)
    if record["model"].get("engine_mode", Mode.EAGER) != Mode.EAGER:  # re-run in the recorded mode where it runs here
        from engine.core.compiled import ModeError, to_mode

        try:
            lm = to_mode(lm, record["model"]["engine_mode"])
        except (ModeError, ValueError) as exc:
            note = " ".join(filter(None, [note, f"The record's engine mode does not run here ({exc}); compared eager."]))
    from engine.record.format import RecordError
    from engine.record.verify import verify

    try:
        result = verify(record, lm, source_name=name)
    except ModelLoadError as exc:  # a race's draft model that is not here
        return _model_missing(record, name, exc, args)
    except RecordError as exc:  # a record this model cannot run (ids past its vocabulary)
        print(f"error: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"status": "refused", "ok": False, "verdict": str(exc)}))
        return REFUSED
    d = result.to_dict()
    if note:
        d["notes"] = [note, *d["notes"]]
    if args.json:
        from engine.record.values import strict

        print(json.dumps(strict(d), ensure_ascii=False, allow_nan=False))
    else:
        print(describe(d))
    return 0 if result.ok else 1


def describe(d: dict) -> str:
    """The verification as a few lines for a terminal."""
    tol = d["tolerance"]
    w = d["weights"]
    weights = ("not compared (no hashes on one side)" if not w["compared"] else
               "same files (SHA-256)" if w["same"] else "DIFFERENT files: " + ", ".join(
                   f"{n} {s}" for n, s in w["files"].items() if s != "same"))
    found = d["derived"]
    lines = [d["verdict"], "", f"weights and tokenizer: {weights}",
             f"derived again here from the token ids (strings, probabilities, the analysis, KV bytes): "
             f"{found['checked']:,} values, " + (f"{found['differ']:,} differ, the first at {found['first']['path']}"
                                                  if found["first"] else "all the same"),
             f"prompt ids from the recorded text: {'same' if d['prompt']['same_ids'] else 'DIFFERENT'}",
             f"tolerance: {tol['logit']:g} logits ({tol['why']})"]
    per = d["logits"]["per_step"]
    if per:
        lines.append("largest logit difference per step: " + " ".join(f"{x:.2g}" for x in per))
    if d["attention"] and d["attention"].get("largest") is not None:
        lines.append(f"attention weights: largest difference {d['attention']['largest']:.2g}")
    lines.append("timings (recorded -> here, ratio here/recorded):")
    lines += [f"  {t['what']}: {t['recorded_s'] * 1000:.1f} ms -> {t['here_s'] * 1000:.1f} ms, x{t['ratio']:.2f}"
              for t in d["timings"]]
    lines.append(f"recorded on {d['recorded_machine']['device_name']} ({d['recorded_machine']['device']}), here on "
                 f"{d['here_machine']['device_name']} ({d['here_machine']['device']})")
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)
