"""The training routes, in the order they are tried (cost decides the order they are shown in).  Each candidate
changes one axis (or that axis plus gradient checkpointing, or a smaller micro-batch keeping the effective batch).
Keeping the effective batch by gradient accumulation is nearly free; a shorter sequence comes last (it changes what
is learned).  The training defaults depend on the mode and device only, which the changes set explicitly.

1. gradient checkpointing; 2. a smaller micro-batch, the same effective batch; 3. 8-bit optimizers, pure bf16
weights, and those cheap steps stacked; 4. fewer trainable parameters (LoRA, QLoRA, fewer modules, a lower rank);
5. sharding over the machine's GPUs, over more nodes; 6. offload to RAM (ZeRO-Offload); 7. a shorter sequence;
8. when none of those runs, every lever at once (floor), so that "nothing fits" comes from a search that covered them.
A request this machine cannot run (QLoRA's kernels on Apple, ZeRO on the CPU, flash-attention on a T4) first gets
what runs here swapped in, and the candidates from there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fitcheck import engines
from fitcheck.estimate.context_limit import search_limit
from fitcheck.estimate.distributed import gb_text, training_traffic
from fitcheck.estimate.lora import lora_params
from fitcheck.estimate.lora_targets import parse_targets
from fitcheck.estimate.sharding import FSDP_STRATEGIES
from fitcheck.estimate.verdict import FITS
from fitcheck.machine import Machine
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import TrainingPlan, grad_checkpointing
from fitcheck.request import Request
from fitcheck.search import rank as R
from fitcheck.search.largest import largest_fitting
from fitcheck.search.routes import (
    Alternative,
    Evaluate,
    Route,
    Search,
    changed_fields,
    fewest_nodes,
    more_nodes,
    multi_node,
    runs,
    same_effective_batch,
)
from fitcheck.speed.training import estimate_training_speed


@dataclass
class Context:
    """What every training route reads: the request the changes start from, its plan, the machine, the search."""

    spec: ModelSpec
    base: Request
    plan: TrainingPlan
    machine: Machine
    s: Search
    extra: float                  # what every candidate costs beyond its own change (COST_RUNNABLE after a swap)
    kind: str
    cc: float | None

    @property
    def eight_bit(self) -> bool:
        """An 8-bit optimizer is an option: a 32-bit one is asked for, and bitsandbytes' kernels run here."""
        return self.plan.optimizer in ("adamw", "sgd") \
            and engines.OPTIMIZER_RUNS["adamw-8bit"].problem(self.kind, self.cc) is None

    @property
    def pure_bf16(self) -> bool:
        plan = self.plan
        return plan.mode == "full" and plan.master_weights == "fp32" and plan.compute_dtype == "bf16"

    @property
    def qlora_runs(self) -> bool:
        return engines.TRAINING_BASE_RUNS["nf4"].problem(self.kind, self.cc) is None

    def longest_seq(self, cand: Request) -> int | None:
        """The longest sequence below the plan's at which ``cand`` fits."""
        return largest_fitting(lambda n: self.s.fits(cand.with_changes(seq_len=n)), R.MIN_USEFUL_SEQ,
                               min(self.plan.seq_len - 1, search_limit(self.spec, self.plan.seq_len)))

    def consider(self, title: str, cand: Request, cost: float, with_checkpointing: bool = True) -> None:
        """Offer ``cand``; where it does not run, the same with gradient checkpointing, or at a smaller micro-batch
        keeping the effective batch."""
        s = self.s
        cost += self.extra
        out = s.consider(title, cand, cost)
        if out is None or runs(out):
            return
        if with_checkpointing and not grad_checkpointing(cand)[0]:
            self.consider(title + ", with gradient checkpointing", cand.with_changes(grad_checkpointing=True),
                          cost - self.extra + R.COST_CHECKPOINTING, False)
        elif cand.batch > 1 and cand.batch == self.base.batch:
            # Still too big: the same change at a smaller micro-batch, keeping the effective batch.
            fitting = largest_fitting(lambda n: s.fits(cand.with_changes(batch=n)), 1, cand.batch - 1)
            if fitting:
                b, accum = same_effective_batch(fitting, cand.batch * cand.grad_accum)
                s.consider(f"{title}, micro-batch {b} × accumulation {accum}",
                           cand.with_changes(batch=b, grad_accum=accum), cost + R.COST_ACCUMULATION)


