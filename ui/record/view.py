"""Display values of a saved run and of its re-run here (tables as DataFrames, lines as text; no st.* here)."""
from __future__ import annotations

import time

import pandas as pd

from ui.frame.html import visible


def when(record: dict) -> str:
    """The record's save time (UTC in the file) in this server's local time."""
    t = time.strptime(record["saved_at"], "%Y-%m-%dT%H:%M:%SZ")
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(time.mktime(t) - time.timezone))


def wall_speedup(shown: str, own: float) -> str:
    """A saved race's speedup, once: ``shown`` is the noise guard's reading of the median over the races measured
    ("2.18x", or "no gain"), ``own`` the recorded race's own wall-clock speedup, added only where it reads otherwise
    (the two were printed side by side: "2.18x (2.18x)")."""
    mine = f"{own:.2f}x"
    return mine if shown == mine else f"{shown} (the race recorded here: {mine})"


def machine_line(m: dict) -> str:
    libs = ", ".join(f"{k} {v}" for k, v in m["libraries"].items() if k in ("torch", "transformers"))
    return f"{m['device_name']} ({m['device']}, {m['torch_threads']} threads; {libs})"


def load_line(m: dict) -> str:
    cal = m["calibration"]
    if cal is None:
        la = m["load_avg_at_save"]
        return ("not measured under the noise guard" + (f" (load average {la:.1f} when saved)" if la is not None
                                                        else ""))
    return cal["described"] + (" " + " ".join(cal["flags"]) if cal["flags"] else "")


def facts_table(record: dict) -> pd.DataFrame:
    """What the record says about its model, settings and machine, one row each."""
    m, body = record["model"], record[record["kind"]]
    s = body["settings"]
    how = ("greedy (temperature 0)" if s["temperature"] == 0 else
           f"temperature {s['temperature']:g}, top-k {s['top_k']}, top-p {s['top_p']:g}, seed {body['seed']}")
    rows = [("model", f"{m['name']}: {m['source']}"),
            ("architecture", f"{m['model_type']}, {m['n_layers']} layers, {m['n_heads']} query heads, "
                             f"{m['n_kv_heads']} KV heads, vocabulary {m['vocab_size']:,}"),
            ("precision, engine mode", f"{m['precision']} on {m['device']}, {m['engine_mode']}"),
            ("weights (SHA-256)", m["identity"]["weights_sha256"] or f"not known ({m['identity']['how']})"),
            ("sampling", how),
            ("recorded", f"{when(record)} by {record['saved_by']}"),
            ("machine", machine_line(record["machine"])),
            ("load while measured", load_line(record["machine"]))]
    if record["kind"] == "race":
        r = body
        rows.insert(4, ("race", f"{r['drafter']}, k = {r['k']}, {r['max_new_tokens']} tokens to generate"))
    return pd.DataFrame(rows, columns=["", "recorded"])


def side_by_side(record: dict, v) -> pd.DataFrame:
    """Recorded there, measured here: the machine and setup on one row each."""
    rec, here = record["machine"], v.here_machine
    rows = [("device", f"{rec['device_name']} ({rec['device']})", f"{here['device_name']} ({here['device']})"),
            ("torch threads", str(rec["torch_threads"]), str(here["torch_threads"])),
            ("torch, transformers", f"{rec['libraries'].get('torch')}, {rec['libraries'].get('transformers')}",
             f"{here['libraries'].get('torch')}, {here['libraries'].get('transformers')}"),
            ("load while measured", load_line(rec), load_line(here))]
    return pd.DataFrame(rows, columns=["", "recorded there", "measured here"])


def files_table(v) -> pd.DataFrame:
    return pd.DataFrame([{"file": name, "compared by SHA-256": state} for name, state in v.weights["files"].items()])


def tokens_line(v) -> str:
    t = v.tokens if v.kind == "trace" else v.tokens["plain"]
    if t["same"]:
        return f"The same {t['count_here']} tokens here." if v.kind == "trace" else \
            f"Both lanes wrote the same tokens here ({t['count_here']} plain; the rounds drafted and kept the same)." \
            if v.tokens["same_rounds"] else f"Both lanes wrote the same {t['count_here']} tokens here."
    i = t["first_difference"]
    return (f"The tokens part at step {i}: recorded {visible(t['recorded_token'] or '')!r}, here "
            f"{visible(t['here_token'] or '')!r}" + (f" (the record's top two were {t['margin']:.3g} apart)"
                                                     if t["margin"] is not None else "") + ".")


def box(v) -> str:
    """Which box the verdict goes in: success, info or warning."""
    return {"identical": "success", "within tolerance": "info"}.get(v.status, "warning")
