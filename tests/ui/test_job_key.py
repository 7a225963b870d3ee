"""A worker job's key tells two logits vectors apart: numpy's repr of a 49k-value array is a few numbers and "...",
so keys built from it gave two different positions of the sampling page one key (one job's result for both)."""
import numpy as np
import torch

from ui.frame.work import job_key


def _stages(logits, seed):
    return logits, seed


def test_arrays_that_differ_only_inside_the_repr_ellipsis_get_different_keys():
    a = np.zeros(49_152, np.float32)
    b = a.copy()
    b[20_000] = 1.0
    assert repr(a) == repr(b)  # what a repr-based key saw
    assert job_key(_stages, (a, 0), {}) != job_key(_stages, (b, 0), {})
    assert job_key(_stages, (a, 0), {}) == job_key(_stages, (a.copy(), 0), {})  # equal bytes: the same job


def test_tensors_are_keyed_by_their_bytes_dtype_and_shape():
    t = torch.zeros(6, dtype=torch.bfloat16)
    assert job_key(_stages, (t, 0), {}) == job_key(_stages, (t.clone(), 0), {})
    assert job_key(_stages, (t, 0), {}) != job_key(_stages, (t + 1, 0), {})
    assert job_key(_stages, (t, 0), {}) != job_key(_stages, (t.reshape(2, 3), 0), {})
    assert job_key(_stages, (t, 0), {}) != job_key(_stages, (t.float(), 0), {})


def test_a_typed_requests_key_is_its_kind_and_its_fields():
    """Two tabs asking the same request share one job (the worker joins equal keys); any field that differs, or
    another kind, is another job. A model is keyed by its name, never by its object."""
    from dataclasses import dataclass

    from engine.jobs.kinds import JobKind
    from ui.frame.work import request_key

    @dataclass(frozen=True)
    class Ask:
        prompt: str
        n: int = 3

    kind, other = JobKind("answer", alone=str), JobKind("analysis", alone=str)
    assert request_key(kind, Ask("hi")) == request_key(kind, Ask("hi"))
    assert request_key(kind, Ask("hi")) != request_key(kind, Ask("hi", 4))
    assert request_key(kind, Ask("hi")) != request_key(kind, Ask("ho"))
    assert request_key(kind, Ask("hi")) != request_key(other, Ask("hi"))
