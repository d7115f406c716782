"""The commands that run a plan: fitcheck's own (from the option vocabulary, so it reproduces the
request) and the engine's (vLLM, llama.cpp, transformers; accelerate/peft/DeepSpeed for training).
Pure string building; shlex-quoted."""

from __future__ import annotations

import shlex

from fitcheck.engines import FSDP_STRATEGIES, MXFP4_TRANSFORMERS_NEEDS
from fitcheck.estimate.formats import weight_format
from fitcheck.options import command_args
from fitcheck.plan import DEFAULT_GPU_MEMORY_UTILIZATION, AnyPlan, Plan, TrainingPlan
from fitcheck.request import Request


def fitcheck_command(model_args: tuple[str, ...], request: Request, *, profile: str | None = None,
                     extra: tuple[str, ...] = ()) -> str:
    """`fitcheck MODEL ...` that asks ``request`` again: every option that differs from its default
    (fitcheck.options), the precision and engine always, the machine's --profile."""
    always = ("mode", "precision") if request.training else ("precision", "engine")
    args = ["fitcheck", *model_args, *command_args(request.option_values(), request.mode, always=always)]
    if profile:
        args += ["--profile", profile]
    args += list(extra)
    return shlex.join(args)


def attention_typed(plan: Plan) -> bool:
    """Whether the plan's attention came from --attention (a release's default reproduces itself)."""
    return any(a.name == "attention" and a.why == "from --attention" for a in plan.assumptions)


def engine_command(model_id: str, plan: AnyPlan, quantized_repos: dict[str, str] | None = None, *,
                   local: bool = False) -> str:
    """The command that runs ``plan`` with its engine (``local``: model_id is a path on this machine)."""
    if isinstance(plan, TrainingPlan):
        return training_engine_command(model_id, plan)
    repos = quantized_repos or {}
    if plan.engine == "vllm":
        return _vllm(model_id, plan, repos)
    if plan.engine == "sglang":
        return _sglang(model_id, plan, repos)
    if plan.engine == "llama.cpp":
        return _llama_cpp(model_id, plan, repos, local)
    return _transformers(model_id, plan, repos)


_HF_QUANT_KEYS = {"awq": "awq", "gptq-int4": "gptq-int4", "int4": "gptq-int4", "gptq-int8": "gptq-int8", "fp8": "fp8"}


def _quantized_repo(model_id: str, precision: str, repos: dict[str, str]) -> tuple[str, bool]:
    key = _HF_QUANT_KEYS.get(precision)
    if key and key in repos:
        return repos[key], True
    return model_id, False


def _needs_checkpoint(model_id: str, precision: str) -> str:
    """A trailing shell comment when no pre-quantized repository of this model is known."""
    return (f"  # {model_id} as a pre-quantized {precision.upper()} checkpoint: none known to fitcheck, "
            "use one you trust")


def _vllm(model_id: str, plan: Plan, repos: dict[str, str]) -> str:
    serve, comment = _vllm_serve(model_id, plan, repos)
    if plan.expert_parallel and plan.nodes > 1:
        others = plan.nodes - 1
        worker = _vllm_serve(model_id, plan, repos, rank=plan.gpus)[0]
        return (f"{serve}{comment}  # then on the other {others} node{'s' if others > 1 else ''} (node R starts rank "
                f"R×{plan.gpus}): {worker}")
    if plan.nodes > 1:
        others = plan.nodes - 1
        return (f"{RAY_HEAD} && {serve}{comment}  # first, on the other {others} node"
                f"{'s' if others > 1 else ''}: {RAY_WORKER}")
    return serve + comment


