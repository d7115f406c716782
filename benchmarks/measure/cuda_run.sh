#!/usr/bin/env bash
# One-call CUDA measurement on a GPU machine, within one 10-minute command: runs the CUDA case list
# (benchmarks/measure/cases.py, CUDA_CASES; the runner starts no case after BUDGET_S seconds) and
# writes its CSV and per-case logs under $OUT (or benchmarks/results/ when OUT is unset); then, in
# at most 2 minutes, the allocator sweep's steps on the GPU (max_memory_allocated/reserved), the
# check of the CPU-recorded replay (benchmarks/measure/alloc_trace.py).
#
#   bash benchmarks/measure/cuda_run.sh            # from anywhere; runs from the repo root
#   BUDGET_S=480 CASES='cuda-prefill-*' bash benchmarks/measure/cuda_run.sh
#
# Needs a CUDA build of torch already installed; transformers, peft and packaging are installed
# only when missing (cuda_setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/measure/cuda_setup.sh
need transformers peft packaging tabulate
"$PY" -c 'import transformers, peft; print("transformers", transformers.__version__, "peft", peft.__version__)'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

stamp="$(date -u +%Y-%m-%d)"
status=0
"$PY" -m benchmarks.measure --device cuda ${CASES:+--cases "$CASES"} --budget-s "$BUDGET_S" \
    --max-rss-gib 0 --out "$OUT_DIR/cuda-$stamp.csv" --logs "$OUT_DIR/cuda-logs" || status=$?
timeout 120 "$PY" -m benchmarks.measure.alloc_trace --sweep --device cuda \
    --out "$OUT_DIR/allocator-cuda-$stamp.csv" || echo "allocator sweep on CUDA: exit $?"
# Per-case logs travel back as one file (an $OUT folder may return only a few files).
tar -czf "$OUT_DIR/cuda-logs-$stamp.tar.gz" -C "$OUT_DIR" cuda-logs && rm -rf "$OUT_DIR/cuda-logs"
exit "$status"
