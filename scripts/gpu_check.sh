#!/usr/bin/env bash
# The CUDA path, checked on a lent GPU machine (CI has none; see README "GPU"). Run through the device tool from the
# repo root with `.whl` (transformers/tokenizers wheels matching requirements.txt) and `.gpu/smollm2-shape`
# (SmolLM2-135M's config and tokenizer, no weights: its 540 MB of weights do not travel) carried:
#   1. the engine's unit tier with the shared tiny model on the GPU (ILE_TEST_DEVICE=cuda, tests/conftest.py);
#   2. a SmolLM2-shaped model with random weights, loaded through the app's own loader on the GPU in its default
#      precision: greedy engine = model.generate, cache parity, KV bytes = formula, speculative greedy = plain,
#      class batch = solo (scripts/gpu_invariants.py);
#   3. the benchmarks that print ratios against a peer measured in the same run (decode, classroom).
# Everything it prints and its JUnit report land in $OUT.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || exit 1
fi
nvidia-smi -L
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'transformers', transformers.__version__)"
MODEL=/tmp/smollm2-shape-random
python3 - "$MODEL" <<'PY'
import sys, torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
src, dst = ".gpu/smollm2-shape", sys.argv[1]
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
model.save_pretrained(dst)
AutoTokenizer.from_pretrained(src).save_pretrained(dst)
print("saved a SmolLM2-shaped random model:", sum(p.numel() for p in model.parameters()), "parameters")
PY
echo "== 1. engine unit tier on cuda"
ILE_TEST_DEVICE=cuda timeout 200 python3 -m pytest tests/engine -m unit -q -p no:cacheprovider --maxfail=30 \
  --junitxml="$OUT/engine-unit-cuda.xml" -o addopts="" 2>&1 | tail -40
echo "== 2. invariants on a SmolLM2-shaped model, cuda, default precision"
timeout 150 python3 scripts/gpu_invariants.py "$MODEL" 2>&1 | tee "$OUT/invariants.txt"; echo "invariants exit: ${PIPESTATUS[0]}"
echo "== 3. benchmarks against their peers, same run"
timeout 75 python3 -m engine bench decode --model "$MODEL" --device cuda --new-tokens 64 --repeats 3 2>&1 | tail -15
timeout 75 python3 -m engine bench classroom --model "$MODEL" --device cuda --sessions 20 --new-tokens 6 --repeats 2 2>&1 | tail -12
