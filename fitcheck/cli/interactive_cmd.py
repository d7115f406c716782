"""`fitcheck interactive` (and plain `fitcheck` on a terminal): ask, answer, then explore.

Asks for the model, mode, precision, context (sequence length for training modes), batch and
machine (and, training on several GPUs or nodes, the sharding: FSDP, else the ZeRO stage), each
with a default and validated (a bad answer is asked again with the reason), shows
the verdict and the alternatives (the same table as `fitcheck check`), then loops: a number
takes that alternative, ``FIELD VALUE`` (``context 8192``, ``precision awq``, ``machine
rtx-4090``) changes one answer, ``q``/``quit``/Ctrl-D ends (exit 0), Ctrl-C ends with exit 130.
A change is checked by the rules the flags follow (fitcheck.options, fitcheck.request, and the
capability table through fitcheck.plan): one the command line would refuse, or that this machine
cannot run, is refused at entry with the reason and what to type instead (``gpus auto``).

The pure part (answers, parsing a change, applying an alternative) is separate from the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import click

from fitcheck.bounded import short_number
from fitcheck.errors import FitcheckError
from fitcheck.options import BY_NAME, DEFAULTS, OPTIONS
from fitcheck.request import Request, base_of_mode
from fitcheck.search.routes import changed_fields

QUIT = ("q", "quit", "exit")
DEFAULT_MODEL = "qwen-7b"
THIS_MACHINE = "this"
HELP = ("Next: a number takes that alternative; FIELD VALUE changes one answer ({fields}); "
        "`show` repeats the table; q quits.")
# The answers besides the request options (fitcheck.options): which model, which machine.
OWN_FIELDS = ("model", "machine")
# Short names people type for an answer, on top of each option's name and flag (fitcheck.options).
_SHORT = {"p": "precision", "ctx": "context", "c": "context", "b": "batch", "profile": "machine",
          "kv": "kv_dtype", "ngl": "gpu_layers", "transformers": "transformers_version",
          "checkpointing": "grad_checkpointing", "rank": "lora_rank"}
SHOWN_FIELDS = ("model", "mode", "precision", "context", "prompt", "batch", "machine", "engine", "kv", "gpus",
                "gpu-layers", "device", "transformers", "optimizer", "checkpointing", "lora-rank", "zero", "fsdp",
                "download-dir")


def _aliases() -> dict[str, str]:
    out = {f: f for f in OWN_FIELDS}
    for opt in OPTIONS:
        out[opt.name] = opt.name
        out[opt.name.replace("_", "-")] = opt.name
        for flag in opt.flags:
            for part in flag.split("/"):
                if not part.startswith("--no-"):
                    out[part.lstrip("-")] = opt.name
    return {**out, **_SHORT}


FIELD_ALIASES = _aliases()


class Invalid(ValueError):
    """An answer that cannot be used; its message is the reason shown before asking again."""


@dataclass(frozen=True)
class Answers:
    """What the session has been told: a model, a machine and a Request (fitcheck.request)."""

    model: str = DEFAULT_MODEL
    machine: str = THIS_MACHINE
    request: Request = Request()

    def get(self, field: str):
        return getattr(self, field) if field in OWN_FIELDS else getattr(self.request, field)

    def with_answer(self, field: str, value) -> Answers:
        if field in OWN_FIELDS:
            return replace(self, **{field: value})
        if field == "context" and self.request.training:
            field = "seq_len"  # the length answer is the sequence length in training modes
        if field == "mode" and value != self.request.mode:
            # Options of the other mode go back to their defaults, and so does a precision the new mode does not
            # take as its base (a GGUF type, or nf4 for lora): the plan picks the mode's default for the machine
            # from the capability table; the sequence length carries over between training modes.
            keep = {n: v for n, v in self.request.option_values().items() if BY_NAME[n].applies(value)}
            if keep.get("precision") is not None and not base_of_mode(keep["precision"], value):
                keep["precision"] = None
            return replace(self, request=Request(**{**keep, "mode": value}))
        request = self.request.with_changes(**{field: value})
        if field != "prompt_tokens" and request.prompt_tokens is not None and request.prompt_tokens > request.context:
            # a shorter context takes the prompt down with it; a prompt typed longer than the context is refused
            request = request.with_changes(prompt_tokens=request.context)
        return replace(self, request=request)

    def changes_from(self, before: Answers) -> list[str]:
        out = [f"{f} {before.get(f)} → {self.get(f)}" for f in OWN_FIELDS if before.get(f) != self.get(f)]
        changed = changed_fields(before.request, self.request)
        mode = self.request.mode
        # answers the new mode does not take went back to their defaults: said once, with what they were
        dropped = [n for n, _ in changed if n in BY_NAME and not BY_NAME[n].applies(mode)] \
            if mode != before.request.mode else []
        out += [f"{typed_name(name)} {_shown(getattr(before.request, name))} → {_shown(new)}"
                for name, new in changed if name not in dropped]
        if dropped:
            out.append(f"reset (not for {mode}): "
                       + ", ".join(f"{typed_name(n)} {_shown(getattr(before.request, n))}" for n in dropped))
        return out


def typed_name(name: str) -> str:
    """How an answer is typed back at the prompt: the option's flag without dashes (gpu-layers, kv-dtype)."""
    opt = BY_NAME.get(name)
    return opt.flag.lstrip("-").split("/")[0] if opt is not None else name


