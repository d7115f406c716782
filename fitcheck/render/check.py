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
from fitcheck.estimate.verdict import CANNOT_RUN, DOES_NOT_FIT, DOES_NOT_FIT_ON_DISK, FITS, TIGHT, UNKNOWN, WORDS
from fitcheck.machine import Machine, known
from fitcheck.model.catalog import published_active_params
from fitcheck.pipeline import CheckResult
from fitcheck.plan import TrainingPlan
from fitcheck.render.cost import check_cost_document, check_cost_lines
from fitcheck.render.download import download_document, download_lines
from fitcheck.render.software import software_document, software_lines
from fitcheck.render.speed import (
    advice_document,
    speed_document,
    speed_line,
    training_speed_document,
    training_speed_line,
)
from fitcheck.units import format_count, format_gib, gib

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


def _summed(components) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in components:
        out[c.name] = out.get(c.name, 0) + c.bytes
    return out


def _link_text(machine) -> str:
    c = machine.cluster
    if c is None or c.inter_node_gbps is None:
        return ", inter-node link not in the profile ([cluster] inter_node_gbps)"
    return f", {c.inter_node} {c.inter_node_gbps:g} GB/s per node between nodes"


def _grouped(pairs: list) -> tuple[list, list[str]]:
    """Consecutive devices with the same need and free memory as one column, labelled GPU0-7."""
    out: list = []
    labels: list[str] = []
    first = ""
    for i, (d, v) in enumerate(pairs):
        same = out and d.kind == "gpu" and out[-1][0].components == d.components \
            and out[-1][1].free_bytes == v.free_bytes and out[-1][0].kind == "gpu"
        if same:
            labels[-1] = f"{first}-{d.device.upper().removeprefix('GPU')}"
            continue
        first = d.device.upper() if d.kind == "gpu" else "RAM per node"
        out.append((d, v))
        labels.append(first)
        del i
    return out, labels


def render_check_table(result: CheckResult) -> str:
    """The human answer: model, machine, request, breakdown per device in GiB, verdict, alternatives."""
    lines = _header_lines(result) + [""] + _breakdown_lines(result) + [""] + _verdict_lines(result)
    lines.append(_largest_line(result))
    if result.speed is not None and result.verdict.status != CANNOT_RUN:
        lines.append(speed_line(result.speed, result.device_advice))
    if result.training_speed is not None and result.verdict.status != CANNOT_RUN:
        lines.append(training_speed_line(result.training_speed))
    lines += download_lines(result.download)
    lines += check_cost_lines(result)
    lines += software_lines(result.software, getattr(result.plan, "engine", None))
    if result.launch and result.verdict.status != CANNOT_RUN:
        lines.append("Launch:" if result.verdict.runs else "Launch (as asked, once it fits):")
        lines += [f"  {line}" for line in result.launch]
    lines += _alternatives_lines(result)
    lines.append("")
    lines.append("Assumptions: " + "; ".join(f"{a.name} {a.value} ({a.why}{', ' + a.option if a.option else ''})"
                                            for a in result.estimate.assumptions))
    lines += [f"Note: {note}" for note in result.estimate.notes]
    return "\n".join(lines)


def _header_lines(result: CheckResult) -> list[str]:
    """Model:, Machine: and Request: lines."""
    est, plan, spec = result.estimate, result.plan, result.spec
    params = f"{format_count(spec.total_params)} params"
    if spec.is_moe:
        params += f", {format_count(published_active_params(spec, getattr(result.model, 'entry', None)))} active"
    generic = " — GENERIC dense estimate (architecture assumed)" if spec.generic else ""
    arch = f", {spec.architecture}" if spec.architecture else ""
    lines = [f"Model:    {result.model_id} ({params}{arch}){generic}"]
    if result.model.note:
        lines.append(f"          {result.model.note}")
    lines.append(f"Machine:  {machine_line(result.machine)}")
    if plan.nodes > 1:
        lines.append(f"          × {plan.nodes} nodes{_link_text(result.machine)}")
    where = {"gpu": f"{plan.gpus} GPU{'s' if plan.gpus > 1 else ''}", "cpu": "CPU",
             "offload": f"GPU + CPU ({plan.offload_flag})"}[plan.device]
    if plan.nodes > 1:
        where = f"{plan.nodes} nodes × {where}"
    layout = getattr(plan, "layout", "")
    if layout:
        where += f" ({layout})"
    if plan.training:
        lines.append(f"Request:  {_training_line(plan, where)}")
    else:
        lines.append(f"Request:  {est.mode}, {plan.precision}, {plan.engine} on {where}, "
                     f"context {plan.context:,} tokens"
                     + (f" (prompt {plan.prompt_tokens:,})" if plan.prompt_tokens != plan.context else "")
                     + f", batch {plan.batch}, KV cache {plan.kv_dtype}")
    return lines


