"""Figures and escaped HTML for the tokenization page (no st.* calls here)."""
from __future__ import annotations

import html

import plotly.graph_objects as go

from ui.frame.figures import COLORS, invisible_names, style, token_label, whole_ticks
from ui.frame.html import PALETTE

SPECIAL_BG = "#1e293b"
PARTIAL_BG = "#e2e8f0"


def chip_label(row, raw_pieces: bool = False) -> str:
    if raw_pieces or row.special:
        return token_label(row.piece)
    if row.partial:
        return "\u27e8" + row.bytes_hex + "\u27e9"
    return token_label(row.text)


def tooltip(row, text: str) -> str:
    span = (f"chars {row.start}-{row.end}: {token_label(text[row.start:row.end])!r}" if row.start is not None
            else "no character offsets from this tokenizer")
    kind = "special (control) token" if row.special else (
        "part of a multi-byte character" if row.partial else "text token")
    return (f"#{row.position}  id {row.id}  ({kind})\npiece {row.piece!r}\ndecodes to {token_label(row.text)!r}\n"
            f"bytes {row.bytes_hex}\n{span}")


def token_chips(table, raw_pieces: bool = False, show_ids: bool = True) -> str:
    """Every token as a coloured chip (id underneath; special tokens dark; byte pieces as hex; an invisible
    character by its code point, with its Unicode name underneath). All escaped."""
    out = ['<div class="tok-chips" style="display:flex;flex-wrap:wrap;gap:4px;line-height:1.25;direction:ltr;">']
    for r in table.rows:
        if r.special:
            bg, fg = SPECIAL_BG, "#f8fafc"
        elif r.partial:
            bg, fg = PARTIAL_BG, "#334155"
        else:
            bg, fg = PALETTE[r.position % len(PALETTE)], "#0f172a"
        sub = ""
        if r.partial and r.start is not None and not raw_pieces:
            sub = (f'<div style="font-size:0.6875rem;color:#64748b">part of '
                   f'{html.escape(token_label(table.text[r.start:r.end]))}</div>')
        elif not r.special and not raw_pieces and invisible_names(r.text):  # drawn as nothing: say what it is
            sub = (f'<div style="font-size:0.6875rem;color:#64748b">'
                   f'{html.escape(", ".join(n.split(" ", 1)[1] for n in invisible_names(r.text)))}</div>')
        idtxt = f'<div style="font-size:0.6875rem;color:{"#cbd5e1" if r.special else "#475569"}">{r.id}</div>' \
            if show_ids else ""
        out.append(
            f'<div class="tok-chip" title="{html.escape(tooltip(r, table.text), quote=True)}" '
            f'style="background:{bg};color:{fg};border-radius:6px;padding:3px 6px;text-align:center;'
            f'font-family:ui-monospace,monospace;font-size:1rem;white-space:pre;unicode-bidi:isolate;">'
            f"<span>{html.escape(chip_label(r, raw_pieces))}</span>{sub}{idtxt}</div>")
    out.append("</div>")
    return "".join(out)


def template_view(segments) -> str:
    """The exact text the model receives, laid out as written, with special tokens highlighted. All escaped."""
    out = ['<div class="tok-template" style="white-space:pre-wrap;font-family:ui-monospace,monospace;'
           'font-size:1rem;line-height:1.6;background:#f8fafc;border:1px solid #cbd5e1;border-radius:8px;'
           'padding:10px 12px;color:#0f172a;unicode-bidi:plaintext;">']
    for s in segments:
        if s.special:
            out.append(f'<span style="background:{SPECIAL_BG};color:#fde68a;border-radius:4px;padding:1px 4px;'
                       f'font-weight:600">{html.escape(s.text)}</span>')
        else:
            out.append(html.escape(s.text))
    out.append("</div>")
    return "".join(out)


def compare_bar(counts, current: str) -> go.Figure:
    """Token count of the same text under each tokenizer (fewest at the top)."""
    counts = sorted(counts, key=lambda c: c.n_tokens)
    names = [f"{c.name} (vocab {c.vocab_size:,})" for c in counts][::-1]
    vals = [c.n_tokens for c in counts][::-1]
    colors = [COLORS["accent"] if c.name == current else COLORS["primary"] for c in counts][::-1]
    text = [f"{c.n_tokens} tokens, {c.chars_per_token:.2f} chars/token" for c in counts][::-1]
    fig = go.Figure(go.Bar(x=vals, y=names, orientation="h", marker_color=colors, text=text, textposition="auto"))
    style(fig, "The same text through each tokenizer compared here (red: the current model)",
          "tokens (count)", "tokenizer", height=max(260, 90 + 60 * len(counts)))
    fig.update_yaxes(automargin=True)
    return fig


def bytes_per_token_bar(table) -> go.Figure:
    """How many bytes each token stands for: long for common words, 1 for pieces of emoji or CJK characters."""
    xs = [r.position for r in table.rows]
    ys = [len(r.raw) for r in table.rows]
    colors = [SPECIAL_BG if r.special else (COLORS["warn"] if r.partial else COLORS["primary"]) for r in table.rows]
    hover = [f"#{r.position} id {r.id}: {token_label(r.text)!r}" for r in table.rows]
    fig = go.Figure(go.Bar(x=xs, y=ys, marker_color=colors, hovertext=hover, hoverinfo="text+y"))
    style(fig, "Bytes of text per token",
          "token position", "UTF-8 bytes", height=320)
    whole_ticks(fig, len(xs))
    return fig


def pair_bar(rows) -> go.Figure:
    """Grouped bars: tokens per text for two tokenizers (rows from engine.tokenization.tokens.contrast)."""
    if not rows:
        return style(go.Figure(), "Two tokenizers, same texts", "text", "tokens")
    kinds = [html.escape(r.kind, quote=False) for r in rows]
    fig = go.Figure()
    for side, color in (("a", COLORS["primary"]), ("b", COLORS["accent"])):
        counts = [getattr(r, side) for r in rows]
        fig.add_bar(x=kinds, y=[c.n_tokens for c in counts], name=html.escape(counts[0].name, quote=False),
                    marker_color=color, text=[c.n_tokens for c in counts], textposition="outside")
    fig.update_layout(barmode="group")
    return style(fig, "Two real tokenizers, same texts: tokens needed", "text (largest disagreement first)",
                 "tokens")
