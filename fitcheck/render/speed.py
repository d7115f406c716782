"""Speed in words and in JSON: decode/prefill rates, training throughput, the CPU-or-GPU advice.

Shared by the `fitcheck MODEL` and `fitcheck where` renderers.
"""

from __future__ import annotations

from fitcheck.estimate.distributed import gb_text
from fitcheck.search.device import DeviceAdvice
from fitcheck.speed.decode import SpeedEstimate
from fitcheck.speed.efficiency import Efficiency, Rate
from fitcheck.speed.training import TrainingSpeed


def rate_text(rate: Rate | None, unit: str = "tok/s") -> str:
    """'35–60 tok/s' (two significant figures at each end), or 'unknown'."""
    if rate is None:
        return "unknown"
    return f"{_num(rate.low)}–{_num(rate.high)} {unit}"


def _num(x: float) -> str:
    if x >= 100:
        return f"{round(x, -1 if x < 1000 else -2):,.0f}"
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def rate_dict(rate: Rate | None) -> dict | None:
    return None if rate is None else {"low": round(rate.low, 2), "high": round(rate.high, 2)}


def alternative_speed_document(speed: SpeedEstimate | TrainingSpeed | None) -> dict | None:
    """An alternative's speed in JSON: decode (the whole batch and each sequence) and prefill at its context, or
    training tokens/s; ``unknown`` says why a rate is missing."""
    if speed is None:
        return None
    if isinstance(speed, TrainingSpeed):
        return {"training_tokens_per_s": rate_dict(speed.rate), "unknown": speed.unknown or None}
    return {"at_context": speed.context, "decode_tokens_per_s": rate_dict(speed.decode),
            "per_sequence_tokens_per_s": rate_dict(speed.per_sequence),
            "prefill_tokens_per_s": rate_dict(speed.prefill), "unknown": speed.unknown or None}


def alternative_speed_text(speed: SpeedEstimate | TrainingSpeed | None) -> str:
    """'24–43 tok/s decode' or '1,200–1,900 tok/s training' for an alternative's line; '' when unknown."""
    if isinstance(speed, TrainingSpeed):
        return f"{rate_text(speed.rate)} training" if speed.rate is not None else ""
    if speed is None or speed.decode is None:
        return ""
    per = f" ({rate_text(speed.per_sequence)} each)" if speed.batch > 1 and speed.per_sequence is not None else ""
    return f"{rate_text(speed.decode)} decode{per}"


def efficiency_dict(e: Efficiency) -> dict:
    return {"name": e.name, "low": e.low, "high": e.high, "why": e.why}


def speed_document(speed: SpeedEstimate | None) -> dict | None:
    """The JSON form of one speed estimate."""
    if speed is None:
        return None
    return {
        "device": speed.device, "engine": speed.engine, "precision": speed.precision, "batch": speed.batch,
        "at_context": speed.context,
        "decode_tokens_per_s": rate_dict(speed.decode),
        "per_sequence_tokens_per_s": rate_dict(speed.per_sequence),
        "prefill_tokens_per_s": rate_dict(speed.prefill),
        "bound": speed.bound,
        "bytes_per_step": {"weights": speed.weight_bytes_per_step, "kv_cache": speed.kv_bytes_per_step},
        "bandwidth_bytes_per_s": speed.bandwidth_bytes_per_s,
        "ram_bandwidth_source": speed.ram_bandwidth_source or None,
        "assumptions": [efficiency_dict(e) for e in speed.assumptions],
        "unknown": speed.unknown or None,
        "communication": _comm_document(speed.comm),
        "kv_cache_copies": _copies_document(speed),
    }


# The speed line names transformers' KV-cache copies once they cost this share of a decode step (a display threshold).
KV_COPY_NOTE_SHARE = 0.1


def kv_copy_text(speed: SpeedEstimate) -> str:
    """Where a long context's slow-down comes from when the engine copies the KV cache every token, or ''."""
    if speed.kv_copy_share < KV_COPY_NOTE_SHARE or not speed.kv_copy_bytes_per_step:
        return ""

    return (f"transformers copies the KV cache every token (DynamicCache's torch.cat, and repeat_kv for the "
            f"grouped-query heads): {gb_text(speed.kv_copy_bytes_per_step)} per token at {speed.context:,} tokens, "
            f"{speed.kv_copy_share * 100:.0f} % of the step; vLLM, SGLang and llama.cpp read the cache in place")


