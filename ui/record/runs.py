"""Saved runs in the app: the files a page offers for download, built only when the button is pressed; an uploaded
file checked before anything reads it; and its re-run on this server's engine worker, kept for the session.

The download buttons hand Streamlit a function that builds the file when clicked (on a thread of its own, with no
page to draw on); anything in it that touches the model runs on the engine worker, like all torch work.
"""
from __future__ import annotations

import re
import time

from engine.jobs import worker
from engine.core.prompt import encode_prompt
from engine.measure import noise
from engine.measure.threads import policy_threads
from engine.record import build, format as record_format
from ui.record.replay import replay_html
from engine.record.verify import Verification, verify
from ui.frame import kept, work
from ui.frame.models import get_model, model_named, policy, ref_for


def file_name(model: str, kind: str, suffix: str) -> str:
    """'run-embedded-trace-20261126-2032.json': the model name reduced to safe characters (a folder path is not)."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", model.rsplit("/", 1)[-1]).strip("-")[:40] or "model"
    return f"run-{safe}-{kind}-{time.strftime('%Y%m%d-%H%M')}.{suffix}"


def _source(lm) -> str:
    """What the loader read for ``lm``: a class server's label stands for its target (hashed from there)."""
    return policy().target_of(lm.ref.name)


def _machine(lm, calibration=None) -> dict:
    return build.machine_facts(str(lm.device), policy_threads(), calibration)


def trace_record(trace, lm, saved_by: str = "the app: the loop page") -> dict:
    """The record of the home page's run (it was not measured under the noise guard: the load average at save
    time is what the record can say)."""
    identity = worker.run(build.model_identity, lm, _source(lm))
    return build.trace_record(trace, lm.tokenizer, identity, _machine(lm), saved_by)


def race_record(result, params, lm) -> dict:
    """The record of the race page's race, with the calibration it was measured under and its noise check."""
    identity = worker.run(build.model_identity, lm, _source(lm))
    enc = encode_prompt(lm.tokenizer, params.prompt, params.chat)
    return build.race_record(result.run, result.check, params.prompt, enc, lm.tokenizer, lm.info, identity,
                             _machine(lm, result.calibration), "the app: the speculative decoding page")


def json_bytes(make) -> bytes:
    return record_format.dumps(make())


def page_bytes(make) -> bytes:
    """The replay page of a record built now (sealed and checked first, as a file would be)."""
    return replay_html(record_format.load(record_format.dumps(make()))).encode("utf-8")


def uploaded(data: bytes) -> dict:
    """An uploaded file, checked (size, JSON, version, content hash, schema, consistency); raises RecordError."""
    return record_format.load(data)


PROMPT_SLACK = 128  # room for a chat template's tokens around the app's longest prompt


def availability(record: dict) -> str | None:
    """None when this server can run the record: its model (and a race's draft model) offered here, and no longer
    than the app's own runs (a file can ask for far more work than any page would); else why not, in one line."""
    from engine.models.names import ModelNotAllowed
    from engine.core.prompt import MAX_PROMPT_TOKENS
    from engine.core.trace import MAX_NEW_TOKENS

    body = record[record["kind"]]
    n, new = len(body["prompt"]["ids"]), body["max_new_tokens"]
    if n > MAX_PROMPT_TOKENS + PROMPT_SLACK or new > MAX_NEW_TOKENS:
        return (f"This run has a {n:,}-token prompt and asks for {new:,} new tokens; this server runs at most "
                f"{MAX_PROMPT_TOKENS + PROMPT_SLACK:,} and {MAX_NEW_TOKENS}.")
    pol = policy()
    names = [record["model"]["name"]]
    if record["kind"] == "race" and record["race"]["drafter"].startswith("model:"):
        draft = record["race"]["drafter"].partition(":")[2]
        if draft not in ("self", "target", record["model"]["name"]) and not draft.startswith("random"):
            names.append(draft)
    for name in names:
        try:
            pol.resolve(name)
        except ModelNotAllowed:
            return (f"This server does not offer the model '{name[:80]}' this run was recorded with (it offers "
                    f"{', '.join(pol.labels)}).")
    return None


def verification(record: dict) -> Verification | None:
    """This session's re-run of ``record`` (None until run)."""
    return kept.get(("record verify", record["content_sha256"]))


def run_here(record: dict) -> Verification:
    """Load the record's model under this server's policy (at the recorded precision when this device runs it),
    then re-run the record alone on the engine worker and compare. Raises ModelLoadError (or a drafter's error)
    for the page to show."""
    from engine.models.loading import default_device
    from engine.models.precision import default_precision, unsupported_reason

    m = record["model"]
    runs_here = not unsupported_reason(m["precision"], default_device())
    lm = get_model(ref_for(m["name"], m["precision"] if runs_here else default_precision(default_device())))
    drafter = None
    if record["kind"] == "race":
        from engine.speculative.drafters import make_drafter

        drafter = make_drafter(lm, record["race"]["drafter"], loader=model_named)  # the policy's models only
    result = work.run(verify, record, lm, noise.probe_seconds, _source(lm), drafter,
                      key=("record verify", record["content_sha256"], lm.ref))
    return kept.put(("record verify", record["content_sha256"]), result)
