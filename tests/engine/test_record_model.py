"""Saved runs on the real SmolLM2 (model tier): the record's identity is the model cache's own checksum, a 40-token
prompt with 16 new tokens fits in a few MB, and an unchanged record re-runs to identical tokens on this machine."""
import torch

from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.record import build, format as F, verify as V
from ui.record.replay import replay_html

PROMPT = ("The lighthouse at Hook Head has guided ships for more than eight hundred years. Monks kept a fire burning "
          "on the headland long before the tower was built, and the stone walls are four metres thick")


def test_a_smollm2_record_is_a_few_mb_and_reproduces(embedded_lm):
    lm = embedded_lm
    tr = run_trace(lm, PROMPT, SamplingSettings(), max_new_tokens=16, use_chat_template=False)
    assert len(tr.prompt_ids) == 40 and len(tr.generated_ids) == 16
    identity = build.model_identity(lm)
    assert "checksum record" in identity["how"] and identity["weights_sha256"] and identity["tokenizer_sha256"]
    assert {"model.safetensors", "tokenizer.json"} <= set(identity["files"])
    data = F.dumps(build.trace_record(tr, lm.tokenizer, identity, build.machine_facts("cpu", torch.get_num_threads()),
                                      "test"))
    rec = F.load(data)
    page = replay_html(rec).encode()
    assert len(data) < 2 * 2**20 and len(page) < 8 * 2**20, (len(data), len(page))  # 1.4 MB and 6.0 MB measured
    v = V.verify(rec, lm)
    assert v.status == "identical" and v.tokens["same"] and v.weights["same"], v.verdict
    assert v.logits["largest"] <= V.TOLERANCE_SAME["float32"] and v.attention["within"]