def _vllm_serve(model_id: str, plan: Plan, repos: dict[str, str], rank: int = 0) -> tuple[str, str]:
    """(`vllm serve ...`, a trailing comment or ''); ``rank``: the first data-parallel rank of a headless node."""
    repo, prequantized = _quantized_repo(model_id, plan.precision, repos)
    args = ["vllm", "serve", repo, "--max-model-len", str(plan.context)]
    if plan.batch > 1:
        args += ["--max-num-seqs", str(plan.batch)]
    fmt = weight_format(plan.precision)
    comment = ""
    if plan.precision == "fp8" and not prequantized and not plan.stored_format:
        args += ["--quantization", "fp8"]  # online dynamic FP8 quantization of a 16-bit checkpoint
    elif fmt.family in ("gptq", "awq") and not prequantized:
        comment = _needs_checkpoint(model_id, plan.precision)
    elif plan.precision in ("int8", "nf4"):
        args += ["--quantization", "bitsandbytes"]
    elif plan.precision in ("fp16", "fp32"):
        args += ["--dtype", {"fp16": "float16", "fp32": "float32"}[plan.precision]]
    if plan.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    if plan.expert_parallel:
        # docs.vllm.ai/en/latest/serving/data_parallel_deployment.html: one rank per GPU, experts over all ranks
        args += ["--data-parallel-size", str(plan.world), "--enable-expert-parallel"]
        if plan.nodes > 1:
            args += ["--data-parallel-size-local", str(plan.gpus), "--data-parallel-address", "HEAD_IP",
                     "--data-parallel-rpc-port", str(VLLM_DP_RPC_PORT)]
            if rank:
                args.insert(3, "--headless")
                args += ["--data-parallel-start-rank", str(rank)]
    elif plan.gpus > 1:
        args += ["--tensor-parallel-size", str(plan.gpus)]
    if plan.nodes > 1 and not plan.expert_parallel:
        args += ["--pipeline-parallel-size", str(plan.nodes), "--distributed-executor-backend", "ray"]
    if plan.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION:
        args += ["--gpu-memory-utilization", f"{plan.gpu_memory_utilization:g}"]
    if plan.cpu_offload_gb:
        args += ["--cpu-offload-gb", f"{plan.cpu_offload_gb:g}"]
    return shlex.join(args), comment


# vLLM's multi-node serving: a Ray cluster, then `vllm serve` on the head node
# (docs.vllm.ai/en/stable/serving/distributed_serving.html, "Running vLLM on multiple nodes").
RAY_PORT = 6379
RAY_HEAD = f"ray start --head --port={RAY_PORT}"
RAY_WORKER = f"ray start --address=HEAD_IP:{RAY_PORT}"
# vLLM's data-parallel coordination port in its multi-node DP/EP example (data_parallel_deployment.html).
VLLM_DP_RPC_PORT = 13345
# SGLang's multi-node launch: the same command on every node with its --node-rank, --dist-init-addr the first
# node's address (docs.sglang.ai/references/multi_node_deployment/multi_node.html: `--tp 16 --dist-init-addr
# 172.16.4.52:20000 --nnodes 2 --node-rank 0`; its DeepSeek page uses port 5000).
SGLANG_INIT_PORT = 5000
# llama.cpp's RPC backend: `rpc-server -H 0.0.0.0 -p 50052` on each worker, `--rpc host:port,...` on the main host
# (github.com/ggml-org/llama.cpp/blob/master/tools/rpc/README.md).
RPC_PORT = 50052
# torchrun's c10d rendezvous and accelerate's main process port (PyTorch elastic docs; accelerate launch --help).
RDZV_PORT = 29500