def training_alternatives(spec: ModelSpec, request: Request, plan: TrainingPlan, machine: Machine,
                          evaluate: Evaluate) -> tuple[Alternative, ...]:
    s = Search(request, evaluate, relax=bool(plan.problems))
    candidates(s, spec, request, plan, machine, 0.0)
    if plan.problems:
        fixed = runnable(request, plan, machine)
        out = evaluate(fixed) if fixed != request else None
        if out is not None and not out.plan.problems:
            what = ", ".join(f"{k} {'default' if v is None else v}" for k, v in changed_fields(request, fixed))
            s.consider(f"What runs here: {what}", fixed, R.COST_RUNNABLE)
            if out.verdict.status != FITS:  # it does not fit with headroom: the candidates from there
                before = len(s.found)
                candidates(s, spec, fixed, out.plan, machine, R.COST_RUNNABLE)  # type: ignore[arg-type]
                # each of them runs with that swap too: the title says so, as its command does
                s.found[before:] = [replace(a, title=f"With {what}: {lower_first(a.title)}") for a in s.found[before:]]
    return s.ranked_for_training(R.MAX_TRAINING_ALTERNATIVES)


def candidates(s: Search, spec: ModelSpec, base: Request, plan: TrainingPlan, machine: Machine,
               extra: float) -> None:
    kind, cc = engines.machine_kind(machine, plan.device)
    c = Context(spec, base, plan, machine, s, extra, kind, cc)
    for route in ROUTES:
        route.propose(c)


def lower_first(title: str) -> str:
    """``title`` to follow a colon: its first word lowercased unless it is an acronym or a name (FSDP, LoRA)."""
    word = title.split(" ", 1)[0]
    return title[:1].lower() + title[1:] if word[1:].islower() else title


# ---- 1.–3. the cheap steps -----------------------------------------------------------------------------
def checkpointing(c: Context) -> None:
    if not c.plan.grad_checkpointing:
        c.consider("Turn on gradient checkpointing", c.base.with_changes(grad_checkpointing=True),
                   R.COST_CHECKPOINTING, False)


def micro_batch(c: Context) -> None:
    plan = c.plan
    if plan.batch > 1:
        fitting = largest_fitting(lambda n: c.s.fits(c.base.with_changes(batch=n)), 1, plan.batch - 1)
        if fitting:
            b, accum = same_effective_batch(fitting, plan.batch * plan.grad_accum)
            c.consider(f"Micro-batch {b} with gradient accumulation {accum} (same effective batch)",
                       c.base.with_changes(batch=b, grad_accum=accum), R.COST_ACCUMULATION, False)


def optimizer(c: Context) -> None:
    """An 8-bit optimizer (bitsandbytes) where its kernels run; pure bf16 weights for full fine-tuning."""
    if c.eight_bit:
        c.consider("Use 8-bit AdamW (bitsandbytes)", c.base.with_changes(optimizer="adamw-8bit"),
                   R.COST_8BIT_OPTIMIZER)
        c.consider("Use paged 8-bit AdamW (bitsandbytes)", c.base.with_changes(optimizer="paged-adamw-8bit"),
                   R.COST_PAGED_OPTIMIZER)
    if c.pure_bf16:
        c.consider("Pure bf16 weights, no fp32 master copy (--master-weights none)",
                   c.base.with_changes(master_weights="none"), R.COST_PURE_BF16)


def stacked(c: Context) -> None:
    """The cheap steps stacked, in the order a practitioner gives them up (speed first, then a little quality),
    before anything that changes what is trained (LoRA) or adds PCIe traffic."""
    ladder: list[tuple[str, dict[str, Any], float]] = []
    if not c.plan.grad_checkpointing:
        ladder.append(("gradient checkpointing", {"grad_checkpointing": True}, R.COST_CHECKPOINTING))
    if c.eight_bit:
        ladder.append(("8-bit AdamW", {"optimizer": "adamw-8bit"}, R.COST_8BIT_OPTIMIZER))
    if c.pure_bf16:
        ladder.append(("pure bf16 weights (--master-weights none)", {"master_weights": "none"}, R.COST_PURE_BF16))
    changes: dict[str, Any] = {}
    names: list[str] = []
    cost = 0.0
    for name, change, step in ladder:
        changes.update(change)
        names.append(name)
        cost += step
        if len(names) < 2:
            continue  # one step alone is a candidate above
        title = ", ".join(names[:-1]) + " and " + names[-1]
        c.consider(title[0].upper() + title[1:], c.base.with_changes(**changes), cost, False)
        if runs(c.s.evaluate(c.base.with_changes(**changes))):
            break


