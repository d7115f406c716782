"""A one-row-per-case summary of measured results, for the terminal.  Pure (no torch)."""

from __future__ import annotations

MIB = 2**20
# Phases shown, in order; a training case's later steps all land in the "stepN" column.
SHOWN_PHASES = ("build", "prefill", "generate", "forward", "backward", "optimizer", "stepN")


def _mib(value) -> str:
    return "" if value in ("", None) else f"{int(value) / MIB:,.0f}"


def summary_rows(rows: list[dict]) -> list[list[str]]:
    """Per case: id, status, weights (build steady), then each phase's peak, in MiB."""
    by_case: dict[str, dict] = {}
    for row in rows:
        entry = by_case.setdefault(row["case_id"], {"status": row["status"], "phases": {}})
        phase = str(row.get("phase") or "")
        if phase.startswith("step"):
            phase = "stepN"
        if phase:
            entry["phases"][phase] = row
    table = []
    for case_id, entry in by_case.items():
        phases = entry["phases"]
        build = phases.get("build", {})
        line = [case_id, entry["status"], _mib(build.get("steady_bytes"))]
        line += [_mib(phases.get(p, {}).get("peak_bytes")) for p in SHOWN_PHASES]
        table.append(line)
    return table


def render(rows: list[dict]) -> str:
    headers = ["case", "status", "weights MiB"] + [f"{p} peak" for p in SHOWN_PHASES]
    body = summary_rows(rows)
    try:
        from tabulate import tabulate
    except ImportError:
        return "\n".join("\t".join(map(str, line)) for line in [headers, *body])
    return tabulate(body, headers=headers, disable_numparse=True, stralign="right")