def launch_lines(model_id: str, plan: AnyPlan, quantized_repos: dict[str, str] | None = None) -> tuple[str, ...]:
    """What to run on each node for a plan over several nodes (empty for one machine)."""
    if plan.nodes <= 1:
        return ()
    if isinstance(plan, TrainingPlan):
        return training_launch_lines(model_id, plan)
    repos = quantized_repos or {}
    if plan.engine == "sglang":
        return _sglang_launch(model_id, plan, repos)
    if plan.engine == "llama.cpp":
        return (f"{_nodes_text(plan.nodes)}: {RPC_SERVER}  # exposes the node's GPUs to llama-server",
                f"then on node 0: {_llama_cpp(model_id, plan, repos).split('  # first')[0]}")
    if plan.engine != "vllm":
        return ()
    if plan.expert_parallel:
        return (f"node 0 (HEAD_IP): {_vllm_serve(model_id, plan, repos)[0]}",
                *(f"node {r}: {_vllm_serve(model_id, plan, repos, rank=r * plan.gpus)[0]}"
                  for r in range(1, plan.nodes)))
    serve, comment = _vllm_serve(model_id, plan, repos)
    return (f"head node (node 0): {RAY_HEAD}",
            (f"node 1: {RAY_WORKER}" if plan.nodes == 2 else f"each of nodes 1..{plan.nodes - 1}: {RAY_WORKER}"),
            f"then on the head node: {serve}{comment}")


RPC_SERVER = f"rpc-server -H 0.0.0.0 -p {RPC_PORT}"


def _nodes_text(nodes: int) -> str:
    return "node 1" if nodes == 2 else f"each of nodes 1..{nodes - 1}"


def _rpc_hosts(nodes: int) -> str:
    return ",".join(f"NODE{i}_IP:{RPC_PORT}" for i in range(1, nodes))


def _sglang(model_id: str, plan: Plan, repos: dict[str, str]) -> str:
    line, comment = _sglang_serve(model_id, plan, repos, 0)
    if plan.nodes > 1:
        comment += ("  # on node 0 (HEAD_IP); the same on node 1 with --node-rank 1" if plan.nodes == 2 else
                    f"  # on node 0 (HEAD_IP); the same on each other node with --node-rank R (1..{plan.nodes - 1})")
    return line + comment


def _sglang_launch(model_id: str, plan: Plan, repos: dict[str, str]) -> tuple[str, ...]:
    return tuple(f"node {r}{' (HEAD_IP)' if r == 0 else ''}: {''.join(_sglang_serve(model_id, plan, repos, r))}"
                 for r in range(plan.nodes))


def _sglang_serve(model_id: str, plan: Plan, repos: dict[str, str], rank: int) -> tuple[str, str]:
    """`python -m sglang.launch_server ...` (docs.sglang.ai/advanced_features/server_arguments.html)."""
    repo, prequantized = _quantized_repo(model_id, plan.precision, repos)
    args = ["python", "-m", "sglang.launch_server", "--model-path", repo, "--context-length", str(plan.context)]
    if plan.batch > 1:
        args += ["--max-running-requests", str(plan.batch)]
    comment = ""
    # docs.sglang.ai, DeepSeek usage: "already in FP8 format, so you should not run it with any quantization
    # arguments like --quantization fp8"; a 16-bit checkpoint is quantized at load with it.
    if plan.precision == "fp8" and not prequantized and not plan.stored_format:
        args += ["--quantization", "fp8"]
    elif weight_format(plan.precision).family in ("gptq", "awq") and not prequantized:
        comment = _needs_checkpoint(model_id, plan.precision)
    elif plan.precision in ("fp16", "fp32"):
        args += ["--dtype", {"fp16": "float16", "fp32": "float32"}[plan.precision]]
    if plan.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    if plan.world > 1:
        args += ["--tp", str(plan.world)]
    if plan.expert_parallel:
        args += ["--dp", str(plan.world), "--enable-dp-attention", "--ep-size", str(plan.world)]
    if plan.nodes > 1:
        args += ["--nnodes", str(plan.nodes), "--node-rank", str(rank), "--dist-init-addr",
                 f"HEAD_IP:{SGLANG_INIT_PORT}"]
    if plan.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION and plan.mem_fraction_static is not None:
        args += ["--mem-fraction-static", f"{plan.mem_fraction_static:g}"]
    return shlex.join(args), comment


