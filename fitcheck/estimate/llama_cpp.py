"""llama.cpp's buffers, from its source: what a load reserves, device by device.  Pure.

A llama.cpp load prints one line per backend buffer: the model weights per device
("load_tensors: CUDA0 model buffer size"), the KV cache per device ("CUDA0 KV buffer size"), the
host output buffer (logits), and the compute buffers the graph allocator reserves for the
worst-case graph ("CUDA0 compute buffer size", "CUDA_Host compute buffer size").  This module
holds the settings that decide those sizes (:class:`LlamaCppSetup`, the command line's -c, -np,
-ub, -fa, -ctk/-ctv, -ngl); `inference._llama_cpp` turns them into the estimate's components, and
`benchmarks/llamacpp_logs.py` checks them against published load logs.
"""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck.engines import LLAMA_CPP_UBATCH


@dataclass(frozen=True)
class LlamaCppSetup:
    """The context settings of one llama.cpp load (llama-server / llama-cli flags)."""

    n_ctx: int                      # -c: KV cells over all sequences, before llama.cpp pads it
    n_seq: int = 1                  # -np: sequences sharing the cells
    n_ubatch: int = LLAMA_CPP_UBATCH  # -ub: the micro-batch the worst-case graph is reserved for
    flash_attn: bool = True         # -fa (auto resolves to on where the backend has the kernel)
    type_k: str = "fp16"            # -ctk
    type_v: str = "fp16"            # -ctv
    gpu_layers: int | None = None   # -ngl: None = every layer and the output layer
    gpus: int = 1                   # devices the layers are split over (--split-mode layer)


def setup_from_plan(plan) -> LlamaCppSetup:
    """The setup a fitcheck plan asks llama-server for (`-c context×batch -np batch -ngl ...`)."""
    return LlamaCppSetup(n_ctx=plan.context * plan.batch, n_seq=plan.batch, type_k=plan.kv_dtype,
                         type_v=plan.kv_dtype, gpu_layers=plan.gpu_layers, gpus=plan.world if plan.gpus else 0)
