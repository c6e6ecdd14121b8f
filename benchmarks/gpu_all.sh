#!/usr/bin/env bash
# The GPU figures of issue 31 in one go (≤ 8 min on one H200): the demo's tracing overhead (block and leaf depth,
# fused kernel and torch's functions, verdicts GPU vs CPU), then SD 1.5 at 512 px and SDXL at 1024 px (real
# architectures, random weights built on the GPU; float16 and bfloat16; block depth, leaf for SD 1.5), each with a
# CUDA-generator and a CPU-generator run replayed twice, and the runs opened in the window (offscreen).
#
#     bash benchmarks/gpu_all.sh            # results in $OUT (the device machine's) or /tmp/gv-gpu
#
# Each part has its own time limit, so one that hangs does not take the others' time; a part's log says how far
# it got. Needs the project's venv (.venv, or PYTHON=…) with a CUDA torch, and Triton for the fused kernel.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
OUT_DIR=${OUT:-/tmp/gv-gpu}
mkdir -p "$OUT_DIR"
export PYTHONPATH=. QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT_DIR/gpu.txt" 2>&1
"$PY" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" \
  >> "$OUT_DIR/gpu.txt" 2>&1
uptime >> "$OUT_DIR/gpu.txt"
started=$(date +%s)

timeout 120 "$PY" benchmarks/gpu_trace_overhead.py --rounds 7 --steps 20 > "$OUT_DIR/demo.txt" 2>&1
echo "demo: exit $? after $(( $(date +%s) - started )) s" | tee -a "$OUT_DIR/gpu.txt"

timeout 330 "$PY" benchmarks/real_architectures.py --gpu-suite --json "$OUT_DIR/real_architectures.jsonl" \
  > "$OUT_DIR/real_architectures.txt" 2>&1
echo "real architectures: exit $? after $(( $(date +%s) - started )) s" | tee -a "$OUT_DIR/gpu.txt"
cat "$OUT_DIR/real_architectures.txt" | grep -v '^  round' | tail -40
uptime >> "$OUT_DIR/gpu.txt"
