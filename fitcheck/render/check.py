"""Render a CheckResult: the table people read and the versioned JSON document CI reads.

The JSON document (schema "fitcheck.check/1") is a contract; tests lock its key set.
Bytes are integers in JSON; GiB (2^30 bytes) only in the table, labelled GiB.

{
  "schema": "fitcheck.check/1", "fitcheck_version": str,
  "model":   {query, id, source, note, architecture, params_total, params_active, generic,
              stored_format (the checkpoint's own: 'mxfp4', 'fp8', 'awq', a GGUF file's 'fp16', 'q4_k_m'; null
              for a 16-bit checkpoint), stored_file_type (a GGUF file's type as llama.cpp names it, else null)},
  "request": {mode, precision, context, batch, prompt_tokens, kv_dtype, engine, device, gpus,
              gpu_layers, cpu_moe, cpu_offload_gb, gpu_memory_utilization, headroom_pct},
  "machine": {name, kind, source, summary},
  "estimate": {devices: [{device, kind, components: {name: bytes}, breakdown: [{name, bytes,
               detail, counted_in}], peak_allocated_bytes, peak_reserved_bytes, total_bytes}],
               components: {name: bytes}, peak_allocated_bytes, peak_reserved_bytes, total_bytes,
               facts: {...}, assumptions: [{name, value, why, option}], notes: [str]},
  "verdict": {status, exit_code, summary, reasons, max_context, max_batch,
              devices: [{device, kind, need_bytes, free_bytes, usable_bytes, status, reason}]},
  "alternatives": [{title, status, cost, changes: {option: value}, total_bytes, devices:
                    [{device, total_bytes}], fitcheck_command, engine_command}],
  "speed": {device, engine, precision, batch, at_context, decode_tokens_per_s: {low, high},
            per_sequence_tokens_per_s, prefill_tokens_per_s, bound, bytes_per_step: {weights, kv_cache},
            bandwidth_bytes_per_s, assumptions: [{name, low, high, why}], unknown,
            best_device: {choice: gpu|cpu|null, reason, gpu: {...}, cpu: {...}}},
  "cost": {kwh_price_usd, kwh_price_source, amortize_years, hours_per_day, owned, usd_per_hour, power_watts,
           purchase_usd, energy_kwh_per_million_tokens, electricity_usd_per_million_tokens,
           amortized_usd_per_million_tokens, usd_per_million_tokens, run} | null
           (owned or rented machines only; run: the --tokens training run, see fitcheck.render.cost),
  "software": {environments, torch, packages, problems, issues, status} | null
              (the installed stack checked for this request; null with --profile: fitcheck.render.software),
  "download": {download_bytes, checkpoint_bytes, format, repo, exact, basis, already_at, place, download_dir,
               disk_free_bytes, status, reason, saves} (what the plan downloads, where, the free disk there:
               fitcheck.render.download),
  "requirements": [{requirement, fact, status: ok|failed|unknown, measured, shown, message}],
  "exit_code": int   # the command's exit status: the verdict, --strict and the requirements combined
}
verdict.status may also be "cannot_run" (exit 1): the installed stack cannot run the request here, and
"does_not_fit_on_disk" (exit 1): the memory fits but the download does not fit on the disk it lands on.
"""

from __future__ import annotations

import shlex
from typing import Any

from fitcheck import __version__
from fitcheck.estimate.verdict import TIGHT
from fitcheck.machine import Machine, known
from fitcheck.pipeline import CheckResult
from fitcheck.render.cost import check_cost_document
from fitcheck.render.download import download_document
from fitcheck.render.software import software_document
from fitcheck.render.speed import (
    advice_document,
    alternative_speed_document,
    speed_document,
    training_speed_document,
)
from fitcheck.units import format_gib

SCHEMA = "fitcheck.check/1"


