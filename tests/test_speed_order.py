"""Alternatives ranked by what the user gives up, speed included (fitcheck.alternatives.speed_order)."""

from __future__ import annotations

import json
import shlex

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.cli import cli
from fitcheck.search.rank import (
    MUCH_SLOWER,
    READ_ALONG_TOKENS_PER_S,
    SMALL_QUALITY_LOSS,
    Footing,
    much_faster,
    speed_order,
)


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_a_much_faster_4bit_build_ranks_before_a_slow_8bit_one():
    # Qwen3-30B-A3B on an RTX 5090: bitsandbytes LLM.int8 through transformers (its per-expert loop, ~5 tok/s,
    # and tight) cost 13 and ranked first; llama.cpp's Q4_K_M build (hundreds of tok/s, with headroom; Qwen's
    # GGUF repository holds it) second.
    doc = json.loads(run("Qwen/Qwen3-30B-A3B", "--profile", "rtx-5090", "--strict", "--json").output)
    alts = doc["alternatives"]
    commands = [a["fitcheck_command"] for a in alts]
    int8 = next(i for i, c in enumerate(commands) if "--precision int8" in c)
    assert "--precision q4_k_m" in commands[0], commands
    assert int8 > 0 and alts[int8]["cost"] < alts[0]["cost"]   # moved by speed, not by its cost
    # still offered, and still takeable: its command reproduces its status and bytes
    again = json.loads(run(*shlex.split(commands[int8])[1:], "--json").output)
    assert again["verdict"]["status"] == alts[int8]["status"] == "tight"
    assert abs(again["estimate"]["total_bytes"] - alts[int8]["total_bytes"]) <= 0.01 * alts[int8]["total_bytes"]


def test_what_much_faster_needs():
    slow = Footing(quality_loss=1, kv_loss=0, context=4096, batch=1, nodes=1, fits=False, decode_low=5.0)
    fast = Footing(quality_loss=SMALL_QUALITY_LOSS, kv_loss=0, context=4096, batch=1, nodes=1, fits=True,
                   decode_low=5.0 * MUCH_SLOWER)
    assert much_faster(fast, slow) and not much_faster(slow, fast)
    from dataclasses import replace

    assert not much_faster(replace(fast, decode_low=5.0 * MUCH_SLOWER * 0.99), slow)   # not much faster
    assert not much_faster(replace(fast, quality_loss=SMALL_QUALITY_LOSS + 1), slow)     # Q4_0, Q3_K_M: more lost
    assert not much_faster(replace(fast, context=2048), slow)                          # a shorter context
    assert not much_faster(replace(fast, nodes=2), slow)                               # another machine
    assert not much_faster(replace(fast, kv_loss=9), slow)                             # a 4-bit KV cache
    assert not much_faster(replace(fast, fits=False), replace(slow, fits=True))        # tight over comfortable
    assert not much_faster(replace(fast, decode_low=None), slow)                       # speed unknown
    # fast enough to read along: quality decides (the cost order stands)
    quick = replace(slow, decode_low=READ_ALONG_TOKENS_PER_S)
    assert not much_faster(replace(fast, decode_low=READ_ALONG_TOKENS_PER_S * 100), quick)
    # per sequence: 64 sequences at 100 tok/s together are slow for each reader
    batched = replace(slow, batch=64, decode_low=100.0)
    assert much_faster(replace(fast, batch=64, decode_low=100.0 * MUCH_SLOWER), batched)


footings = st.builds(Footing, quality_loss=st.integers(0, 6), kv_loss=st.sampled_from([0, 4, 9]),
                     context=st.sampled_from([2048, 4096]), batch=st.sampled_from([1, 4]),
                     nodes=st.sampled_from([1, 2]), fits=st.booleans(),
                     decode_low=st.none() | st.floats(0.0, 2000.0, allow_nan=False))
options = st.lists(st.tuples(st.integers(0, 60), footings), max_size=12)


@settings(max_examples=300, deadline=None)
@given(options)
def test_speed_order_moves_only_what_a_much_faster_option_overtakes(items):
    # cost order, at equal cost a comfortable fit before a tight one (alternatives._rank)
    ranked = [(i, cost, f) for i, (cost, f) in enumerate(sorted(items, key=lambda t: (t[0], not t[1].fits)))]
    out = speed_order(ranked, lambda t: t[2])
    assert sorted(out) == ranked                                  # every option kept, none added
    assert speed_order(list(ranked), lambda t: t[2]) == out       # deterministic
    place = {t[0]: n for n, t in enumerate(out)}
    for a in ranked:
        for b in ranked:
            if much_faster(b[2], a[2]):
                assert place[b[0]] < place[a[0]]                  # after every option much faster than it
                assert b[2].fits or not a[2].fits                 # never a tight one over a comfortable one
            if a[0] < b[0] and place[b[0]] < place[a[0]]:
                # out of cost order only when something much faster overtakes the one put later: so a
                # comfortable option follows a tight one of equal cost only for a much faster one
                assert any(much_faster(c[2], a[2]) for c in ranked)


def test_a_modest_speed_gap_leaves_the_cost_order():
    # Qwen-7B on an RTX 3060: LLM.int8 with transformers (~13–24 tok/s) before vLLM's AWQ (~34–61 tok/s):
    # 2.6× is not MUCH_SLOWER, so the 8-bit weights' quality decides.
    commands = [a["fitcheck_command"] for a in
                json.loads(run("qwen-7b", "--profile", "rtx-3060", "--strict", "--json").output)["alternatives"]]
    int8 = next(i for i, c in enumerate(commands) if "--precision int8 " in c and "--engine transformers" in c)
    awq = next(i for i, c in enumerate(commands) if "--precision awq " in c and "--engine vllm" in c)
    assert int8 < awq, commands


def test_where_picks_a_machines_precision_in_checks_order_speed_included():
    # The precision `where` falls back to (fitcheck.alternatives.best_precision) for Qwen3-30B-A3B on an RTX 5090:
    # by cost alone bitsandbytes LLM.int8 through transformers (one quality step, tight, ~5 tok/s); in check's
    # order llama.cpp's Q4_K_M build (hundreds of tok/s), check's own first alternative there.
    from fitcheck.model.resolve import resolve_model
    from fitcheck.pipeline import Evaluator, check
    from fitcheck.profiles import load_profile
    from fitcheck.request import Request
    from fitcheck.search.best import best_precision
    from fitcheck.search.rank import COST_PER_QUALITY_STEP, COST_TIGHT

    model, machine = resolve_model("Qwen/Qwen3-30B-A3B"), load_profile("rtx-5090")
    evaluate = Evaluator(model.spec, machine)
    result = check(model, Request(), machine, search=False, choose=False)  # the alternatives to the default
    best = best_precision(model.spec, Request(), result.plan, machine, evaluate)
    first = result.alternatives[0]
    assert best is not None and (best.plan.precision, best.plan.engine) == ("q4_k_m", "llama.cpp")
    assert (first.plan.precision, first.plan.engine) == (best.plan.precision, best.plan.engine)
    int8 = evaluate(Request(precision="int8", engine="transformers"))
    assert int8 is not None and int8.verdict.status == "tight"
    assert best.cost > COST_PER_QUALITY_STEP + COST_TIGHT   # the cheaper int8 ranks after it by speed
