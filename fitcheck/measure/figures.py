"""Measured figures of a run, and each set beside the estimate's (pure: dicts in, dicts out).

Every measured figure excludes the process's memory before the model was built (interpreter,
torch import, CUDA initialisation's first block): the child subtracts its baseline.

| device | measured                                        | compared with the estimate's          |
|--------|-------------------------------------------------|---------------------------------------|
| cpu    | ``peak_rss_bytes`` (RSS, sampled + VmHWM)        | ``peak_reserved_bytes`` (+ glibc heap) |
| cuda   | ``peak_allocated_bytes`` (max_memory_allocated) | ``peak_allocated_bytes``              |
|        | ``peak_reserved_bytes`` (max_memory_reserved)   | ``peak_reserved_bytes``               |
|        | ``device_used_bytes`` (NVML, context included)  | ``total_bytes`` (what must be free)   |
| mps    | ``peak_driver_bytes`` (driver_allocated_memory) | ``peak_reserved_bytes``               |

``peak_bytes`` is the figure to compare on every device: RSS on the CPU, the device memory the
process used on CUDA (reserved plus the context when NVML cannot be read), the driver's on MPS.
Components are compared where a run separates them: weights (the build phase's steady bytes),
the KV cache, gradients and optimizer states (counted from the live tensors).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pair:
    """One measured figure beside the estimate's."""

    name: str
    measured_bytes: int
    estimated_bytes: int
    what: str = ""

    @property
    def error_pct(self) -> float | None:
        """(estimated - measured) / measured, percent: negative is an under-prediction."""
        if not self.measured_bytes:
            return None
        return round((self.estimated_bytes - self.measured_bytes) / self.measured_bytes * 100, 2)

    def as_dict(self) -> dict:
        return {"name": self.name, "measured_bytes": self.measured_bytes, "estimated_bytes": self.estimated_bytes,
                "error_pct": self.error_pct, "what": self.what}


def _max(phases: list[dict], key: str) -> int | None:
    values = [p[key] for p in phases if p.get(key) is not None]
    return max(values) if values else None


def _counted(phases: list[dict], key: str) -> int | None:
    values = [p.get("counted", {}).get(key) for p in phases]
    values = [v for v in values if v]
    return max(values) if values else None


def measured_figures(device: str, info: dict, phases: list[dict]) -> dict:
    """The ``measured`` section: peaks over every phase, relative to the baseline, and the counted parts."""
    out: dict = {"device": device, "baseline_bytes": info.get("baseline_bytes"),
                 "phases": [_phase_row(p) for p in phases]}
    peak = _max(phases, "peak_bytes")
    if device == "cpu":
        out["peak_rss_bytes"] = peak
        out["peak_bytes"] = peak
    elif device == "cuda":
        reserved = _max(phases, "peak_reserved_bytes")
        base_reserved = info.get("baseline_reserved_bytes") or 0
        out["peak_allocated_bytes"] = peak
        out["peak_reserved_bytes"] = reserved - base_reserved if reserved is not None else None
        out["context_bytes"] = info.get("context_bytes")
        used = _max(phases, "device_used_peak_bytes")
        out["device_used_bytes"] = used
        if used is not None:
            out["peak_bytes"] = used
        elif out["peak_reserved_bytes"] is not None:
            out["peak_bytes"] = out["peak_reserved_bytes"] + (info.get("context_bytes") or 0)
        else:
            out["peak_bytes"] = peak
    else:  # mps
        out["peak_driver_bytes"] = peak
        out["peak_bytes"] = peak
    build = next((p for p in phases if p.get("phase") == "build"), None)
    out["components"] = {
        "weights": build.get("steady_bytes") if build else None,
        "kv_cache": _counted(phases, "kv_cache_bytes"),
        "gradients": _counted(phases, "grad_bytes"),
        "optimizer_states": _counted(phases, "optimizer_state_bytes"),
    }
    return out


def _phase_row(p: dict) -> dict:
    keep = ("phase", "start_bytes", "peak_bytes", "steady_bytes", "wall_s", "peak_reserved_bytes",
            "device_used_peak_bytes")
    return {**{k: p.get(k) for k in keep}, "counted": dict(p.get("counted") or {})}


def compared(device: str, measured: dict, estimate_device: dict, estimate_facts: dict, mode: str,
             kv_after_prefill: int | None = None) -> list[Pair]:
    """Each measured figure beside the estimate's, from the check document's estimate device entry.

    `kv_after_prefill`: the estimator's KV cache for the prompt alone (what the prefill leaves),
    where the estimate's component is for the whole context.
    """
    comps = estimate_device["components"]
    pairs: list[Pair] = []
    parts = measured["components"]
    lora = mode in ("lora", "qlora")
    weights_est = comps.get("weights", 0) + (comps.get("adapters", 0) if lora else 0)
    if parts.get("weights"):
        pairs.append(Pair("weights", parts["weights"], weights_est,
                          "after the build, with the adapters" if lora else "after the build"))
    if parts.get("kv_cache"):
        estimated = kv_after_prefill if kv_after_prefill is not None else comps.get("kv_cache", 0)
        pairs.append(Pair("kv_cache", parts["kv_cache"], estimated, "held after the prefill, prompt only (counted)"))
    if parts.get("gradients"):
        grads = comps.get("gradients") or estimate_facts.get("gradient_bytes") or 0
        pairs.append(Pair("gradients", parts["gradients"], int(grads), "after backward (counted)"))
    if parts.get("optimizer_states"):
        pairs.append(Pair("optimizer_states", parts["optimizer_states"], comps.get("optimizer_states", 0),
                          "after the first step (counted)"))
    if device == "cuda":
        for name, est_key, what in (("peak_allocated", "peak_allocated_bytes", "max_memory_allocated"),
                                    ("peak_reserved", "peak_reserved_bytes", "max_memory_reserved"),
                                    ("device_used", "total_bytes", "NVML, CUDA context included")):
            value = measured.get(f"{name}_bytes")
            if value:
                pairs.append(Pair(name, value, estimate_device[est_key], what))
    if measured.get("peak_bytes"):
        est = estimate_device["total_bytes"] if device == "cuda" else estimate_device["peak_reserved_bytes"]
        what = {"cpu": "peak RSS above the baseline", "mps": "driver-allocated memory",
                "cuda": "device memory used (what must be free)"}[device]
        pairs.append(Pair("peak", measured["peak_bytes"], est, what))
    return pairs


def estimate_device_entry(check_doc: dict, device: str) -> dict:
    """The estimate's entry for the device measured (the CPU's RAM, or the first GPU)."""
    kind = "cpu" if device == "cpu" else "gpu"
    devices = check_doc["estimate"]["devices"]
    return next((d for d in devices if d["kind"] == kind), devices[0])