# ---- 4. fewer trainable parameters ---------------------------------------------------------------------
def lora(c: Context) -> None:
    """full → LoRA; where QLoRA does not run (the CPU, Apple), LoRA with checkpointing at the longest sequence that
    fits is the last step down, as QLoRA's is below where its kernels run."""
    plan = c.plan
    if plan.mode != "full":
        return
    half = plan.compute_dtype if plan.compute_dtype in ("bf16", "fp16") else "bf16"
    cand = c.base.with_changes(mode="lora", precision=half, lora_targets="all-linear",
                               lora_train_embeddings=False, master_weights=None)
    c.consider(f"LoRA (r={plan.lora_rank}, all linear layers) instead of full fine-tuning", cand, R.COST_LORA)
    if c.qlora_runs:
        return
    cand = cand.with_changes(grad_checkpointing=True)
    if not runs(c.s.evaluate(cand)):
        seq = c.longest_seq(cand)
        if seq:
            c.consider(f"LoRA (r={plan.lora_rank}) with gradient checkpointing at a {seq:,}-token sequence",
                       cand.with_changes(seq_len=seq),
                       R.COST_LORA + R.COST_CHECKPOINTING + R.shorter_cost(seq, plan.seq_len), False)


def qlora(c: Context) -> None:
    """full or LoRA → QLoRA (a 4-bit NF4 base), with the recipe's gradient checkpointing and, where that alone does
    not hold the run, its paged 8-bit optimizer, then at the longest sequence that fits."""
    plan = c.plan
    if plan.mode not in ("full", "lora") or not c.qlora_runs:
        return
    cand = c.base.with_changes(mode="qlora", precision="nf4", lora_train_embeddings=False, master_weights=None)
    # The QLoRA recipe checkpoints (peft's prepare_model_for_kbit_training turns it on): where the request did not,
    # QLoRA gives up that speed too, and says so.
    recipe = grad_checkpointing(cand)[0] and not plan.grad_checkpointing
    ckpt = ", with gradient checkpointing" if recipe else ""
    cost = (0 if plan.mode == "lora" else R.COST_LORA) + R.COST_QLORA + (R.COST_CHECKPOINTING if recipe else 0)
    c.consider(f"QLoRA: LoRA on a 4-bit NF4 base (r={plan.lora_rank})"
               + (", with gradient checkpointing (peft's prepare_model_for_kbit_training turns it on)"
                  if recipe else ""), cand, cost)
    best, title = cand, f"QLoRA (r={plan.lora_rank}){ckpt}"
    if c.eight_bit and not runs(c.s.evaluate(cand)):
        # QLoRA's own recipe pairs the 4-bit base with a paged 8-bit optimizer (Dettmers et al. 2023).
        best = cand.with_changes(optimizer="adamw-8bit")
        title = title + " and 8-bit AdamW" if recipe else title + " with 8-bit AdamW"
        cost += R.COST_8BIT_OPTIMIZER
        c.consider(title, best, cost)
    if not runs(c.s.evaluate(best)):
        # Even the 4-bit base does not hold this sequence: QLoRA at the longest sequence that fits (the shorter
        # sequence costs as in 7. below).
        seq = c.longest_seq(best)
        if seq:
            c.consider(f"{title} at a {seq:,}-token sequence", best.with_changes(seq_len=seq),
                       cost + R.shorter_cost(seq, plan.seq_len), False)


def adapters(c: Context) -> None:
    """LoRA on fewer modules, a lower rank, frozen embeddings."""
    plan = c.plan
    if plan.mode not in ("lora", "qlora"):
        return
    if plan.lora_targets != "attention":
        c.consider("LoRA on the attention projections only", c.base.with_changes(lora_targets="attention"), 6)
    for r in (8, 4):
        if r < plan.lora_rank:
            c.consider(f"LoRA rank {r}", c.base.with_changes(lora_rank=r),
                       3 + (plan.lora_rank - r) / plan.lora_rank * 3)
    if plan.lora_train_embeddings:
        c.consider("Freeze the embeddings and lm_head (adapters only)",
                   c.base.with_changes(lora_train_embeddings=False), 4)


# ---- 5. sharding, 6. offload --------------------------------------------------------------------------
def _shards(c: Context) -> bool:
    return c.plan.device == "gpu" and engines.SHARDING_RUNS.problem(c.kind, c.cc) is None