def machine_line(machine: Machine) -> str:
    """One line: name, cores, RAM available, GPUs."""
    parts = [machine.name + (f" ({shlex.join(machine.overrides)})" if machine.overrides else "")]
    cores = machine.cpu.usable_cores if known(machine.cpu.usable_cores) else machine.cpu.logical_cores
    if known(cores):
        parts.append(f"{cores} CPU cores")
    avail = machine.memory.available_bytes
    parts.append(f"{format_gib(avail, 1)} RAM available" if known(avail) else f"RAM available {avail}")
    if machine.gpus:
        names: dict[str, int] = {}
        for g in machine.gpus:
            mem = format_gib(g.memory_total_bytes, 0) if known(g.memory_total_bytes) else "memory unknown"
            label = f"{g.name if known(g.name) else 'GPU'} {mem}"
            names[label] = names.get(label, 0) + 1
        parts.append(", ".join(f"{n}× {label}" if n > 1 else label for label, n in names.items()))
    else:
        parts.append("no GPU" + (f" ({machine.gpu_status})" if machine.gpu_status else ""))
    return ", ".join(parts)


def check_exit_code(result, strict: bool = False, outcomes=()) -> int:
    """The exit status of one check: the verdict's, 1 for *tight* under ``strict``, combined with the
    requirements' (1 beats 3 beats 0)."""
    from fitcheck.preflight.requirements import combine
    from fitcheck.preflight.requirements import exit_code as requirements_exit_code

    code = result.exit_code
    if strict and result.verdict.status == TIGHT:
        code = 1
    return combine([code, requirements_exit_code(outcomes)])


def check_document(result: CheckResult, outcomes=(), exit_code: int | None = None) -> dict:
    """The JSON document for one check; ``outcomes`` are the --require results and ``exit_code``
    the command's exit status (default: the verdict's with the requirements)."""
    from fitcheck.preflight.requirements import outcome_dict
    est, plan, spec = result.estimate, result.plan, result.spec
    model_id = result.model_id
    return {
        "schema": SCHEMA,
        "fitcheck_version": __version__,
        "model": {
            "query": result.query,
            "id": model_id,
            "source": result.model.source,
            "note": result.model.note,
            "architecture": spec.architecture,
            "params_total": spec.total_params,
            "params_active": spec.active_params,
            "generic": spec.generic,
            "stored_format": spec.stored_format,
            "stored_file_type": spec.stored_file_type or None,
        },
        "request": {
            "mode": est.mode,
            "precision": plan.precision,
            "context": plan.context,
            "batch": plan.batch,
            "prompt_tokens": plan.prompt_tokens,
            "kv_dtype": plan.kv_dtype,
            "engine": plan.engine,
            "device": plan.device,
            "gpus": 0 if plan.device == "cpu" else plan.gpus,  # a CPU training plan is one process, no GPU
            "nodes": plan.nodes,
            "expert_parallel": bool(getattr(plan, "expert_parallel", False)),
            "layout": getattr(plan, "layout", ""),
            "gpu_layers": plan.gpu_layers,
            "cpu_moe": plan.cpu_moe,
            "cpu_offload_gb": plan.cpu_offload_gb,
            "gpu_memory_utilization": plan.gpu_memory_utilization,
            "headroom_pct": round(result.headroom * 100, 3),
            **_training_request(plan),
        },
        "machine": {
            "name": result.machine.name,
            "kind": result.machine.kind,
            "source": result.machine.source,
            "summary": machine_line(result.machine),
        },
        "estimate": {
            "devices": [
                {
                    "device": d.device,
                    "kind": d.kind,
                    "components": _summed(d.components),
                    "breakdown": [{"name": c.name, "bytes": c.bytes, "detail": c.detail, "counted_in": c.counted_in}
                                  for c in d.components],
                    "peak_allocated_bytes": d.peak_allocated_bytes,
                    "peak_reserved_bytes": d.peak_reserved_bytes,
                    "total_bytes": d.total_bytes,
                }
                for d in est.devices
            ],
            "components": est.by_component(),
            "peak_allocated_bytes": est.peak_allocated_bytes,
            "peak_reserved_bytes": est.peak_reserved_bytes,
            "total_bytes": est.total_bytes,
            "facts": dict(est.facts),
            "assumptions": [{"name": a.name, "value": a.value, "why": a.why, "option": a.option}
                            for a in est.assumptions],
            "notes": list(est.notes),
        },
        "verdict": {
            "status": result.verdict.status,
            "exit_code": result.verdict.exit_code,
            "summary": result.verdict.summary(),
            "reasons": list(result.verdict.reasons),
            "max_context": result.max_context,
            "max_batch": result.max_batch,
            "devices": [
                {"device": d.device, "kind": d.kind, "need_bytes": d.need_bytes, "free_bytes": d.free_bytes,
                 "usable_bytes": d.usable_bytes, "status": d.status, "reason": d.reason}
                for d in result.verdict.devices
            ],
        },
        "launch": list(result.launch),
        "better_layout": _better_layout(getattr(result, "better_layout", None)),
        "chosen": _chosen(result.chosen),
        "alternatives": [
            {
                "title": a.title,
                "status": a.verdict.status,
                "cost": round(a.cost, 2),
                "changes": {name: _json_value(value) for name, value in a.changes},
                "total_bytes": a.estimate.total_bytes,
                "devices": [{"device": d.device, "total_bytes": d.total_bytes} for d in a.estimate.devices],
                "fitcheck_command": a.fitcheck_command,
                "engine_command": a.engine_command,
                "download_bytes": a.download.download_bytes if a.download is not None else None,
                "speed": alternative_speed_document(a.speed),
            }
            for a in result.alternatives
        ],
        "speed": _speed_section(result),
        "cost": _cost_section(result),
        "software": _software_section(result),
        "download": _download_section(result),
        "requirements": [outcome_dict(o) for o in outcomes],
        "exit_code": check_exit_code(result, False, outcomes) if exit_code is None else exit_code,
    }