def training_launch_lines(model_id: str, plan: TrainingPlan) -> tuple[str, ...]:
    """What to run for a multi-node training plan: DeepSpeed's launcher from the head node (hostfile,
    ds_config.json) for ZeRO, torchrun on each node otherwise; and `accelerate launch` on each node R,
    with the accelerate config line FSDP's sharding strategy takes."""
    accelerate = f"or each node R (0..{plan.nodes - 1}): {training_engine_command(model_id, plan).split('  # ')[0]}"
    if plan.zero is not None:
        return (*deepspeed_launch_lines(plan), accelerate)
    torchrun = ["torchrun", "--nnodes", str(plan.nodes), "--nproc-per-node", str(plan.gpus),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"HEAD_IP:{RDZV_PORT}", "train.py"]
    lines = [f"each node: {shlex.join(torchrun)}", accelerate]
    if plan.fsdp is not None:
        # accelerate config file (accelerate config → FSDP): the same strategy as --fsdp_sharding_strategy.
        lines.append(f"accelerate config file: distributed_type: FSDP, fsdp_config: {{fsdp_sharding_strategy: "
                     f"{FSDP_STRATEGIES[plan.fsdp].strategy}}}, num_machines: {plan.nodes}, "
                     f"num_processes: {plan.world}")
        if FSDP_STRATEGIES[plan.fsdp].within_node:
            # FSDP2 spells HSDP as a 2-D device mesh (torch.distributed.fsdp.fully_shard, "mesh" argument).
            reshard = "" if FSDP_STRATEGIES[plan.fsdp].stage == 3 else ", reshard_after_forward=False"
            lines.append(f"or with FSDP2 in train.py: fully_shard(layer{reshard}, mesh=init_device_mesh('cuda', "
                         f"({plan.nodes}, {plan.gpus}), mesh_dim_names=('replicate', 'shard'))) for each decoder "
                         "layer, then the model")
    return tuple(lines)


# DeepSpeed's multi-node launcher (www.deepspeed.ai/getting-started/#resource-configuration-multi-node):
# a hostfile of `hostname slots=GPUs` lines, one per node, reachable by passwordless ssh from the head node
# (the launcher starts every rank over pdsh), then `deepspeed --hostfile ... --num_nodes --num_gpus`.
HOSTFILE_LISTED = 8  # nodes written out line by line; more are written by a loop


def hostfile_command(plan: TrainingPlan) -> str:
    """A shell command that writes DeepSpeed's hostfile: node1..nodeN, `slots` = GPUs per node."""
    if plan.nodes <= HOSTFILE_LISTED:
        lines = "".join(f"node{i} slots={plan.gpus}\\n" for i in range(1, plan.nodes + 1))
        return f"printf '{lines}' > hostfile"
    return f'for i in $(seq 1 {plan.nodes}); do echo "node$i slots={plan.gpus}"; done > hostfile'


def ds_config_json(plan: TrainingPlan) -> str:
    """ds_config.json for DeepSpeed's launcher: the micro-batch and accumulation, precision and
    zero_optimization (stage, offload_optimizer / offload_param to the CPU, www.deepspeed.ai/docs/config-json/
    "ZeRO Optimizations for FP16 Training", "Parameter offloading", "Optimizer offloading")."""
    return ('{"train_micro_batch_size_per_gpu": ' + str(plan.batch) + ', "gradient_accumulation_steps": '
            + str(plan.grad_accum) + ", " + deepspeed_config(plan)[1:])


def deepspeed_launch_lines(plan: TrainingPlan) -> tuple[str, ...]:
    launcher = ["deepspeed", "--hostfile", "hostfile", "--num_nodes", str(plan.nodes), "--num_gpus", str(plan.gpus),
                "train.py", "--deepspeed", "ds_config.json"]
    return (f"head node (node1): {hostfile_command(plan)}  # node1..node{plan.nodes}: the nodes' hostnames, "
            "reachable by passwordless ssh from node1",
            f"head node: echo {shlex.quote(ds_config_json(plan))} > ds_config.json",
            f"head node (starts every rank over ssh): {shlex.join(launcher)}")


