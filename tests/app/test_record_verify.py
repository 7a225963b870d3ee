"""AppTest: the saved-run page's "Run it here" uses the same verify as the command line (issue 49): a record showing
other strings over the same ids, re-sealed, is not reproduced and the page names where; a record whose ids go past
this model's vocabulary is said in one line."""
import json

import pytest
import torch

from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from tests.record_edits import claim_twice_the_vocabulary
from engine.record import build, format as F
from tests.app.test_pages import errors, shown
from tests.app.test_record import open_record


@pytest.fixture(scope="module")
def record(tiny_lm) -> dict:
    tr = run_trace(tiny_lm, "The capital of France is", SamplingSettings(), max_new_tokens=4, seed=0)
    machine = build.machine_facts("cpu", torch.get_num_threads())
    return json.loads(F.dumps(build.trace_record(tr, tiny_lm.tokenizer, build.model_identity(tiny_lm), machine, "t")))


def _sealed(rec, edit) -> bytes:
    rec = json.loads(json.dumps(rec))
    edit(rec)
    return F.dumps({k: v for k, v in rec.items() if k != "content_sha256"})


def _run_here(data: bytes):
    at = open_record(data)
    at.button(key="record_run_here").click().run()
    assert not errors(at), errors(at)
    return at


def test_other_strings_over_the_same_ids_are_not_reproduced_in_the_app(record):
    def berlin(r):
        r["trace"]["prompt"]["tokens"][-1] = " Berlin"

    at = _run_here(_sealed(record, berlin))
    said = [shown(w.value) for w in at.warning]
    assert any(s.startswith("Not reproduced: the record's trace.prompt.tokens[") and "Berlin" in s for s in said), \
        [shown(x.value) for x in [*at.success, *at.info, *at.warning]]
    assert not at.success


def test_ids_past_this_models_vocabulary_are_one_line_in_the_app(record):
    big = claim_twice_the_vocabulary

    at = _run_here(_sealed(record, big))
    said = [shown(e.value) for e in at.error]
    assert len(said) == 1 and "past this model's vocabulary" in said[0], said
