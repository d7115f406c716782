"""Optimizer state per trainable parameter, and the step's temporary buffers.

Sources:
- AdamW (torch.optim.AdamW, Loshchilov & Hutter 2019): exp_avg and exp_avg_sq, each the dtype of
  the parameter it updates (fp32 master copy: 4 B each; a bf16 parameter without master: 2 B each).
  The default `foreach` implementation (torch/optim/adamw.py `_multi_tensor_adamw`) allocates one
  more state-sized list, `exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)`, during `step()`.
- 8-bit AdamW (bitsandbytes `AdamW8bit`, Dettmers et al. 2022, "8-bit Optimizers via Block-wise
  Quantization"): two uint8 states plus one fp32 absmax per 2048-value block (bitsandbytes
  optim/optimizer.py, blocksize 2048) = 2 + 2 × 4/2048 B.  Paged AdamW 8-bit keeps the same
  state in CUDA unified memory, which the driver can page out to RAM under pressure.
- SGD with momentum (torch.optim.SGD, momentum > 0): one momentum buffer in the parameter dtype.
- Adafactor (Shazeer & Stern 2018; transformers.optimization.Adafactor, beta1=None): a factored
  second moment, one fp32 row vector and one column vector per matrix (rows + cols), a full fp32
  vector for 1-D parameters; no first moment.
- DeepSpeed's fused Adam (ops/adam/fused_adam.py) updates in one kernel: no step temporaries.
"""

from __future__ import annotations

from dataclasses import dataclass

OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw-8bit", "sgd", "adafactor")
_BNB_BLOCK = 2048


@dataclass(frozen=True)
class ParamShape:
    """A trainable tensor: `count` copies of a rows × cols matrix (cols = 1: a vector)."""

    rows: int
    cols: int
    count: int = 1

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.count


def state_bytes(optimizer: str, shapes: tuple[ParamShape, ...], state_dtype_bytes: int) -> int:
    """Persistent optimizer state for these trainable tensors.

    `state_dtype_bytes`: 4 when states live beside an fp32 master copy, else the parameter's size.
    """
    params = sum(s.params for s in shapes)
    if optimizer == "adamw":
        return 2 * state_dtype_bytes * params
    if optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        return int(params * (2 + 2 * 4 / _BNB_BLOCK))
    if optimizer == "sgd":
        return state_dtype_bytes * params
    if optimizer == "adafactor":
        return 4 * sum((s.rows + s.cols) * s.count if s.cols > 1 else s.rows * s.count for s in shapes)
    raise ValueError(optimizer)


def step_temp_bytes(optimizer: str, params: int, largest: int, state_dtype_bytes: int, *, fused: bool,
                    foreach: bool = True) -> int:
    """Temporaries that exist only inside optimizer.step() (0 for fused kernels).

    `largest`: parameters of the largest trainable tensor (Adafactor updates one at a time).
    `foreach`: PyTorch's multi-tensor AdamW (its default when every parameter is on a CUDA
    device); on the CPU it loops over parameters one at a time (torch/optim/adam.py
    `_single_tensor_adam`: `exp_avg_sq.sqrt() / bias_correction2_sqrt` holds two temporaries
    of one parameter's size; measured 216 MiB for SmolLM2-135M's 113 MiB fp32 embedding).
    """
    if fused:
        return 0
    if optimizer == "adamw":
        if not foreach:
            return 2 * state_dtype_bytes * largest
        return state_dtype_bytes * params  # exp_avg_sq_sqrt of the foreach implementation
    if optimizer == "adafactor":
        return 3 * 4 * largest  # fp32 grad copy, grad², update of the tensor being updated
    return 0


def describe(optimizer: str, state_dtype_bytes: int) -> str:
    return {
        "adamw": f"AdamW: exp_avg + exp_avg_sq, {2 * state_dtype_bytes} B/param",
        "adamw-8bit": "bitsandbytes AdamW8bit: 2 uint8 states + block absmax ≈ 2 B/param",
        "paged-adamw-8bit": "bitsandbytes PagedAdamW8bit: ≈ 2 B/param in paged (unified) memory",
        "sgd": f"SGD momentum buffer, {state_dtype_bytes} B/param",
        "adafactor": "Adafactor: factored second moment (rows + cols per matrix, fp32)",
    }[optimizer]
