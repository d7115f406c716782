"""One QLoRA decoder layer's allocations, recorded on the CPU, and the whole checkpointed step built from them.

    python -m benchmarks.measure.layer_trace --record llama8b [--tokens 1750,3500]   # torch, transformers, peft
    python -m benchmarks.measure.layer_trace --replay llama8b --at 28000             # pure: the stored trace

``--record`` builds one ``LlamaDecoderLayer`` of a catalog shape with random weights, as the QLoRA
recipe leaves it: the seven linears frozen and 4-bit-like, the norms fp32
(``prepare_model_for_kbit_training``), peft LoRA on all seven in fp32, the fp32 residual stream as
its input, the forward under autocast bf16 inside ``torch.utils.checkpoint`` (reentrant, as
transformers 4.47's ``gradient_checkpointing_enable`` defaults to), then its backward.  sdpa on the
CPU stands in for flash-attention 2 (both keep only the output and the logsumexp for backward;
with no mask transformers passes ``enable_gqa``, so K/V are not expanded, as in FA2).

bitsandbytes' 4-bit has no kernel on this CPU for the recipe's era, so each linear is
:class:`Frozen4bitLinear`: a stored packed uint8 weight (half a byte per element) that its forward
and backward dequantize to a bf16 transient per call, as bitsandbytes 0.44/0.45's
``MatMul4Bit`` does (bitsandbytes/autograd/_functions.py: forward
``F.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t())``, saving no activation;
backward ``grad_A = torch.matmul(grad_output, F.dequantize_4bit(B, ctx.state).to(grad_output.dtype).t())``),
inside ``Linear4bit.forward``'s casts (bitsandbytes/nn/modules.py: ``x = x.to(compute_dtype)`` and
the output ``.to(inp_dtype)``), and peft wraps it as it wraps ``Linear4bit``
(peft/tuners/lora/bnb.py ``Linear4bit.forward``: the base output ``.clone()``, then
``result + lora_B(lora_A(x)) * scaling``).

The profiler's memory events (as ``alloc_trace`` records them) are kept for the checkpointed
forward (the layer's output is what stays: the next layer's saved input) and for the backward
(what stays is the input's gradient and the LoRA weights' gradients).  Recorded at two token
counts, each event's size is checked to be ``a + b·T`` with both counts' events in the same order;
the stored trace keeps (a, b) per event, so it replays at any length.

``build_step`` lays out a whole step as the estimate's tensors do (fitcheck/estimate/varying_lengths.py):
the embedding output, L copies of the forward (each output kept), the loss path of ``StepTensors``
in its code order, L backwards in reverse; static tensors sit in segments of their own.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"

# name: (catalog model, hidden, intermediate, heads, kv heads, head_dim, the two recording token counts)
SHAPES = {
    "llama8b": ("meta-llama/Llama-3.1-8B", 4096, 14336, 32, 8, 128, (1750, 3500)),
    "llama70b": ("meta-llama/Llama-3.3-70B-Instruct", 8192, 28672, 64, 8, 128, (875, 1750)),
}
LORA_RANK = 32


def trace_path(shape: str) -> Path:
    found = sorted(RESULTS.glob(f"qlora-layer-trace-{shape}-*.json"))
    if not found:
        raise FileNotFoundError(f"no recorded layer trace for {shape} under {RESULTS}")
    return found[-1]


# ---------------------------------------------------------------- recording (torch) --

def _layer(shape: str):
    import peft
    import torch
    import transformers
    from peft.tuners.lora.layer import Linear as LoraLinear

    _, hidden, inter, heads, kv, head_dim, _ = SHAPES[shape]

    class Dequant4bit(torch.autograd.Function):
        """MatMul4Bit's allocations: the weight dequantized to the activation's dtype in forward and
        again in backward, the product, nothing of the input saved.  The product is allocated as
        F.linear / matmul return it (one tensor of the output's shape and dtype) but not computed:
        bf16 GEMMs of these widths take seconds a call on a CPU without AVX-512-BF16, and no value
        changes what is allocated."""

        @staticmethod
        def forward(ctx, a, packed, out_features, in_features):
            ctx.save_for_backward(packed)
            ctx.shape = (out_features, in_features)
            w = _dequant(packed, ctx.shape, a.dtype)
            return _product(a, w, out_features)

        @staticmethod
        def backward(ctx, grad):
            (packed,) = ctx.saved_tensors
            w = _dequant(packed, ctx.shape, grad.dtype)
            return _product(grad, w, ctx.shape[1]), None, None, None

    def _dequant(packed, shape, dtype):
        w = torch.empty(shape, dtype=dtype)     # one transient of the matrix's size, as dequantize_4bit's out
        w.view(-1, 2).copy_(packed.view(-1, 1))
        return w

    def _product(a, w, width):
        return a.new_empty((*a.shape[:-1], width)).normal_()

    class Frozen4bitLinear(torch.nn.Linear):
        def __init__(self, linear: torch.nn.Linear) -> None:
            torch.nn.Module.__init__(self)
            self.in_features, self.out_features = linear.in_features, linear.out_features
            n = self.in_features * self.out_features
            self.weight = torch.nn.Parameter(torch.randint(0, 16, (n // 2, 1), dtype=torch.uint8), requires_grad=False)
            self.register_parameter("bias", None)

        def forward(self, x):
            inp_dtype = x.dtype
            x = x.to(torch.bfloat16)            # Linear4bit: compute_dtype bf16 (bnb_4bit_compute_dtype)
            return Dequant4bit.apply(x, self.weight, self.out_features, self.in_features).to(inp_dtype)

    class Lora4bitStandIn(LoraLinear):
        """peft's lora.bnb.Linear4bit forward (vanilla LoRA, adapters active) over Frozen4bitLinear."""

        def forward(self, x, *args, **kwargs):
            result = self.base_layer(x).clone()
            for name in self.active_adapters:
                lora_a, lora_b = self.lora_A[name], self.lora_B[name]
                output = lora_b(lora_a(self.lora_dropout[name](x))) * self.scaling[name]
                result = result + output
            return result

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=1,
                                   num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                                   max_position_embeddings=131072)
    cfg._attn_implementation = "sdpa"
    layer = transformers.models.llama.modeling_llama.LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
    for mod in (layer.self_attn, layer.mlp):
        for name, child in list(mod.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(mod, name, Frozen4bitLinear(child))
    layer.input_layernorm.float()            # prepare_model_for_kbit_training: what is not quantized -> fp32
    layer.post_attention_layernorm.float()
    for p in layer.parameters():
        p.requires_grad_(False)
    config = peft.LoraConfig(r=LORA_RANK, lora_alpha=LORA_RANK, lora_dropout=0.0,
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"])
    config._register_custom_module({Frozen4bitLinear: Lora4bitStandIn})
    adapted = peft.inject_adapter_in_model(config, layer)
    rotary = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(cfg)
    return adapted, rotary, cfg


def record_one(shape: str, tokens: int) -> dict:
    """The memory events of one checkpointed forward and one backward of the layer at `tokens`."""
    import os
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    from torch.utils.checkpoint import checkpoint

    layer, rotary, cfg = _layer(shape)
    hidden = cfg.hidden_size
    x = torch.randn(1, tokens, hidden, dtype=torch.float32, requires_grad=True)   # the fp32 residual stream
    pos = torch.arange(tokens).unsqueeze(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cos_sin = rotary(x, pos)
    grad_out = torch.randn(1, tokens, hidden, dtype=torch.float32)
    lora = [p for p in layer.parameters() if p.requires_grad]

    def run(h):
        return layer(h, attention_mask=None, position_embeddings=cos_sin)

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("fitcheck_forward"), torch.autocast("cpu", dtype=torch.bfloat16):
            out = checkpoint(run, x, use_reentrant=True)
        with record_function("fitcheck_backward"):
            out.backward(grad_out)
    assert x.grad is not None
    keep = {"out": out.data_ptr(), "grad": x.grad.data_ptr()}
    lora_grads = {p.grad.data_ptr() for p in lora}
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)["traceEvents"]
    os.unlink(path)
    spans = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in trace if e.get("name", "").startswith("fitcheck_")}
    memory = sorted((e["ts"], e["args"].get("Ev Idx", 0), e["args"]["Addr"], e["args"]["Bytes"]) for e in trace
                    if e.get("name") == "[memory]" and e["args"].get("Device Type", 0) == 0)
    phases: dict[str, list] = {"forward": [], "backward": []}
    live: dict[int, tuple[str, int]] = {}
    count = {"forward": 0, "backward": 0}
    for ts, _, addr, nbytes in memory:
        phase = next((p for p in phases if spans[f"fitcheck_{p}"][0] <= ts <= spans[f"fitcheck_{p}"][1]), None)
        if phase is None:
            continue
        if nbytes > 0:
            live[addr] = (phase, count[phase])
            phases[phase].append(["a", count[phase], nbytes])
            count[phase] += 1
        elif addr in live:           # a tensor of this trace ([phase, index of its allocation])
            phases[phase].append(["f", *live.pop(addr)])
    roles: dict[str, str] = {}
    for addr, (phase, index) in live.items():
        roles[f"{phase}:{index}"] = ("output" if addr == keep["out"] else "input_grad" if addr == keep["grad"]
                                     else "lora_grad" if addr in lora_grads else "other")
    import peft
    import transformers
    return {"tokens": tokens, "forward": phases["forward"], "backward": phases["backward"],
            "survivors": roles,
            "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                         "peft": peft.__version__}}


def _sorted_frees(events: list) -> list:
    """Each run of consecutive frees in one order: tensors dropped together (a function's locals as it
    returns) go in an order that varies from run to run, and the allocator's state after a run of frees
    does not depend on it (free blocks merge the same way in any order)."""
    out: list = []
    run: list = []
    for e in [*events, None]:
        if e is not None and e[0] == "f":
            run.append(e)
            continue
        out += sorted(run, key=lambda f: (f[1], f[2]))
        run = []
        if e is not None:
            out.append(e)
    return out


def fit(one: dict, two: dict) -> dict:
    """Per allocation ["a", index, a, b]: bytes = a + b·T, from recordings at two token counts whose
    events are the same in order (frees ["f", phase, index] alike)."""
    t1, t2 = one["tokens"], two["tokens"]
    out: dict = {}
    for phase in ("forward", "backward"):
        e1, e2 = _sorted_frees(one[phase]), _sorted_frees(two[phase])
        if [e[:1] if e[0] == "a" else e for e in e1] != [e[:1] if e[0] == "a" else e for e in e2]:
            raise ValueError(f"{phase}: the two recordings' events differ ({len(e1)} vs {len(e2)} events)")
        rows = []
        for i, (a1, a2) in enumerate(zip(e1, e2, strict=True)):
            if a1[0] == "f":
                rows.append(a1)
                continue
            s1, s2 = a1[2], a2[2]
            b, rem = divmod(s2 - s1, t2 - t1)
            a = s1 - b * t1
            if rem or a < 0:
                raise ValueError(f"{phase} event {i}: {s1} B at {t1}, {s2} B at {t2} is not a + b·T")
            rows.append(["a", a1[1], a, b])
        out[phase] = rows
    if one["survivors"] != two["survivors"]:
        raise ValueError("the two recordings keep different tensors")
    out["survivors"] = one["survivors"]
    return out


def record(shape: str, tokens: tuple[int, int]) -> dict:
    import tempfile

    from .fresh_process import run_fresh

    runs = [run_fresh("benchmarks.measure.layer_trace", json.dumps([shape, t]), f"{shape}-{t}") for t in tokens]
    one, two = runs
    if one is None or two is None:
        raise RuntimeError("a recording failed")
    raw = Path(tempfile.gettempdir()) / f"layer-trace-raw-{shape}.json"   # in case the fit refuses them
    raw.write_text(json.dumps(runs))
    model, hidden, inter, heads, kv, head_dim, _ = SHAPES[shape]
    return {"shape": shape, "model": model, "hidden": hidden, "intermediate": inter, "heads": heads,
            "kv_heads": kv, "head_dim": head_dim, "lora_rank": LORA_RANK, "recorded_at_tokens": list(tokens),
            **one["versions"], "date": datetime.date.today().isoformat(), **fit(one, two)}


# ------------------------------------------------------------------ the step (pure) --

@dataclass(frozen=True)
class LayerTrace:
    forward: tuple[tuple, ...]      # ("a", i, a, b) / ("f", i): i the index of the allocating event
    backward: tuple[tuple, ...]
    survivors: dict                 # "phase:i" -> output / input_grad / lora_grad / other

    @classmethod
    def load(cls, path: Path) -> LayerTrace:
        data = json.loads(path.read_text())
        return cls(tuple(map(tuple, data["forward"])), tuple(map(tuple, data["backward"])), data["survivors"])

    def role(self, phase: str, i: int) -> str | None:
        return self.survivors.get(f"{phase}:{i}")


def _phase(trace: LayerTrace, phase: str, tokens: int, key: tuple,
           names: dict[str, object]) -> Iterator[tuple[tuple, str]]:
    """The layer's events of `phase` at `tokens`, with their tensors' roles ("" for a transient); a
    tensor whose role is in `names` takes that id."""
    def ident(ph: str, i: int) -> tuple[object, str]:
        role = trace.role(ph, i) or ""
        return names.get(role, (key, ph, i)), role

    for ev in trace.forward if phase == "forward" else trace.backward:
        if ev[0] == "a":
            name, role = ident(phase, ev[1])
            yield ("a", name, max(ev[2] + ev[3] * tokens, 1)), role
        else:
            name, role = ident(ev[1], ev[2])
            yield ("f", name), role


def build_step(trace: LayerTrace, tensors, tokens: int, step: int = 0) -> list[tuple]:
    """One step's events for ``benchmarks.measure.caching_allocator.replay``: the embedding output, L
    traced forwards (output i+1 kept), the loss path of `tensors` (a StepTensors) in its code order,
    L traced backwards in reverse (each then frees its saved input, its incoming gradient and what its
    forward kept beside the output), the LoRA
    gradients and anything else a layer kept freed at the step's end (optimizer step, zero_grad)."""
    from fitcheck.estimate.varying_lengths import _events

    L = tensors.layers
    k = ("s", step)
    ev: list[tuple] = [("a", (k, "x", 0), tokens * tensors.layer_input)]
    kept: list = []
    for i in range(L):
        for e, _role in _phase(trace, "forward", tokens, (k, i), {"output": (k, "x", i + 1)}):
            ev.append(e)
    loss = list(_events(_no_layers(tensors), tokens, step))[1:-1]   # without x0's allocation and g0's free
    rename: dict[object, object] = {(k, "x", 0): (k, "x", L), (k, "g", 0): (k, "g", L)}
    for is_alloc, ident, nbytes in loss:
        ident = rename.get(ident, ident)
        ev.append(("a", ident, max(nbytes, 1)) if is_alloc else ("f", ident))
    for i in reversed(range(L)):
        for e, role in _phase(trace, "backward", tokens, (k, i), {"input_grad": (k, "g", i)}):
            ev.append(e)
            if e[0] == "a" and role in ("lora_grad", "other"):
                kept.append(e[1])
        ev += [("f", (k, "g", i + 1)), ("f", (k, "x", i))]
        # what the checkpoint's forward kept beside its output (its saved RNG state) goes with the graph
        ev += [("f", ((k, i), "forward", int(key.split(":")[1]))) for key, role in trace.survivors.items()
               if role == "other" and key.startswith("forward:")]
    ev.append(("f", (k, "g", 0)))
    ev += [("f", ident) for ident in kept]
    return ev


def _no_layers(tensors):
    from dataclasses import replace

    return replace(tensors, layers=0)


def step_events(trace: LayerTrace, tensors, tokens: int, steps: int = 3) -> list[tuple]:
    out: list[tuple] = []
    for s in range(steps):
        out += build_step(trace, tensors, tokens, s)
        out.append(("step",))
    return out


def traced_reserve(trace: LayerTrace, tensors, tokens: int, steps: int = 3) -> tuple[int, int]:
    """(live peak, the smallest room the steps run in) of the traced steps, bytes."""
    from .caching_allocator import needed_bytes, replay

    events = step_events(trace, tensors, tokens, steps)
    return replay(events).peak_allocated, needed_bytes(events)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", choices=SHAPES)
    ap.add_argument("--tokens", help="the two token counts to record at (comma-separated)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        from .fresh_process import emit

        shape, tokens = json.loads(args.one)
        emit(record_one(shape, tokens))
        return 0
    if args.record:
        tokens = tuple(int(t) for t in args.tokens.split(",")) if args.tokens else SHAPES[args.record][6]
        data = record(args.record, (tokens[0], tokens[1]))
        out = args.out or RESULTS / f"qlora-layer-trace-{args.record}-{data['date']}.json"
        out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
        print(f"wrote {out}: {len(data['forward'])} forward, {len(data['backward'])} backward events; "
              f"kept: {sorted(set(data['survivors'].values()))}")
        return 0
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
