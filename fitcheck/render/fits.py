"""`fitcheck models --fits`, rendered: the table and the JSON document of fitcheck.search.fits."""

from __future__ import annotations

from typing import Any

from fitcheck import __version__
from fitcheck.render.layout import Command, fit
from fitcheck.render.layout import table as layout_table
from fitcheck.render.speed import rate_text
from fitcheck.search.fit_score import FitScore
from fitcheck.search.fits import SCHEMA, FitRow, FitsResult
from fitcheck.speed.efficiency import Rate
from fitcheck.units import GiB, format_count


def fits_document(result: FitsResult) -> dict:
    """The JSON document (schema "fitcheck.fits/1"; tests lock the row keys)."""
    def rate(r: tuple[float, float] | None) -> dict | None:
        return None if r is None else {"low": round(r[0], 2), "high": round(r[1], 2)}

    def score(s: FitScore | None) -> dict | None:
        if s is None:
            return None
        return {"total": round(s.total, 1), "capability": round(s.capability, 4), "quality": round(s.quality, 4),
                "speed": None if s.speed is None else round(s.speed, 4), "margin": round(s.margin, 4),
                "effective_params": s.effective_params,
                "tokens_per_s": None if s.tokens_per_s is None else round(s.tokens_per_s, 2)}

    def row(r: FitRow) -> dict:
        plan = r.plan if r.fits else None
        return {
            "id": r.model.id, "family": r.model.family, "params": r.params,
            "active_params": r.model.active_params,
            "precision": plan.precision if plan else None,
            "engine": getattr(plan, "engine", None) if plan else None,
            "device": getattr(plan, "device", None) if plan else None,
            "status": r.status, "need_bytes": r.need_bytes, "free_bytes": r.free_bytes,
            "decode_tokens_per_s": rate(r.decode_tokens_per_s),
            "training_tokens_per_s": rate(r.training_tokens_per_s),
            "fitcheck_command": r.fitcheck_command, "change": r.change, "reason": r.reason or None,
            "checkpoint_known": r.checkpoint_known if r.fits else None,
            "score": score(r.score),
            **({"source": r.model.source, "where": r.model.where} if result.local else {}),
        }

    req = result.request
    request = {"mode": result.mode, "headroom_pct": round(result.headroom * 100, 2)}
    if result.mode == "inference":
        request.update(context=req.context, batch=req.batch, engine=req.engine)
    else:
        request.update(seq_len=req.seq_len, batch=req.batch)
    return {
        "schema": SCHEMA, "fitcheck_version": __version__,
        "machine": result.machine.name, "profile": result.profile, "request": request,
        "ranking": {"sort": result.sort, "top": result.top, "min_speed": result.min_speed,
                    "fitting": len(result.fitting), "left_out_by_min_speed": result.left_out_by_min_speed,
                    "left_out_by_top": result.left_out_by_top},
        "models": [row(r) for r in result.listed],
        "not_fitting": [row(r) for r in result.rows if not r.fits],
        **({"unreadable": [{"name": n, "source": src, "reason": why} for n, src, why in result.unreadable]}
           if result.local or result.unreadable else {}),
    }


def _speed(r: FitRow) -> str:
    pair = r.decode_tokens_per_s or r.training_tokens_per_s
    if pair is None:
        return "unknown"
    return rate_text(Rate(*pair), "").strip()


def _label(device: str | None) -> str:
    return device.upper() if device and device.startswith("gpu") else "RAM"


def _memory(r: FitRow) -> str:
    if len(r.devices) > 1:     # a split between GPU and RAM: both
        return ", ".join(f"{need / GiB:.1f}/{free / GiB:.0f} {_label(d)}" for d, need, free in r.devices)
    if r.need_bytes is None or r.free_bytes is None:
        return ""
    return f"{r.need_bytes / GiB:.1f}/{r.free_bytes / GiB:.0f} {_label(r.device)}"


def _runs_as(plan: Any) -> str:
    if plan.training:        # training: the base's format and what the recipe changed
        parts = [plan.precision]
        if plan.grad_checkpointing:
            parts.append("checkpointing")
        if plan.optimizer != "adamw":
            parts.append(plan.optimizer)
        if plan.zero is not None:
            parts.append(f"ZeRO-{plan.zero}" + (f" offload {plan.offload}" if plan.offload != "none" else ""))
        if plan.fsdp:
            parts.append(f"FSDP {plan.fsdp}")
        if plan.gpus > 1:
            parts.append(f"{plan.gpus} GPUs")
        return ", ".join(parts)
    how = f"{plan.precision} {plan.engine}"
    how += {"cpu": " CPU", "offload": f" {plan.offload_flag}"}.get(plan.device, "")
    if plan.gpus > 1:
        how += f" ×{plan.gpus} GPUs"
    if plan.kv_dtype in ("fp8", "q8_0", "q4_0"):
        how += f", KV {plan.kv_dtype}"
    return how