def sharding(c: Context) -> None:
    """Shard across the machine's GPUs (DeepSpeed ZeRO-2/3, FSDP full-shard); hybrid sharding replicates the model
    states on every node: shard them over all the nodes' GPUs."""
    plan = c.plan
    n = len(c.machine.gpus) if _shards(c) else 0
    if n > 1 and (plan.gpus < n or (plan.zero is None and plan.fsdp is None)):
        across = f"{n} GPUs" + (f" × {plan.nodes} nodes" if plan.nodes > 1 else "")
        for zero in (2, 3):
            c.consider(f"DeepSpeed ZeRO-{zero} across {across}",
                       c.base.with_changes(gpus=n, zero=zero, fsdp=None, offload="none"),
                       R.COST_SHARDING + (zero - 2) * 2)
        c.consider(f"FSDP full-shard across {across}",
                   c.base.with_changes(gpus=n, fsdp="full-shard", zero=None, offload="none"), R.COST_SHARDING + 2)
    if _shards(c) and plan.nodes > 1 and plan.fsdp and FSDP_STRATEGIES[plan.fsdp].within_node:
        c.consider(f"FSDP full-shard over all {plan.world} GPUs of the {plan.nodes} nodes (not replicated per node)",
                   c.base.with_changes(fsdp="full-shard"), R.COST_SHARDING)


def nodes(c: Context) -> None:
    """More nodes like this one, the model states sharded over all their GPUs; with gradient checkpointing too where
    the request does not checkpoint (sharding divides the model states, not the activations, so without it more
    nodes may only hold them by the dozen).  The cheaper (cluster_cost) of the two is offered."""
    plan = c.plan
    if not _shards(c) or not multi_node(c.machine) or plan.offload != "none":
        return
    sharded = {"zero": plan.zero, "fsdp": None} if plan.zero == 3 else {"zero": None, "fsdp": "full-shard"}
    what = "DeepSpeed ZeRO-3" if plan.zero == 3 else "FSDP full-shard"
    cand = c.base.with_changes(gpus=None, **sharded)
    tries = [(what, cand, c.extra)]
    if not grad_checkpointing(cand)[0]:
        tries.append((what + " with gradient checkpointing", cand.with_changes(grad_checkpointing=True),
                      c.extra + R.COST_CHECKPOINTING))
    best: tuple[float, str, Request] | None = None
    for title, cand, cost in tries:
        def runs_on(k: int, cand: Request = cand) -> bool:
            return runs(c.s.evaluate(cand.with_changes(nodes=k)))

        n = fewest_nodes(runs_on, plan.nodes + 1)
        if n is not None:
            total = cost + R.cluster_cost(plan.nodes, n)
            if best is None or total < best[0]:
                best = total, f"{title} over {n} nodes", cand.with_changes(nodes=n)
    if best is not None:
        c.s.consider(best[1], best[2], best[0])


def offload(c: Context) -> None:
    """Offload to RAM (DeepSpeed ZeRO-Offload): the optimizer, then the parameters too; each node's RAM holds its
    own ranks' share of the offloaded states, so more nodes need less RAM each."""
    plan = c.plan
    if not _shards(c) or plan.offload != "none":
        return
    zero = max(plan.zero or 2, 2)
    for title, cand, cost in (
            ("Offload the optimizer to the CPU (DeepSpeed ZeRO-Offload)",
             c.base.with_changes(zero=zero, fsdp=None, offload="optimizer"), R.COST_OFFLOAD_OPTIMIZER),
            ("Offload optimizer and parameters to the CPU (ZeRO-3 Offload)",
             c.base.with_changes(zero=3, fsdp=None, offload="optimizer+params"), R.COST_OFFLOAD_PARAMS)):
        pcie = pcie_cost(c.s, c.spec, cand, c.machine)
        c.consider(title, cand, cost + pcie)
        if cand.offload == "optimizer+params" and multi_node(c.machine) and not runs(c.s.evaluate(cand)):
            more_nodes(c.s, cand.with_changes(gpus=None), plan, "ZeRO-3 Offload", c.extra + cost + pcie)


