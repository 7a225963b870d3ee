"""Cached tokenizer work for the tokenization page, keyed on plain values (no forward pass is involved)."""
from __future__ import annotations

import logging
import streamlit as st

from engine.tokenization import tokens as T
from engine.models import catalog
from engine.models.names import builtin
from engine.core.loaded import ModelRef
from ui.frame.models import get_model, offered, policy
from ui.frame.cache import memo, shared

logger = logging.getLogger(__name__)


@memo(48)
def table_for(ref: ModelRef, text: str, chat: bool) -> T.TokenTable:
    """What the model receives for ``text`` (raises PromptError for an empty text)."""
    return T.prompt_table(get_model(ref).tokenizer, text, chat)


@memo(48)
def segments_for(ref: ModelRef, ids: tuple[int, ...]) -> list[T.Segment]:
    return T.segments(get_model(ref).tokenizer, ids)


@memo(48)
def ids_for(ref: ModelRef, text: str) -> tuple[int, ...]:
    tok = get_model(ref).tokenizer
    return tuple(int(i) for i in tok(text, add_special_tokens=False)["input_ids"])


@shared(8)
def _tokenizer(name: str, path: str | None):
    """``path``: a folder (or, in class mode, an allow-listed target); None: one of the app's own models."""
    if path in builtin():
        return T.builtin_tokenizer(path)
    if path:
        return T.load_tokenizer(path)
    return T.builtin_tokenizer(name)


def sources(current: str) -> list[T.TokenizerSource]:
    """Every tokenizer available offline: the app's two models, the model loaded now, the local hub cache.
    In class mode only the allow-list's models, by their labels: nothing else on the server is read or named
    (not its Hugging Face cache, not a packaged tokenizer, not a built-in model the teacher left off the list)."""
    pol = policy()
    if pol.class_mode:
        return [T.TokenizerSource(label, target) for label, target in pol.allowed]
    out = [T.TokenizerSource(name, None) for name in builtin()]
    if current not in builtin():
        out.append(T.TokenizerSource(current, None))
    out += T.packaged_tokenizers()
    names = {s.name for s in out}
    out += [s for s in _cached_sources() if s.name not in names]
    return out


@memo(8, ttl=300)
def _cached_sources() -> list[T.TokenizerSource]:
    return T.cached_tokenizers()


@memo(24)
def compare_for(text: str, srcs: tuple[T.TokenizerSource, ...], current: ModelRef) -> tuple[list, list[str]]:
    """(counts, problems): ``text`` through every source; one that cannot be loaded is reported, not fatal."""
    counts, problems = [], []
    class_mode = policy().class_mode
    for s in srcs:
        try:
            tok = get_model(current).tokenizer if s.name == current.name else _tokenizer(s.name, s.path)
            if tok is None:
                problems.append(f"{s.name}: not available on this machine")
                continue
            counts.append(T.count_tokens(s.name, tok, text))
        except Exception as exc:  # a broken cached tokenizer must not break the page
            # a class server never shows why (the reason can name its folders); its log has it
            if class_mode:
                logger.info(f"class mode: tokenizer of {s.name!r} could not be read: {type(exc).__name__}: {exc}")
            problems.append(f"{s.name}: not available on this server" if class_mode else
                            f"{s.name}: {type(exc).__name__}: {str(exc)[:120]}")
    return counts, problems


def pair_offered() -> bool:
    """Does this server offer the first two packaged models (SmolLM2 and Gemma 3)? A class server shows their pair
    only when its list offers both."""
    return all(offered(name) for name in catalog.names()[:2])


@memo(24)
def contrast_for(text: str) -> list[T.ContrastRow] | None:
    """The first two packaged models' tokenizers (SmolLM2's and Gemma 3's) on the contrast texts and on ``text``
    (None: one is not available yet, e.g. Gemma still being prepared). Tokenizers only: no model weights are loaded
    for this."""
    if not pair_offered():
        return None
    first, second = catalog.names()[:2]
    a, b = _tokenizer(first, None), _tokenizer(second, None)
    if a is None or b is None:
        return None
    texts = ((("Your text", text),) if text.strip() else ()) + T.CONTRAST_TEXTS
    return T.contrast("SmolLM2 (49k BPE)", a, "Gemma 3 (262k)", b, texts)


def paris_ids(ref: ModelRef) -> tuple | None:
    """This tokenizer's ids of "Paris", " Paris" and "paris" (None: it cannot encode them)."""
    try:
        return tuple(ids_for(ref, w) for w in ("Paris", " Paris", "paris"))
    except Exception:  # a tokenizer that cannot encode these: the lesson box is left out
        return None
