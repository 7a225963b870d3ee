"""Saved runs built from the engine's own records: a ``Trace`` (engine/core/trace.py) or a race's ``SpecRun``
(engine/speculative/records.py), with who ran them (the model's identity) and where (the machine).

Nothing here runs the model: every number comes from the record of the run, the model's facts and the hashes the
model cache keeps. The field-by-field description is docs/record-format.md.
"""
from __future__ import annotations

import hashlib
import os
import platform
import time
from dataclasses import asdict
from importlib import metadata

import numpy as np

from engine.record.format import FORMAT, VERSION
from engine.record.values import encode_array
from engine.record.summaries import timings
from engine.record.speculative import race_summary

FIRST_TOP = 200  # tokens of the first step whose text the record keeps (the sampling sliders' bars)
TOKENIZER_FILES = ("tokenizer", "chat_template", "special_tokens_map", "vocab", "merges", "spiece", "added_tokens")
LIBRARIES = ("torch", "transformers", "tokenizers", "numpy", "safetensors")


# ------------------------------------------------------------------------------------------------ who and where


def engine_mode(ref) -> str:
    """How the engine ran the model: "eager" (plain PyTorch modules) or "compiled" (engine.core.compiled: a static
    cache and torch.compile around the decode step), as the model's reference says; the one place a record reads
    it."""
    return str(ref.mode)


def _summary_hash(files: dict, pick) -> str | None:
    chosen = sorted(name for name in files if pick(name))
    if not chosen:
        return None
    return hashlib.sha256("".join(f"{n} {files[n]['sha256']}\n" for n in chosen).encode()).hexdigest()


def is_weights(name: str) -> bool:
    return name.endswith(".safetensors") or name == "parameters (in memory)"


def is_tokenizer(name: str) -> bool:
    return name.startswith(TOKENIZER_FILES)


def _in_memory(lm) -> dict:
    """The tiny models have no files: their parameters and tokenizer hashed as they are in memory."""
    import torch

    h = hashlib.sha256()
    size = 0
    for name, t in sorted(lm.model.state_dict().items()):
        if not isinstance(t, torch.Tensor):  # an int8 copy's packed weights (a tuple) are left out
            continue
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        h.update(name.encode() + b"\0")
        h.update(raw.tobytes())
        size += raw.size
    tok = lm.tokenizer.backend_tokenizer.to_str().encode() if hasattr(lm.tokenizer, "backend_tokenizer") else b""
    return {"parameters (in memory)": {"size": size, "sha256": h.hexdigest()},
            "tokenizer (in memory)": {"size": len(tok), "sha256": hashlib.sha256(tok).hexdigest()}}


def model_identity(lm, source_name: str | None = None) -> dict:
    """Which weights and tokenizer ran: the size and SHA-256 of every file the loader read, per file and summed
    into one hash for the weights and one for the tokenizer. ``source_name``: what the loader was given, when the
    model is shown under another name (a class server's label)."""
    from engine.models.names import TINY
    from engine.models.convert import file_checksums
    from engine.models.packaged import model_folder
    name = source_name or lm.ref.name
    folder = model_folder(name)
    files = file_checksums(folder) if folder is not None else None
    if files:
        how = ("its model cache's checksum record (written when it was converted, checked at every load)"
               if (folder / "checksum.json").is_file() else "its folder's files, hashed when the run was saved")
    elif name == TINY or name.startswith(TINY.split("-")[0] + "-"):  # the tiny models (tests: tiny-<family>)
        files, how = _in_memory(lm), "its parameters and tokenizer hashed in memory (it is built from a config)"
    else:
        files, how = {}, "not known: no files of this model were found to hash (a hub model)"
    return {"how": how, "files": files, "weights_sha256": _summary_hash(files, is_weights),
            "tokenizer_sha256": _summary_hash(files, is_tokenizer)}


def model_facts(ref, info, identity: dict) -> dict:
    """The model's name, precision, engine mode (its ``ModelRef``), architecture facts and identity, as the record
    keeps them."""
    d = info.to_dict()
    return {
        "name": ref.name, "source": info.source, "model_type": info.model_type,
        "precision": ref.precision or info.dtype, "dtype": info.dtype, "device": info.device,
        "engine_mode": engine_mode(ref), **{k: d[k] for k in (
            "n_params", "n_layers", "n_heads", "n_kv_heads", "head_dim", "hidden_size", "intermediate_size",
            "vocab_size", "max_positions", "tied_embeddings", "has_chat_template", "position_encoding", "rope_theta")},
        "arch": d.get("arch"), "identity": identity,
    }


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def calibration_dict(cal) -> dict | None:
    """The noise guard's calibration of the measurement (engine/measure/noise.py), with its one-line reading."""
    if cal is None:
        return None
    return {**asdict(cal), "flags": list(cal.flags), "described": cal.describe()}


def machine_facts(device: str, threads: int, calibration=None) -> dict:
    """Where the run was measured: the device and its name, cores and torch threads, the thread policy, the library
    versions, and the load the noise guard saw while it ran (None when the run was not measured under it)."""
    import torch

    from engine.measure.threads import cores, describe_policy

    dev = torch.device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()
    versions = {}
    for lib in LIBRARIES:
        try:
            versions[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"device": dev.type, "device_name": name, "cores": cores(), "torch_threads": max(1, int(threads)),
            "thread_policy": str(describe_policy()), "os": platform.platform(), "python": platform.python_version(),
            "libraries": versions, "calibration": calibration_dict(calibration), "load_avg_at_save": load}


def _envelope(kind: str, saved_by: str, model: dict, machine: dict) -> dict:
    return {"format": FORMAT, "version": VERSION, "kind": kind,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "saved_by": saved_by[:300],
            "model": model, "machine": machine}