def _breakdown_lines(result: CheckResult) -> list[str]:
    """The table of GiB per component and device, with what each device has free."""
    from tabulate import tabulate

    est = result.estimate
    names: list[str] = []
    for d in est.devices:
        for c in d.components:
            if c.name not in names:
                names.append(c.name)
    shown = list(zip(est.devices, result.verdict.devices, strict=False))
    labels = [d.device.upper() if d.kind == "gpu" else "CPU (RAM)" for d in est.devices]
    if result.plan.nodes > 1:  # identical GPUs side by side (a pipeline stage, a node) as one column
        shown, labels = _grouped(shown)
    rows = [[n] + [_gib(d.component(n)) for d, _ in shown] for n in names]
    rows.append(["peak allocated"] + [_gib(d.peak_allocated_bytes) for d, _ in shown])
    rows.append(["total needed"] + [_gib(d.total_bytes) for d, _ in shown])
    rows.append(["free"] + [_gib(dv.free_bytes) if dv.free_bytes is not None else "unknown" for _, dv in shown])
    return [tabulate(rows, headers=["GiB"] + labels, tablefmt="simple", disable_numparse=True,
                     colalign=("left",) + ("right",) * len(shown))]


def _verdict_lines(result: CheckResult) -> list[str]:
    """Verdict: and its reasons, the serving engine's KV pool, a better layout."""
    status = result.verdict.status
    headroom = "" if status in (CANNOT_RUN, DOES_NOT_FIT_ON_DISK, TIGHT) else f" (headroom {result.headroom:.0%})"
    lines = [f"Verdict:  {WORDS[status]} — {result.verdict.summary().split(': ', 1)[-1]}{headroom}"]
    for extra in result.verdict.reasons[1:]:
        if status == DOES_NOT_FIT_ON_DISK and extra.startswith("memory: "):
            extra += f" (headroom {result.headroom:.0%})"
        lines.append(f"          {extra}")
    pool = result.estimate.pool
    if pool is not None and status != CANNOT_RUN:
        lines.append(f"          {pool.title} KV pool: {pool.kv_pool_tokens:,} tokens"
                     + (f" over {pool.ranks} data-parallel ranks" if pool.ranks else "")
                     + f", maximum concurrency {pool.max_concurrency}× at {result.plan.context:,} tokens")
    better = result.better_layout
    if better is not None:
        lines += [f"          {better.title}:", f"            {better.fitcheck_command}"]
    return lines


def _largest_line(result: CheckResult) -> str:
    """Largest that fits: the longest context (sequence) and the largest batch."""
    plan, status = result.plan, result.verdict.status
    if status == UNKNOWN:
        return "Largest that fits: unknown until the free memory above can be read"
    if status == CANNOT_RUN:
        return "Largest that fits: nothing — this machine cannot run the request as asked"
    if isinstance(plan, TrainingPlan):
        seq = f"sequence {result.max_context:,} tokens" if result.max_context else "no sequence length"
        seq += _past_maximum(result, plan.seq_len)
        mb = f"micro-batch {result.max_batch:,}" if result.max_batch else "no micro-batch"
        return f"Largest that fits: {seq} at micro-batch {plan.batch}; {mb} at {plan.seq_len:,} tokens"
    if result.max_context or result.max_batch:
        ctx = f"context {result.max_context:,} tokens" if result.max_context else "no context"
        ctx += _past_maximum(result, plan.context)
        bat = f"batch {result.max_batch:,}" if result.max_batch else "no batch"
        return f"Largest that fits: {ctx} at batch {plan.batch}; {bat} at {plan.context:,} tokens"
    if status == TIGHT:
        return (f"Largest that fits: nothing outside the {result.headroom:.0%} headroom, not even 1 token or "
                "1 sequence (the request as asked fits only inside it)")
    return "Largest that fits: nothing at these settings (not even 1 token or 1 sequence)"


