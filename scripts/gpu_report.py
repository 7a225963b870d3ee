"""The section of docs/gpu.md that scripts/gpu_check.sh writes: every result it has, as Markdown, and all of them in
one JSON file.  python scripts/gpu_report.py RESULTS_DIR OUT.md OUT.json"""
from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path


def _load(d: Path, name: str) -> dict | None:
    try:
        return json.loads((d / name).read_text())
    except (OSError, ValueError):
        return None


def _text(d: Path, name: str) -> str:
    try:
        return (d / name).read_text().strip()
    except OSError:
        return ""


def decode(r: dict) -> list[str]:
    out = [f"| {r['dtype']} | {m} | {x['decode_ms_per_token']:.2f} | {x['tokens_per_s']:.1f} | "
           f"{x['ratio_to_eager']:.2f}x | {x['of_floor']:.0%} | {x['same_tokens']} | {x['ran_as']} |"
           for m, x in r["modes"].items()]
    out.append(f"| {r['dtype']} | floor | {r['floor_ms_per_token']:.3f} | {r['floor_tokens_per_s']:,.0f} | | | | "
               f"{r['decode_weight_bytes'] / 1e6:.0f} MB at {r['read_gb_s']:.0f} GB/s |")
    out += [f"| {r['dtype']} | refused | {why} | | | | | |" for why in r.get("refused", {}).values()]
    return out


def report(d: Path) -> tuple[str, dict]:
    every = {p.stem: _load(d, p.name) for p in sorted(d.glob("*.json"))}
    lines = [f"## Measured by scripts/gpu_check.sh on {datetime.date.today().isoformat()}", "",
             "```", _text(d, "gpu.txt"), "```", ""]
    dec = [every.get("decode-bfloat16"), every.get("decode-float32")]
    if any(dec):
        lines += ["### Decode: eager vs compiled vs the floor (bench decode --modes eager,compiled)", "",
                  "| dtype | mode | ms/token | tokens/s | vs eager | of floor | same tokens | ran as |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in dec:
            if r:
                lines += decode(r)
        lines.append("")
    hf = every.get("hf-compile")
    if hf:
        lines += ["### transformers' own static cache + torch.compile (the peer)", ""]
        for r in hf["rows"]:
            if "error" in r:
                lines.append(f"- {r['precision']}: failed: {r['error']}")
                continue
            lines.append(f"- {r['precision']}: {r['ms_per_token']:.2f} ms/token ({r['tokens_per_s']:.0f} tokens/s); "
                         f"CUDA graph skips: {r['cudagraph_skips']}")
            lines += [f"  - `{m.splitlines()[0][:300]}`" for m in r["skip_messages"][:3]]
            stack = [m for m in r["skip_messages"] if "Found from" in m][:1]
            if stack:
                lines += ["", "  ```", *("  " + s for s in stack[0].splitlines()[:14]), "  ```"]
        lines.append("")
    prof = every.get("profile")
    if prof:
        lines += ["### One step, kernel by kernel (bench profile)", "",
                  f"Floor {prof['floor_ms']:.3f} ms per decode step; roofline ridge "
                  f"{prof['ridge_flop_per_byte']:.0f} FLOPs per byte.", "",
                  "| mode | step | kernels | GPU busy | plain ms | traced ms | regime | top kernels |",
                  "|---|---|---|---|---|---|---|---|"]
        for m, row in prof["modes"].items():
            for phase, p in row.items():
                top = ", ".join(f"{o['name'][:40]} {o['ms']:.3f} ms x{o['count']}" for o in p["top_ops"][:3])
                lines.append(f"| {m} | {phase} | {p['ops_per_step']:,} | {p['device_busy_fraction']:.0%} | "
                             f"{p['plain_ms']:.3f} | {p['wall_ms']:.3f} | {p['regime']} | {top} |")
        lines.append("")
    tl = every.get("timeline")
    if tl:
        lines += ["### Prompt-length sweep (bench timeline)", "", "| prompt tokens | TTFT ms | TPOT ms |", "|---|---|---|"]
        lines += [f"| {r['prompt_tokens']:,} | {r['ttft_ms']['median']:.1f} | {r['tpot_ms']['median']:.2f} |"
                  for r in tl["sweep"]]
        lines += ["", f"Prefill started to climb at {tl.get('climb_started_at')} tokens; extended to "
                      f"{tl.get('extended')}; memory short at {tl.get('memory_short_at')}. Decode step "
                      f"{tl['decode_step_ms']:.2f} ms vs floor {tl['decode_floor_ms']:.3f} ms.", ""]
    for name in ("precision-eager", "precision-compiled"):
        r = every.get(name)
        if r:
            lines += [f"### bench precision ({name.split('-')[1]})", "",
                      "| precision | mode | MB/step | floor ms | decode ms | speedup vs float32 | same tokens |",
                      "|---|---|---|---|---|---|---|"]
            lines += [f"| {x['precision']} | {x.get('mode', '')} | {x['decode_weight_bytes'] / 1e6:.0f} | "
                      f"{x['floor_ms']:.3f} | {x['decode_ms']['median']:.2f} | {x['speedup_vs_float32']:.2f}x | "
                      f"{x['tokens_identical']}/{x['new_tokens']} |" for x in r["rows"]]
            lines.append("")
    race = every.get("race")
    if race:
        lines += ["### Race page vs `python -m engine race` (quote prompt, lookup, k = 4, greedy)", "",
                  "| new tokens | CLI speedup (before, after) | page speedup | page / CLI | page decode-only | identical |",
                  "|---|---|---|---|---|---|"]
        for r in race["rows"]:
            b, a, p = r["cli_before"], r["cli_after"], r["page"]
            lines.append(f"| {r['new_tokens']} | {b['speedup']:.2f}x, {a['speedup']:.2f}x | {p['speedup']}x | "
                         f"{r['page_vs_cli']:.2f} | {p['decode_speedup']}x | {p['identical']} (CLI: "
                         f"{b['identical']}) |" if r["page_vs_cli"] else f"| {r['new_tokens']} | | {p} | | | |")
        lines.append("")
    pages = every.get("pages")
    if pages:
        bad = [r for r in pages["rows"] if r["problems"]]
        lines += ["### Every page through AppTest on the GPU, buttons pressed", "",
                  f"{len(pages['rows'])} page runs, {sum(len(r['buttons_pressed']) for r in pages['rows'])} buttons "
                  f"pressed, {len(bad)} with a problem."]
        lines += [f"- {r['page']} ({r['mode']}): {'; '.join(r['problems'])[:400]}" for r in bad]
        lines.append("")
    inv = every.get("invariants")
    if inv:
        lines += ["### Invariants on the real weights (scripts/gpu_invariants.py)", ""]
        lines += [f"- {'PASS' if c['ok'] else 'FAIL'} {c['check']}: {c['detail'][:200]}" for c in inv["checks"]]
        lines.append("")
    skipped = _text(d, "skipped.txt")
    exits = _text(d, "exits.txt")
    lines += ["### Steps", "", f"Exit codes: {exits.replace(chr(10), '; ') or 'none'}.",
              f"Left for another call: {skipped.replace(chr(10), ', ') or 'none'}.", ""]
    return "\n".join(lines), every


def main(results: str, md: str, js: str) -> int:
    text, every = report(Path(results))
    Path(md).write_text(text)
    Path(js).write_text(json.dumps(every, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
