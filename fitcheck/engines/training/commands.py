"""The commands that run a training plan: `accelerate launch` with the Python-side settings (peft's LoraConfig,
transformers' TrainingArguments, DeepSpeed's config), and over several nodes DeepSpeed's launcher or torchrun on
each node.  Pure string building; shlex-quoted.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from fitcheck.engines.transformers import HF_ATTENTION
from fitcheck.estimate.sharding import FSDP_STRATEGIES

if TYPE_CHECKING:
    from fitcheck.plan import TrainingPlan

# torchrun's c10d rendezvous and accelerate's main process port (PyTorch elastic docs; accelerate launch --help).
RDZV_PORT = 29500


def launch_lines(model_id: str, plan: TrainingPlan) -> tuple[str, ...]:
    """What to run for a multi-node training plan: DeepSpeed's launcher from the head node (hostfile,
    ds_config.json) for ZeRO, torchrun on each node otherwise; and `accelerate launch` on each node R,
    with the accelerate config line FSDP's sharding strategy takes."""
    accelerate = f"or each node R (0..{plan.nodes - 1}): {command(model_id, plan).split('  # ')[0]}"
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


# ---- training: accelerate launch, peft, TrainingArguments, DeepSpeed ---------------------------
# transformers TrainingArguments(optim=...) names (training_args.OptimizerNames).
HF_OPTIM = {"adamw": "adamw_torch", "adamw-8bit": "adamw_bnb_8bit", "paged-adamw-8bit": "paged_adamw_8bit",
            "sgd": "sgd", "adafactor": "adafactor"}


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


def command(model_id: str, plan: TrainingPlan) -> str:
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