def pcie_cost(s: Search, spec: ModelSpec, request: Request, machine: Machine) -> float:
    """What offload's PCIe time costs in the ranking: COST_PER_SLOWDOWN for each doubling of the
    step's compute time it could add (fitcheck.speed.training.offload_bytes_per_step over PCIe)."""
    out = s.evaluate(request)
    if out is None or not isinstance(out.plan, TrainingPlan):
        return 0.0
    speed = estimate_training_speed(spec, out.plan, machine)
    compute = speed.step_seconds
    if not speed.offload_seconds or compute is None:
        return 0.0
    link = speed.link_wait[1] if speed.link_wait else 0.0
    fastest_compute = compute[1] - speed.offload_seconds - link  # the slow end is compute + transfer
    return R.COST_PER_SLOWDOWN * min(speed.offload_seconds / max(fastest_compute, 1e-9), R.SLOWDOWN_CAP)


# ---- 7. a shorter sequence ----------------------------------------------------------------------------
def shorter(c: Context) -> None:
    """A shorter sequence (last: it changes what is learned); with gradient checkpointing too where that alone does
    not hold the asked sequence, as a longer one fits with it than without."""
    plan = c.plan
    seq = c.longest_seq(c.base)
    if seq:
        c.consider(f"Shorten the sequence to {seq:,} tokens", c.base.with_changes(seq_len=seq),
                   R.shorter_cost(seq, plan.seq_len), False)
    checkpointed = c.base.with_changes(grad_checkpointing=True)
    if not plan.grad_checkpointing and not runs(c.s.evaluate(checkpointed)):
        longer = c.longest_seq(checkpointed)
        if longer and (seq is None or longer > seq):
            c.consider(f"Gradient checkpointing at a {longer:,}-token sequence",
                       checkpointed.with_changes(seq_len=longer),
                       R.COST_CHECKPOINTING + R.shorter_cost(longer, plan.seq_len), False)


# ---- 8. every lever at once ----------------------------------------------------------------------------
def floor(c: Context) -> None:
    """When no route above runs: every lever at its most memory-saving setting this machine runs, together — the
    fewest trainable parameters (QLoRA where its kernels run, else LoRA, embeddings frozen), gradient
    checkpointing, micro-batch 1 (the effective batch kept by accumulation), and either 8-bit AdamW on the GPU or
    ZeRO-3 Offload of the optimizer and parameters to RAM (all the machine's GPUs) — at the asked sequence, else
    the longest that fits.  Each lever only lowers the GPU's need (offload trades it for RAM, so both ends are
    tried), so where neither floor fits at the shortest useful sequence no combination of the routes does, and
    "Nothing fits" is the answer of a search that covered them (llama-3.1-8b --mode qlora on an 8 GB laptop GPU
    fits only as ZeRO-3 Offload at a shorter sequence)."""
    plan = c.plan
    if c.s.offered() or plan.device != "gpu":
        return
    changes: dict[str, Any] = {"grad_checkpointing": True}
    names: list[str] = []
    cost = 0.0
    if not plan.grad_checkpointing:
        names.append("gradient checkpointing")
        cost += R.COST_CHECKPOINTING
    if plan.mode in ("full", "lora") and c.qlora_runs:
        changes.update(mode="qlora", precision="nf4", master_weights=None)
        names.insert(0, "QLoRA")
        cost += R.COST_QLORA + (R.COST_LORA if plan.mode == "full" else 0)
    elif plan.mode == "full":
        half = plan.compute_dtype if plan.compute_dtype in ("bf16", "fp16") else "bf16"
        changes.update(mode="lora", precision=half, lora_targets="all-linear", master_weights=None)
        names.insert(0, "LoRA")
        cost += R.COST_LORA
    if plan.mode == "full" or plan.lora_train_embeddings:
        changes.update(lora_train_embeddings=False)
    if plan.batch > 1:
        changes.update(batch=1, grad_accum=plan.batch * plan.grad_accum)
        names.append("micro-batch 1")
        cost += R.COST_ACCUMULATION
    tries: list[tuple[list[str], dict[str, Any], float]] = []
    if c.eight_bit:
        tries.append((names + ["8-bit AdamW"], {"optimizer": "adamw-8bit"}, cost + R.COST_8BIT_OPTIMIZER))
    else:
        tries.append((names, {}, cost))
    if _shards(c):
        n = max(len(c.machine.gpus), 1)
        tries.append((names + ["ZeRO-3 Offload of the optimizer and parameters to the CPU"],
                      {"zero": 3, "fsdp": None, "offload": "optimizer+params", "gpus": n if n > 1 else c.base.gpus},
                      cost + R.COST_OFFLOAD_PARAMS))
    for parts, more, total in tries:
        if not parts:
            continue        # nothing to change but the sequence: the shorter route has offered that
        cand = c.base.with_changes(**changes, **more)
        title = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
        title = title[0].upper() + title[1:]
        if more.get("offload"):
            total += pcie_cost(c.s, c.spec, cand, c.machine)
        if runs(c.s.evaluate(cand)):
            c.consider(title, cand, total, False)
            continue
        seq = c.longest_seq(cand)
        if seq:
            c.consider(f"{title}, at a {seq:,}-token sequence", cand.with_changes(seq_len=seq),
                       total + R.shorter_cost(seq, plan.seq_len), False)