def problem(request: Request, spec: Any, machine: Any) -> str | None:
    """Why ``request`` cannot be checked on ``machine``, by the rules the flags follow: a malformed request
    (exit 2 on the command line) or one the capability table says this machine cannot run; None when it runs."""
    from fitcheck.plan import resolve

    try:
        plan = resolve(request, spec, machine)
    except FitcheckError as exc:
        return exc.one_line()
    return plan.problems[0] if plan.problems else None


def recovery(answers: Answers, spec: Any, machine: Any) -> list[str]:
    """What to type to get a request that runs here: each answer given whose default alone fixes it."""
    out = []
    for name in answers.request.given():
        if name == "mode":
            continue
        default = DEFAULTS[name]
        if problem(answers.request.with_changes(**{name: default}), spec, machine) is None:
            out.append(f"{typed_name(name)} {_shown(default)}")
    return out


def refusal(before: Answers, after: Answers, spec: Any, machine: Any, was: str | None = None) -> str | None:
    """Why the change from ``before`` (whose problem was ``was``) to ``after`` (on ``machine``) is refused at
    entry: a problem it brings that ``before`` did not have, with how to get a request that runs; None when
    it is accepted."""
    why = problem(after.request, spec, machine)
    if why is None or why == was:
        return None
    fixes = recovery(after, spec, machine)
    return why + ("; " + " or ".join(f"`{f}`" for f in fixes) + " runs here" if fixes else "")


def choices(name: str) -> tuple[str, ...]:
    """The choices of option ``name`` (mode, precision, engine, ...), as the vocabulary declares them."""
    return tuple(str(c) for c in BY_NAME[name].choices)


def validate(field: str, text: str, session: Session | None = None):
    """The value of ``field`` typed as ``text``; Invalid with the reason when it is not usable."""
    if field == "model":
        from fitcheck.model.resolve import resolve_model

        try:
            resolved = resolve_model(text)
        except FitcheckError as exc:
            raise Invalid(exc.one_line()) from None
        if session is not None:
            session.models[text.strip()] = resolved
        return text.strip()
    if field == "machine":
        name = text.strip()
        if name.lower() in (THIS_MACHINE, "this machine", "here", "local"):
            return THIS_MACHINE
        from fitcheck.profiles import load_profile

        try:
            machine = load_profile(name)
        except FitcheckError as exc:
            raise Invalid(exc.one_line()) from None
        if session is not None:
            session.machines[name] = machine
        return name
    opt = BY_NAME.get(field)
    if opt is None:
        raise Invalid(f"unknown answer {field!r}")
    if field == "transformers_version" and (text.strip().lower() == "latest" or text.strip().startswith(">=")):
        return None
    try:
        return opt.parse(text)
    except FitcheckError as exc:
        if opt.kind == "choice":
            options = (("auto",) if opt.nullable else ()) + choices(field)
            raise Invalid(f"{text.strip()!r} is not a {field.replace('_', ' ')}; choose one of: "
                          + ", ".join(options)) from None
        if opt.kind == "int" and opt.low is not None:
            training = session is not None and session.answers.request.training
            name = "sequence length" if field == "context" and training else field.replace('_', ' ')
            span = f"from {opt.low:,.0f} to {opt.high:,.0f}" if opt.high is not None else f">= {opt.low:g}"
            raise Invalid(f"the {name} must be a whole number {span}, got {short_number(text.strip())}") from None
        if field == "transformers_version":
            raise Invalid(f"{exc.message}; or auto for 4.45 and later") from None
        raise Invalid(exc.one_line()) from None


