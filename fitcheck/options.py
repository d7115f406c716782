"""The request vocabulary: one declaration per option, and everything derived from it.

Each :class:`Option` says its name, type, default, choices or range, the modes it applies to and
its help.  From this one table come:

- the click options of ``fitcheck check`` and ``fitcheck where`` (:func:`click_options`),
- validation of a value typed anywhere (:meth:`Option.parse`, used by click, plan files and the
  interactive prompts) and of a whole request (:func:`validate_values`),
- the fields a plan file accepts (:data:`PLAN_FIELDS`),
- the command that reproduces a request (:func:`command_args`): the options that differ from their
  defaults, in this table's order, so ``fitcheck`` parsing that command gives the same request back.

A default is written here and nowhere else; :class:`fitcheck.request.Request` reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fitcheck.bounded import short_number
from fitcheck.errors import FitcheckError
from fitcheck.estimate.generate_step import AUTO_SAMPLING, CUSTOM_SAMPLINGS, SAMPLINGS
from fitcheck.estimate.lora_targets import parse_targets
from fitcheck.estimate.sharding import FSDP_STRATEGIES
from fitcheck.versions import parse_transformers_version

INFERENCE = "inference"
TRAINING_MODES = ("full", "lora", "qlora")
MODES = (INFERENCE, *TRAINING_MODES)
ALL_MODES = frozenset(MODES)
TRAINING = frozenset(TRAINING_MODES)
LORA = frozenset({"lora", "qlora"})
ONLY_INFERENCE = frozenset({INFERENCE})

PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "gptq-int4", "gptq-int8", "awq", "nf4",
              "mxfp4", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0", "q3_k_m", "q2_k", "mxfp4_moe",
              "mlx-8bit", "mlx-6bit", "mlx-4bit", "mlx-3bit")
ENGINES = ("transformers", "vllm", "sglang", "llama.cpp", "mlx")
DEVICES = ("auto", "gpu", "cpu")
KV_DTYPES = ("auto", "fp16", "bf16", "fp32", "fp8", "q8_0", "q4_0")
OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw-8bit", "sgd", "adafactor")
ATTENTIONS = ("flash", "sdpa", "eager")
OFFLOADS = ("none", "optimizer", "optimizer+params")
FSDP_MODES = tuple(FSDP_STRATEGIES)  # the capability table's strategies (fitcheck.engines)
MASTER_WEIGHTS = ("fp32", "none")
ZERO_STAGES = (0, 1, 2, 3)

# Bounds on what a request may ask, so absurd numbers are bad input, not overflows.
MAX_CONTEXT = 2**30        # tokens per sequence (Llama 4 Scout advertises 10M)
MAX_BATCH = 2**20          # concurrent sequences / micro-batch
MAX_GPUS = 4096
MAX_NODES = 1024
MAX_GPU_LAYERS = 100_000
MAX_OFFLOAD_GIB = 1_000_000
MAX_LORA_RANK = 65_536
MAX_GRAD_ACCUM = 2**20


@dataclass(frozen=True)
class Option:
    """One request option.  ``kind`` is int, float, str, choice or flag; None means "not set"."""

    name: str                         # the Request field
    flags: tuple[str, ...]            # click declarations; the first is the long flag
    kind: str
    default: Any
    help: str
    modes: frozenset[str] = ALL_MODES
    choices: tuple[Any, ...] = ()
    low: float | None = None
    high: float | None = None
    metavar: str | None = None
    check: Callable[[Any], None] | None = None   # extra validation of a value (raises FitcheckError)
    prompt: str | None = None         # the interactive question, where it asks this one
    training_prompt: str | None = None  # the question in the training modes, where it means something else there
    nullable: bool = False            # "auto"/"none" typed means None
    envvar: str | None = None         # FITCHECK_* variable a user keeps the setting in (the command line wins)
    this_machine: bool = False        # about this machine (its disk): `where`, which judges profiles, has no use for it
    # A choice of what to run, which an alternative keeps as set (fitcheck.search.routes); False for what describes
    # the environment (the installed release): an alternative may propose another (an upgrade gives nothing up).
    choice: bool = True

    @property
    def flag(self) -> str:
        return self.flags[0]

    @property
    def question(self) -> str:
        """What the interactive mode asks for this option."""
        return self.prompt or self.help

    def question_in(self, mode: str) -> str:
        """What the interactive mode asks for this option in ``mode``."""
        return self.training_prompt if self.training_prompt and mode in TRAINING else self.question

    def applies(self, mode: str) -> bool:
        return mode in self.modes

    def parse(self, value: Any) -> Any:
        """A value typed on the command line, in a plan file or at a prompt, checked; FitcheckError if not."""
        if value is None:
            return None
        is_choice = any(str(c).lower() == str(value).strip().lower() for c in self.choices)
        if is_choice and self.kind == "int":  # a word a count also takes ("all")
            return next(c for c in self.choices if str(c).lower() == str(value).strip().lower())
        unset = ("auto", "default") if self.kind == "flag" else ("auto", "none", "off")  # a flag's "off" is False
        if self.nullable and not is_choice and isinstance(value, str) and value.strip().lower() in unset:
            return None
        return getattr(self, f"_parse_{self.kind}")(value)

    def _parse_flag(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        low = str(value).strip().lower()
        if low in ("on", "yes", "true", "1"):
            return True
        if low in ("off", "no", "false", "0"):
            return False
        raise FitcheckError(f"{self.flag} is on or off, got {value!r}")

    def _parse_choice(self, value: Any) -> Any:
        for c in self.choices:
            if str(c).lower() == str(value).strip().lower():
                return c
        raise FitcheckError(f"{self.flag}: {short_number(value)} is not one of: "
                            + ", ".join(str(c) for c in self.choices))

    def _parse_int(self, value: Any) -> int:
        number = _int(value)
        if number is None:
            words = "".join(f" or {c}" for c in self.choices)
            raise FitcheckError(f"{self.flag} must be a whole number{words}, got {short_number(value)}")
        self._bounds(number)
        return number

    def _parse_float(self, value: Any) -> float:
        if isinstance(value, bool):
            raise FitcheckError(f"{self.flag} must be a number, got {value!r}")
        try:
            real = float(str(value)[:64]) if not isinstance(value, (int, float)) else float(value)
        except (TypeError, ValueError, OverflowError):
            raise FitcheckError(f"{self.flag} must be a number, got {short_number(value)}") from None
        if real != real or real in (float("inf"), float("-inf")):  # NaN, infinity
            raise FitcheckError(f"{self.flag} must be a finite number, got {short_number(value)}")
        self._bounds(real)
        return real

    def _parse_str(self, value: Any) -> str:
        text = str(value).strip()
        if not text:
            raise FitcheckError(f"{self.flag} must not be empty")
        if self.check is not None:
            self.check(text)
        return text

    def _bounds(self, number: float) -> None:
        if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
            raise FitcheckError(f"{self.flag} must be between {_num(self.low)} and {_num(self.high)}, "
                                f"got {short_number(number if isinstance(number, int) else f'{number:.6g}')}")

    def text(self, value: Any) -> str:
        """The value as typed on a command line."""
        if isinstance(value, float):
            return f"{value:g}"
        return str(value)


def _num(x: float | None) -> str:
    if x is None:
        return "no limit"
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) >= 10_000 else f"{x:g}"


MAX_DIGITS = 12  # a typed whole number has at most this many digits: bounded before int()


def _int(value: Any) -> int | None:
    """A whole number typed as 4096, 4,096, 4_096 or 32k; None when it is not one.  ASCII digits only
    ('²' is a digit to str.isdigit), at most MAX_DIGITS of them."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    raw = str(value).strip().replace(",", "").replace("_", "")
    sign = -1 if raw.startswith("-") else 1  # a whole number still, out of every option's range
    raw = raw[1:] if sign < 0 else raw
    scale = 1
    if raw.lower().endswith("k"):
        raw, scale = raw[:-1], 1024
    if not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_DIGITS:
        return None
    return sign * int(raw) * scale


