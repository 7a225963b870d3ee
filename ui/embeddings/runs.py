"""Cached embedding-table and position work for the embeddings page, keyed on plain values.

None of it runs the transformer blocks; display options read these cached records and recompute nothing.
"""
from __future__ import annotations

import streamlit as st

from engine.embeddings import analysis as E
from engine.tokenization import tokens as T
from engine.core.loaded import ModelRef
from ui.frame import work
from ui.frame.models import get_model
from ui.frame.cache import memo


@memo(32)
def prompt_ids(ref: ModelRef, prompt: str, chat: bool) -> tuple[tuple[int, ...], tuple[str, ...], bool]:
    """(ids, tokens as decoded text, chat applied) for exactly what the model receives."""
    table = T.prompt_table(get_model(ref).tokenizer, prompt, chat)
    return table.ids, tuple(r.text for r in table.rows), table.chat_applied


@memo(32)
def embeddings_for(ref: ModelRef, ids: tuple[int, ...]) -> E.PromptEmbeddings:
    return work.run(E.prompt_embeddings, get_model(ref), ids)


@memo(16)
def map_for(ref: ModelRef, ids: tuple[int, ...], sample_size: int, seed: int) -> E.EmbeddingMap:
    return work.run(E.embedding_map, get_model(ref), ids, sample_size, seed)


@memo(64)
def neighbours_for(ref: ModelRef, token_id: int, k: int) -> E.Neighbours:
    return work.run(E.nearest_tokens, get_model(ref), token_id, k)


@memo(16)
def rope_for(ref: ModelRef, n_positions: int, layer: int = 0) -> E.RopeAngles:
    return work.run(E.rope_angles, get_model(ref), n_positions, layer)


@memo(32)
def relative_for(ref: ModelRef, q_token: int, k_token: int, head: int, n_positions: int) -> E.RelativeDemo:
    return work.run(E.relative_demo, get_model(ref), q_token, k_token, head, n_positions)


@memo(8)
def learned_for(ref: ModelRef, n_positions: int) -> E.LearnedPositions:
    return work.run(E.learned_positions, get_model(ref), n_positions)


@memo(8)
def tied_for(ref: ModelRef) -> E.TiedCheck:
    return work.run(E.tied_check, get_model(ref))


@memo(8)
def row_pair_for(ref: ModelRef, token_id: int, n: int = 6):
    return work.run(E.row_pair, get_model(ref), token_id, n)
