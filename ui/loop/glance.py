"""The loop picture drawn as HTML boxes and arrows (no st.* here). Every model or user string is escaped."""
from __future__ import annotations

import html
from urllib.parse import urlencode

from ui.loop.view import LINKS, STAGES, Glance, title

CSS = """<style>
.ile-loop{display:grid;grid-template-columns:1fr 20px 1fr 20px 1fr 20px 1fr 20px 1fr;
 grid-template-rows:auto 58px auto;font-family:system-ui,sans-serif;color:#0f172a;margin:4px 0 8px}
.ile-box{display:block;border:2px solid #94a3b8;border-radius:10px;padding:5px 7px;text-decoration:none!important;
 color:#0f172a!important;background:#f8fafc;min-height:118px;position:relative;overflow:hidden}
.ile-box:hover{border-color:#2563eb}
.ile-box.active{border:3px solid #d97706;background:#fff7ed;box-shadow:0 0 0 3px #fde68a}
.ile-box.todo .ile-v{color:#64748b}
.ile-h{font-weight:700;font-size:16px;margin-bottom:3px}
.ile-v{font-family:ui-monospace,monospace;font-size:15px;line-height:1.3;white-space:pre-wrap;overflow-wrap:anywhere}
.ile-arrow{display:flex;align-items:center;justify-content:center;font-size:20px;color:#475569}
.ile-down{grid-column:9;grid-row:2;display:flex;align-items:center;justify-content:center;font-size:22px;color:#475569}
.ile-kv{grid-column:3/8;grid-row:2;position:relative}
.ile-kv .up{position:absolute;left:calc((100% - 40px)/6);right:calc((100% - 40px)/6);top:0;height:50%;
 border-right:3px solid #d97706;border-bottom:3px solid #d97706}
.ile-kv .down{position:absolute;left:calc((100% - 40px)/6);top:50%;bottom:0;border-left:3px solid #d97706}
.ile-kv .head{position:absolute;right:calc((100% - 40px)/6 - 9px);top:-12px;color:#d97706;font-size:18px}
.ile-kv .lab{position:absolute;left:0;right:0;top:calc(50% - 11px);text-align:center}
.ile-kv .lab span{background:#fff;padding:0 6px;font-size:15px;font-weight:600;color:#9a3412}
.ile-status{grid-column:1/3;grid-row:3;font-size:15px;padding:4px 6px;align-self:center}
.ile-badge{position:absolute;right:4px;top:4px;background:#d97706;color:#fff;border-radius:8px;padding:0 6px;
 font-size:14px;font-family:ui-monospace,monospace;max-width:60%;overflow:hidden;white-space:pre;text-overflow:ellipsis}
.ile-bar{display:flex;align-items:center;gap:4px;font-size:14px;line-height:1.25}
.ile-bar .tok{font-family:ui-monospace,monospace;width:38%;overflow:hidden;white-space:pre;text-overflow:ellipsis}
.ile-bar .track{flex:1;height:11px;background:#e2e8f0;border-radius:3px;overflow:hidden}
.ile-bar .fill{display:block;height:100%;background:#2563eb}
.ile-bar.chosen .fill{background:#dc2626}.ile-bar.chosen .tok{font-weight:700;color:#b91c1c}
.ile-bar .pct{width:3.2em;text-align:right}
.ile-chosen{display:inline-block;font-family:ui-monospace,monospace;font-size:22px;font-weight:700;
 background:#fee2e2;color:#991b1b;border-radius:6px;padding:0 6px;margin:2px 0;white-space:pre}
mark.ile-new{background:#fecaca;color:#991b1b;font-weight:700;padding:0 2px;border-radius:3px}
</style>"""

# grid (column, row) of each stage: the top row runs left to right, the bottom row comes back right to left
PLACE = {"text": (1, 1), "ids": (3, 1), "embeddings": (5, 1), "blocks": (7, 1), "hidden": (9, 1),
         "logits": (9, 3), "softmax": (7, 3), "sampled": (5, 3), "appended": (3, 3)}
ARROWS = [(2, 1, "\u25b6"), (4, 1, "\u25b6"), (6, 1, "\u25b6"), (8, 1, "\u25b6"),
          (8, 3, "\u25c0"), (6, 3, "\u25c0"), (4, 3, "\u25c0")]


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _body(g: Glance, stage: str, state: str) -> str:
    if state == "todo":
        return '<div class="ile-v">\u2026</div>'
    if stage == "softmax":
        rows = []
        for tok, p in zip(g.top_tokens, g.top_probs):
            cls = "ile-bar chosen" if tok == g.chosen else "ile-bar"
            rows.append(f'<div class="{cls}"><span class="tok">{_e(tok)}</span><span class="track">'
                        f'<span class="fill" style="width:{max(1.0, 100 * p):.0f}%"></span></span>'
                        f'<span class="pct">{100 * p:.0f}%</span></div>')
        return "".join(rows)
    if stage == "sampled":
        return (f'<div class="ile-chosen" data-testid="ile-chosen">{_e(g.chosen)}</div>'
                + "".join(f'<div class="ile-v">{_e(x)}</div>' for x in g.lines["sampled"]))
    if stage == "appended":
        return (f'<div class="ile-v">{_e(g.context_tail)}<mark class="ile-new">{_e(g.chosen)}</mark></div>'
                + "".join(f'<div class="ile-v">{_e(x)}</div>' for x in g.lines["appended"]))
    return "".join(f'<div class="ile-v">{_e(x)}</div>' for x in g.lines[stage])


def picture(g: Glance, stage: int, n_layers: int, query: dict | None = None) -> str:
    """The whole loop for pass ``g.t`` with stage number ``stage`` (index into STAGES) highlighted."""
    qs = ("?" + urlencode(query)) if query else ""
    out = [CSS, f'<div class="ile-loop" data-testid="ile-loop" data-token="{g.t}" data-stage="{STAGES[stage]}">']
    for i, name in enumerate(STAGES):
        # The text box holds the whole context; a decode pass starts from the new token's id.
        state = "active" if i == stage else ("todo" if i > stage and not (name == "text" and g.t) else "done")
        col, row = PLACE[name]
        badge = ""
        if state == "active":
            badge = f'<span class="ile-badge">{_e(g.traveller if i < STAGES.index("sampled") else g.chosen)}</span>'
        out.append(f'<a class="ile-box {state}" data-stage="{name}" href="{_e(LINKS[name] + qs)}" target="_self" '
                   f'style="grid-column:{col};grid-row:{row}" title="Open the {_e(LINKS[name])} page">'
                   f'{badge}<div class="ile-h">{_e(title(name, n_layers))}</div>{_body(g, name, state)}</a>')
    for col, row, ch in ARROWS:
        out.append(f'<div class="ile-arrow" style="grid-column:{col};grid-row:{row}">{ch}</div>')
    out.append('<div class="ile-down">\u25bc</div>')
    out.append('<div class="ile-kv"><div class="up"></div><div class="down"></div><div class="head">\u25b2</div>'
               '<div class="lab"><span>new token goes round again, with the KV cache</span></div></div>')
    what = (f"{g.phase}: the whole prompt in one pass" if g.t == 0 else
            f"decode: only {g.traveller!r} goes in; earlier keys and values come from the KV cache")
    out.append(f'<div class="ile-status"><b>Token {g.t + 1} of {g.n_tokens}</b><br>{_e(what)}</div>')
    out.append("</div>")
    return "".join(out)