def _check_transformers_version(text: str) -> None:
    parse_transformers_version(text)


def _check_lora_targets(text: str) -> None:
    parse_targets(text)


OPTIONS: tuple[Option, ...] = (
    Option("mode", ("--mode",), "choice", INFERENCE, choices=MODES, prompt="Mode",
           help="What to estimate: inference, or fine-tuning (full, lora, qlora; --batch is then the "
                "micro-batch per GPU)."),
    Option("precision", ("--precision", "-p"), "choice", None, choices=PRECISIONS, nullable=True,
           envvar="FITCHECK_PRECISION",
           prompt="Precision (auto, bf16, fp16, int8, awq, gptq-int4, nf4, q8_0, q4_k_m, ...)",
           help="Weights format. Default: the best this machine runs — bf16 on GPUs with compute capability "
                ">= 8.0 and Apple, fp16 on older GPUs, q4_k_m on CPU-only machines; a checkpoint keeps its "
                "stored format (FP8, AWQ, GPTQ, MXFP4) where it runs here, and a .gguf file its own type. "
                "bf16/fp16 of a quantized checkpoint is its dequantized size; mxfp4 (gpt-oss's experts) and "
                "mxfp4_moe (its GGUF) exist only for MXFP4 checkpoints; mlx-8bit/6bit/4bit/3bit are mlx-lm's "
                "affine group-64 formats."),
    Option("context", ("--context", "-c"), "int", 4096, modes=ONLY_INFERENCE, low=1, high=MAX_CONTEXT,
           prompt="Context length, tokens (prompt + generated)",
           help="Tokens per sequence, prompt plus generated (not the model's maximum)."),
    Option("prompt_tokens", ("--prompt",), "int", None, modes=ONLY_INFERENCE, low=1, high=MAX_CONTEXT, nullable=True,
           metavar="N",
           help="Tokens prefilled in one call (the prompt); the rest of --context is generated. Prefill-sized "
                "memory (logits, activations, attention scores) follows the prompt, the KV cache the context. "
                "Default: the whole context."),
    Option("seq_len", ("--seq-len",), "int", 2048, modes=TRAINING, low=1, high=MAX_CONTEXT,
           prompt="Sequence length, tokens", help="Training: tokens per sequence."),
    Option("batch", ("--batch", "-b"), "int", 1, low=1, high=MAX_BATCH, prompt="Batch (concurrent sequences)",
           training_prompt="Micro-batch (sequences per GPU per step; gradient accumulation multiplies it)",
           help="Concurrent sequences (training: the micro-batch per GPU)."),
    Option("kv_dtype", ("--kv-dtype",), "choice", "auto", modes=ONLY_INFERENCE, choices=KV_DTYPES,
           envvar="FITCHECK_KV_DTYPE",
           help="KV-cache element type (auto: the engine's default; fp8 with vLLM, q8_0/q4_0 with llama.cpp)."),
    Option("engine", ("--engine",), "choice", None, modes=ONLY_INFERENCE, choices=ENGINES, nullable=True,
           envvar="FITCHECK_ENGINE",
           help="Default: the engine that runs the precision on this machine — llama.cpp for GGUF types and "
                "CPU-only machines, mlx (mlx-lm) on Apple GPUs, transformers otherwise (vllm and sglang when "
                "asked). An engine that cannot run on this machine is a verdict (exit 1) with what runs."),
    Option("gpu_memory_utilization", ("--gpu-memory-utilization",), "float", 0.9, modes=ONLY_INFERENCE,
           low=0.05, high=1.0, help="vLLM's reservation, a fraction of total GPU memory (SGLang: its "
                                    "--mem-fraction-static when given; SGLang's own default by TP size otherwise)."),
    Option("gpus", ("--gpus",), "int", None, low=1, high=MAX_GPUS, nullable=True,
           help="GPUs to use. Default: inference spreads over all of the machine's GPUs (tensor parallel "
                "with vLLM, layer split otherwise); training uses all of them with --zero/--fsdp, else one."),
    Option("nodes", ("--nodes",), "int", 1, low=1, high=MAX_NODES, prompt="Nodes (machines like this one)",
           help="Machines like this one, linked by the profile's [cluster] interconnect; --gpus is then per node. "
                "Serving across nodes: vLLM (tensor parallel within a node, pipeline parallel across nodes), "
                "SGLang (tensor parallel over all GPUs of all nodes) or llama.cpp's RPC backend (layers split "
                "over the nodes); training shards (--zero/--fsdp) or replicates (DDP) over nodes × GPUs."),
    Option("expert_parallel", ("--expert-parallel",), "flag", False, modes=ONLY_INFERENCE,
           help="MoE models with vLLM or SGLang: the routed experts split over all GPUs of all nodes (expert "
                "parallel), attention data parallel (each GPU serves its own sequences with its own KV cache): vLLM "
                "--data-parallel-size N --enable-expert-parallel, SGLang --enable-dp-attention --dp N --ep-size N."),
    Option("device", ("--device",), "choice", "auto", choices=DEVICES,
           help="Where to run or train: auto (the GPU when there is one), gpu, or cpu."),
    Option("gpu_layers", ("--gpu-layers", "-ngl"), "int", None, modes=ONLY_INFERENCE, low=0, high=MAX_GPU_LAYERS,
           nullable=True, help="llama.cpp: layers on the GPU (partial offload); the rest run from RAM."),
    Option("cpu_moe", ("--cpu-moe",), "int", None, modes=ONLY_INFERENCE, choices=("all",), low=0,
           high=MAX_GPU_LAYERS, nullable=True, metavar="N|all",
           help="llama.cpp, MoE models: keep the routed experts of the first N layers (all: of every layer) in RAM "
                "and everything else on the GPU (llama-server --n-cpu-moe N / --cpu-moe)."),
    Option("cpu_offload_gb", ("--cpu-offload-gb",), "float", 0.0, modes=ONLY_INFERENCE, low=0, high=MAX_OFFLOAD_GIB,
           metavar="GiB",
           help="vLLM: GiB of weights per GPU kept in RAM and streamed to the GPU over PCIe in every forward pass."),
    Option("transformers_version", ("--transformers-version",), "str", None, choice=False,
           metavar="X.Y", check=_check_transformers_version, nullable=True, envvar="FITCHECK_TRANSFORMERS_VERSION",
           help="transformers version that will run the model (engine transformers). Before 4.45 the prompt's "
                "logits are fp32 for every position, not just the last; training under 4.46–4.48 keeps a "
                "shifted fp32 copy of the logits at batch > 1. Default (inference): the installed transformers on "
                "this machine, else 4.45 or later; training: 4.49 or later."),
    Option("grad_accum", ("--grad-accum",), "int", 1, modes=TRAINING, low=1, high=MAX_GRAD_ACCUM,
           help="Training: gradient accumulation steps (> 1 keeps gradients allocated between micro-batches)."),
    Option("optimizer", ("--optimizer",), "choice", "adamw", modes=TRAINING, choices=OPTIMIZERS,
           help="Training: optimizer (the 8-bit ones are bitsandbytes: CUDA/ROCm)."),
    Option("master_weights", ("--master-weights",), "choice", None, modes=TRAINING, choices=MASTER_WEIGHTS,
           nullable=True, help="Training: fp32 master copy of the trainable weights (default fp32)."),
    Option("grad_checkpointing", ("--grad-checkpointing/--no-grad-checkpointing",), "flag", None, modes=TRAINING,
           nullable=True,
           help="Training: recompute activations in backward (keeps only layer inputs). Default: the recipe of "
                "the library that runs it — on for qlora (peft's prepare_model_for_kbit_training enables it), "
                "off for full and lora (the Trainer's default)."),
    Option("attention", ("--attention",), "choice", None, choices=ATTENTIONS, nullable=True,
           help="Attention kernel (eager holds prompt² scores and an fp32 softmax per layer; flash: "
                "flash-attention 2 on CUDA >= 8.0 or ROCm). Default: sdpa for training; for inference with "
                "transformers the release's default (eager before 4.36, see --transformers-version)."),
    Option("sampling", ("--sampling",), "choice", AUTO_SAMPLING, modes=ONLY_INFERENCE,
           choices=(AUTO_SAMPLING, *SAMPLINGS, *CUSTOM_SAMPLINGS),
           help="transformers generate(): how each token is picked, which sets the vocabulary-sized tensors of a "
                "decoding step -- greedy (do_sample=False), sample (do_sample, top-k 50) or top-p (temperature, "
                "top-k and top-p); sample:WARPERS for other sets, as an auto default prints them (repetition-penalty "
                "first where generation_config.json sets repetition_penalty; greedy:repetition-penalty without "
                "do_sample). "
                "Default: auto, what the model's generation_config.json makes generate() run "
                "(read from its folder, the Hub cache or the catalog's record), else top-p."),
    Option("lora_rank", ("--lora-rank",), "int", 16, modes=LORA, low=1, high=MAX_LORA_RANK, help="LoRA/QLoRA rank r."),
    Option("lora_targets", ("--lora-targets",), "str", "all-linear", modes=LORA,
           metavar="all-linear|attention|q_proj,v_proj,...", check=_check_lora_targets,
           help="LoRA/QLoRA: modules that get adapters."),
    Option("lora_train_embeddings", ("--lora-train-embeddings",), "flag", False, modes=LORA,
           help="LoRA/QLoRA: also train embeddings and lm_head (peft modules_to_save)."),
    Option("zero", ("--zero",), "choice", None, modes=TRAINING, choices=ZERO_STAGES, nullable=True,
           prompt=f"DeepSpeed ZeRO stage ({', '.join(map(str, ZERO_STAGES))}, or none)",
           help="Training: DeepSpeed ZeRO stage across --gpus (default: all of the machine's GPUs)."),
    Option("fsdp", ("--fsdp",), "choice", None, modes=TRAINING, choices=FSDP_MODES, nullable=True,
           prompt=f"Shard over the GPUs with PyTorch FSDP ({', '.join(FSDP_MODES)}, or none for DeepSpeed or one GPU)",
           help="Training: PyTorch FSDP sharding across --gpus (default: all of the machine's GPUs); hybrid-shard "
                "shards within each node and replicates across --nodes (HYBRID_SHARD)."),
    Option("offload", ("--offload",), "choice", "none", modes=TRAINING, choices=OFFLOADS,
           help="Training: ZeRO-Offload to RAM (RAM need is checked too)."),
    Option("headroom", ("--headroom",), "float", 10.0, low=0, high=99, envvar="FITCHECK_HEADROOM",
           help="Safety margin, percent of free memory kept unused."),
    Option("download_dir", ("--download-dir",), "str", None, metavar="PATH", nullable=True,
           envvar="FITCHECK_DOWNLOAD_DIR", prompt="Download folder (auto: the engine's own cache)", this_machine=True,
           help="Where the weights will be downloaded (checked for free space on this machine). Default: the "
                "engine's own cache — the Hugging Face cache (HF_HUB_CACHE, else HF_HOME/hub, else "
                "~/.cache/huggingface/hub), llama.cpp's for -hf GGUF builds (LLAMA_CACHE), the Ollama store "
                "(OLLAMA_MODELS, else ~/.ollama/models) for Ollama names."),
)
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
DEFAULTS: dict[str, Any] = {o.name: o.default for o in OPTIONS}
# Plan-file case fields: every request option, plus what a case names besides the request.
# A plan field may also take an option's flag name where it reads better ("prompt" for --prompt).
PLAN_ALIASES = {"prompt": "prompt_tokens"}
PLAN_FIELDS: tuple[str, ...] = ("model", "name", *BY_NAME, *PLAN_ALIASES, "params", "profile", "strict")


