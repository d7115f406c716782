"""The commands that run a plan: fitcheck's own (from the option vocabulary, so it reproduces the request) and the
engine's (each engine module builds its own: fitcheck.engines.*).  Pure string building; shlex-quoted."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from fitcheck.engines import get
from fitcheck.options import command_args
from fitcheck.plan import AnyPlan, TrainingPlan
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


def engine_command(model_id: str, plan: AnyPlan, quantized_repos: Mapping[str, str] | None = None, *,
                   local: bool = False) -> str:
    """The command that runs ``plan`` with its engine (``local``: model_id is a path on this machine)."""
    if isinstance(plan, TrainingPlan):
        from fitcheck.engines.training import commands

        return commands.command(model_id, plan)

    return get(plan.engine).command(model_id, plan, quantized_repos or {}, local)


def launch_lines(model_id: str, plan: AnyPlan, quantized_repos: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """What to run on each node for a plan over several nodes (empty for one machine)."""
    if plan.nodes <= 1:
        return ()
    if isinstance(plan, TrainingPlan):
        from fitcheck.engines.training import commands

        return commands.launch_lines(model_id, plan)

    return get(plan.engine).launch_lines(model_id, plan, quantized_repos or {})
