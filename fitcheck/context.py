"""The edge context: what a front end reads once about the machine an answer is for, passed into the pipeline so
that `fitcheck MODEL`, a plan file's case, `models --fits`, interactive mode and `measure` give the same bytes for
the same request.

On this machine (no --profile, no --gpu/--vram/--ram what-if) that is the engines installed in this Python
environment (package metadata only: an installed transformers is the default --transformers-version, and the
plan's engine version is named in the assumptions) and the software stack (fitcheck.engines.stack: a build that
cannot run here makes the verdict CANNOT RUN, and drops the alternatives it cannot run).  A profile or a what-if
describes another machine: none of it.  Cost settings and --tokens ride along for every machine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from fitcheck.engines import ENGINES, get
from fitcheck.estimate.result import Assumption
from fitcheck.pipeline import with_stack
from fitcheck.request import Request
from fitcheck.speed.cost import CostSettings

if TYPE_CHECKING:
    from fitcheck.pipeline import CheckResult

INSTALLED_WHY = "installed here (package metadata)"


@dataclass(frozen=True)
class Context:
    versions: tuple[tuple[str, str], ...] = ()   # (engine, version) installed here
    stack: Any = None                            # fitcheck.probe.software.SoftwareStack read here, or None
    cost: CostSettings | None = None             # electricity price and amortisation (--kwh-price, ...)
    tokens: int | None = None                    # fine-tuning: the tokens to train on (--tokens)

    @property
    def installed_transformers(self) -> str | None:
        return dict(self.versions).get("transformers")

    def ask(self, request: Request) -> Request:
        """``request`` as asked here: the installed transformers when it gives no --transformers-version."""
        installed = self.installed_transformers
        if installed and not request.training and request.transformers_version is None:
            return request.with_changes(transformers_version=installed)
        return request

    def finish(self, result: CheckResult, asked: Request) -> CheckResult:
        """``result`` (of ``self.ask(asked)``) with the cost settings, the stack checked against its plan, and the
        installed versions named in its assumptions."""
        result = replace(result, cost=self.cost, tokens=self.tokens if asked.training else None)
        if self.stack is not None:
            result = with_stack(result, self.stack)
        if self.versions:
            result = self._named(result, from_env=self.ask(asked) is not asked)
        return result

    def _named(self, result: CheckResult, from_env: bool) -> CheckResult:
        versions = dict(self.versions)
        engine = getattr(result.plan, "engine", None)
        engine = engine if engine in ENGINES else None  # a training plan's launcher is no serving engine

        def named(assumptions: tuple[Assumption, ...]) -> tuple[Assumption, ...]:
            notes = []
            for a in assumptions:
                if a.name == "logits" and from_env:
                    a = replace(a, why=f"transformers {versions['transformers']} {INSTALLED_WHY}: "
                                + a.why.split(": ", 1)[-1])
                notes.append(a)
            if engine in versions and engine != "transformers":  # transformers: the logits' release, above
                label = get(engine).distribution or engine
                notes.append(Assumption("engine_version", f"{label} {versions[engine]}", INSTALLED_WHY))
            return tuple(notes)

        plan = result.plan.with_changes(assumptions=named(result.plan.assumptions))
        return replace(result, plan=plan,
                       estimate=replace(result.estimate, assumptions=named(result.estimate.assumptions)))


def read_context(this_machine: bool, *, python_envs: tuple[str, ...] = (), cost: CostSettings | None = None,
                 tokens: int | None = None) -> Context:
    """The context of an answer: on ``this_machine``, the installed engines and software stack (read once, here);
    for a profile or a what-if, only the cost settings and tokens."""
    if not this_machine:
        return Context(cost=cost, tokens=tokens)
    from fitcheck.model.installed import default_transformers_version, installed_versions
    from fitcheck.probe.software import read_stack

    versions = installed_versions({e.name: e.distribution for e in ENGINES.values() if e.distribution})
    if "transformers" in versions and default_transformers_version(versions) is None:
        del versions["transformers"]  # a version --transformers-version would not take: not a default
    return Context(tuple(sorted(versions.items())), read_stack(extra=tuple(python_envs)), cost, tokens)