def _json_value(value: Any) -> Any:
    """A typed change as JSON: numbers and strings as they are; a flag as on/off; unset as "auto"."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "auto" if value is None else value


def _download_section(result) -> dict | None:
    return download_document(getattr(result, "download", None))


def _software_section(result) -> dict | None:
    return software_document(getattr(result, "software", None))


def _cost_section(result) -> dict | None:
    return check_cost_document(result)


def _better_layout(better) -> dict | None:
    """The expert-parallel layout of the same GPUs, when it holds more sequences (pipeline._expert_parallel_layout)."""
    if better is None:
        return None
    return {"title": better.title, "status": better.verdict.status,
            "changes": {name: _json_value(value) for name, value in better.changes},
            "fitcheck_command": better.fitcheck_command, "engine_command": better.engine_command}


def _speed_section(result: CheckResult) -> dict:
    """decode/prefill tokens/s of this plan and the CPU-or-GPU advice (fitcheck.speed.decode, search.device)."""
    section = speed_document(result.speed) or {}
    if result.training_speed is not None:
        section.update(training_speed_document(result.training_speed) or {})
    section["best_device"] = advice_document(result.device_advice)
    return section


def _chosen(chosen) -> dict | None:
    """Why the request is for weights the user did not name (pipeline.Chosen), or None."""
    if chosen is None:
        return None
    return {"title": chosen.title, "default": {"precision": chosen.precision, "engine": chosen.engine,
                                               "total_bytes": chosen.total_bytes, "summary": chosen.summary}}


def _summed(components) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in components:
        out[c.name] = out.get(c.name, 0) + c.bytes
    return out


# ---- training plans (--mode full|lora|qlora) -------------------------------------------------
def _training_request(plan) -> dict:
    """Extra request keys of a training plan (additive to the inference keys)."""
    if not plan.training:
        return {}
    lora = plan.mode != "full"
    return {
        "seq_len": plan.seq_len, "grad_accum": plan.grad_accum, "effective_batch": plan.effective_batch,
        "compute_dtype": plan.compute_dtype, "optimizer": plan.optimizer, "master_weights": plan.master_weights,
        "grad_checkpointing": plan.grad_checkpointing, "attention": plan.attention,
        "lora_rank": plan.lora_rank if lora else None, "lora_targets": plan.lora_targets if lora else None,
        "lora_train_embeddings": plan.lora_train_embeddings if lora else None,
        "zero": plan.zero, "fsdp": plan.fsdp, "offload": plan.offload,
    }


