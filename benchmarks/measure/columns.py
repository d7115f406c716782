"""The CSV the runner writes: one row per (case, phase), every column documented here.

Long format so a comparison can pick one phase and one component at a time.  Bytes are
integers.  ``*_bytes`` readings are relative to the case's baseline (after imports, before the
model is built) unless the description says "absolute".  ``counted`` columns are summed from
live tensors by the case itself, not measured; they are filled on the phase that produced them
and empty elsewhere.  Pure (no torch).
"""

from __future__ import annotations

from dataclasses import asdict

from .cases import Case

COLUMNS: tuple[tuple[str, str], ...] = (
    # ---- the case ------------------------------------------------------------------------
    ("case_id", "unique case name (benchmarks/measure/cases.py)"),
    ("model", "Hugging Face id whose shape was built (random weights)"),
    ("architecture", "transformers model_type built"),
    ("spec_source", "where the shape came from: 'catalog' (fitcheck resolve_model) or 'hand'"),
    ("layers_used", "transformer layers built"),
    ("layers_full", "layers of the real model"),
    ("params_built", "parameters of the built model (counted; tied weights once)"),
    ("spec_params", "ModelSpec.total_params of the built depth (estimator's count, to compare)"),
    ("dtype", "dtype the parameters were built in"),
    ("mode", "load | prefill | generate | train_full | train_lora"),
    ("batch", "sequences per batch"),
    ("seq_len", "prompt length (prefill/generate) or training sequence length, tokens"),
    ("new_tokens", "tokens generated after the prompt (generate)"),
    ("logits_to_keep", "prefill: positions that get logits; 0 = all"),
    ("attn_impl", "attention implementation requested (sdpa | eager)"),
    ("attn_impl_used", "attention implementation transformers chose"),
    ("grad_checkpointing", "gradient checkpointing on (non-reentrant)"),
    ("autocast", "torch.autocast dtype during the forward ('' = none)"),
    ("lora_rank", "LoRA rank (0 = no adapter)"),
    ("lora_targets", "attn = q,k,v,o_proj; all-linear = every nn.Linear but the output head"),
    ("optimizer", "optimizer (training)"),
    ("train_steps", "training steps run"),
    ("trainable_params", "parameters with requires_grad (counted)"),
    # ---- the phase -----------------------------------------------------------------------
    ("phase", "build | prefill | generate | forward | backward | optimizer | stepN"),
    ("phase_index", "order of the phase within the case, from 0"),
    ("start_bytes", "before the phase, after gc + malloc_trim (what earlier phases left alive)"),
    ("peak_bytes", "highest memory during the phase: CPU max(sampled RSS, VmHWM); "
                   "CUDA max_memory_allocated"),
    ("steady_bytes", "after the phase, its products alive, gc done, no trim: CPU RSS; "
                     "CUDA memory_allocated"),
    ("peak_sampled_bytes", "CPU: peak RSS seen by the 1 ms /proc/self/statm sampler"),
    ("peak_hwm_bytes", "CPU: kernel VmHWM after a clear_refs reset at phase start"),
    ("ru_maxrss_bytes", "CPU: getrusage ru_maxrss, absolute (cross-check; = VmHWM after reset)"),
    ("peak_reserved_bytes", "CUDA: max_memory_reserved during the phase, absolute"),
    ("steady_reserved_bytes", "CUDA: memory_reserved after the phase, absolute"),
    ("device_used_bytes", "CUDA: device total - free after the phase, absolute (nvidia-smi view)"),
    # ---- counted tensor bytes (from live tensors) ------------------------------------------
    ("param_bytes", "counted after build: parameters (adapter included)"),
    ("buffer_bytes", "counted after build: registered buffers (rotary tables ...)"),
    ("trainable_bytes", "counted after build: parameters with requires_grad"),
    ("kv_cache_bytes", "counted after prefill: tensors held by the returned KV cache"),
    ("logits_bytes", "counted: logits tensor the forward returned (before the loss upcast)"),
    ("grad_bytes", "counted after backward: .grad tensors"),
    ("optimizer_state_bytes", "counted after the optimizer step: optimizer.state tensors"),
    ("generated_tokens", "counted after generate: new tokens actually produced"),
    # ---- run -------------------------------------------------------------------------------
    ("phase_wall_s", "seconds the phase took"),
    ("case_wall_s", "seconds the whole case process took (empty if it did not finish)"),
    ("status", "ok | timeout | killed (memory guard) | error"),
    ("error", "last line of the failure, if any"),
    ("device", "cpu | cuda"),
    ("device_name", "CPU model or GPU name"),
    ("baseline_bytes", "absolute: RSS after imports (CPU) or allocated bytes (CUDA)"),
    ("context_bytes", "CUDA: device memory in use with nothing allocated (context + others)"),
    ("torch_threads", "torch.get_num_threads()"),
    ("torch_version", "torch version"),
    ("transformers_version", "transformers version"),
    ("peft_version", "peft version"),
    ("python_version", "Python version"),
    ("malloc_env", "allocator environment variables set for the case (MALLOC_*, ...)"),
    ("date", "UTC date and time the case ran"),
)
COLUMN_NAMES = tuple(name for name, _ in COLUMNS)

_CASE_COLUMNS = {"case_id": "id", "attn_impl": "attn"}
_COUNTED = ("param_bytes", "buffer_bytes", "trainable_bytes", "kv_cache_bytes", "logits_bytes",
            "grad_bytes", "optimizer_state_bytes", "generated_tokens")


def rows_for(case: Case, info: dict, phases: list[dict], status: str, error: str,
             case_wall_s: float | None, date: str) -> list[dict]:
    """CSV rows of one case: one per finished phase, or one with an empty phase if none did."""
    case_fields = asdict(case)
    base = {}
    for name in COLUMN_NAMES:
        key = _CASE_COLUMNS.get(name, name)
        if key in case_fields:
            base[name] = case_fields[key]
        elif key in info:
            base[name] = info[key]
    base.update(status=status, error=error, case_wall_s=case_wall_s, date=date)
    rows = []
    for index, reading in enumerate(phases or [{}]):
        row = dict.fromkeys(COLUMN_NAMES, "")
        row.update({k: v for k, v in base.items() if v is not None})
        if reading:
            row["phase_index"] = index
            row["phase_wall_s"] = reading.get("wall_s", "")
            for name in COLUMN_NAMES:
                if name in reading and reading[name] is not None:
                    row[name] = reading[name]
            counted = reading.get("counted", {})
            for name in _COUNTED:
                if name in counted:
                    row[name] = counted[name]
        rows.append(row)
    return rows
