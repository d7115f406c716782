"""llama.cpp's memory: weights (mmap), a KV cache of n_ctx = context × sequences cells allocated up front, compute
and output buffers; -ngl N puts N layers (and their KV) on the GPU, the rest in RAM; --n-cpu-moe N keeps the routed
experts of the first N layers in RAM; with --rpc the nodes' GPUs are devices of one llama-server.  Pure; the
buffers' rules are in fitcheck.engines.llama_cpp.buffers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fitcheck.engines.llama_cpp import buffers as LC
from fitcheck.engines.llama_cpp.offload import (
    LLAMA_CPP_OFFLOAD_MIN_BATCH,
    offloaded_expert_bytes,
    offloaded_moe_layers,
    one_layer_expert_bytes,
)
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.parts import stored_weight_total
from fitcheck.estimate.result import ACTIVATIONS, KV_CACHE, OVERHEAD, WEIGHTS, Component, DeviceNeed, Memory
from fitcheck.model.spec import ModelSpec
from fitcheck.units import GiB, MiB

if TYPE_CHECKING:
    from fitcheck.engines.llama_cpp import LlamaCpp
    from fitcheck.plan import Plan

# ggml's CUDA backend: context plus cuBLAS handle, smaller than PyTorch's.
LLAMA_CPP_CUDA_CONTEXT = 320 * MiB
LLAMA_CPP_CPU_RUNTIME = 100 * MiB


# ---- llama.cpp ---------------------------------------------------------------------------------
def memory(engine: LlamaCpp, spec: ModelSpec, plan: Plan, setup: LC.LlamaCppSetup | None = None):
    setup = setup or LC.setup_from_plan(plan)
    wb = engine.weights(spec, plan.precision)
    weights_total, exact = stored_weight_total(spec, plan.precision, wb.total)
    scale = weights_total / wb.total if wb.total else 1.0
    L = spec.num_layers
    cells = LC.cells(setup)  # n_ctx: -c (shared by the -np parallel sequences), padded by llama.cpp
    if plan.device == "cpu":
        gpu_layers = 0
    elif plan.gpu_layers is None:
        gpu_layers = L + 1
    else:
        gpu_layers = min(plan.gpu_layers, L + 1)
    layers_on_gpu = min(gpu_layers, L)
    head_on_gpu = gpu_layers > L
    # With --rpc the nodes' GPUs are devices of one llama-server: layers split over all of them.
    n_gpu = plan.world if gpu_layers else 0
    layer_w = wb.per_layer_bytes * scale
    head_w = (wb.lm_head_bytes or (wb.embed_bytes if spec.tie_word_embeddings else 0)) * scale
    embed_w = wb.embed_bytes * scale
    kv_all = LC.kv_bytes(spec, setup)
    kv_gpu = LC.kv_bytes(spec, setup, layers=layers_on_gpu) if layers_on_gpu else 0
    t = LC.micro_batch(setup)
    copies = LC.pipeline_copies(replace(setup, gpus=n_gpu), L) if n_gpu else 1
    # The output matrix stays in RAM with -ngl <= n_layer; a micro-batch of >= 32 tokens runs its matmul on
    # the GPU, which holds a copy of it while the matmul runs (op offload, llama_cpp.gpu_compute_bytes).
    out_copy = int(head_w) if n_gpu and not head_on_gpu and t >= LLAMA_CPP_OFFLOAD_MIN_BATCH else 0
    # --n-cpu-moe / --cpu-moe: the routed experts of the first layers stay in RAM (offload.py).
    moe_off = offloaded_moe_layers(spec, plan.cpu_moe) if layers_on_gpu else 0
    experts_ram = int(offloaded_expert_bytes(spec, plan.precision, plan.cpu_moe) * scale) if moe_off else 0
    # The worst-case graph's micro-batch (>= 32 tokens) runs the experts on the GPU: one layer's expert
    # tensors are copied into its compute buffer at a time (ggml-cuda offload_op).
    copied = int(one_layer_expert_bytes(spec, plan.precision) * scale) \
        if moe_off and t >= LLAMA_CPP_OFFLOAD_MIN_BATCH else 0
    fa = "flash attention" if setup.flash_attn else "no flash attention: scores n_ctx × n_tokens × heads in f32"
    devices = []
    if n_gpu:
        for i in range(n_gpu):
            share = 1.0 / n_gpu
            holds_output = head_on_gpu and i == n_gpu - 1
            w = (layer_w * layers_on_gpu - experts_ram) * share + (head_w if holds_output else 0)
            what = (f"{layers_on_gpu} of {L} layers" + (" + output head" if head_on_gpu else "")
                    + (f", less the routed experts of {moe_off} layers (in RAM: --n-cpu-moe {plan.cpu_moe})"
                       if moe_off else ""))
            compute = LC.gpu_compute_bytes(spec, setup, holds_output=holds_output, pipeline_copies=copies,
                                           offloaded_weight=out_copy if i == 0 else 0)
            how = (f"compute buffer for the worst-case graph: {t}-token micro-batch, {cells:,} cells, {fa}"
                   + (", logits of every token" if holds_output else "")
                   + (f"; {copies} copies of its inputs (pipeline parallelism)" if copies > 1 else "")
                   + ("; the output matrix copied from RAM for its matmul" if out_copy and i == 0 else ""))
            comps = [
                Component(WEIGHTS, int(w), what
                          + f" as {weight_format(plan.precision).description}" + (f"; {exact}" if exact else "")),
                Component(KV_CACHE, int(kv_gpu * share),
                          _llama_kv_detail(spec, setup, share * layers_on_gpu / max(L, 1))),
                Component(ACTIVATIONS, compute, how),
                Component(OVERHEAD, LLAMA_CPP_CUDA_CONTEXT, "CUDA context and cuBLAS", counted_in="runtime"),
            ]
            if copied:
                comps.insert(3, Component(ACTIVATIONS, copied, "one layer's routed experts copied from RAM for a "
                                          f"prompt micro-batch (>= {LLAMA_CPP_OFFLOAD_MIN_BATCH} tokens run on the "
                                          "GPU)"))
            devices.append(DeviceNeed(f"gpu{i}", "gpu", tuple(comps)))
    cpu_layers = L - layers_on_gpu
    cpu_w = embed_w + layer_w * cpu_layers + (0 if head_on_gpu or spec.tie_word_embeddings else head_w) + experts_ram
    cpu_what = ("token embedding (kept in RAM by llama.cpp)" if n_gpu else "all weights") \
        + (f" + {cpu_layers} layers" if n_gpu and cpu_layers else "") \
        + (f" + the routed experts of {moe_off} layers ({experts_ram / GiB:.2f} GiB)" if moe_off else "")
    host = LC.host_compute_bytes(spec, setup, cpu_layers=cpu_layers if n_gpu else L, output_on_cpu=not head_on_gpu,
                                 has_gpu=bool(n_gpu))
    output = LC.output_buffer_bytes(spec, setup)
    cpu_comps = [
        Component(WEIGHTS, int(cpu_w), cpu_what + ", memory-mapped"),
        Component(KV_CACHE, int(kv_all - kv_gpu),
                  _llama_kv_detail(spec, setup, cpu_layers / max(L, 1)) if cpu_layers else "none on CPU"),
        Component(ACTIVATIONS, host + output,
                  ("host compute buffer (token embeddings and f32 masks for the GPU" + (", and the CPU's layers"
                   if cpu_layers else "") + ")" if n_gpu else f"compute buffer ({t}-token micro-batch, {fa})")
                  + f" and the output buffer ({max(setup.n_seq, 1)} × {spec.vocab_size:,} f32 logits)"),
        Component(OVERHEAD, LLAMA_CPP_CPU_RUNTIME, "llama.cpp process", counted_in="runtime"),
    ]
    devices.append(DeviceNeed("cpu", "cpu", tuple(cpu_comps)))
    facts: list[tuple[str, float | int | str]] = [("gpu_layers", gpu_layers), ("n_ctx", cells)]
    notes = []
    if moe_off:
        facts += [("cpu_moe_layers", moe_off), ("experts_in_ram_bytes", experts_ram)]
        notes.append(f"llama.cpp --n-cpu-moe {plan.cpu_moe}: the routed experts of {moe_off} of {spec.num_moe_layers} "
                     "MoE layers stay in RAM and run on the CPU while decoding; attention, norms, router, shared "
                     "experts, output head and the whole KV cache stay on the GPU")
    if plan.nodes > 1 and n_gpu:
        facts.append(("rpc_servers", plan.nodes - 1))
        exposes = "s expose their" if plan.nodes > 2 else " exposes its"
        notes.append(f"llama.cpp RPC: {plan.nodes - 1} rpc-server node{exposes} GPUs to llama-server; layers split "
                     f"over the {n_gpu} GPUs in proportion to their memory "
                     "(llama.cpp's default --tensor-split; the nodes' GPUs are alike, so equal shares)")
    if plan.batch > 1:
        notes.append(f"llama.cpp: -c {cells} shared by -np {plan.batch} sequences of {plan.context} tokens")
    return Memory(devices, facts, notes)


def _llama_kv_detail(spec: ModelSpec, setup: LC.LlamaCppSetup, share: float) -> str:
    """llama.cpp's KV cache in words, from the same rule as its bytes (llama_cpp.kv_bytes)."""
    n = max(setup.n_seq, 1)
    per = spec.kv_elements_per_token
    how = "MLA latent" if spec.is_mla else f"2 × {spec.num_kv_heads} KV heads × {spec.attn_head_dim}"
    full_t = LC.cells(setup) // n
    sliding = min(spec.num_sliding_layers, spec.num_attention_layers) if spec.sliding_window else 0
    if sliding:
        swa = LC._has_swa_cache(spec)
        full = spec.num_attention_layers - sliding
        parts = [f"{full} full-attention layers × {full_t:,} tokens"] if full else []
        swa_t = LC.swa_cells(spec, setup) // n if swa else full_t
        parts.append(f"{sliding} sliding-window layers × {swa_t:,} tokens")
        layers = f"({' + '.join(parts)})" if full else parts[0]
        why = (f"llama.cpp's SWA cache: window {spec.sliding_window:,} × {n} seq + n_ubatch {setup.n_ubatch}, "
               f"padded to {LC.LLAMA_CPP_SWA_PAD}; --swa-full keeps every token" if swa else
               f"window {spec.sliding_window:,}, but llama.cpp runs {spec.architecture} with full attention: "
               "every token")
    else:
        layers, why = f"{spec.num_attention_layers} layers × {full_t:,} tokens", ""
    kv = setup.type_k if setup.type_k == setup.type_v else f"{setup.type_k}/{setup.type_v}"
    text = (f"{layers} × {how} = {per} elements/token × {n} seq × {kv}; -c {setup.n_ctx:,} padded to a multiple "
            f"of {setup.ctx_pad} ({LC.cells(setup):,} cells" + (" shared by the sequences)" if n > 1 else ")"))
    if why:
        text += f"; sliding-window layers: {why}"
    if share != 1.0:
        text += f"; this device holds {share:.0%}"
    return text


