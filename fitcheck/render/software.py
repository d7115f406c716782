"""The installed stack, rendered: `check`'s "Software:" lines and "software" key, `probe`'s "Software" section.

JSON ("software" in `fitcheck check --json` and `fitcheck probe --json`; null with --profile):
    {environments: [site-packages folders read], torch: {version, backend: cuda|rocm|cpu|unknown,
     backend_version, how, location} | null, packages: {name: {version, location}}, problems: [str],
     issues: [{kind: driver|compute_capability|backend|kernel|package, blocking, reason, fix}],
     status: ok | cannot_run | warning | no_torch}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fitcheck.engines import ENGINES

if TYPE_CHECKING:
    from fitcheck.engines.stack import StackCheck

_SHOWN = ("vllm", "bitsandbytes", "flash-attn", "llama-cpp-python", "transformers", "peft", "deepspeed")


def _status(checked: StackCheck) -> str:
    if checked.blocking:
        return "cannot_run"
    if checked.stack.torch is None:
        return "no_torch"
    return "warning" if checked.warnings else "ok"


def software_document(checked: StackCheck | None) -> dict | None:
    if checked is None:
        return None
    from fitcheck.engines.stack import issue_dict
    from fitcheck.probe.software import stack_document

    doc = stack_document(checked.stack) or {}
    return {**doc, "issues": [issue_dict(i) for i in checked.issues], "status": _status(checked)}


def stack_summary(checked: StackCheck, engine: str | None = None) -> str:
    """'torch 2.5.1 (CUDA 12.4, local version +cu124); vllm 0.6.4, bitsandbytes 0.45.0'."""
    s = checked.stack
    if s.torch is None:
        runner = ENGINES.get(engine or "")
        if runner is not None and not runner.uses_torch:  # a native binary: a missing torch is no news for it
            return f"{runner.title} needs no Python stack (torch not found here)"
        where = ", ".join(s.environments) or "no environment"
        return f"torch not found in {where} (--python-env PATH names another environment)"
    others = [f"{p.name} {p.version}" for p in s.packages if p.name in _SHOWN]
    torch = s.get("torch")
    return s.torch.text + (f" from {torch.location}" if torch else "") + (f"; {', '.join(others)}" if others else "")


def software_lines(checked: StackCheck | None, engine: str | None = None, brief: bool = False) -> list[str]:
    """The check table's lines: the stack, then each warning (blocking issues are the verdict's reasons);
    ``brief``: the warnings only."""
    if checked is None:
        return []
    lines = [] if brief else [f"Software: {stack_summary(checked, engine)}"]
    lines += [f"Warning:  {i.text}" for i in checked.warnings]
    return lines


def probe_software_section(checked: StackCheck | None, has_gpu: bool = True) -> str | None:
    """`fitcheck probe`'s "Software" table (this machine only)."""
    if checked is None:
        return None
    from tabulate import tabulate

    s = checked.stack
    rows = [("environments", "; ".join(s.environments) or "none read")]
    if s.torch is not None:
        rows.append(("torch", f"{s.torch.version}, {s.torch.backend}"
                     + (f" {s.torch.backend_version}" if s.torch.backend_version else "") + f" ({s.torch.how})"))
    else:
        rows.append(("torch", "not installed (--python-env PATH reads another environment)"))
    rows += [(p.name, p.version) for p in s.packages if p.name != "torch"]
    rows += [("cannot run" if i.blocking else "warning", i.text) for i in checked.issues]
    if not checked.issues and s.torch is not None:
        rows.append(("check", "the driver, this GPU and the torch build match" if has_gpu
                     else "no GPU here: torch runs on the CPU"))
    rows += [("not read", p) for p in s.problems]
    return "Software (package metadata only)\n" + tabulate(rows, tablefmt="plain")
