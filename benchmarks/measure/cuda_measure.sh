#!/usr/bin/env bash
# `fitcheck measure` on CUDA, a dozen requests, within one 10-minute command (issue 16).
#
#   bash benchmarks/measure/cuda_measure.sh          # from anywhere; runs from the repo root
#   BUDGET_S=420 bash benchmarks/measure/cuda_measure.sh
#
# Each request runs in its own fresh process (`fitcheck measure ... --json`): Qwen2.5-0.5B/1.5B and
# Llama-3.2-1B inference at several prompt/generate splits and batches 1-8, full, LoRA and QLoRA
# (bitsandbytes NF4) steps, eager vs sdpa.  Every JSON document (fitcheck.measure/1: the estimate,
# max_memory_allocated/reserved, the NVML view with the CUDA context, per phase) goes into one JSON
# lines file under $OUT (or benchmarks/results/), with one summary line per request on stdout;
# receipts go to a throwaway cache.  No request starts after BUDGET_S seconds (default 400), so
# `benchmarks/measure/cuda_run.sh` (its own ~10 minutes) is a second command.
#
# Needs a CUDA build of torch already installed.  fitcheck runs from this checkout (PYTHONPATH);
# transformers, peft, bitsandbytes and fitcheck's dependencies are installed when missing
# (cuda_setup.sh: torch pinned).
set -euo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/measure/cuda_setup.sh
export FITCHECK_CACHE_DIR="$(mktemp -d)"
need transformers peft bitsandbytes packaging tabulate
# fitcheck from this checkout (no install needed); its own small dependencies when missing.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
need psutil pynvml:nvidia-ml-py cpuinfo:py-cpuinfo click
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

stamp="$(date -u +%Y-%m-%d)"
out="$OUT_DIR/cuda-measure-$stamp.jsonl"
: >"$out"
# name | fitcheck measure arguments
requests=(
  "qwen05-p1024-g16-b1|Qwen/Qwen2.5-0.5B --prompt 1024 --new-tokens 16"
  "qwen05-p4096-g64-b1|Qwen/Qwen2.5-0.5B --prompt 4096 --new-tokens 64"
  "qwen05-p512-g256-b8|Qwen/Qwen2.5-0.5B --prompt 512 --new-tokens 256 --batch 8"
  "qwen15-p2048-g32-b4|Qwen/Qwen2.5-1.5B --prompt 2048 --new-tokens 32 --batch 4"
  "qwen15-p8192-g16-b1|Qwen/Qwen2.5-1.5B --prompt 8192 --new-tokens 16"
  "llama1-p1024-g128-b2|meta-llama/Llama-3.2-1B --prompt 1024 --new-tokens 128 --batch 2"
  "llama1-p4096-g16-b8|meta-llama/Llama-3.2-1B --prompt 4096 --new-tokens 16 --batch 8"
  "qwen05-nf4-p2048|Qwen/Qwen2.5-0.5B -p nf4 --prompt 2048 --new-tokens 16"
  "qwen05-full-s1024|Qwen/Qwen2.5-0.5B --mode full --master-weights none --seq-len 1024 --batch 2"
  "qwen05-lora-s1024-sdpa|Qwen/Qwen2.5-0.5B --mode lora --seq-len 1024 --batch 2 --attention sdpa"
  "qwen05-lora-s1024-eager|Qwen/Qwen2.5-0.5B --mode lora --seq-len 1024 --batch 2 --attention eager"
  "qwen15-lora-gc-s2048|Qwen/Qwen2.5-1.5B --mode lora --seq-len 2048 --grad-checkpointing"
  "qwen15-qlora-s2048|Qwen/Qwen2.5-1.5B --mode qlora --seq-len 2048 --grad-checkpointing"
  "llama1-qlora-s1024-b4|meta-llama/Llama-3.2-1B --mode qlora --seq-len 1024 --batch 4"
)
t0=$SECONDS
for entry in "${requests[@]}"; do
    name="${entry%%|*}"; args="${entry#*|}"
    if (( SECONDS - t0 > BUDGET_S )); then echo "$name: skipped (budget ${BUDGET_S}s spent)"; continue; fi
    set +e
    # shellcheck disable=SC2086  # the arguments are this file's own, split on spaces on purpose
    doc="$("$PY" -m fitcheck measure $args --json --time-limit 120 --no-receipt 2>"$OUT_DIR/cuda-measure-$name.err")"
    code=$?
    set -e
    if [ -n "$doc" ]; then
        printf '%s' "$doc" | "$PY" -c 'import json, sys; d = json.load(sys.stdin); d["name"] = sys.argv[1]; d["exit"] = int(sys.argv[2]); print(json.dumps(d, sort_keys=True))' "$name" "$code" >>"$out"
        printf '%s' "$doc" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
c = {p["name"]: p for p in d.get("comparison", [])}
f = lambda k: ("%s %.3f/%.3f GiB %+.1f%%" % (k, c[k]["measured_bytes"] / 2**30, c[k]["estimated_bytes"] / 2**30, c[k]["error_pct"] or 0)) if k in c else ""
print(sys.argv[1], d["status"], d["run"]["wall_s"], "s |", " | ".join(x for x in map(f, ("peak_allocated", "peak_reserved", "device_used")) if x), "| context", d["measured"].get("context_bytes"))
' "$name"
    else
        echo "$name: exit $code, no document: $(tail -1 "$OUT_DIR/cuda-measure-$name.err")"
    fi
done
# The per-request stderr files travel back as one file.
tar -czf "$OUT_DIR/cuda-measure-logs-$stamp.tar.gz" -C "$OUT_DIR" $(cd "$OUT_DIR" && ls cuda-measure-*.err) && rm -f "$OUT_DIR"/cuda-measure-*.err
echo "wrote $out"