def parse_command(line: str, n_alternatives: int, runs: bool = True):
    """What a line typed at the ``>`` prompt asks for:
    ('quit',) | ('show',) | ('help',) | ('alternative', index0) | ('set', field, text); Invalid otherwise.
    ``runs``: whether the request shown runs as asked (what a number with no alternatives is told)."""
    text = line.strip()
    if not text:
        return ("help",)
    low = text.lower()
    if low in QUIT:
        return ("quit",)
    if low in ("show", "s", "again"):
        return ("show",)
    if low in ("help", "h", "?"):
        return ("help",)
    if text.isascii() and text.isdigit():  # "²" is a digit to str.isdigit, not to int()
        n = int(text)
        if not n_alternatives:
            raise Invalid("there are no alternatives to pick (it fits as asked)" if runs else
                          "there are no alternatives to pick: nothing found fits; change an answer "
                          "(e.g. context 2048, or machine NAME)")
        if not 1 <= n <= n_alternatives:
            raise Invalid(f"pick an alternative between 1 and {n_alternatives}")
        return ("alternative", n - 1)
    word, _, rest = text.partition(" ")
    if "=" in word and not rest:
        word, _, rest = word.partition("=")
    field = FIELD_ALIASES.get(word.lower())
    if field is None:
        raise Invalid(f"{word!r} is not an answer to change; try one of: {', '.join(SHOWN_FIELDS)}")
    if not rest.strip():
        raise Invalid(f"give a value: {word} VALUE")
    return ("set", field, rest.strip())


def apply_alternative(answers: Answers, alternative) -> Answers:
    """The answers with an alternative taken: its whole request (typed changes, nothing parsed)."""
    return replace(answers, request=alternative.request)


