"""The human answer to one check: the verdict first, then what was asked of which machine, the
breakdown, the largest that fits, speed, download and what fits instead.

By default it fits one screen (``render_check_table``); ``verbose`` gives everything: the table in GiB,
every assumption with its reason, the notes, cost and every alternative. ``brief_line`` is the
verdict in one line. The JSON document of the same result is fitcheck.render.check's.
"""

from __future__ import annotations

from fitcheck.estimate.verdict import CANNOT_RUN, DOES_NOT_FIT, DOES_NOT_FIT_ON_DISK, FITS, TIGHT, UNKNOWN, WORDS
from fitcheck.model.catalog import published_active_params
from fitcheck.pipeline import CheckResult
from fitcheck.plan import TrainingPlan
from fitcheck.render.check import machine_line
from fitcheck.render.cost import check_cost_lines
from fitcheck.render.download import download_lines
from fitcheck.render.layout import Command, fit
from fitcheck.render.software import software_lines
from fitcheck.render.speed import alternative_speed_text, speed_line, training_speed_line
from fitcheck.units import format_count, format_gib, gib


def _link_text(machine) -> str:
    c = machine.cluster
    if c is None or c.inter_node_gbps is None:
        return ", inter-node link not in the profile ([cluster] inter_node_gbps)"
    return f", {c.inter_node} {c.inter_node_gbps:g} GB/s per node between nodes"


def _grouped(pairs: list) -> tuple[list, list[str]]:
    """Consecutive devices with the same need and free memory as one column, labelled GPU0-7."""
    out: list = []
    labels: list[str] = []
    first = ""
    for i, (d, v) in enumerate(pairs):
        same = out and d.kind == "gpu" and out[-1][0].components == d.components \
            and out[-1][1].free_bytes == v.free_bytes and out[-1][0].kind == "gpu"
        if same:
            labels[-1] = f"{first}-{d.device.upper().removeprefix('GPU')}"
            continue
        first = d.device.upper() if d.kind == "gpu" else "RAM per node"
        out.append((d, v))
        labels.append(first)
        del i
    return out, labels


# Alternatives the default answer shows; -v/--verbose shows every one.
SHOWN_ALTERNATIVES = 3


# The default answer shows each note's gist: its first clause, at most this many characters (one row of 80
# columns after "Note: "); -v shows it whole (how an engine holds memory takes 300-400 characters).
NOTE_GIST = 72
# The default answer draws the breakdown as bars when the devices fold into at most this many columns;
# more (a layer split over 8 unequal GPUs) reads better as the table.
MAX_BARS = 3


def render_check_table(result: CheckResult, verbose: bool = False, width: int | None = None,
                       alternatives: int | None = SHOWN_ALTERNATIVES, color: bool = False,
                       ascii: bool = False) -> str:
    """The human answer. By default one screen: the verdict first, what was asked of which machine,
    the breakdown as bars against each device's free memory, the largest that fits, speed, download,
    the best three alternatives, the assumptions that were not in the request line and a pointer to
    what ``verbose`` adds (the table in GiB, every assumption with its reason, the notes, cost, every
    alternative). ``width`` wraps prose at that many columns (commands stay whole); ``alternatives``
    caps the list (None: all, as interactive mode numbers them); ``color`` paints the verdict word and
    ``ascii`` draws the bars without block characters (the edge decides both: fitcheck.render.layout)."""
    shown = None if verbose else alternatives
    lines = _verdict_lines(result, color) + _header_lines(result, verbose) + [""]
    bars = [] if verbose else _bars(result, width, ascii)
    lines += bars or _breakdown_lines(result) + ([""] + _bars(result, width, ascii) if verbose else [])
    lines += ["", _largest_line(result)]
    lines += _speed_lines(result, verbose)
    lines += download_lines(result.download, brief=not verbose)
    costs = check_cost_lines(result)
    if verbose or _cost_asked(result):
        lines += costs
    lines += software_lines(result.software, getattr(result.plan, "engine", None), brief=not verbose)
    if result.launch and result.verdict.status != CANNOT_RUN:
        lines.append("Launch:" if result.verdict.runs else "Launch (as asked, once it fits):")
        lines += [Command(f"  {line}") for line in result.launch]
    lines += _alternatives_lines(result, shown)
    lines += _assumption_lines(result, verbose)
    lines += [f"Note: {note if verbose else gist(note)}" for note in result.estimate.notes]
    if not verbose:
        lines += _more_line(result, shown, costs, table=bool(bars))
    return "\n".join(fit(lines, width))