def validate_values(values: dict[str, Any]) -> None:
    """Each option's value checked against its declaration (FitcheckError naming the flag)."""
    for name, value in values.items():
        opt = BY_NAME.get(name)
        if opt is None or value is None:
            continue
        opt.parse(value)


def not_applying(mode: str, names: Iterable[str]) -> list[Option]:
    """The options among ``names`` that do not apply to ``mode``."""
    return [BY_NAME[n] for n in names if n in BY_NAME and not BY_NAME[n].applies(mode)]


def mode_error(mode: str, options: list[Option]) -> FitcheckError:
    flags = ", ".join(o.flag.split("/")[0] for o in options)
    if mode == INFERENCE:
        return FitcheckError(f"{flags} applies to training: add --mode full, lora or qlora")
    hint = " (training uses --seq-len)" if any(o.name == "context" for o in options) else ""
    return FitcheckError(f"{flags} applies to inference, not --mode {mode}{hint}")


def command_args(values: dict[str, Any], mode: str, *, always: Iterable[str] = ()) -> list[str]:
    """Arguments that give back ``values`` (a request's fields): options that apply to ``mode`` and
    differ from their default, in the vocabulary's order; ``always`` are written even at the default."""
    keep = set(always)
    args: list[str] = []
    for opt in OPTIONS:
        if opt.name not in values or not opt.applies(mode):
            continue
        value = values[opt.name]
        if value == opt.default and opt.name not in keep:
            continue
        if value is None:
            continue
        flag = opt.flag
        if opt.kind == "flag":
            on, _, off = flag.partition("/")
            args.append(on if value else (off or on))
            continue
        args += [flag, opt.text(value)]
    return args