def _alternatives_lines(result: CheckResult) -> list[str]:
    """What fits instead, each with its two commands; or why nothing does."""
    status = result.verdict.status
    if result.alternatives:
        lines = ["", "What runs here instead (best first):" if status == CANNOT_RUN
                 else "What fits instead (best first):"]
        for i, a in enumerate(result.alternatives, 1):
            need = _needs_line(a.estimate.devices, per_node=a.estimate.nodes > 1)
            if status == DOES_NOT_FIT_ON_DISK and a.download is not None:
                need += f"; download {format_gib(a.download.download_bytes)}"
            tight = " (tight)" if a.verdict.status == TIGHT else ""
            lines += [f"  {i}. {a.title}{tight} — needs {need}", f"     {a.fitcheck_command}",
                      f"     {a.engine_command}"]
        return lines
    if status == DOES_NOT_FIT_ON_DISK:
        return ["", "Nothing smaller fits on this disk: free space there, or --download-dir PATH on a disk with room."]
    if status in (DOES_NOT_FIT, CANNOT_RUN):
        disk = "" if result.download is None or result.download.fits else \
            " with a download that fits on this disk (or --download-dir PATH on a disk with room)"
        return ["", f"{nothing_fits(result.plan, result.profile)}{disk}; "
                "`fitcheck profiles` lists machines to try with --profile NAME."]
    return []


def _past_maximum(result: CheckResult, asked: int) -> str:
    """The search stops at the model's maximum length (fitcheck.estimate.context_limit.search_limit): when
    the length asked is past it and fits, say so beside that figure rather than seem to contradict the
    verdict ("largest 32,768" beside FITS at 200,000)."""
    limit = result.spec.max_context
    if limit is None or result.max_context != limit or asked <= limit or result.verdict.status != FITS:
        return ""
    return f" (the model's maximum; {asked:,} as asked fits in memory too)"


def nothing_fits(plan, profile: str | None = None) -> str:
    """What was tried before saying nothing fits: the levers of inference, of GPU or of CPU training;
    on the --profile machine when the answer is for one."""
    where = f"on {profile}" if profile else "on this machine"
    if not plan.training:
        return f"Nothing fits {where}, even quantized or offloaded"
    if plan.device == "cpu":
        return f"Nothing fits {where}, even with LoRA, gradient checkpointing or a shorter sequence"
    return f"Nothing fits {where}, even with LoRA or QLoRA, gradient checkpointing, offload or a shorter sequence"


def _needs_line(devices, per_node: bool = False) -> str:
    """'GPU0 9.22 GiB, RAM 0.40 GiB'; equal GPUs folded: '45.61 GiB on each of 8 GPUs, RAM 0.62 GiB'
    ('RAM ... per node' over several nodes)."""
    gpus = [d for d in devices if d.kind == "gpu" and d.total_bytes]
    parts = []
    if len(gpus) > 1 and max(d.total_bytes for d in gpus) - min(d.total_bytes for d in gpus) < 2**30 // 10:
        parts.append(f"{_gib(max(d.total_bytes for d in gpus))} GiB on each of {len(gpus)} GPUs")
    else:
        parts += [f"{d.device.upper()} {_gib(d.total_bytes)} GiB" for d in gpus]
    parts += [f"RAM {_gib(d.total_bytes)} GiB{' per node' if per_node else ''}" for d in devices
              if d.kind == "cpu" and d.total_bytes]
    return ", ".join(parts)


def _gib(n: int | None) -> str:
    """A table cell in GiB (the column header says GiB)."""
    return "-" if n is None else gib(n)


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


def _training_line(plan, where: str) -> str:
    if plan.device == "cpu":
        where = "on the CPU"
    parts = [f"{plan.mode} fine-tuning, {plan.precision} base, {where}", f"sequence {plan.seq_len:,} tokens",
             f"micro-batch {plan.batch} × accumulation {plan.grad_accum}", plan.optimizer,
             "checkpointing on" if plan.grad_checkpointing else "checkpointing off", f"{plan.attention} attention"]
    if plan.mode != "full":
        parts.append(f"LoRA r={plan.lora_rank} on {plan.lora_targets}")
    if plan.zero is not None:
        parts.append(f"ZeRO-{plan.zero}")
    if plan.fsdp:
        parts.append(f"FSDP {plan.fsdp}")
    if plan.offload != "none":
        parts.append(f"offload {plan.offload}")
    return ", ".join(parts)