def brief_line(result: CheckResult) -> str:
    """``--brief``: the verdict in one line, with the largest context, for scripts and shell prompts."""
    plan = result.plan
    length = "sequence" if plan.training else "context"
    largest = f"; largest {length} {result.max_context:,}" if result.max_context else ""
    why = result.verdict.summary().split(": ", 1)[-1]
    chosen = f" as {plan.precision} with {plan.engine} (chosen: the default does not fit)" if result.chosen else ""
    return f"{WORDS[result.verdict.status]}: {result.model_id}{chosen} on {result.machine.name} — {why}{largest}"


def _speed_lines(result: CheckResult, verbose: bool) -> list[str]:
    """The speed of the plan; by default only for a plan that runs (an alternative's speed is its own)."""
    status = result.verdict.status
    if status == CANNOT_RUN or not (verbose or result.verdict.runs):
        return []
    lines = []
    if result.speed is not None:
        lines.append(speed_line(result.speed, result.device_advice, brief=not verbose))
    if result.training_speed is not None:
        lines.append(training_speed_line(result.training_speed, brief=not verbose))
    if not result.verdict.runs:
        lines = [line.replace("Speed:    ", "Speed:    if it fit, ", 1) for line in lines]
    return lines


# Assumptions the Request: line already states (its value is on the line; -v gives the reason), per mode.
_IN_INFERENCE_LINE = frozenset({"mode", "device", "precision", "engine", "gpus", "nodes", "kv_dtype", "context",
                                "batch", "prompt_tokens"})


_IN_TRAINING_LINE = frozenset({"mode", "device", "precision", "gpus", "nodes", "seq_len", "batch", "grad_accum",
                               "optimizer", "grad_checkpointing", "attention", "lora", "lora_rank", "lora_targets",
                               "zero", "fsdp", "offload"})


def _assumption_lines(result: CheckResult, verbose: bool) -> list[str]:
    """Every assumption with its reason and option (verbose), or, by default, only the ones the request
    line does not already show, by name and value: what the answer took for granted that was not asked."""
    assumptions = result.estimate.assumptions
    if verbose:
        return ["", "Assumptions:"] + [f"  {a.name} {a.value} ({a.why}{', ' + a.option if a.option else ''})"
                                       for a in assumptions]
    stated = _IN_TRAINING_LINE if result.plan.training else _IN_INFERENCE_LINE
    hidden = [a for a in assumptions if a.name not in stated]
    if not hidden:
        return []
    return ["", "Assumed:  " + "; ".join(f"{a.name} {a.value} ({_reason(a.why)})" for a in hidden)]


def _reason(why: str, limit: int = 50) -> str:
    """An assumption's reason up to its first ': ' or '; ' ('transformers >= 4.45 assumed', 'from
    generation_config.json'), cut at a word within ``limit`` characters."""
    head = min((i for i in (why.find(": "), why.find("; ")) if i > 0), default=len(why))
    text = why[:head]
    return text if len(text) <= limit else text[:text.rfind(" ", 0, limit)] + " …"


def _cost_asked(result: CheckResult) -> bool:
    """The user asked about cost: --tokens, or a price, period or hours of their own (--kwh-price ...)."""
    from fitcheck.speed.cost import CostSettings

    return bool(result.tokens) or (result.cost is not None and result.cost != CostSettings())


def gist(note: str, limit: int = NOTE_GIST) -> str:
    """``note`` when it is at most ``limit`` characters; else its first clause (up to the first ': ', '; ' or ' ('
    past 30 characters) if that is short enough, else the note cut at a word; '…' marks what -v shows."""
    if len(note) <= limit:
        return note
    cuts = [i for i in (note.find(mark, 30) for mark in (": ", "; ", " (")) if 0 < i <= limit - 2]
    cut = min(cuts) if cuts else note.rfind(" ", 0, limit - 1)
    return note[:cut if cut > 0 else limit - 2] + " …"


