"""Render a MeasureResult: the versioned JSON document ("fitcheck.measure/1") and the table.

The document is the full check document (``model``, ``request``, ``machine``, ``estimate``,
``verdict``, ``alternatives``, ``speed``; its own schema kept as ``check_schema``) plus:

{
  "schema": "fitcheck.measure/1", "status": measured | out_of_memory | refused | timeout | error,
  "exit_code": int, "reason": str,
  "run": {device, device_name, prompt_tokens, new_tokens, seq_len, steps, layers, time_limit_s,
          memory_limit_bytes, memory_limit: {device_bytes, host_bytes, source, address_space_bytes} | null,
          forced, wall_s, date},
  "versions": {torch, transformers, peft, bitsandbytes, cuda, python},
  "measured": {device, peak_bytes, peak_rss_bytes (cpu) | peak_allocated_bytes, peak_reserved_bytes,
               device_used_bytes, context_bytes (cuda) | peak_driver_bytes (mps), baseline_bytes,
               components: {weights, kv_cache, gradients, optimizer_states}, phases: [...]},
  "comparison": [{name, measured_bytes, estimated_bytes, error_pct, what}],
  "measured_verdict": {status: fits | does_not_fit | not_measured, summary}
}

Out of memory under ``--memory-limit`` when the estimate fits the machine: ``alternatives`` are
those that fit the limit (the check re-run with that much free).

Bytes are integers; ``error_pct`` is (estimated - measured) / measured × 100.
"""

from __future__ import annotations

from fitcheck.measure.runner import MEASURED, OUT_OF_MEMORY
from fitcheck.render.answer import render_check_table
from fitcheck.render.check import check_document

SCHEMA = "fitcheck.measure/1"
_GiB = 2**30


def _run_section(result) -> dict:
    job, run, opts = result.job, result.run, result.options
    training = bool(job and job.training)
    return {
        "device": result.device,
        "device_name": (run.info.get("device_name") if run else "") or "",
        "prompt_tokens": None if training or not job else job.prompt_tokens,
        "new_tokens": None if training or not job else job.new_tokens,
        "seq_len": job.seq_len if training and job else None,
        "steps": job.steps if training and job else None,
        "layers": opts.layers,
        "time_limit_s": opts.time_limit_s,
        "memory_limit_bytes": result.limit.device_bytes if result.limit else None,
        "memory_limit": None if result.limit is None else result.limit.as_dict() | {
            "address_space_bytes": (run.info.get("address_space_limit_bytes") if run else None)},
        "forced": opts.force,
        "wall_s": run.wall_s if run else None,
        "date": result.date,
    }


def measured_verdict(result) -> dict:
    if result.status == MEASURED:
        peak = result.measured.get("peak_bytes") or 0
        return {"status": "fits", "summary": f"measured: it ran, peak {peak / _GiB:.2f} GiB on {result.device}"}
    if result.status == OUT_OF_MEMORY:
        return {"status": "does_not_fit", "summary": f"measured: out of memory on {result.device} ({result.reason})"}
    return {"status": "not_measured", "summary": f"not measured: {result.reason or result.status}"}


def measure_document(result) -> dict:
    check = check_document(result.check)
    info = result.run.info if result.run else {}
    doc = {
        **check,
        "schema": SCHEMA,
        "check_schema": check["schema"],
        "status": result.status,
        "exit_code": result.exit_code,
        "reason": result.reason,
        "run": _run_section(result),
        "versions": {k: info.get(k, "") for k in ("torch", "transformers", "peft", "bitsandbytes", "cuda", "python")},
        "measured": result.measured,
        "comparison": [p.as_dict() for p in result.pairs],
        "measured_verdict": measured_verdict(result),
    }
    if result.alternatives_doc and not doc["alternatives"]:
        # Out of memory under --memory-limit although the estimate fits the machine: what fits the limit.
        doc["alternatives"] = result.alternatives_doc
    return doc


def _gib(n) -> str:
    return f"{n / _GiB:.3f}" if isinstance(n, int) else "—"


def render_measure(result, doc: dict) -> str:
    """The check's table, then the measurement beside it and the measured verdict."""
    from tabulate import tabulate

    lines = [render_check_table(result.check), ""]
    run = doc["run"]
    if result.run:
        versions = ", ".join(f"{k} {v}" for k, v in doc["versions"].items() if v and k != "python")
        what = (f"{run['steps']} optimizer steps at {run['seq_len']:,} tokens" if run["steps"] else
                f"a prefill of {run['prompt_tokens']:,} tokens, then {run['new_tokens']} generated")
        lines.append(f"Measured: {what} on {result.device} ({run['device_name']}; {versions}) in "
                     f"{run['wall_s']:.1f} s, random weights, memory before the model excluded")
        if result.limit:
            lines.append(f"Limit:    {_gib(result.limit.host_bytes)} GiB of RAM above the baseline"
                         + (f", {_gib(result.limit.device_bytes)} GiB on the GPU" if result.device == "cuda" else "")
                         + f" ({result.limit.source})")
    if result.pairs:
        rows = [(p.name, _gib(p.estimated_bytes), _gib(p.measured_bytes),
                 f"{p.error_pct:+.1f} %" if p.error_pct is not None else "—", p.what) for p in result.pairs]
        lines.append("")
        lines.append(tabulate(rows, headers=["GiB", "estimated", "measured", "error", "measured as"],
                              disable_numparse=True))
    lines.append("")
    verdict = doc["measured_verdict"]
    word = {"fits": "RAN", "does_not_fit": "OUT OF MEMORY", "not_measured": "NOT MEASURED"}[verdict["status"]]
    lines.append(f"Measured verdict: {word} — {verdict['summary'].split(': ', 1)[1]}")
    if result.status == OUT_OF_MEMORY and doc["alternatives"]:
        within = " within --memory-limit" if result.alternatives_doc else ""
        lines.append(f"What the estimate says fits instead{within}:")
        for n, alt in enumerate(doc["alternatives"][:5], 1):
            lines.append(f"  {n}. {alt['title']}")
            lines.append(f"     {alt['fitcheck_command']}")
    elif result.status == OUT_OF_MEMORY and doc["verdict"]["status"] == "fits":
        lines.append("The estimate said it fits: an under-prediction (please report it with the JSON document, "
                     "--json).")
    return "\n".join(lines)