def _llama_cpp(model_id: str, plan: Plan, repos: dict[str, str], local: bool = False) -> str:
    quant = plan.precision.upper()
    comment = ""
    if "gguf" in repos:
        src = ["-hf", f"{repos['gguf']}:{quant}"]
    elif local and model_id.lower().endswith(".gguf"):
        src = ["-m", model_id]
    else:
        base = model_id.rstrip("/").split("/")[-1].removesuffix(".json")
        src = ["-m", f"{base}-{quant}.gguf"]
        if local:
            comment = f"  # convert {model_id} with llama.cpp's convert_hf_to_gguf.py, then llama-quantize to {quant}"
    args = ["llama-server", *src, "-c", str(plan.context * plan.batch)]
    if plan.nodes > 1:
        args += ["--rpc", _rpc_hosts(plan.nodes)]
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
    if plan.nodes > 1:
        comment += f"  # first, on {_nodes_text(plan.nodes)}: {RPC_SERVER}"
    return shlex.join(args) + comment


def _transformers(model_id: str, plan: Plan, repos: dict[str, str]) -> str:
    repo, prequantized = _quantized_repo(model_id, plan.precision, repos)
    comment = _needs_checkpoint(model_id, plan.precision) if (
        weight_format(plan.precision).family in ("gptq", "awq") and not prequantized) else ""
    if plan.precision == "mxfp4":
        comment = f"  # MXFP4 experts stay packed with {MXFP4_TRANSFORMERS_NEEDS}; else they load dequantized to bf16"
    # GPTQ/AWQ kernels compute in float16.
    dtype = {"fp32": "torch.float32", "fp16": "torch.float16", "awq": "torch.float16", "gptq-int4": "torch.float16",
             "gptq-int8": "torch.float16", "int4": "torch.float16"}.get(plan.precision, "torch.bfloat16")
    extra = ""
    if plan.precision == "nf4":
        extra = (", quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
                 "bnb_4bit_use_double_quant=True)")
    elif plan.precision == "int8":
        extra = ", quantization_config=BitsAndBytesConfig(load_in_8bit=True)"
    elif plan.dequantize == "mxfp4":
        extra = ", quantization_config=Mxfp4Config(dequantize=True)"
    elif plan.precision == "fp8" and not prequantized and not plan.stored_format:
        # no FP8 checkpoint known: quantize the 16-bit one at load, 128×128 blocks (transformers >= 4.50,
        # integrations/finegrained_fp8.py); lm_head stays out of the conversion and tied
        extra = ", quantization_config=FineGrainedFP8Config()"
    config = next((c for c in ("BitsAndBytesConfig", "Mxfp4Config", "FineGrainedFP8Config") if c in extra), "")
    bnb = f", {config}" if config else ""
    if attention_typed(plan):
        extra += f", attn_implementation='{HF_ATTENTION.get(plan.attention, plan.attention)}'"
    device_map = "'cpu'" if plan.device == "cpu" else "'auto'"
    return (f"python -c \"from transformers import AutoModelForCausalLM{bnb}; "
            f"import torch; AutoModelForCausalLM.from_pretrained('{repo}', torch_dtype={dtype}, "
            f"device_map={device_map}{extra})\"" + comment)


# ---- training: accelerate launch, peft, TrainingArguments, DeepSpeed ---------------------------
# transformers TrainingArguments(optim=...) names (training_args.OptimizerNames).
HF_OPTIM = {"adamw": "adamw_torch", "adamw-8bit": "adamw_bnb_8bit", "paged-adamw-8bit": "paged_adamw_8bit",
            "sgd": "sgd", "adafactor": "adafactor"}
HF_ATTENTION = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}


