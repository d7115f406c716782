"""What to train instead when a training plan does not fit: re-estimated alternatives, ranked.

Each candidate changes the plan along one axis (or that axis plus gradient checkpointing), is
fully re-estimated and judged on the same machine, and is kept only if it fits.  Cost (lower is
better): what is lost in speed (checkpointing ≈ one extra forward, offload much more), in the
update (8-bit states, fewer trainable parameters, a quantized base) or in the request (a shorter
sequence).  Keeping the effective batch by gradient accumulation is nearly free.

On the CPU (a plan with device "cpu": one process, RAM is the memory) only what runs there is
offered: checkpointing, a smaller micro-batch, LoRA and smaller adapters, a shorter sequence.
Never more GPUs, ZeRO, FSDP, offload, QLoRA or a bitsandbytes 8-bit optimizer (GPU kernels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fitcheck.estimate.result import Estimate
from fitcheck.estimate.search import largest_fitting
from fitcheck.estimate.training_request import TrainingPlan
from fitcheck.estimate.verdict import FITS, TIGHT, Verdict
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec

Evaluate = Callable[[TrainingPlan], tuple[Estimate, Verdict]]

MAX_ALTERNATIVES = 6
MIN_USEFUL_SEQ = 256
COST_CHECKPOINTING = 5      # ≈ 30 % more compute (one extra forward per step)
COST_ACCUMULATION = 2
COST_8BIT_OPTIMIZER = 4
COST_LORA = 15              # full → LoRA: far fewer trainable parameters
COST_QLORA = 10             # LoRA → QLoRA: a 4-bit base
COST_SHARDING = 5           # ZeRO / FSDP communication
COST_OFFLOAD_OPTIMIZER = 20
COST_OFFLOAD_PARAMS = 30


@dataclass(frozen=True)
class TrainingAlternative:
    title: str
    plan: TrainingPlan
    estimate: Estimate
    verdict: Verdict
    cost: float
    changes: tuple[tuple[str, str], ...]


def _seq_cost(plan: TrainingPlan, seq: int) -> float:
    return 10 + 40 * (1 - seq / plan.seq_len)


def find_training_alternatives(spec: ModelSpec, plan: TrainingPlan, machine: Machine,
                               evaluate: Evaluate) -> tuple[TrainingAlternative, ...]:
    found: list[TrainingAlternative] = []
    seen: set[TrainingPlan] = set()

    def fits(p: TrainingPlan) -> bool:
        return evaluate(p)[1].status == FITS

    def consider(title: str, cand: TrainingPlan, cost: float, changes: tuple[tuple[str, str], ...],
                 with_checkpointing: bool = True) -> None:
        key = cand.with_changes(assumptions=())
        if key in seen:
            return
        seen.add(key)
        est, verdict = evaluate(cand)
        if verdict.status in (FITS, TIGHT):
            found.append(TrainingAlternative(title, cand, est, verdict, cost + (3 if verdict.status == TIGHT else 0), changes))
        elif with_checkpointing and not cand.grad_checkpointing:
            consider(title + ", with gradient checkpointing", cand.with_changes(grad_checkpointing=True),
                     cost + COST_CHECKPOINTING, changes + (("grad_checkpointing", "on"),), False)
        elif cand.batch > 1 and not any(k == "batch" for k, _ in changes):
            # Still too big: the same change at a smaller micro-batch, keeping the effective batch.
            b = largest_fitting(lambda n: fits(cand.with_changes(batch=n)), 1, cand.batch - 1)
            if b:
                accum = -(-cand.batch * cand.grad_accum // b)
                consider(f"{title}, micro-batch {b} × accumulation {accum}", cand.with_changes(batch=b, grad_accum=accum),
                         cost + COST_ACCUMULATION, changes + (("batch", str(b)), ("grad_accum", str(accum))), False)

    # 1. Gradient checkpointing.
    if not plan.grad_checkpointing:
        consider("Turn on gradient checkpointing", plan.with_changes(grad_checkpointing=True), COST_CHECKPOINTING,
                 (("grad_checkpointing", "on"),), False)

    # 2. A smaller micro-batch, keeping the effective batch with gradient accumulation.
    if plan.batch > 1:
        b = largest_fitting(lambda n: fits(plan.with_changes(batch=n)), 1, plan.batch - 1)
        if b:
            accum = -(-plan.batch * plan.grad_accum // b)
            consider(f"Micro-batch {b} with gradient accumulation {accum} (same effective batch)",
                     plan.with_changes(batch=b, grad_accum=accum), COST_ACCUMULATION,
                     (("batch", str(b)), ("grad_accum", str(accum))), False)

    on_gpu = plan.device != "cpu"

    # 3. An 8-bit optimizer (bitsandbytes: GPU kernels).
    if on_gpu and plan.optimizer in ("adamw", "sgd"):
        consider("Use 8-bit AdamW (bitsandbytes)", plan.with_changes(optimizer="adamw-8bit"), COST_8BIT_OPTIMIZER,
                 (("optimizer", "adamw-8bit"),))

    # 4. Fewer trainable parameters: full → LoRA → QLoRA; LoRA on fewer modules or a lower rank.
    half = plan.compute_dtype if plan.compute_dtype in ("bf16", "fp16") else "bf16"
    if plan.mode == "full":
        lora = plan.with_changes(mode="lora", precision=half, lora_targets="all-linear", lora_train_embeddings=False)
        consider(f"LoRA (r={plan.lora_rank}, all linear layers) instead of full fine-tuning", lora, COST_LORA,
                 (("mode", "lora"),))
    if on_gpu and plan.mode in ("full", "lora"):
        base = 0 if plan.mode == "lora" else COST_LORA
        consider(f"QLoRA: LoRA on a 4-bit NF4 base (r={plan.lora_rank})",
                 plan.with_changes(mode="qlora", precision="nf4", lora_train_embeddings=False),
                 base + COST_QLORA, (("mode", "qlora"), ("precision", "nf4")))
    if plan.mode in ("lora", "qlora"):
        if plan.lora_targets != "attention":
            consider("LoRA on the attention projections only", plan.with_changes(lora_targets="attention"), 6,
                     (("lora_targets", "attention"),))
        for r in (8, 4):
            if r < plan.lora_rank:
                consider(f"LoRA rank {r}", plan.with_changes(lora_rank=r), 3 + (plan.lora_rank - r) / plan.lora_rank * 3,
                         (("lora_rank", str(r)),))
        if plan.lora_train_embeddings:
            consider("Freeze the embeddings and lm_head (adapters only)", plan.with_changes(lora_train_embeddings=False), 4,
                     (("lora_train_embeddings", "off"),))

    # 5. Shard across the machine's GPUs.
    n = len(machine.gpus) if on_gpu else 0
    if n > 1 and (plan.gpus < n or (plan.zero is None and plan.fsdp is None)):
        for zero in (2, 3):
            consider(f"DeepSpeed ZeRO-{zero} across {n} GPUs", plan.with_changes(gpus=n, zero=zero, fsdp=None, offload="none"),
                     COST_SHARDING + (zero - 2) * 2, (("gpus", str(n)), ("zero", str(zero))))
        consider(f"FSDP full-shard across {n} GPUs", plan.with_changes(gpus=n, fsdp="full-shard", zero=None, offload="none"),
                 COST_SHARDING + 2, (("gpus", str(n)), ("fsdp", "full-shard")))

    # 6. Offload to RAM (ZeRO-Offload).
    if on_gpu and plan.offload == "none":
        gpus = max(plan.gpus, min(n, plan.gpus)) if n else plan.gpus
        consider("Offload the optimizer to the CPU (DeepSpeed ZeRO-Offload)",
                 plan.with_changes(zero=max(plan.zero or 2, 2), fsdp=None, offload="optimizer", gpus=gpus),
                 COST_OFFLOAD_OPTIMIZER, (("zero", str(max(plan.zero or 2, 2))), ("offload", "optimizer")))
        consider("Offload optimizer and parameters to the CPU (ZeRO-3 Offload)",
                 plan.with_changes(zero=3, fsdp=None, offload="optimizer+params", gpus=gpus),
                 COST_OFFLOAD_PARAMS, (("zero", "3"), ("offload", "optimizer+params")))

    # 7. A shorter sequence (last: it changes what is learned).
    seq = largest_fitting(lambda s: fits(plan.with_changes(seq_len=s)), MIN_USEFUL_SEQ, plan.seq_len - 1)
    if seq:
        consider(f"Shorten the sequence to {seq:,} tokens", plan.with_changes(seq_len=seq), _seq_cost(plan, seq),
                 (("seq_len", str(seq)),), False)

    found.sort(key=lambda a: a.cost)
    return tuple(found[:MAX_ALTERNATIVES])