# ---- click ------------------------------------------------------------------------------------
def _click_type(opt: Option):
    import click

    if opt.kind == "choice":
        return click.Choice([str(c) for c in opt.choices], case_sensitive=False)
    if opt.kind == "int":  # the callback parses it as plan files and the interactive prompt do: 32k, 4,096, all
        return click.STRING
    if opt.kind == "float":
        return finite_float_range(opt.low, opt.high)
    return click.STRING


def finite_float_range(low: float | None = None, high: float | None = None):
    """click's FloatRange that also refuses nan and inf (a NaN passes every range comparison)."""
    import math

    import click

    class FiniteFloatRange(click.FloatRange):
        def convert(self, value, param, ctx):
            number = super().convert(value, param, ctx)
            if not math.isfinite(number):
                self.fail(f"{value!r} is not a finite number", param, ctx)
            return number

    return FiniteFloatRange(min=low, max=high)


def _callback(opt: Option):
    import click

    def convert(ctx, param, value):
        if value is None:
            return None
        try:
            return opt.parse(value)
        except FitcheckError as exc:
            raise click.BadParameter(exc.one_line()) from None
    return convert


def click_options(names: Iterable[str] | None = None, *, help_overrides: dict[str, str] | None = None):
    """A decorator adding the click options for ``names`` (default: all), each from its declaration."""
    import click

    chosen = [BY_NAME[n] for n in names] if names is not None else list(OPTIONS)
    helps = help_overrides or {}

    def decorator(func: Any) -> Any:
        for opt in reversed(chosen):
            attrs: dict[str, Any] = {"help": helps.get(opt.name, opt.help)}
            if opt.envvar:
                attrs.update(envvar=opt.envvar, show_envvar=True)
            if opt.kind == "flag":
                attrs.update(default=opt.default, show_default="/" in opt.flag and opt.default is not None)
                if "/" not in opt.flag:
                    attrs["is_flag"] = True
            else:
                attrs.update(type=_click_type(opt), default=opt.default, callback=_callback(opt),
                             show_default=opt.default is not None)
                if opt.metavar or opt.kind == "int":
                    attrs["metavar"] = opt.metavar or "INTEGER"
            func = click.option(*opt.flags, opt.name, **attrs)(func)
        return func
    return decorator