def lora_config(plan: TrainingPlan) -> str:
    """peft LoraConfig(...) for the plan's adapters."""
    targets = ("'all-linear'" if plan.lora_targets == "all-linear" else
               repr(["q_proj", "k_proj", "v_proj", "o_proj"]) if plan.lora_targets == "attention" else
               repr(plan.lora_targets.split(",")))
    extra = ", modules_to_save=['embed_tokens', 'lm_head']" if plan.lora_train_embeddings else ""
    return f"LoraConfig(r={plan.lora_rank}, lora_alpha={2 * plan.lora_rank}, target_modules={targets}{extra})"


def deepspeed_config(plan: TrainingPlan) -> str:
    """The DeepSpeed config values that matter for memory (zero_optimization and precision)."""
    if plan.zero is None:
        return ""
    z: dict[str, object] = {"stage": plan.zero}
    if plan.offload in ("optimizer", "optimizer+params"):
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload == "optimizer+params":
        z["offload_param"] = {"device": "cpu", "pin_memory": True}
    prec = {"bf16": '"bf16": {"enabled": true}', "fp16": '"fp16": {"enabled": true}'}.get(plan.compute_dtype, "")
    zo = str(z).replace("'", '"').replace("True", "true")
    return "{" + (prec + ", " if prec else "") + f'"zero_optimization": {zo}' + "}"


def training_arguments(plan: TrainingPlan) -> str:
    args = [f"per_device_train_batch_size={plan.batch}", f"gradient_accumulation_steps={plan.grad_accum}",
            f"optim='{HF_OPTIM[plan.optimizer]}'"]
    if plan.grad_checkpointing:
        args.append("gradient_checkpointing=True")
    if plan.compute_dtype in ("bf16", "fp16"):
        args.append(f"{plan.compute_dtype}=True")
    if plan.device == "cpu":
        args.append("use_cpu=True")
    return "TrainingArguments(" + ", ".join(args) + ")"


def training_engine_command(model_id: str, plan: TrainingPlan) -> str:
    """`accelerate launch` flags plus the Python-side settings (peft, transformers, DeepSpeed).

    On the CPU: `accelerate launch --cpu` with one process, and TrainingArguments(use_cpu=True)."""
    args = ["accelerate", "launch"] + (["--cpu"] if plan.device == "cpu" else []) + ["--num_processes", str(plan.world)]
    if plan.nodes > 1:
        args += ["--num_machines", str(plan.nodes), "--machine_rank", "R", "--main_process_ip", "HEAD_IP",
                 "--main_process_port", str(RDZV_PORT)]
    if plan.compute_dtype in ("bf16", "fp16"):
        args += ["--mixed_precision", plan.compute_dtype]
    if plan.zero is not None:
        args += ["--use_deepspeed", "--zero_stage", str(plan.zero)]
        if plan.offload in ("optimizer", "optimizer+params"):
            args += ["--offload_optimizer_device", "cpu"]
        if plan.offload == "optimizer+params":
            args += ["--offload_param_device", "cpu"]
    if plan.fsdp is not None:
        args += ["--use_fsdp", "--fsdp_sharding_strategy", FSDP_STRATEGIES[plan.fsdp].strategy]
        if plan.offload != "none":
            args += ["--fsdp_offload_params", "true"]
    args += ["--gradient_accumulation_steps", str(plan.grad_accum), "train.py"]
    notes = [f"from_pretrained('{model_id}', attn_implementation='{HF_ATTENTION[plan.attention]}'"
             + (", quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', "
                "bnb_4bit_use_double_quant=True)" if plan.precision == "nf4" else
                ", quantization_config=BitsAndBytesConfig(load_in_8bit=True)" if plan.precision == "int8"
                else ", quantization_config=Mxfp4Config(dequantize=True)" if plan.dequantize == "mxfp4"
                else "") + ")"]
    if plan.mode != "full":
        notes.append(lora_config(plan))
    notes.append(training_arguments(plan))
    ds = deepspeed_config(plan)
    if ds:
        notes.append(f"deepspeed config {ds}")
    return shlex.join(args) + "  # " + "; ".join(notes)
