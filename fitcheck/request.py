"""What the user asks, in every mode: one frozen :class:`Request`, defaults from the vocabulary.

The same type comes from the command line, a plan file, the interactive answers and the Python
API, and an alternative is a Request with some fields replaced.  None means "pick the default for
this machine" (fitcheck.plan resolves it, recording why).

Validation here is of the request alone: a value out of range, an unknown choice, options that
contradict each other whatever the machine.  Those are malformed input (exit 2).  Whether *this
machine* can run it is the capability table's question (fitcheck.engines): a verdict, not an error.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from fitcheck.errors import FitcheckError
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.sharding import FSDP_STRATEGIES
from fitcheck.frozen import replaced
from fitcheck.options import BY_NAME, DEFAULTS, INFERENCE, mode_error, not_applying, validate_values

# Precisions each training mode takes as its base weights.
PRECISIONS_BY_MODE = {
    "full": ("bf16", "fp16", "fp32"),
    "lora": ("bf16", "fp16", "fp32", "int8"),  # fp32/fp16: CPUs without bf16, T4 and V100
    "qlora": ("nf4", "gptq-int4", "int4", "awq"),
}


def base_of_mode(precision: str, mode: str) -> bool:
    """Whether ``precision`` is a base the training ``mode`` takes (every precision is, for inference)."""
    return mode not in PRECISIONS_BY_MODE or weight_format(precision).name in PRECISIONS_BY_MODE[mode]


@dataclass(frozen=True)
class Request:
    """A question as asked; every field an option of fitcheck.options (defaults there)."""

    mode: str = DEFAULTS["mode"]
    precision: str | None = DEFAULTS["precision"]
    context: int = DEFAULTS["context"]                 # inference: tokens per sequence
    seq_len: int = DEFAULTS["seq_len"]                 # training: tokens per sequence
    batch: int = DEFAULTS["batch"]
    kv_dtype: str = DEFAULTS["kv_dtype"]
    engine: str | None = DEFAULTS["engine"]
    gpu_memory_utilization: float = DEFAULTS["gpu_memory_utilization"]
    gpus: int | None = DEFAULTS["gpus"]
    nodes: int = DEFAULTS["nodes"]                     # machines like this one (--gpus is per node)
    expert_parallel: bool = DEFAULTS["expert_parallel"]  # MoE: experts over all GPUs, attention data parallel
    device: str = DEFAULTS["device"]
    gpu_layers: int | None = DEFAULTS["gpu_layers"]
    cpu_moe: int | str | None = DEFAULTS["cpu_moe"]    # llama.cpp: experts of the first N layers in RAM ("all")
    cpu_offload_gb: float = DEFAULTS["cpu_offload_gb"]  # vLLM: GiB of weights per GPU kept in RAM
    transformers_version: str | None = DEFAULTS["transformers_version"]
    grad_accum: int = DEFAULTS["grad_accum"]
    optimizer: str = DEFAULTS["optimizer"]
    master_weights: str | None = DEFAULTS["master_weights"]
    grad_checkpointing: bool | None = DEFAULTS["grad_checkpointing"]  # None: the mode's recipe (plan.py)
    attention: str | None = DEFAULTS["attention"]     # None: sdpa for training, the release's default for inference
    sampling: str | None = DEFAULTS["sampling"]       # 'auto': from generation_config.json (plan.sampling_mode)
    lora_rank: int = DEFAULTS["lora_rank"]
    lora_targets: str = DEFAULTS["lora_targets"]
    lora_train_embeddings: bool = DEFAULTS["lora_train_embeddings"]
    zero: int | None = DEFAULTS["zero"]
    fsdp: str | None = DEFAULTS["fsdp"]
    offload: str = DEFAULTS["offload"]
    headroom: float = DEFAULTS["headroom"]             # percent of free memory kept unused
    prompt_tokens: int | None = DEFAULTS["prompt_tokens"]  # inference prefill (default: the whole context)
    download_dir: str | None = DEFAULTS["download_dir"]   # where the weights land (default: the engine's cache)
    # Not options: the Python API may set them (training internals).
    lora_dropout: float = 0.0                          # peft LoraConfig default
    ds_bucket_elements: int | None = None              # DeepSpeed reduce_bucket_size (None: HF "auto" = hidden²)

    @property
    def training(self) -> bool:
        return self.mode != INFERENCE

    def with_changes(self, **changes: Any) -> Request:
        return replaced(self, changes)

    def option_values(self) -> dict[str, Any]:
        """The fields that are options, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in BY_NAME}

    def given(self) -> list[str]:
        """Options set to something other than their default."""
        return [n for n, v in self.option_values().items() if v != DEFAULTS[n]]

    def validate(self) -> None:
        """Malformed-request checks (FitcheckError, exit 2); nothing here depends on the machine.

        Pure over the request's values, so a request found valid is remembered (bounded; by value and
        type, so 4096.0 is not taken for a valid 4096): searches re-resolve the same requests on every
        machine.  A malformed one raises each time."""
        try:
            _validated(self, tuple(map(type, self.__dict__.values())))
        except TypeError:  # an unhashable value (from the Python API): checked without the memo
            self._validate()

    def _validate(self) -> None:
        validate_values(self.option_values())
        wrong = not_applying(self.mode, self.given())
        if wrong:
            raise mode_error(self.mode, wrong)
        if self.prompt_tokens is not None and self.prompt_tokens > self.context:  # >= 1: validate_values
            raise FitcheckError(f"--prompt {self.prompt_tokens:,} is longer than --context {self.context:,} "
                                "(the context is the prompt plus the tokens generated)",
                                f"--context {self.prompt_tokens} or more, or a shorter --prompt")
        if self.gpus is not None and self.device == "cpu":
            raise FitcheckError(f"--gpus {self.gpus} with --device cpu: pick one",
                                "drop --gpus, or use --device gpu" if not self.training else "drop --gpus")
        if self.nodes > 1 and self.device == "cpu":
            raise FitcheckError(f"--nodes {self.nodes} with --device cpu: several nodes are for GPUs",
                                "drop --nodes, or use --device gpu")
        if self.training:
            self._validate_training()
        else:
            self._validate_inference()

    def _validate_inference(self) -> None:
        """What no machine and no engine could run; the pairs the engines refuse are checked with their rows
        (fitcheck.plan.validate_request)."""
        if self.gpu_layers is not None and self.device == "cpu":
            raise FitcheckError("--gpu-layers offloads layers to a GPU, and --device cpu has none",
                                "drop --gpu-layers, or --device cpu")
        if self.cpu_moe is not None:
            if self.device == "cpu":
                raise FitcheckError("--cpu-moe keeps experts in RAM and the rest on a GPU, and --device cpu has none",
                                    "drop --cpu-moe, or --device cpu")
            if self.gpu_layers is not None:
                raise FitcheckError("--cpu-moe keeps every layer on the GPU but its experts: it replaces --gpu-layers",
                                    "drop --gpu-layers, or --cpu-moe")
        if self.cpu_offload_gb and self.device == "cpu":
            raise FitcheckError("--cpu-offload-gb streams weights to a GPU, and --device cpu has none",
                                "drop --cpu-offload-gb, or --device cpu")
        if self.gpu_layers is not None and self.nodes > 1:
            raise FitcheckError("--gpu-layers with --nodes: llama.cpp's RPC backend puts every layer on the nodes' "
                                "devices", "drop --gpu-layers")

    def _validate_training(self) -> None:
        if self.zero is not None and self.fsdp is not None:
            raise FitcheckError("--zero (DeepSpeed) and --fsdp (PyTorch FSDP) are alternatives", "pass one of them")
        if self.offload != "none":
            if self.fsdp is not None:
                if self.offload != "optimizer+params" or FSDP_STRATEGIES[self.fsdp].stage != 3:
                    raise FitcheckError("FSDP offloads parameters, gradients and optimizer together",
                                        "use --fsdp full-shard --offload optimizer+params")
            elif self.zero is None or self.zero == 0:
                raise FitcheckError("--offload needs DeepSpeed ZeRO",
                                    "add --zero 2 (optimizer) or --zero 3 (optimizer+params)")
            elif self.offload == "optimizer+params" and self.zero != 3:
                raise FitcheckError("parameter offload needs ZeRO-3", "use --zero 3 --offload optimizer+params")
        if self.precision is not None and not base_of_mode(self.precision, self.mode):
            raise FitcheckError(f"--precision {self.precision} is not a {self.mode} base",
                                f"{self.mode} takes: " + ", ".join(PRECISIONS_BY_MODE[self.mode]))
        if not 0 <= self.lora_dropout < 1:
            raise FitcheckError(f"LoRA dropout must be in [0, 1), got {self.lora_dropout}")


@lru_cache(maxsize=4096)
def _validated(request: Request, types: tuple[type, ...]) -> None:
    """Request.validate's checks, once per distinct valid request (lru_cache keeps no exception)."""
    request._validate()