# ------------------------------------------------------------------------------------------------ a trace


def _prompt(text: str, encoded, tokens) -> dict:
    return {"text": text, "input_text": encoded.text, "chat_template_applied": bool(encoded.chat_applied),
            "notes": list(encoded.notes), "ids": [int(i) for i in encoded.ids], "tokens": list(tokens)}


def step_dict(s) -> dict:
    d = asdict(s)
    d["top_ids"], d["top_tokens"] = list(s.top_ids), list(s.top_tokens)
    d["top_probs"], d["top_logits"] = [float(p) for p in s.top_probs], [float(x) for x in s.top_logits]
    return d


def _top_table(tokenizer, ids, probs) -> dict:
    from engine.core.prompt import token_text

    ids = np.asarray(ids)
    flat = sorted({int(i) for i in ids.reshape(-1)})
    text = dict(zip(flat, token_text(tokenizer, flat)))
    return {"ids": ids.astype(int).tolist(), "tokens": [[text[int(i)] for i in row] for row in ids],
            "probs": np.asarray(probs, dtype=np.float64).round(6).tolist()}


def _analysis(a, tokenizer) -> dict:
    return {
        "attentions": encode_array(a.attentions, "float16"),  # [layers, heads, m, m]
        "embedding_preview": encode_array(a.embedding_preview, "float32"),  # [n, 8]
        "residual_norms": encode_array(a.residual_norms, "float32"),  # [layers + 1, n]
        "hidden_preview": [float(v) for v in a.hidden_preview],
        "lens": _top_table(tokenizer, a.lens_ids, a.lens_probs),  # [layers + 1, 5] at the last prompt position
        "positions": _top_table(tokenizer, a.top_ids, a.top_probs),  # [n, 10] next-token top-k at every position
    }


def kv_formula(info, steps) -> list[int]:
    """Derived: the KV bytes the per-layer formula gives after each step (engine.core.kv.layer_bytes_formula)."""
    from engine.core.kv import layer_bytes_formula

    return [int(sum(layer_bytes_formula(info, s.kv_tokens))) for s in steps]


def trace_record(trace, tokenizer, identity: dict, machine: dict, saved_by: str) -> dict:
    """The saved form of one traced run (not yet sealed: ``engine.record.format.dumps`` adds the content hash)."""
    from engine.core.prompt import token_text

    first = np.asarray(trace.first_logits, dtype=np.float32)  # [vocab]
    top = np.argsort(-first, kind="stable")[:FIRST_TOP]
    t = {
        "prompt": _prompt(trace.prompt, trace.encoded, trace.prompt_tokens),
        "settings": asdict(trace.settings), "seed": int(trace.seed), "max_new_tokens": int(trace.max_new_tokens),
        "generated_ids": [int(i) for i in trace.generated_ids], "generated_tokens": list(trace.generated_tokens),
        "generated_text": trace.generated_text, "stop_reason": trace.stop_reason,
        "timed_in_batcher": bool(trace.timed_in_batcher), "steps": [step_dict(s) for s in trace.steps],
        "kv_formula_bytes": kv_formula(trace.info, trace.steps),
        "timings": timings([s.seconds for s in trace.steps]),
        "first_logits": {"values": encode_array(first, "float32"), "top_ids": top.astype(int).tolist(),
                         "top_tokens": token_text(tokenizer, top.tolist())},
        "analysis": _analysis(trace.analysis, tokenizer) if trace.analysis is not None else None,
    }
    return {**_envelope("trace", saved_by, model_facts(trace.model, trace.info, identity), machine), "trace": t}


# ------------------------------------------------------------------------------------------------ a race


def race_record(run, result_check, prompt: str, encoded, tokenizer, ref, info, identity: dict, machine: dict,
                saved_by: str) -> dict:
    """The saved form of a race (plain vs speculative decoding, engine.speculative.decoding.race) with the noise
    guard's judgement of its speedup (``result_check``: engine.measure.noise.SpeedupCheck)."""
    from engine.core.prompt import token_text

    rounds = []
    for r in run.rounds:
        d = asdict(r)
        d["drafted"], d["q"], d["p"] = list(r.drafted), list(r.q), list(r.p)
        d["target_top_ids"], d["target_top_probs"] = list(r.target_top_ids), list(r.target_top_probs)
        d["drafted_tokens"] = token_text(tokenizer, list(r.drafted))
        d["token_text"] = token_text(tokenizer, [r.token])[0]
        rounds.append(d)
    race = {
        "prompt": _prompt(prompt, encoded, token_text(tokenizer, encoded.ids)),
        "drafter": run.drafter, "k": int(run.k), "settings": asdict(run.settings), "seed": int(run.seed),
        "max_new_tokens": int(run.max_new_tokens), "threads": int(run.threads),
        "plain": {"ids": list(run.plain_ids), "tokens": list(run.plain_tokens),
                  "step_seconds": list(run.plain_step_seconds), "steps": [step_dict(s) for s in run.plain_steps]},
        "speculative": {"ids": list(run.spec_ids), "tokens": list(run.spec_tokens),
                        "prefill_seconds": float(run.spec_prefill_seconds), "rounds": rounds},
        "summary": race_summary(run),
        "check": {"shown": result_check.shown, "no_gain": bool(result_check.no_gain),
                  "flags": list(result_check.flags)},
    }
    return {**_envelope("race", saved_by, model_facts(ref, info, identity), machine), "race": race}


def steps_of(saved: list[dict]) -> tuple:
    """Saved steps back as the engine's StepRecord values (the app's figures and tables read those)."""
    from engine.core.trace import StepRecord

    return tuple(StepRecord(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}) for d in saved)