def _copies_document(speed: SpeedEstimate) -> dict | None:
    """transformers' KV-cache copies per decode step, or None where the engine reads the cache in place."""
    if not speed.kv_copy_bytes_per_step:
        return None
    return {"bytes_per_step": speed.kv_copy_bytes_per_step, "share_of_step": round(speed.kv_copy_share, 4),
            "why": "DynamicCache.update concatenates each layer's cache (torch.cat) and repeat_kv copies it "
                   "for every query head; engines with a paged or preallocated cache read it in place"}


def _span(pair: tuple[float, float] | None) -> dict | None:
    return None if pair is None else {"low": round(pair[0], 9), "high": round(pair[1], 9)}


def _comm_document(comm) -> dict | None:
    """Seconds a decode step waits on the links (vLLM tensor/pipeline parallel), or None."""
    if comm is None:
        return None
    return {"what": comm.what, "seconds_per_step": _span(comm.seconds),
            "inter_node_seconds_per_step": _span(comm.inter_node),
            "tp_across_nodes_seconds_per_step": _span(comm.tp_across_nodes),
            "pp_across_nodes_seconds_per_step": _span(comm.pp_across_nodes), "link": comm.link or None}


def _device_kind(speed: SpeedEstimate) -> str:
    """'gpu' or 'cpu': where this estimate runs (a GPU + CPU split is the GPU's)."""
    return "cpu" if speed.device == "cpu" else "gpu"


def training_speed_document(speed: TrainingSpeed | None) -> dict | None:
    """The JSON form of a TrainingSpeed."""
    if speed is None:
        return None
    step = speed.step_seconds
    return {
        "device": speed.device, "devices": speed.devices, "peak_tflops": speed.peak_tflops,
        "flops_per_token": speed.flops_per_token, "tokens_per_step": speed.tokens_per_step,
        "training_tokens_per_s": rate_dict(speed.rate),
        "step_seconds": None if step is None else {"low": round(step[0], 3), "high": round(step[1], 3)},
        "assumptions": [efficiency_dict(speed.mfu)], "unknown": speed.unknown or None,
        "offload_pcie": {"bytes_per_step": speed.offload_bytes, "seconds_per_step": round(speed.offload_seconds, 3)}
        if speed.offload_bytes else None,
        "inter_node": None if speed.traffic is None else {
            "bytes_per_step": speed.traffic.bytes_per_step, "what": speed.traffic.what, "link": speed.traffic.link,
            "seconds_per_step": speed.traffic.seconds,
            "wait_seconds_per_step": _span(speed.link_wait),
            "full_shard_bytes_per_step": speed.traffic.full_shard_bytes,
            "full_shard_seconds_per_step": speed.traffic.full_shard_seconds},
    }


def training_speed_line(speed: TrainingSpeed | None, brief: bool = False) -> str:
    """One table line: training tokens/s and the optimizer step's time, or why unknown; ``brief``: without the
    MFU and FLOPs it comes from, the offload's PCIe time and the inter-node traffic."""
    if speed is None:
        return "Speed:    not estimated"
    step = speed.step_seconds
    if speed.rate is None or step is None:
        return f"Speed:    unknown ({speed.unknown})"
    fast, slow = step
    if brief:
        return (f"Speed:    {rate_text(speed.rate)} training; one step of {speed.tokens_per_step:,} tokens in "
                f"{_seconds_range(fast, slow)}")
    devices = f"{speed.devices} × " if speed.devices > 1 else ""
    line = (f"Speed:    {rate_text(speed.rate)} training ({speed.mfu.low * 100:.0f}–{speed.mfu.high * 100:.0f} % of "
            f"{devices}{speed.peak_tflops:g} TFLOPS 16-bit, {speed.flops_per_token / 1e9:.1f} GFLOP per token); "
            f"one step of {speed.tokens_per_step:,} tokens in {_seconds_range(fast, slow)}"
            + (f", of which offload moves {speed.offload_bytes / 2**30:.2f} GiB over PCIe "
               f"({speed.offload_seconds:.2g} s, overlapped with compute at best)" if speed.offload_bytes else ""))
    return line + (f"\n{traffic_line(speed.traffic, speed.link_wait)}" if speed.traffic else "")


