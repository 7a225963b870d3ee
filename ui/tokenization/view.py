"""Display values for the tokenization page: which text, the Paris question's answer, the inspected token's
fields, the token table and its CSV (the page only lays them out)."""
from __future__ import annotations

import pandas as pd

from engine.predictions.grading import same_tokens
from engine.tokenization.tokens import SENTENCEPIECE_SPACE, TokenTable
from ui.frame.lessons import lesson
from ui.frame.figures import invisible_names, token_label

YOUR_PROMPT = "Your prompt (sidebar)"
EXAMPLES = {
    YOUR_PROMPT: None,
    "Many scripts: emoji, CJK, right-to-left": "I \u2764\ufe0f tokens \U0001f642\U0001f680 \u6771\u4eac\u306f\u65e5"
                                                "\u672c\u306e\u9996\u90fd\u3002 \u05e9\u05dc\u05d5\u05dd "
                                                "\u0645\u0631\u062d\u0628\u0627 caf\u00e9 na\u00efve",
    "Invisible characters": "zero\u200bwidth\u200bspace, soft\u00adhyphen, word\u2060joiner, non\u00a0breaking",
    "Code": "def add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b  # 4 spaces of indent\n\nprint(add(2, 40))",
    "HTML and script (shown literally)": "<script>alert(1)</script> <b>x</b> &amp; <img src=x onerror=alert(2)>",
    "Numbers": "In 2024, 1234567 + 89 = 1234656; pi is 3.14159.",
}


def text_for(choice: str | None, prompt: str) -> str:
    example = EXAMPLES.get(choice or YOUR_PROMPT)
    return prompt if example is None else example


def raw_toggle(table: TokenTable) -> tuple[str, str]:
    """The raw-pieces toggle's label and help, for this tokenizer's way of storing pieces: byte-level BPE (SmolLM2)
    spells every byte with a stand-in character, SentencePiece (Gemma) marks a leading space with ▁."""
    if table.byte_level:
        return ("Show raw vocabulary pieces (Ġ = space, Ċ = newline)",
                "Byte-level BPE stores each byte as a printable stand-in character; this shows those stored pieces "
                "instead of the text they decode to.")
    return (f"Show raw vocabulary pieces ({SENTENCEPIECE_SPACE} = space)",
            f"SentencePiece stores a word's leading space as {SENTENCEPIECE_SPACE}, and a byte it has no piece for "
            "as a <0x..> piece; this shows those stored pieces instead of the text they decode to.")


def is_example(choice: str | None) -> bool:
    return EXAMPLES.get(choice or YOUR_PROMPT) is not None


def paris_answer(ids) -> str | None:
    """The reveal of the "Try this" box from this tokenizer's real ids of "Paris", " Paris" and "paris"
    (runs.paris_ids; None: it cannot encode them, and the lesson box is left out)."""
    if ids is None:
        return None
    a, b, c = ids
    name = "answer all different" if len({a, b, c}) == 3 else "answer some shared"
    return lesson("tokenization", name, a=list(a), b=list(b), c=list(c))


def invisible_note(table: TokenTable) -> str | None:
    """The caption line that says what the ⟨U+...⟩ chips are, when the text has any (None: it has none)."""
    names = dict.fromkeys(n for r in table.rows if not r.special and not r.partial for n in invisible_names(r.text))
    return lesson("tokenization", "invisible chips", names="; ".join(names)) if names else None


def counts_text(table: TokenTable, info) -> str:
    n = len(table.rows)
    return lesson("tokenization", "why counts matter", context=info.max_positions, n=n, heads=info.n_heads,
                  layers=info.n_layers, pairs=n * n * info.n_heads * info.n_layers)


def token_fields(table: TokenTable, i: int) -> pd.DataFrame:
    """Every field of token ``i`` as a two-column table."""
    r = table.rows[i]
    span = table.text[r.start:r.end] if r.start is not None else None
    kind = ("special control token" if r.special else
            "piece of a multi-byte character (decodes to \ufffd on its own)" if r.partial else "text")
    return pd.DataFrame({
        "field": ["position", "token id", "raw piece", "decodes to", "bytes (hex)", "character span",
                  "text in span", "kind"],
        "value": [str(r.position), str(r.id), r.piece, token_label(r.text), r.bytes_hex,
                  f"[{r.start}, {r.end})" if r.start is not None else "not reported by this tokenizer",
                  token_label(span) if span is not None else "-", kind],
    })


def token_table(table: TokenTable) -> tuple[pd.DataFrame, bytes]:
    """The table as shown (invisible characters by code point) and the CSV (raw UTF-8 text)."""
    df = pd.DataFrame(table.records())
    shown = df.copy()
    for col in ("piece", "text", "span text"):
        shown[col] = shown[col].map(lambda v: token_label(v) if isinstance(v, str) else v)
    return shown, df.to_csv(index=False).encode("utf-8")


def tokens_line(texts, n_tokens: int, limit: int = 200) -> str:
    return " | ".join(token_label(t) for t in texts[:limit]) + (" | ..." if n_tokens > limit else "")


def verdict(paris):
    """Which choice of the page's question this model's ids of "Paris", " Paris" and "paris" decide."""
    return same_tokens(paris)