def _more_line(result: CheckResult, shown: int | None, costs: list[str], table: bool) -> list[str]:
    """What -v adds, so nothing is hidden without saying so (``table``: the GiB table was drawn as bars)."""
    more = []
    if len(result.estimate.assumptions):
        more.append(f"all {len(result.estimate.assumptions)} assumptions and why")
    if shown is not None and len(result.alternatives) > shown:
        n = len(result.alternatives) - shown
        more.append(f"{n} more alternative{'s' if n > 1 else ''}")
    n = sum(gist(note) != note for note in result.estimate.notes)
    if n:
        more.append(f"{n} note{'s' if n > 1 else ''} in full")
    if costs and not _cost_asked(result):
        more.append("cost")
    if table:
        more.append("the GiB table")
    return [f"More:     -v shows {', '.join(more)}"]


def _bars(result: CheckResult, width: int | None, ascii: bool) -> list[str]:
    """The stacked bars of fitcheck.render.charts, or [] where they would not read better than the table."""
    from fitcheck.render.charts.bar import device_bar_data, device_bars

    if not 0 < len(device_bar_data(result)) <= MAX_BARS:
        return []
    return device_bars(result, width=min(width or 80, 100), ascii=ascii)


def _header_lines(result: CheckResult, verbose: bool = True) -> list[str]:
    """Model:, Machine: and Request: lines (the model's other ids only when verbose)."""
    est, plan, spec = result.estimate, result.plan, result.spec
    params = f"{format_count(spec.total_params)} params"
    if spec.is_moe:
        params += f", {format_count(published_active_params(spec, getattr(result.model, 'entry', None)))} active"
    generic = " — GENERIC dense estimate (architecture assumed)" if spec.generic else ""
    arch = f", {spec.architecture}" if spec.architecture else ""
    lines = [f"Model:    {result.model_id} ({params}{arch}){generic}"]
    note = result.model.note or ""
    if not verbose:  # the other ids a name could mean are for -v (and `fitcheck models NAME`), the id is above
        note = "; ".join(part for part in note.split("; ")
                         if not part.startswith("also: ") and not _alias_of(part, result.model_id))
    if note:
        lines.append(f"          {note}")
    lines.append(f"Machine:  {machine_line(result.machine)}")
    if plan.nodes > 1:
        lines.append(f"          × {plan.nodes} nodes{_link_text(result.machine)}")
    where = {"gpu": f"{plan.gpus} GPU{'s' if plan.gpus > 1 else ''}", "cpu": "CPU",
             "offload": f"GPU + CPU ({plan.offload_flag})"}[plan.device]
    if plan.nodes > 1:
        where = f"{plan.nodes} nodes × {where}"
    layout = getattr(plan, "layout", "")
    if layout:
        where += f" ({layout})"
    if plan.training:
        lines.append(f"Request:  {_training_line(plan, where)}")
    else:
        lines.append(f"Request:  {est.mode}, {plan.precision}, {plan.engine} on {where}, "
                     f"context {plan.context:,} tokens"
                     + (f" (prompt {plan.prompt_tokens:,})" if plan.prompt_tokens != plan.context else "")
                     + f", batch {plan.batch}, KV cache {plan.kv_dtype}")
    return lines


def _alias_of(part: str, model_id: str) -> bool:
    """'qwen-7b → Qwen/Qwen2.5-7B-Instruct': a name that means the id the Model: line already shows."""
    name, arrow, target = part.partition(" → ")
    return bool(arrow) and target == model_id and " " not in name


def _breakdown_lines(result: CheckResult) -> list[str]:
    """The table of GiB per component and device, with what each device has free."""
    from tabulate import tabulate

    est = result.estimate
    names: list[str] = []
    for d in est.devices:
        for c in d.components:
            if c.name not in names:
                names.append(c.name)
    shown = list(zip(est.devices, result.verdict.devices, strict=False))
    labels = [d.device.upper() if d.kind == "gpu" else "CPU (RAM)" for d in est.devices]
    if result.plan.nodes > 1:  # identical GPUs side by side (a pipeline stage, a node) as one column
        shown, labels = _grouped(shown)
    rows = [[n] + [_gib(d.component(n)) for d, _ in shown] for n in names]
    rows.append(["peak allocated"] + [_gib(d.peak_allocated_bytes) for d, _ in shown])
    rows.append(["total needed"] + [_gib(d.total_bytes) for d, _ in shown])
    rows.append(["free"] + [_gib(dv.free_bytes) if dv.free_bytes is not None else "unknown" for _, dv in shown])
    return [tabulate(rows, headers=["GiB"] + labels, tablefmt="simple", disable_numparse=True,
                     colalign=("left",) + ("right",) * len(shown))]