# The columns a table is kept to in a pipe (no terminal width known): the widest the tables are laid out for.
PIPE_WIDTH = 120
UNKNOWN_MARK = " *"   # after "runs as": no published build of the row's weights format is known (checkpoint_known)
_RANKED = {
    "score": "Ranked by score (0–100: capability from parameters × quality the precision keeps × speed × memory "
             "left; fitcheck.search.fit_score)",
    "speed": "Ranked by speed (the low end of each estimate; unknown last)",
    "params": "Ranked by parameter count",
    "size": "Ranked by memory needed",
    "score-training": "Ranked by score (0–100: capability from parameters × quality the precision keeps × memory "
                      "left; a training run's speed is not scored; fitcheck.search.fit_score)",
}


def _ranked_key(result: FitsResult) -> str:
    return "score-training" if result.sort == "score" and result.mode != "inference" else result.sort


def _footer(result: FitsResult, show_all: bool) -> list[str]:
    """What the table leaves out and how it is ranked."""
    n_not = len(result.rows) - len(result.fitting)
    lines = [f"{len(result.fitting)} of {len(result.rows)} model(s) fit"
             + (f"; {n_not} do not (--all lists them, --json says why)" if n_not and not show_all else "")
             + f". {_RANKED[_ranked_key(result)]}; each runs as check would choose (its default, else its best "
               "alternative at this context and batch)."]
    if result.left_out_by_min_speed:
        lines.append(f"{result.left_out_by_min_speed} more fit below --min-speed {result.min_speed:g} tok/s.")
    if result.left_out_by_top:
        lines.append(f"{result.left_out_by_top} more fit: --top 0 lists them all.")
    return lines


def render_fits_table(result: FitsResult, *, show_all: bool = False, width: int | None = None) -> str:
    """The models that fit, best first, in 120 columns (a status column only with ``show_all``, where rows that do
    not fit are listed too; a tight row says so beside its memory); ``width`` wraps the prose under it."""

    req = result.request
    if result.mode == "inference":
        what = f"inference at {req.context:,} tokens, batch {req.batch}" + (f", {req.engine}" if req.engine else "")
        rate_head = "tok/s"
    else:
        what = f"{req.mode} fine-tuning, sequence {req.seq_len:,} tokens, micro-batch {req.batch}"
        rate_head = "train tok/s"  # training tokens a second
    lines = [f"Machine:  {result.machine.name} — {what}", ""]
    shown = result.listed + (tuple(r for r in result.rows if not r.fits) if show_all else ())
    if shown:
        table = []
        for r in shown:
            plan: Any = r.plan if r.fits else None
            how = _runs_as(plan) + ("" if r.checkpoint_known else UNKNOWN_MARK) if plan is not None else ""
            name = f"{r.model.id} ({r.model.source})" if result.local else r.model.id
            score = r.score
            memory = _memory(r) + (" tight" if r.status == "tight" and not show_all else "")
            table.append((name, "" if score is None else f"{score.total:.0f}", format_count(r.params), how or "—",
                          memory, _speed(r) if r.fits else "", r.status.replace("_", " "))[:None if show_all else 6])
        headers = ("model", "score", "params", "runs as", "GiB need/free", rate_head, "status")
        lines.append(layout_table(table, headers[:None if show_all else 6]))
    elif result.fitting:
        lines.append(f"No model that fits here decodes at --min-speed {result.min_speed:g} tok/s.")
    else:
        lines.append("No local model fits this request here." if result.local else
                     "No catalog model fits this request here.")
    lines += ["", *_footer(result, show_all)]
    if any(not r.checkpoint_known for r in shown if r.fits):
        lines.append(f"{UNKNOWN_MARK.strip()} no published build of that format known to fitcheck: its check "
                     "says what to look for.")
    lines += [f"Not read: {n} ({src}): {why}" for n, src, why in result.unreadable]
    first = result.listed[0].fitcheck_command if result.listed else None
    if first:
        # on a line of its own when the label would push it past the terminal (a command is never wrapped)
        limit = width or PIPE_WIDTH
        lines += [Command("Look closer: " + first)] if len(first) + 13 <= limit else ["Look closer:", Command(first)]
    return "\n".join(fit(lines, width))

