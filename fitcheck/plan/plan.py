"""What a resolved plan is: every choice of a request made concrete for one machine.  Frozen dataclasses.

fitcheck.plan.inference and fitcheck.plan.training resolve a Request into these; the engines' memory models
(fitcheck.engines) and every stage after them read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck.estimate.context_limit import Yarn
from fitcheck.estimate.generate_step import DEFAULT_SAMPLING
from fitcheck.estimate.result import Assumption
from fitcheck.frozen import replaced
from fitcheck.options import DEFAULTS

DEFAULT_CONTEXT = DEFAULTS["context"]
DEFAULT_SEQ_LEN = DEFAULTS["seq_len"]
DEFAULT_GPU_MEMORY_UTILIZATION = DEFAULTS["gpu_memory_utilization"]
DEFAULT_LORA_RANK = DEFAULTS["lora_rank"]
DEFAULT_LORA_TARGETS = DEFAULTS["lora_targets"]


@dataclass(frozen=True)
class Plan:
    """A fully resolved inference configuration: every field concrete."""

    precision: str
    engine: str
    device: str                 # 'gpu', 'cpu' or 'offload' (llama.cpp split between GPU and CPU)
    gpus: int                   # GPUs used (0 for CPU)
    context: int
    batch: int
    prompt_tokens: int
    kv_dtype: str               # concrete: fp16, bf16, fp32, fp8, q8_0, q4_0
    gpu_layers: int | None      # llama.cpp layers on the GPU (None: all)
    gpu_memory_utilization: float
    gpu_total_bytes: int | None  # vLLM reserves a fraction of this
    compute_capability: float | None
    unified_memory: bool = False
    assumptions: tuple[Assumption, ...] = ()
    decodes: bool = True        # tokens are generated after the prompt (False: a prefill-only pass)
    # transformers' prefill logits: 'last' position only (>= 4.45, logits_to_keep=1, what generate()
    # asks for), 'all' positions in the compute dtype (logits_to_keep=0), or 'all-fp32': every
    # position upcast in the model's forward (transformers < 4.45: `logits = logits.float()`).
    logits: str = "last"
    transformers_version: str | None = None  # as typed (--transformers-version); None: a current one
    # transformers' attention: 'sdpa'/'flash' never materialise the prompt × prompt scores; 'eager'
    # holds them in the compute dtype plus an fp32 softmax, per layer (see inference._eager_scores).
    attention: str = "sdpa"
    # generate() with the legacy tuple cache: the previous step's cache is still referenced while
    # the new one is concatenated, so two caches are alive at the last decode step.
    legacy_cache: bool = False
    # how generate() picks each token (fitcheck.estimate.generate_step.SAMPLINGS, --sampling, or a
    # 'sample:...' one a generation_config.json asks for; resolve_inference: sampling_mode): its
    # vocabulary-sized tensors per step.  Default 'top-p' (do_sample with temperature, top-k and top-p), the
    # larger of the common cases.
    sampling: str = DEFAULT_SAMPLING
    # generate(min_new_tokens=N): MinLengthLogitsProcessor and MinNewTokensLengthLogitsProcessor run each step
    # (the measurement harness forces its token counts so); no option sets it (the API may).
    min_new_tokens: bool = False
    problems: tuple[str, ...] = ()           # why this machine cannot run it (empty: it can)
    mode: str = "inference"
    nodes: int = 1              # machines; vLLM: pipeline-parallel stages, one per node (gpus is per node)
    # llama.cpp --n-cpu-moe: the first cpu_moe layers keep their routed experts in RAM (device 'offload',
    # every layer's attention, norms, router and shared experts on the GPU); 0: none.
    cpu_moe: int = 0
    cpu_moe_all: bool = False    # --cpu-moe all: every layer's experts (llama-server --cpu-moe)
    cpu_offload_gb: float = 0.0  # vLLM --cpu-offload-gb: GiB of weights per GPU in RAM, streamed every forward
    expert_parallel: bool = False  # MoE: routed experts over all GPUs, attention data parallel (vLLM, SGLang)
    mem_fraction_static: float | None = None  # SGLang: weights + KV pool, a fraction of total GPU memory
    stored_format: bool = False  # the precision is the checkpoint's own (an FP8 checkpoint needs no --quantization)

    @property
    def world(self) -> int:
        """GPUs over all nodes."""
        return max(self.gpus, 1) * max(self.nodes, 1)

    dequantize: str = ""        # the stored format transformers is told to dequantize at load ('mxfp4'), else ''
    # How the plan spreads over GPUs and nodes, in words ('tensor parallel 16 over 2 nodes'; the engine's
    # Engine.layout, set at resolve); '' on one device.
    layout: str = ""
    # A context past the model's maximum (max_position_embeddings): the engines' commands then set what lets them
    # start (vLLM and SGLang refuse a longer context without it) and the publisher's YaRN recipe where one is known.
    beyond_max_context: bool = False
    yarn: Yarn | None = None

    def with_changes(self, **changes) -> Plan:
        return replaced(self, changes)

    @property
    def training(self) -> bool:
        return False

    @property
    def offload_flag(self) -> str:
        """How a partial-offload plan splits, as llama-server spells it ('' when it does not)."""
        if self.cpu_moe:
            return "--cpu-moe" if self.cpu_moe_all else f"--n-cpu-moe {self.cpu_moe}"
        return f"-ngl {self.gpu_layers}" if self.device == "offload" else ""


@dataclass(frozen=True)
class TrainingPlan:
    """A fully resolved training configuration."""

    mode: str
    precision: str               # base weights format
    compute_dtype: str           # bf16 | fp16 | fp32: activations and 16-bit copies
    seq_len: int
    batch: int
    grad_accum: int
    optimizer: str
    master_weights: str          # fp32 | none
    grad_checkpointing: bool
    attention: str
    lora_rank: int
    lora_targets: str
    lora_dropout: float
    lora_train_embeddings: bool
    gpus: int
    zero: int | None
    fsdp: str | None
    offload: str
    ds_bucket_elements: int | None
    compute_capability: float | None = None
    assumptions: tuple[Assumption, ...] = ()
    device: str = "gpu"          # gpu | cpu: where the step runs (cpu: one process, RAM is the memory)
    problems: tuple[str, ...] = ()
    nodes: int = 1               # machines; gpus is per node
    dequantize: str = ""         # the stored format loaded dequantized (Mxfp4Config(dequantize=True)), else ''
    transformers_version: str | None = None  # as typed (--transformers-version); None: a current one

    @property
    def world(self) -> int:
        """Training processes, one per GPU over all nodes."""
        return self.gpus * self.nodes

    def with_changes(self, **changes) -> TrainingPlan:
        return replaced(self, changes)

    @property
    def training(self) -> bool:
        return True

    @property
    def framework(self) -> str:
        """deepspeed | fsdp | ddp | single (one process, plain PyTorch/Trainer)."""
        if self.zero is not None:
            return "deepspeed"
        if self.fsdp is not None:
            return "fsdp"
        return "ddp" if self.world > 1 else "single"

    @property
    def effective_batch(self) -> int:
        return self.batch * self.grad_accum * self.world

    # The names an inference Plan has, so renderers read any plan alike.
    @property
    def context(self) -> int:
        return self.seq_len

    @property
    def prompt_tokens(self) -> int:
        return self.seq_len

    @property
    def kv_dtype(self) -> str:
        return "none"             # no KV cache in training

    @property
    def engine(self) -> str:
        return {"deepspeed": "deepspeed", "fsdp": "fsdp"}.get(self.framework, "transformers")

    @property
    def gpu_layers(self) -> None:
        return None

    @property
    def gpu_memory_utilization(self) -> None:
        return None

    @property
    def cpu_moe(self) -> int:
        return 0

    @property
    def cpu_moe_all(self) -> bool:
        return False

    @property
    def offload_flag(self) -> str:
        return ""

    @property
    def cpu_offload_gb(self) -> float:
        return 0.0


AnyPlan = Plan | TrainingPlan


