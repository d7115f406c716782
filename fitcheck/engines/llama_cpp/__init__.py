"""llama.cpp: `llama-server` with GGUF files, on CUDA, ROCm, Metal or the CPU; Ollama runs the same runtime.

Its rows of the capability table, its KV layout (the SWA cache), its memory model (memory: weights memory-mapped,
-ngl partial offload, --n-cpu-moe expert offload, the RPC backend over nodes; buffers: the context's buffers from
llama.cpp's source) and the `llama-server` command that loads a plan.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fitcheck.engines.base import RESIDENT, Engine
from fitcheck.engines.capabilities import CPU, CUDA, FLOATS, GGUF_TYPES, METAL, ROCM, Runs
from fitcheck.engines.checkpoints import gguf_types_of, holds_gguf
from fitcheck.estimate.distributed import rpc_comm
from fitcheck.estimate.kv_cache import SlidingCache
from fitcheck.speed.efficiency import Efficiency, experts_touched_fraction, pcie_bytes_per_s

if TYPE_CHECKING:
    from fitcheck.model.spec import ModelSpec
    from fitcheck.plan import Plan

RUNS = Runs(frozenset({CUDA, ROCM, METAL, CPU}), why="llama.cpp's backends")
_TYPES = Runs(frozenset({CUDA, ROCM, METAL, CPU}))
# llama.cpp's RPC backend: `rpc-server -H 0.0.0.0 -p 50052` on each worker, `--rpc host:port,...` on the main host
# (github.com/ggml-org/llama.cpp/blob/master/tools/rpc/README.md).
RPC_PORT = 50052
RPC_SERVER = f"rpc-server -H 0.0.0.0 -p {RPC_PORT}"


class LlamaCpp(Engine):
    name = "llama.cpp"
    title = "llama.cpp"
    uses_torch = False
    runs = RUNS
    precisions = {p: _TYPES for p in GGUF_TYPES + FLOATS}
    kv_dtypes = ("fp16", "q8_0", "q4_0")
    splits = "layers"
    offloads = frozenset({"layers", "experts"})
    multi_node = True
    batch = RESIDENT
    distribution = "llama-cpp-python"
    lower_precisions = GGUF_TYPES
    loads_gguf_files = True
    keeps_packed_experts = True

    multi_node_words = "llama.cpp's RPC backend"
    host_per_layer = Efficiency("host time per layer (llama.cpp)", 20e-6, 60e-6,
                                "one ggml graph per step; a 1B Q4_K_M (22 layers) decodes at 762 tok/s on an RTX 4090 "
                                "(geerlingguy/ai-benchmarks #43): ~60 µs per layer")

    def prefill_copy_seconds(self, spec: ModelSpec, plan: Plan, machine: Any) -> tuple[float, bool]:
        """--n-cpu-moe: prompt micro-batches of >= 32 tokens run the offloaded experts on the GPU, the experts the
        micro-batch routes to copied over PCIe once per micro-batch (fitcheck.engines.llama_cpp.offload)."""
        from fitcheck.engines.llama_cpp.buffers import LLAMA_CPP_UBATCH
        from fitcheck.engines.llama_cpp.offload import LLAMA_CPP_OFFLOAD_MIN_BATCH, offloaded_expert_bytes

        if not plan.cpu_moe or plan.prompt_tokens < LLAMA_CPP_OFFLOAD_MIN_BATCH or not machine.gpus:
            return 0.0, False
        ubatch = min(plan.prompt_tokens, LLAMA_CPP_UBATCH)
        moved = offloaded_expert_bytes(spec, plan.precision, plan.cpu_moe) * experts_touched_fraction(spec, ubatch)
        return moved / (pcie_bytes_per_s(machine) * ubatch), True

    def decode_comm(self, spec: ModelSpec, plan: Plan, machine: Any) -> Any:
        return rpc_comm(spec, plan, machine)

    def default_why(self, precision: str) -> str:
        return "GGUF type or CPU"

    def layout(self, plan: Plan) -> str:
        if plan.device != "cpu" and plan.nodes > 1:
            return f"llama.cpp RPC: layers split over {plan.world} GPUs of {plan.nodes} nodes"
        return ""

    def default_kv(self, precision: str, kind: str, cc: float | None) -> str:
        return "fp16"  # llama-server's -ctk/-ctv default f16

    def default_precision(self, kind: str, cc: float | None, cpu_features: frozenset[str]) -> tuple[str, str]:
        return "q4_k_m", ("CPU inference: the GGUF type llama.cpp users take" if kind == CPU
                          else "the GGUF type llama.cpp users take")

    def sliding_cache(self, spec: ModelSpec, *, tokens: int, prompt_tokens: int | None = None,
                      transformers_version: str | None = None, batched_tokens: int | None = None) -> SlidingCache:
        """llama.cpp's SWA cache (buffers.swa_cells) for the architectures whose loader sets a SWA pattern: window
        + n_ubatch cells, padded; the others run the window with full attention."""
        from fitcheck.engines.llama_cpp.buffers import LLAMA_CPP_SWA_ARCHITECTURES, LLAMA_CPP_SWA_PAD, LLAMA_CPP_UBATCH

        window = spec.sliding_window or 0
        if spec.architecture not in LLAMA_CPP_SWA_ARCHITECTURES:
            return SlidingCache(tokens, tokens, f"window {window:,}, but llama.cpp runs {spec.architecture} with full "
                                                "attention: every token")
        cells = -(-(window + LLAMA_CPP_UBATCH) // LLAMA_CPP_SWA_PAD) * LLAMA_CPP_SWA_PAD
        return SlidingCache(tokens, min(tokens, cells),
                            f"llama.cpp's SWA cache: window {window:,} + n_ubatch {LLAMA_CPP_UBATCH}, padded to "
                            f"{LLAMA_CPP_SWA_PAD}; --swa-full keeps every token")

    def memory(self, spec: ModelSpec, plan: Plan) -> Any:
        from fitcheck.engines.llama_cpp.memory import memory

        return memory(self, spec, plan)

    def held_precision(self, spec: ModelSpec, precision: str) -> tuple[str, str] | None:
        """The GGUF type the model's GGUF repository holds (its recorded file list) when it lacks ``precision``:
        the best one at most as large, else the smallest larger one (Qwen3-0.6B's repository holds Q8_0 only,
        Gemma 3's QAT repositories Q4_0, gpt-oss's MXFP4_MOE)."""
        from fitcheck.estimate.formats import weight_format

        if holds_gguf(spec.gguf_types, precision) or spec.stored_file_type:
            return None
        held = [t for t in GGUF_TYPES if t.upper() in spec.gguf_types]
        if not held:
            return None
        bits = weight_format(precision).linear_bits
        below = [t for t in held if weight_format(t).linear_bits <= bits]
        pick = below[0] if below else min(held, key=lambda t: weight_format(t).linear_bits)
        return pick, f"the GGUF type the model's GGUF repository holds ({', '.join(sorted(spec.gguf_types))})"

    def checkpoint_known(self, spec: ModelSpec, plan: Plan) -> bool:
        """The model's own GGUF file, or a catalog GGUF repository that holds the type (its recorded file list)."""
        if plan.stored_format:
            return True
        return "gguf" in spec.prequantized and holds_gguf(spec.gguf_types, plan.precision)

    def command(self, model_id: str, plan: Plan, repos: Mapping[str, str], local: bool = False) -> str:
        quant = plan.precision.upper()
        comment = ""
        held = gguf_types_of(repos)
        if "gguf" in repos and holds_gguf(held, quant):
            # a repository of one type: llama.cpp's own guides name it without a tag (-hf ggml-org/gpt-oss-20b-GGUF)
            src = ["-hf", repos["gguf"] if held == {quant} else f"{repos['gguf']}:{quant}"]
        elif local and model_id.lower().endswith(".gguf"):
            src = ["-m", model_id]
        else:
            base = model_id.rstrip("/").split("/")[-1].removesuffix(".json")
            src = ["-m", f"{base}-{quant}.gguf"]
            make = (f"convert {model_id} with llama.cpp's convert_hf_to_gguf.py, then llama-quantize it to "
                    f"{quant}")
            if local:
                comment = f"  # {make}"
            elif "gguf" in repos:
                comment = (f"  # {repos['gguf']} holds {', '.join(sorted(held))}, no {quant}: {make}, or take a "
                           f"{quant} build you trust")
            else:
                comment = (f"  # no GGUF repository of {model_id} known to fitcheck: {make}, or take a {quant} "
                           f"build you trust (a {base}-GGUF repository on the Hub)")
        args = ["llama-server", *src, "-c", str(plan.context * plan.batch)]
        if plan.nodes > 1:
            args += ["--rpc", ",".join(f"NODE{i}_IP:{RPC_PORT}" for i in range(1, plan.nodes))]
        if plan.batch > 1:
            args += ["-np", str(plan.batch)]
        if plan.device == "cpu":
            args += ["-ngl", "0"]
        elif plan.gpu_layers is not None:
            args += ["-ngl", str(plan.gpu_layers)]
        else:
            args += ["-ngl", "999"]
        if plan.cpu_moe:
            # llama.cpp common/arg.cpp: --cpu-moe keeps every layer's experts in RAM, --n-cpu-moe N the first N's.
            args += ["--cpu-moe"] if plan.cpu_moe_all else ["--n-cpu-moe", str(plan.cpu_moe)]
        if plan.kv_dtype in ("q8_0", "q4_0"):
            args += ["-fa", "on", "-ctk", plan.kv_dtype, "-ctv", plan.kv_dtype]
        if plan.yarn is not None:
            # past n_ctx_train llama.cpp only warns; the publisher's YaRN recipe keeps the answers (common/arg.cpp:
            # --rope-scaling, --rope-scale, --yarn-orig-ctx)
            args += ["--rope-scaling", "yarn", "--rope-scale", str(plan.yarn.factor), "--yarn-orig-ctx",
                     str(plan.yarn.native)]
        if plan.nodes > 1:
            comment += f"  # first, on {_nodes_text(plan.nodes)}: {RPC_SERVER}"
        return shlex.join(args) + comment

    def launch_lines(self, model_id: str, plan: Plan, repos: Mapping[str, str]) -> tuple[str, ...]:
        if plan.nodes <= 1:
            return ()
        return (f"{_nodes_text(plan.nodes)}: {RPC_SERVER}  # exposes the node's GPUs to llama-server",
                f"then on node 0: {self.command(model_id, plan, repos).split('  # first')[0]}")


def _nodes_text(nodes: int) -> str:
    return "node 1" if nodes == 2 else f"each of nodes 1..{nodes - 1}"


ENGINE = LlamaCpp()


def llama_cpp_devices(spec: ModelSpec, plan: Plan, setup: Any = None) -> list[Any]:
    """The llama.cpp estimate's devices for `plan`, with the context settings of `setup` where a load's
    command line sets more than a plan says (-ub, -fa); `benchmarks/llamacpp_logs.py` scores them."""
    from fitcheck.engines.llama_cpp.memory import memory

    return memory(ENGINE, spec, plan, setup).devices