def _verdict_lines(result: CheckResult, color: bool = False) -> list[str]:
    """Verdict: and its reasons, the serving engine's KV pool, a better layout."""
    from fitcheck.preflight.lines import paint

    status = result.verdict.status
    headroom = "" if status in (CANNOT_RUN, DOES_NOT_FIT_ON_DISK, TIGHT) else f" (headroom {result.headroom:.0%})"
    lines = [f"Verdict:  {paint(WORDS[status], status, color)} — {result.verdict.summary().split(': ', 1)[-1]}"
             f"{headroom}"]
    for extra in result.verdict.reasons[1:]:
        if status == DOES_NOT_FIT_ON_DISK and extra.startswith("memory: "):
            extra += f" (headroom {result.headroom:.0%})"
        lines.append(f"          {extra}")
    pool = result.estimate.pool
    if pool is not None and status != CANNOT_RUN:
        lines.append(f"          {pool.title} KV pool: {pool.kv_pool_tokens:,} tokens"
                     + (f" over {pool.ranks} data-parallel ranks" if pool.ranks else "")
                     + f", maximum concurrency {pool.max_concurrency}× at {result.plan.context:,}"
                     + (f": {max(int(pool.max_concurrency), 1)} of the {result.plan.batch} sequences asked run at "
                        "once, the rest queue" if status != DOES_NOT_FIT and pool.max_concurrency < result.plan.batch
                        else ""))
    better = result.better_layout
    if better is not None:
        lines += [f"          {better.title}:", Command(f"            {better.fitcheck_command}")]
    return lines + _chosen_lines(result)


def _chosen_lines(result: CheckResult) -> list[str]:
    """Chosen: the weights fitcheck picked because the default does not fit, what the default needs, and the
    option that asks for it (pipeline.Chosen)."""
    c = result.chosen
    if c is None:
        return []
    plan = result.plan
    return [f"Chosen:   {plan.precision} with {plan.engine}, the best that fits: the default, {c.precision} with "
            f"{c.engine}, does not "
            f"({c.summary.split(': ', 1)[-1]}; --precision {c.precision} --engine {c.engine} asks for it)"]


def _largest_line(result: CheckResult) -> str:
    """Largest that fits: the longest context (sequence) and the largest batch."""
    plan, status = result.plan, result.verdict.status
    if status == UNKNOWN:
        return "Largest that fits: unknown until the free memory above can be read"
    if status == CANNOT_RUN:
        return "Largest that fits: nothing — this machine cannot run the request as asked"
    if isinstance(plan, TrainingPlan):
        seq = f"sequence {result.max_context:,} tokens" if result.max_context else "no sequence length"
        seq += _past_maximum(result, plan.seq_len)
        mb = f"micro-batch {result.max_batch:,}" if result.max_batch else "no micro-batch"
        return f"Largest that fits: {seq} at micro-batch {plan.batch}; {mb} at {plan.seq_len:,} tokens"
    if result.max_context or result.max_batch:
        ctx = f"context {result.max_context:,} tokens" if result.max_context else "no context"
        ctx += _past_maximum(result, plan.context)
        bat = f"batch {result.max_batch:,}" if result.max_batch else "no batch"
        return f"Largest that fits: {ctx} at batch {plan.batch}; {bat} at {plan.context:,} tokens"
    if status == TIGHT:
        return (f"Largest that fits: nothing outside the {result.headroom:.0%} headroom, not even 1 token or "
                "1 sequence (the request as asked fits only inside it)")
    return "Largest that fits: nothing at these settings (not even 1 token or 1 sequence)"


