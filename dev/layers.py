"""fitcheck's layers, lowest first: a module may import from its own layer and the ones below, never above.

Read top-down the folders are the pipeline: request -> plan -> engines -> estimate -> verdict -> search -> speed ->
render; the table below says where each module stands (the first matching prefix wins).
"""

from __future__ import annotations

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # what everything may use: units, errors, bounded readers, frozen copies, release numbers
    ("util", ("fitcheck", "fitcheck.units", "fitcheck.errors", "fitcheck.bounded", "fitcheck.frozen",
              "fitcheck.versions", "fitcheck.user_config", "fitcheck.contracts")),
    # tables the vocabulary is made of: weights formats, sharding strategies, generate()'s samplings
    ("tables", ("fitcheck.estimate.formats", "fitcheck.estimate.sharding", "fitcheck.estimate.generate_step",
                "fitcheck.estimate.lora_targets")),
    # what a machine and a model are, and where they are read from
    ("machine", ("fitcheck.machine", "fitcheck.storage", "fitcheck.model", "fitcheck.probe", "fitcheck.profiles")),
    # the question as asked
    ("request", ("fitcheck.options", "fitcheck.request")),
    # shared arithmetic, the plan's type, sourced constants, the speed figures' types
    ("estimate", ("fitcheck.calibration", "fitcheck.plan.plan", "fitcheck.speed.efficiency",
                  "fitcheck.estimate.verdict", "fitcheck.estimate")),
    # what runs where, and how each engine holds memory, launches and decodes
    ("engines", ("fitcheck.engines",)),
    # a request resolved for a machine
    ("plan", ("fitcheck.plan",)),
    # how fast, and what it costs
    ("speed", ("fitcheck.speed",)),
    # what fits instead, where, which models
    ("search", ("fitcheck.search",)),
    # one request, one pipeline; the commands that reproduce it
    ("pipeline", ("fitcheck.commands", "fitcheck.pipeline", "fitcheck.api", "fitcheck.context")),
    # searches over the whole check: every machine (`where`), every model (`models --fits`)
    ("answers", ("fitcheck.search.where", "fitcheck.search.fits", "fitcheck.search.sweep")),
    # what the user sees, CI formats, measurement
    ("front", ("fitcheck.render", "fitcheck.preflight", "fitcheck.measure")),
    # the command line, the GitHub Action's step that runs it, and the local page's server (`fitcheck serve`
    # parses each query with the commands' own click parsers, so the page and the CLI cannot drift)
    ("cli", ("fitcheck.cli", "fitcheck.__main__", "fitcheck.preflight.action", "fitcheck.serve")),
)


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    if rank < 0:
        raise KeyError(f"{module} is in no layer of dev/layers.py")
    return rank