# --- the session: state plus I/O -------------------------------------------------------------------
class _Quit(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


@dataclass
class Session:
    answers: Answers
    models: dict
    machines: dict
    result: Any = None        # the last CheckResult (fitcheck.pipeline)
    contexts: dict = field(default_factory=dict)

    def machine(self):
        return self.machine_of(self.answers)

    def context(self):
        """What `fitcheck MODEL` reads of the machine (fitcheck.context): the installed stack on this one."""
        name = self.answers.machine
        if name not in self.contexts:
            from fitcheck.context import read_context

            self.contexts[name] = read_context(name == THIS_MACHINE)
        return self.contexts[name]

    def model(self):
        return self.model_of(self.answers)

    def machine_of(self, answers: Answers):
        if answers.machine not in self.machines:
            if answers.machine == THIS_MACHINE:
                from fitcheck.probe import probe

                self.machines[THIS_MACHINE] = probe()
            else:
                from fitcheck.profiles import load_profile

                self.machines[answers.machine] = load_profile(answers.machine)
        return self.machines[answers.machine]

    def model_of(self, answers: Answers):
        if answers.model not in self.models:
            from fitcheck.model.resolve import resolve_model

            self.models[answers.model] = resolve_model(answers.model)
        return self.models[answers.model]


def _read(prompt: str) -> str:
    """One line from the user; Ctrl-D (EOF) quits with 0, Ctrl-C with 130."""
    try:
        line = input(prompt)
    except EOFError:
        click.echo("")
        raise _Quit(0) from None
    except KeyboardInterrupt:
        click.echo("")
        raise _Quit(130) from None
    if line.strip().lower() in QUIT:
        raise _Quit(0)
    return line


def _set_answer(session: Session, field: str, text: str, *, whole: bool = False) -> bool:
    """Validate and store one answer; on a bad one say why and return False.  With ``whole`` (changes at
    the > prompt, once model and machine are known) the whole request is checked as the flags are:
    one this machine cannot run (--gpus 2 on one GPU, AWQ on a CPU) is refused with what runs here."""
    try:
        value = validate(field, text, session)
    except Invalid as exc:
        click.echo(f"  {exc}")
        return False
    after = session.answers.with_answer(field, value)
    from fitcheck.plan import validate_request

    try:
        validate_request(after.request)
    except FitcheckError as exc:
        click.echo(f"  {exc.one_line()}")
        return False
    if whole:
        try:
            spec, machine = session.model_of(after).spec, session.machine_of(after)
            was = problem(session.answers.request, session.model().spec, session.machine())
        except FitcheckError as exc:
            click.echo(f"  {exc.one_line()}")
            return False
        why = refusal(session.answers, after, spec, machine, was)
        if why:
            click.echo(f"  not changed: {why}")
            return False
    session.answers = after
    return True


def _ask(session: Session, field: str, label: str, default: Any) -> None:
    """Ask until the answer is valid; Enter takes the default."""
    while True:
        text = _read(f"{label} [{default}]: ")
        if _set_answer(session, field, text if text.strip() else str(default)):
            return


def _questions(session: Session) -> None:
    """The questions, each an option's prompt from the vocabulary, with its current value as default."""
    _ask(session, "model", "Model (a catalog name, alias or Hugging Face id)", session.answers.model)
    _ask(session, "mode", f"{BY_NAME['mode'].question} ({', '.join(choices('mode'))})", session.answers.request.mode)
    _ask(session, "precision", BY_NAME["precision"].question, _shown(session.answers.request.precision))
    length = "seq_len" if session.answers.request.training else "context"
    mode = session.answers.request.mode
    _ask(session, "context", BY_NAME[length].question_in(mode), session.answers.get(length))
    _ask(session, "batch", BY_NAME["batch"].question_in(mode), session.answers.request.batch)
    _ask(session, "machine", "Machine (this, or a profile name such as rtx-4090; `fitcheck profiles` lists them)",
         session.answers.machine)
    request = session.answers.request
    if request.training and (len(session.machine().gpus) > 1 or request.nodes > 1):
        # Several GPUs (or nodes) to train on: how the model states are sharded over them, FSDP or DeepSpeed
        # (the training default without either is one GPU, or DDP replicas over the nodes).
        _ask(session, "fsdp", BY_NAME["fsdp"].question, request.fsdp or "none")
        if session.answers.request.fsdp is None:
            _ask(session, "zero", BY_NAME["zero"].question, "none" if request.zero is None else request.zero)


def _evaluate(session: Session) -> int:
    """Show the verdict for the current answers; returns how many alternatives can be picked."""
    click.echo("")
    from fitcheck.pipeline import check
    from fitcheck.render.answer import render_check_table
    from fitcheck.render.layout import terminal_width

    try:
        from fitcheck.probe.disk import storage_for

        model, machine, request = session.model(), session.machine(), session.answers.request
        session.result = check(model, request, machine, ctx=session.context(),
                               storage=storage_for(model, session.answers.model, request.download_dir, machine))
    except FitcheckError as exc:
        session.result = None
        click.echo(f"  cannot check: {exc.one_line()} — change an answer" + _recovery_text(session))
        return 0
    # every alternative: a number typed next picks one (fitcheck.render.layout wraps at the terminal's width)
    click.echo(render_check_table(session.result, alternatives=None, width=terminal_width()))
    hint = _recovery_text(session).lstrip(" ;") if session.result.plan.problems else ""
    if hint:
        click.echo(hint[0].upper() + hint[1:])
    return len(session.result.alternatives)


def _recovery_text(session: Session) -> str:
    try:
        fixes = recovery(session.answers, session.model().spec, session.machine())
    except FitcheckError:
        return ""
    return ("; to run it here type " + " or ".join(f"`{f}`" for f in fixes)) if fixes else ""


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "auto" if value is None else str(value)


def _runs(session: Session) -> bool:
    """Whether the request shown runs as asked (False too when it could not be checked)."""
    return session.result is not None and session.result.verdict.runs


def _loop(session: Session) -> None:
    n = _evaluate(session)
    help_line = HELP.format(fields=", ".join(SHOWN_FIELDS))
    click.echo("")
    click.echo(help_line)
    while True:
        line = _read("> ")
        try:
            command = parse_command(line, n, _runs(session))
        except Invalid as exc:
            click.echo(f"  {exc}")
            continue
        if command[0] == "help":
            click.echo(help_line)
            continue
        if command[0] == "show":
            n = _evaluate(session)
            continue
        before = session.answers
        if command[0] == "alternative":
            alt = session.result.alternatives[command[1]]
            try:
                session.answers = apply_alternative(session.answers, alt)
            except Invalid as exc:
                click.echo(f"  {exc}")
                continue
            click.echo(f"Taking {command[1] + 1}. {alt.title}")
        else:
            _, field, text = command
            if not _set_answer(session, field, text, whole=True):
                continue
        changed = session.answers.changes_from(before)
        click.echo("Changed: " + ("; ".join(changed) if changed else "nothing (same answers)"))
        n = _evaluate(session)


@click.command("interactive")
@click.pass_context
def interactive(ctx: click.Context) -> None:
    """Answer a few questions (model, mode, precision, context, batch, machine), see the verdict,
    then try alternatives or change one answer at a time.

    \b
    At the > prompt:
      2                  take alternative 2 (its changes become your answers)
      context 8192       change one answer (also: precision awq, machine rtx-4090, model llama3-8b)
      q, quit, Ctrl-D    leave (exit 0); Ctrl-C leaves with exit 130

    `fitcheck` with no arguments on a terminal starts this too.
    """
    session = Session(Answers(), {}, {})
    click.echo("fitcheck interactive: Enter takes the [default]; q quits.")
    try:
        _questions(session)
        _loop(session)
    except _Quit as stop:
        ctx.exit(stop.code)
