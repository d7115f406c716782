"""`fitcheck measure`: run the request for real, with random weights, and set the peak beside the estimate.

Modules, one job each:

| module | job | imports torch |
|---|---|---|
| `job`      | the Job a run executes, built from the check's resolved plan; what cannot be measured is refused | no |
| `hf_config`| ModelSpec → transformers config dict (the model's exact shapes, optionally fewer layers) | no |
| `runner`   | the parent: a fresh child process, time limit, memory guard, out-of-memory detection | no |
| `child`    | the child: baseline, build, the request's phases, one protocol line per phase | yes |
| `workload` | build on the meta device, random weights on the target device, prefill/generate/steps | yes |
| `meter`    | CPU peak RSS, CUDA allocator counters + NVML, MPS driver memory | CUDA/MPS meters |
| `figures`  | measured figures and each beside the estimate's | no |
| `receipts` | the receipts file in the user cache; the line `check` prints for a match | no |
| `document` | the JSON document (fitcheck.measure/1) and the table | no |
| `run`      | the Python API: check pipeline → job → run → result | no |

Install with ``pip install 'fitcheck[measure]'`` (torch, transformers, peft; bitsandbytes where
the platform has it).  Only the child process imports torch.
"""

from __future__ import annotations

import importlib.util

from fitcheck.errors import FitcheckError

# On a Linux machine without a GPU, PyPI's default torch is the multi-GB CUDA build: the CPU build first.
INSTALL_LINE = ("pip install torch --index-url https://download.pytorch.org/whl/cpu && pip install 'fitcheck[measure]' "
                "(on a GPU machine: pip install 'fitcheck[measure]')")
CUDA_INSTALL_LINE = "pip install 'fitcheck[measure-cuda]'"
REQUIRED = ("torch", "transformers")


def missing_extra(find_spec=importlib.util.find_spec) -> list[str]:
    """The measurement libraries this Python lacks (found without importing them)."""
    return [name for name in REQUIRED if find_spec(name) is None]


def require_extra(find_spec=importlib.util.find_spec) -> None:
    """A FitcheckError (exit 2) with the install line when torch or transformers is missing."""
    missing = missing_extra(find_spec)
    if missing:
        raise FitcheckError(f"fitcheck measure needs {' and '.join(missing)}", f"install them with: {INSTALL_LINE}")


def require_job_libraries(job, find_spec=importlib.util.find_spec) -> None:
    """peft for LoRA/QLoRA, bitsandbytes for int8/nf4 weights and 8-bit optimizers: exit 2 when missing."""
    if job.mode in ("lora", "qlora") and find_spec("peft") is None:
        raise FitcheckError(f"--mode {job.mode} needs peft", f"install it with: {INSTALL_LINE}")
    if (job.precision in ("int8", "nf4") or "8bit" in job.optimizer) and find_spec("bitsandbytes") is None:
        raise FitcheckError("bitsandbytes is needed for int8/nf4 weights and 8-bit optimizers",
                            f"install it with: {CUDA_INSTALL_LINE}")
