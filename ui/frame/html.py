"""The few places HTML is built by hand. Every piece of user or model text goes through html.escape."""
from __future__ import annotations

import html
import re

PALETTE = ["#dbeafe", "#fde68a", "#bbf7d0", "#fecaca", "#e9d5ff", "#fed7aa", "#a5f3fc", "#fbcfe8"]


def visible(text: str) -> str:
    """Whitespace made visible: space as a middle dot, newline as a return arrow, tab as an arrow."""
    return text.replace(" ", "\u00b7").replace("\n", "\u21b5").replace("\t", "\u21e5") or "\u2205"


def chips(tokens, ids=None, highlight: set[int] | None = None, title_extra=None) -> str:
    """Tokens as coloured chips, each with its id underneath. Safe for any token text. Sizes in rem, so presenter
    view's larger root type (ui/frame/style.py) reaches them (in px the ids stayed 9-11 px on a projector)."""
    out = ['<div style="display:flex;flex-wrap:wrap;gap:4px;line-height:1.2;">']
    for i, tok in enumerate(tokens):
        bg = "#fca5a5" if highlight and i in highlight else PALETTE[i % len(PALETTE)]
        tip = html.escape(title_extra[i] if title_extra else repr(tok), quote=True)
        idtxt = f'<div style="font-size:0.6875rem;color:#475569">{int(ids[i])}</div>' if ids is not None else ""
        out.append(
            f'<div title="{tip}" style="background:{bg};border-radius:6px;padding:3px 6px;text-align:center;'
            f'font-family:ui-monospace,monospace;font-size:1rem;color:#0f172a;white-space:pre">'
            f"{html.escape(visible(tok))}{idtxt}</div>"
        )
    out.append("</div>")
    return "".join(out)


_MD_SPECIAL = set("\\`*_{}[]()#+-.!|<>~$:=\"'&@^%")


WJ = "\u2060"  # word joiner: invisible, and it breaks the bare-URL and e-mail patterns of GitHub markdown


def plotly_text(text) -> str:
    """Text for a plotly title, legend, hover or annotation: plotly draws a subset of HTML there (<a href>, <b>, <br>,
    <span style>...), so <, > and & are written as entities, which plotly shows as the characters themselves."""
    return html.escape(str(text), quote=False)


def md_escape(text: str) -> str:
    """User text made literal inside Streamlit markdown (st.markdown, st.error, st.caption, st.spinner...):
    every ASCII punctuation mark is backslash-escaped (CommonMark allows that for any of them), so no link,
    image, emphasis, heading, HTML or colour/icon directive (``:red[...]``, ``:material/x:``) can form; newlines
    become spaces so the text cannot start a block of its own. Bare URLs, www. names and e-mail addresses are
    turned into links after escapes are resolved, so an invisible word joiner is put inside "://", "www." and
    before "@" (the text reads the same; it is never a link)."""
    text = re.sub(r"(?i)(www)(\.)", "\\1" + WJ + "\\2", str(text).replace("://", ":" + WJ + "//").replace("@", WJ + "@"))
    return "".join("\\" + c if c in _MD_SPECIAL else (" " if c in "\r\n" else c) for c in text)
