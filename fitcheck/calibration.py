"""The tunables no upstream source sizes, shared by several engines: each with its unit and where it came from.

An engine's own constants live in its module (fitcheck.engines.*) beside the code they size; the search's ranking
weights in fitcheck.search.rank ("policy": what a practitioner gives up first, not a measurement).
"""

from __future__ import annotations

from fitcheck.units import MiB

# Bytes.  CUDA context, cuBLAS/cuDNN handles and workspaces of a PyTorch process: not seen by
# torch.cuda.max_memory_allocated (≈0.3–0.6 GiB as usually reported; more on newer GPUs).  vLLM v0.19.0's startup
# logs read 0.51 GiB for it on every single-rank row (benchmarks/data/vllm_startup_logs.csv).
TORCH_CUDA_CONTEXT = 512 * MiB

# A fraction of the transient bytes, and bytes.  PyTorch's caching allocator keeps freed blocks of transient
# tensors; reserved exceeds allocated by 5–15 % of what comes and goes.  Weights are allocated once, tensor by
# tensor: what their segments hold beyond them follows from the allocator's rules (estimate.allocator.load_waste).
# Replayed generate runs (benchmarks/measure/alloc_trace.py) need 0–42 MiB beyond that.
ALLOCATOR_SLACK = 0.05
ALLOCATOR_SLACK_MIN = 64 * MiB

# Bytes.  A CPU process running transformers: the libraries' own resident memory (torch, transformers).
TORCH_CPU_RUNTIME = 600 * MiB

# A multiple of the transient working set.  On the CPU, PyTorch allocates through glibc malloc.  Tensors freed
# inside a forward pass go back to malloc's heap, not to the OS (its dynamic mmap threshold rises to 32 MiB, so most
# transient tensors come from the heap), and resident memory keeps about one more transient working set.
# Measured (benchmarks/measure, Qwen2.5-0.5B and a 2-layer Qwen2.5-7B, 4,096-token prefill): with
# MALLOC_MMAP_THRESHOLD_=65536 the peak matches the live-tensor formula (206 vs 190 MiB, 589 vs
# 572 MiB); with glibc's defaults it is higher by 119 and 129 MiB (see docs/accuracy.md).
# Generating re-allocates the whole DynamicCache each token (torch.cat per layer), and the freed
# smaller cache cannot hold the larger one: the heap keeps about one more KV cache as well.
CPU_HEAP_RETENTION = 1.0
