"""Training alternatives ranked by what the user gives up: checkpointing and accumulation (speed only), the
8-bit optimizer and pure bf16, LoRA, QLoRA, then more nodes; each title saying what it gives up."""

from __future__ import annotations

import json
import shlex

from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.search.rank import COST_CHECKPOINTING, COST_QLORA
from fitcheck.search.routes import same_effective_batch


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def alternatives(*args: str) -> list[dict]:
    r = run(*args, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.output)["alternatives"]


def check_of(command: str) -> dict:
    return json.loads(run(*shlex.split(command)[1:], "--json").output)


def every_candidate(model: str, request, profile: str) -> list:
    """Every candidate the training routes propose, ranked, those that change a field the user set (the mode)
    included: what a check offers only when nothing that keeps them fits."""
    from fitcheck.model.resolve import resolve_model
    from fitcheck.pipeline import Evaluator, check
    from fitcheck.profiles import load_profile
    from fitcheck.search.routes import Search
    from fitcheck.search.training_routes import candidates

    resolved, machine = resolve_model(model), load_profile(profile)
    plan = check(resolved, request, machine, alternatives=False, search=False).plan
    s = Search(request, Evaluator(resolved.spec, machine), relax=True)
    candidates(s, resolved.spec, request, plan, machine, 0.0)
    return list(s.ranked_for_training(20))


def test_qlora_says_and_pays_for_the_checkpointing_its_recipe_turns_on():
    # Llama-3.1-8B LoRA on an RTX 4090: QLoRA (peft's prepare_model_for_kbit_training checkpoints) read "QLoRA:
    # LoRA on a 4-bit NF4 base" and cost the 4-bit base alone, as if it kept LoRA's speed.
    # QLoRA changes the --mode the user set, so a check offers it only when nothing in LoRA fits; the route says
    # and charges it all the same.
    from fitcheck.request import Request

    qlora = next(a for a in every_candidate("llama-3.1-8b", Request(mode="lora"), "rtx-4090")
                 if a.request.mode == "qlora")
    assert "gradient checkpointing" in qlora.title
    assert qlora.cost == COST_QLORA + COST_CHECKPOINTING
    assert qlora.plan.grad_checkpointing is True
    # the check itself keeps the mode
    assert all("--mode lora" in a["fitcheck_command"] for a in alternatives("llama-3.1-8b", "--mode", "lora",
                                                                            "--profile", "rtx-4090"))


def test_no_option_gives_up_more_for_nothing():
    # The same machine: 8-bit AdamW, paged 8-bit AdamW, LoRA rank 8 and 4, each with gradient checkpointing and
    # still tight (21.8–22.0 GiB), were listed beside gradient checkpointing alone, tight at 22.2 GiB.
    alts = alternatives("llama-3.1-8b", "--mode", "lora", "--profile", "rtx-4090")
    assert "--grad-checkpointing" in alts[0]["fitcheck_command"] and alts[0]["status"] == "tight"
    flags = [set(shlex.split(a["fitcheck_command"])) for a in alts]
    for a, mine in zip(alts, flags, strict=True):
        for b, theirs in zip(alts, flags, strict=True):
            if a is not b and theirs < mine:
                assert a["status"] == "fits" and b["status"] == "tight", (a["title"], b["title"])


def test_a_smaller_micro_batch_keeps_the_effective_batch_exactly():
    # Llama-3.1-8B LoRA at micro-batch 8 on an A100 40GB: QLoRA at micro-batch 5 × accumulation 2 (10 a step).
    assert same_effective_batch(5, 8) == (4, 2) and same_effective_batch(7, 7) == (7, 1)
    assert same_effective_batch(6, 7) == (1, 7)
    alts = alternatives("llama-3.1-8b", "--mode", "lora", "--batch", "8", "--profile", "a100-40gb")
    accumulated = [check_of(a["fitcheck_command"])["request"] for a in alts if "--grad-accum" in a["fitcheck_command"]]
    assert accumulated and all(r["batch"] * r["grad_accum"] == 8 for r in accumulated)


def test_more_nodes_with_checkpointing_where_that_needs_far_fewer():
    # Qwen2.5-7B full fine-tuning at micro-batch 8 on one H100: FSDP over dozens of nodes (the activations are
    # not sharded) instead of 4 with gradient checkpointing.  (At micro-batch 4 pure bf16 with checkpointing
    # runs on the one GPU, tight, and single-GPU steps fill the list.)
    alts = alternatives("qwen-7b", "--mode", "full", "--batch", "8", "--profile", "h100-sxm")
    fsdp = next(a for a in alts if "--fsdp full-shard" in a["fitcheck_command"] and "--nodes" in a["fitcheck_command"])
    args = shlex.split(fsdp["fitcheck_command"])
    assert int(args[args.index("--nodes") + 1]) <= 4 and "--grad-checkpointing" in args


def test_full_fine_tuning_gives_up_speed_then_precision_then_what_is_trained_then_more_nodes():
    alts = alternatives("qwen-7b", "--mode", "full", "--profile", "a100-80gb")
    commands = [a["fitcheck_command"] for a in alts]
    first = shlex.split(commands[0])
    assert "--mode" in first and first[first.index("--mode") + 1] == "full"
    # pure bf16 alone runs, tight (precision given up, no speed); checkpointing comes with it where more is needed
    assert "--master-weights" in first or "--grad-checkpointing" in first
    # every alternative keeps full fine-tuning (the mode the user set); the routes that change it rank after the
    # cheap steps, and more nodes after LoRA and QLoRA
    assert all(shlex.split(c)[shlex.split(c).index("--mode") + 1] == "full" for c in commands)
    from fitcheck.request import Request

    every = every_candidate("qwen-7b", Request(mode="full"), "a100-80gb")
    kinds = ["checkpointing" if a.request.grad_checkpointing and a.request.mode == "full" and a.plan.nodes == 1
             else a.request.mode if a.request.mode != "full" else "nodes" if a.plan.nodes > 1 else "other"
             for a in every]
    order = [kinds.index(k) for k in ("checkpointing", "lora", "qlora", "nodes")]
    assert order == sorted(order) and order[1] > 0