def runnable(base: Request, plan: TrainingPlan, machine: Machine) -> Request:
    """For a plan this machine cannot run: the same training with what does run here swapped in."""
    fixed = base
    if not machine.gpus and (base.device == "gpu" or base.gpus is not None):
        fixed = fixed.with_changes(device="auto", gpus=None)
    elif base.gpus is not None and base.gpus > len(machine.gpus):
        fixed = fixed.with_changes(gpus=len(machine.gpus))
    kind, cc = engines.machine_kind(machine, "cpu" if fixed.device == "cpu" or not machine.gpus else "gpu")
    if engines.OPTIMIZER_RUNS[base.optimizer].problem(kind, cc):
        fixed = fixed.with_changes(optimizer="adamw")
    if engines.ATTENTION_RUNS[base.attention or "sdpa"].problem(kind, cc):
        fixed = fixed.with_changes(attention="sdpa")
    if (base.zero is not None or base.fsdp is not None) and engines.SHARDING_RUNS.problem(kind, cc):
        fixed = fixed.with_changes(zero=None, fsdp=None, offload="none", gpus=None)
    if kind == engines.CPU and base.gpus is not None:
        fixed = fixed.with_changes(gpus=None)
    base_runs = engines.TRAINING_BASE_RUNS.get(plan.precision)
    if base_runs is not None and base_runs.problem(kind, cc):
        fixed = fixed.with_changes(mode="lora", precision="bf16", master_weights=None)
    return fixed


ROUTES = (
    Route("checkpointing", "about 30 % more compute (one more forward per step)", checkpointing),
    Route("micro-batch", "a smaller micro-batch, the same effective batch by accumulation", micro_batch),
    Route("optimizer", "8-bit optimizer states, or bf16 updates without an fp32 master copy", optimizer),
    Route("stacked", "the cheap steps together", stacked),
    Route("lora", "full fine-tuning: a low-rank update instead of every weight", lora),
    Route("qlora", "a 4-bit base under the adapters", qlora),
    Route("adapters", "fewer adapted modules, a lower rank, frozen embeddings", adapters),
    Route("sharding", "communication between the GPUs", sharding),
    Route("nodes", "more machines, and a cluster to run", nodes),
    Route("offload", "PCIe time every step", offload),
    Route("shorter", "sequence length (what is learned)", shorter),
    Route("floor", "every lever above at once", floor),
)


def hybrid_advice(spec: ModelSpec, request: Request, plan: Any, machine: Machine,
                  evaluate: Evaluate) -> str | None:
    """A note for FSDP full-shard / shard-grad-op over several nodes when the hybrid twin (sharded within a
    node, replicated across nodes) fits as well: it keeps the parameter all-gathers on NVLink and sends only
    the gradients' all-reduce between nodes."""
    if not isinstance(plan, TrainingPlan) or plan.nodes <= 1 or plan.fsdp not in ("full-shard", "shard-grad-op"):
        return None

    twin = "hybrid-shard" if plan.fsdp == "full-shard" else "hybrid-shard-zero2"
    out = evaluate(request.with_changes(fsdp=twin))
    if out is None or out.verdict.status != FITS or not isinstance(out.plan, TrainingPlan):
        return None
    trainable = spec.total_params if plan.mode == "full" else lora_params(
        spec, plan.lora_rank, parse_targets(plan.lora_targets))
    ours, theirs = (training_traffic(spec, p, machine, trainable) for p in (plan, out.plan))
    if ours is None or theirs is None or theirs.bytes_per_step >= ours.bytes_per_step:
        return None
    need = max(d.total_bytes for d in out.estimate.gpu_devices)
    return (f"--fsdp {twin} fits too ({need / 2**30:.2f} GiB per GPU, the model states replicated on each node): "
            f"{gb_text(theirs.bytes_per_step)} per node per step between nodes instead of "
            f"{gb_text(ours.bytes_per_step)}")