def traffic_line(traffic, wait: tuple[float, float] | None = None) -> str:
    """The inter-node traffic of one training step, its time on the link, and what of it the step waits for."""
    time = (f"{traffic.seconds:.2g} s per step at line rate" if traffic.seconds is not None else "time unknown")

    line = (f"          between nodes: {gb_text(traffic.bytes_per_step)} sent per node per step "
            f"({traffic.what}); {time} on {traffic.link}")
    if traffic.full_shard_bytes is not None:
        other = (f", {traffic.full_shard_seconds:.2g} s" if traffic.full_shard_seconds is not None else "")
        line += f" (full-shard over every GPU: {gb_text(traffic.full_shard_bytes)}{other})"
    if wait is not None:
        low, high = wait
        span = f"{low:.2g}–{high:.2g}" if f"{low:.2g}" != f"{high:.2g}" else f"{high:.2g}"
        line += f"; the step waits {span} s of it (not hidden behind compute; in the step time above)"
    return line


def _seconds_range(fast: float, slow: float) -> str:
    """'0.96–1.6 s', '6.7–20 s', '1.2–2.0 min', in the unit of the slower end."""
    unit, div = ("h", 3600) if slow >= 3600 else ("min", 60) if slow >= 60 else ("s", 1)

    def fig(x: float) -> str:
        return f"{x:.2g}" if x < 10 else _num(x)
    return f"{fig(fast / div)}–{fig(slow / div)} {unit}"


def advice_document(advice: DeviceAdvice | None) -> dict | None:
    """The JSON form of a DeviceAdvice (CPU or GPU)."""
    if advice is None:
        return None
    return {
        "choice": advice.choice, "reason": advice.reason,
        "gpu": _option(advice.gpu, advice.gpu_fits), "cpu": _option(advice.cpu, advice.cpu_fits),
    }


def _option(speed: SpeedEstimate | None, fits: bool | None) -> dict | None:
    if speed is None:
        return None
    return {"device": speed.device, "engine": speed.engine, "precision": speed.precision, "fits": fits,
            "decode_tokens_per_s": rate_dict(speed.decode), "unknown": speed.unknown or None}


def speed_line(speed: SpeedEstimate | None, advice: DeviceAdvice | None, brief: bool = False) -> str:
    """One table line: this plan's speed and the CPU-or-GPU advice; ``brief``: the rates, and the advice
    only where it points at the other device (the long-context and communication lines are verbose)."""
    if speed is None:
        return "Speed:    not estimated"
    if speed.decode is None:
        text = f"Speed:    unknown ({speed.unknown})"
    else:
        per = f" ({rate_text(speed.per_sequence)} per sequence)" if speed.batch > 1 else ""
        text = (f"Speed:    {rate_text(speed.decode)} decode at {speed.context:,} tokens{per}, "
                f"{rate_text(speed.prefill)} prefill; {speed.bound}-bound")
        if speed.ram_bandwidth_source.startswith("measured "):  # a stored `probe --bench` reading: when
            text += "; RAM bandwidth " + speed.ram_bandwidth_source.split(": ")[0]
    if brief:
        if advice is not None and advice.gpu is not None and advice.choice not in (None, _device_kind(speed)):
            text += f"; better here: {advice.choice.upper()} ({advice.reason})"
        return text
    if advice is not None and advice.gpu is None:
        text += "; no GPU here"
    elif advice is not None:
        best = {"gpu": "GPU", "cpu": "CPU", None: "neither"}[advice.choice]
        text += f"; better here: {best} ({advice.reason})"
    copies = kv_copy_text(speed) if speed.decode is not None else ""
    if copies:
        text += f"\n          KV-cache copies: {copies}"
    comm = speed.comm
    if comm is not None and speed.decode is not None and (comm.link or comm.tp_across_nodes is not None):
        low, high = comm.seconds
        text += f"\n          communication: {low * 1e3:.2g}–{high * 1e3:.2g} ms per decode step ({comm.what})"
        if comm.tp_across_nodes is not None:
            a_low, a_high = comm.tp_across_nodes
            text += (f"; tensor parallel across the nodes instead would wait {a_low * 1e3:.2g}–{a_high * 1e3:.2g} ms "
                     "(every all-reduce on the inter-node link)")
        if comm.pp_across_nodes is not None:
            a_low, a_high = comm.pp_across_nodes
            text += (f"; vLLM's tensor parallel within a node × pipeline parallel across nodes would wait "
                     f"{a_low * 1e3:.2g}–{a_high * 1e3:.2g} ms")
    return text