def _alternatives_lines(result: CheckResult, shown: int | None = None) -> list[str]:
    """What fits instead, each with its two commands (the first ``shown``; None: all); or why nothing does."""
    status = result.verdict.status
    if result.alternatives:
        lines = ["", "What runs here instead (best first):" if status == CANNOT_RUN
                 else "What fits instead (best first):"]
        for i, a in enumerate(result.alternatives[:shown], 1):
            need = _needs_line(a.estimate.devices, per_node=a.estimate.nodes > 1)
            if status == DOES_NOT_FIT_ON_DISK and a.download is not None:
                need += f"; download {format_gib(a.download.download_bytes)}"
            tight = " (tight)" if a.verdict.status == TIGHT else ""
            pool = a.estimate.pool
            if pool is not None:  # a pooled engine needs its reservation whatever it holds: what its pool buys
                need += (f"; KV pool {pool.kv_pool_tokens:,} tokens, {pool.max_concurrency}× at "
                         f"{getattr(a.plan, 'context', 0):,}")
            speed = alternative_speed_text(a.speed)
            speed = f"; {speed}" if speed else ""
            lines += [f"  {i}. {a.title}{tight} — needs {need}{speed}", Command(f"     {a.fitcheck_command}"),
                      Command(f"     {a.engine_command}")]
        return lines
    if status == DOES_NOT_FIT_ON_DISK:
        return ["", "Nothing smaller fits on this disk: free space there, or --download-dir PATH on a disk with room."]
    if status in (DOES_NOT_FIT, CANNOT_RUN):
        disk = "" if result.download is None or result.download.fits else \
            " with a download that fits on this disk (or --download-dir PATH on a disk with room)"
        return ["", f"{nothing_fits(result.plan, result.profile)}{disk}; "
                "`fitcheck profiles` lists machines to try with --profile NAME."]
    return []


def _past_maximum(result: CheckResult, asked: int) -> str:
    """The search stops at the model's maximum length (fitcheck.estimate.context_limit.search_limit): when
    the length asked is past it and fits, say so beside that figure rather than seem to contradict the
    verdict ("largest 32,768" beside FITS at 200,000)."""
    limit = result.spec.max_context
    if limit is None or result.max_context != limit or asked <= limit or result.verdict.status != FITS:
        return ""
    return f" (the model's maximum; {asked:,} as asked fits in memory too)"


def nothing_fits(plan, profile: str | None = None) -> str:
    """What was tried before saying nothing fits: the levers of inference, of GPU or of CPU training;
    on the --profile machine when the answer is for one."""
    where = f"on {profile}" if profile else "on this machine"
    if not plan.training:
        return f"Nothing fits {where}, even quantized or offloaded"
    if plan.device == "cpu":
        return f"Nothing fits {where}, even with LoRA, gradient checkpointing or a shorter sequence"
    return f"Nothing fits {where}, even with LoRA or QLoRA, gradient checkpointing, offload or a shorter sequence"


def _needs_line(devices, per_node: bool = False) -> str:
    """'GPU0 9.22 GiB, RAM 0.40 GiB'; equal GPUs folded: '45.61 GiB on each of 8 GPUs, RAM 0.62 GiB'
    ('RAM ... per node' over several nodes)."""
    gpus = [d for d in devices if d.kind == "gpu" and d.total_bytes]
    parts = []
    if len(gpus) > 1 and max(d.total_bytes for d in gpus) - min(d.total_bytes for d in gpus) < 2**30 // 10:
        parts.append(f"{_gib(max(d.total_bytes for d in gpus))} GiB on each of {len(gpus)} GPUs")
    else:
        parts += [f"{d.device.upper()} {_gib(d.total_bytes)} GiB" for d in gpus]
    parts += [f"RAM {_gib(d.total_bytes)} GiB{' per node' if per_node else ''}" for d in devices
              if d.kind == "cpu" and d.total_bytes]
    return ", ".join(parts)


def _gib(n: int | None) -> str:
    """A table cell in GiB (the column header says GiB)."""
    return "-" if n is None else gib(n)


def _training_line(plan, where: str) -> str:
    if plan.device == "cpu":
        where = "on the CPU"
    parts = [f"{plan.mode} fine-tuning, {plan.precision} base, {where}", f"sequence {plan.seq_len:,} tokens",
             f"micro-batch {plan.batch} × accumulation {plan.grad_accum}", plan.optimizer,
             "checkpointing on" if plan.grad_checkpointing else "checkpointing off", f"{plan.attention} attention"]
    if plan.mode != "full":
        parts.append(f"LoRA r={plan.lora_rank} on {plan.lora_targets}")
    if plan.zero is not None:
        parts.append(f"ZeRO-{plan.zero}")
    if plan.fsdp:
        parts.append(f"FSDP {plan.fsdp}")
    if plan.offload != "none":
        parts.append(f"offload {plan.offload}")
    return ", ".join(parts)
