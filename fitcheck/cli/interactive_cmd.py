"""`fitcheck interactive` (and plain `fitcheck` on a terminal): ask, answer, then explore.

Asks for the model, mode, precision, context (sequence length for training modes), batch and
machine, each with a default and validated (a bad answer is asked again with the reason), shows
the verdict and the alternatives (the same table as `fitcheck check`), then loops: a number
takes that alternative, ``FIELD VALUE`` (``context 8192``, ``precision awq``, ``machine
rtx-4090``) changes one answer, ``q``/``quit``/Ctrl-D ends (exit 0), Ctrl-C ends with exit 130.

The pure part (answers, parsing a change, applying an alternative) is separate from the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import click

from fitcheck.errors import FitcheckError

QUIT = ("q", "quit", "exit")
DEFAULT_MODEL = "qwen-7b"
THIS_MACHINE = "this"
HELP = ("Next: a number takes that alternative; FIELD VALUE changes one answer ({fields}); "
        "`show` repeats the table; q quits.")

# what a user may type -> the answer it changes
FIELD_ALIASES = {
    "model": "model", "mode": "mode", "precision": "precision", "p": "precision",
    "context": "context", "ctx": "context", "c": "context", "seq-len": "context", "seq_len": "context",
    "prompt": "prompt_tokens", "prompt-tokens": "prompt_tokens", "prompt_tokens": "prompt_tokens",
    "batch": "batch", "b": "batch", "machine": "machine", "profile": "machine",
    "engine": "engine", "kv": "kv_dtype", "kv-dtype": "kv_dtype", "kv_dtype": "kv_dtype",
    "gpus": "gpus", "device": "device", "gpu-layers": "gpu_layers", "ngl": "gpu_layers",
    "transformers": "transformers_version", "transformers-version": "transformers_version",
    "transformers_version": "transformers_version",
    # training modes (full, lora, qlora)
    "optimizer": "optimizer", "grad-accum": "grad_accum", "grad_accum": "grad_accum",
    "checkpointing": "grad_checkpointing", "grad-checkpointing": "grad_checkpointing",
    "grad_checkpointing": "grad_checkpointing", "attention": "attention",
    "lora-rank": "lora_rank", "lora_rank": "lora_rank", "rank": "lora_rank",
    "lora-targets": "lora_targets", "lora_targets": "lora_targets",
    "zero": "zero", "fsdp": "fsdp", "offload": "offload",
}
SHOWN_FIELDS = ("model", "mode", "precision", "context", "prompt", "batch", "machine", "engine", "kv", "gpus", "device",
                "transformers", "optimizer", "checkpointing", "lora-rank", "zero")


class Invalid(ValueError):
    """An answer that cannot be used; its message is the reason shown before asking again."""


@dataclass(frozen=True)
class Answers:
    model: str = DEFAULT_MODEL
    mode: str = "inference"
    precision: str = "auto"
    context: int = 4096
    prompt_tokens: int | None = None          # inference: tokens prefilled (None: the whole context)
    batch: int = 1
    machine: str = THIS_MACHINE
    engine: str = "auto"
    kv_dtype: str = "auto"
    gpus: int | None = None
    device: str = "auto"
    gpu_layers: int | None = None
    transformers_version: str | None = None   # None: 4.45 or later
    # training modes only (TrainingRequest's defaults); `context` is the sequence length there
    grad_accum: int = 1
    optimizer: str = "adamw"
    master_weights: str | None = None
    grad_checkpointing: bool = False
    attention: str | None = None              # None: sdpa for training, the release's default for inference
    lora_rank: int = 16
    lora_targets: str = "all-linear"
    lora_train_embeddings: bool = False
    zero: int | None = None
    fsdp: str | None = None
    offload: str = "none"

    def request(self):
        from fitcheck.estimate.request import InferenceRequest

        return InferenceRequest(precision=None if self.precision == "auto" else self.precision,
                                context=self.context, batch=self.batch, kv_dtype=self.kv_dtype,
                                engine=None if self.engine == "auto" else self.engine, gpus=self.gpus,
                                device=self.device, gpu_layers=self.gpu_layers,
                                transformers_version=self.transformers_version,
                                prompt_tokens=None if self.prompt_tokens is None else min(self.prompt_tokens, self.context),
                                attention=self.attention)

    def training_request(self):
        """The TrainingRequest of a training mode (full, lora, qlora), as `fitcheck check --mode` builds it."""
        from fitcheck.estimate.training_request import TrainingRequest

        return TrainingRequest(
            mode=self.mode, seq_len=self.context, batch=self.batch, grad_accum=self.grad_accum,
            precision=None if self.precision == "auto" else self.precision.lower(), optimizer=self.optimizer,
            master_weights=self.master_weights, grad_checkpointing=self.grad_checkpointing,
            attention=self.attention or "sdpa", lora_rank=self.lora_rank, lora_targets=self.lora_targets,
            lora_train_embeddings=self.lora_train_embeddings, gpus=self.gpus, zero=self.zero, fsdp=self.fsdp,
            offload=self.offload, device=self.device)


# --- choices read from the check command, so options another command adds appear here too ------
def _check_param(name: str):
    from fitcheck.cli.check_cmd import check

    return next((p for p in check.params if p.name == name), None)


def choices(name: str, fallback: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The choices of `fitcheck check`'s option ``name`` (e.g. mode, precision, engine)."""
    param = _check_param(name)
    return tuple(getattr(param.type, "choices", fallback)) if param is not None else fallback


# --- validation: text -> value, or Invalid(reason) ----------------------------------------------
def _choice(text: str, options: tuple[str, ...], what: str) -> str:
    low = text.strip().lower()
    for o in options:
        if o.lower() == low:
            return o
    raise Invalid(f"{text.strip()!r} is not a {what}; choose one of: {', '.join(options)}")


def _on_off(text: str, what: str) -> bool:
    low = text.strip().lower()
    if low in ("on", "yes", "true", "1"):
        return True
    if low in ("off", "no", "false", "0"):
        return False
    raise Invalid(f"{what} is on or off, got {text.strip()!r}")


def _positive(text: str, what: str, minimum: int = 1) -> int:
    raw = text.strip().replace(",", "").replace("_", "")
    shown = text.strip() if len(text.strip()) <= 24 else text.strip()[:21] + "…"
    if raw.lower().endswith("k") and raw[:-1].isascii() and raw[:-1].isdigit() and len(raw) <= 13:
        raw = str(int(raw[:-1]) * 1024)
    # ASCII digits only ('²' is a digit to str.isdigit) and at most 12 of them: bounded before int()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12 or int(raw) < minimum:
        raise Invalid(f"{what} must be a whole number >= {minimum}, got {shown!r}")
    return int(raw)


def validate(field: str, text: str, session: "Session | None" = None):
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
    if field == "mode":
        return _choice(text, choices("mode", ("inference",)), "mode")
    if field == "precision":
        return _choice(text, ("auto", *choices("precision")), "precision")
    if field == "engine":
        return _choice(text, ("auto", *choices("engine")), "engine")
    if field == "kv_dtype":
        return _choice(text, choices("kv_dtype", ("auto",)), "KV-cache type")
    if field == "device":
        return _choice(text, choices("device", ("auto", "gpu", "cpu")), "device")
    if field == "context":
        return _positive(text, "the length in tokens")
    if field == "prompt_tokens":
        return None if text.strip().lower() in ("auto", "all") else _positive(text, "the prompt in tokens")
    if field == "batch":
        return _positive(text, "the batch")
    if field == "gpus":
        return None if text.strip().lower() == "auto" else _positive(text, "the number of GPUs")
    if field == "gpu_layers":
        return None if text.strip().lower() == "auto" else _positive(text, "the GPU layers", 0)
    if field == "transformers_version":
        return _transformers_version(text)
    if field in ("optimizer", "attention", "fsdp", "offload"):
        if field == "fsdp" and text.strip().lower() in ("none", "off"):
            return None
        return _choice(text, choices(field), field)
    if field == "grad_checkpointing":
        return _on_off(text, "gradient checkpointing")
    if field == "grad_accum":
        return _positive(text, "the gradient accumulation")
    if field == "lora_rank":
        return _positive(text, "the LoRA rank")
    if field == "lora_targets":
        from fitcheck.estimate.lora import parse_targets

        try:
            parse_targets(text.strip())
        except FitcheckError as exc:
            raise Invalid(exc.one_line()) from None
        return text.strip()
    if field == "zero":
        if text.strip().lower() in ("none", "off"):
            return None
        return int(_choice(text, choices("zero", ("0", "1", "2", "3")), "ZeRO stage"))
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
    raise Invalid(f"unknown answer {field!r}")


def parse_command(line: str, n_alternatives: int):
    """What a line typed at the ``>`` prompt asks for:
    ('quit',) | ('show',) | ('help',) | ('alternative', index0) | ('set', field, text); Invalid otherwise."""
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
    if text.isdigit():
        n = int(text)
        if not n_alternatives:
            raise Invalid("there are no alternatives to pick (it fits as asked)")
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


def _flag(value: str) -> bool:
    return str(value).lower() in ("on", "true", "yes", "1")


def _transformers_version(text: str) -> str | None:
    """A version such as 4.38.2; auto, latest or >=4.45 mean a current release (None)."""
    from fitcheck.errors import FitcheckError
    from fitcheck.estimate.request import parse_transformers_version

    text = text.strip()
    if text.lower() in ("auto", "latest") or text.startswith(">="):
        return None
    try:
        parse_transformers_version(text)
    except FitcheckError as exc:
        raise Invalid(f"{exc.message}; or auto for 4.45 and later") from None
    return text


_ALT_FIELDS = {"precision": str, "context": int, "prompt_tokens": int, "batch": int, "kv_dtype": str, "gpus": int, "engine": str,
               "device": str, "gpu_layers": int, "transformers_version": _transformers_version,
               # training alternatives (fitcheck.estimate.training_alternatives)
               "mode": str, "grad_accum": int, "optimizer": str, "grad_checkpointing": _flag, "attention": str,
               "lora_rank": int, "lora_targets": str, "lora_train_embeddings": _flag, "zero": int, "fsdp": str,
               "offload": str, "master_weights": str}
_ALT_ALIASES = {"seq_len": "context"}  # a training plan's sequence length is the `context` answer


def apply_alternative(answers: Answers, alternative) -> Answers:
    """The answers with an alternative's changes applied (its plan's changed options)."""
    changes = {}
    for option, value in alternative.changes:
        field = _ALT_ALIASES.get(option, option)
        if field not in _ALT_FIELDS:
            raise Invalid(f"cannot apply the change {option}={value} here")
        changes[field] = _ALT_FIELDS[field](value)
    if changes.get("device") == "cpu":
        changes.setdefault("gpu_layers", None)
    plan = getattr(alternative, "plan", None)
    if "mode" in changes and "precision" not in changes and getattr(plan, "precision", None):
        changes["precision"] = plan.precision  # e.g. full (fp32) -> LoRA on a bf16 base
    if changes.get("zero") is not None:
        changes.setdefault("fsdp", None)
    if changes.get("fsdp") is not None:
        changes.setdefault("zero", None)
    return replace(answers, **changes)


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
    result: object = None

    def machine(self):
        if self.answers.machine not in self.machines:
            if self.answers.machine == THIS_MACHINE:
                from fitcheck.probe import probe

                self.machines[THIS_MACHINE] = probe()
            else:
                from fitcheck.profiles import load_profile

                self.machines[self.answers.machine] = load_profile(self.answers.machine)
        return self.machines[self.answers.machine]

    def model(self):
        if self.answers.model not in self.models:
            from fitcheck.model.resolve import resolve_model

            self.models[self.answers.model] = resolve_model(self.answers.model)
        return self.models[self.answers.model]


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


def _set_answer(session: Session, field: str, text: str) -> bool:
    """Validate and store one answer; on a bad one say why and return False."""
    try:
        value = validate(field, text, session)
    except Invalid as exc:
        click.echo(f"  {exc}")
        return False
    session.answers = replace(session.answers, **{field: value})
    return True


def _ask(session: Session, field: str, label: str, default) -> None:
    """Ask until the answer is valid; Enter takes the default."""
    while True:
        text = _read(f"{label} [{default}]: ")
        if _set_answer(session, field, text if text.strip() else str(default)):
            return


def _length_label(mode: str) -> str:
    return "Context length, tokens (prompt + generated)" if mode == "inference" else "Sequence length, tokens"


def _questions(session: Session) -> None:
    a = session.answers
    _ask(session, "model", "Model (a catalog name, alias or Hugging Face id)", a.model)
    modes = choices("mode", ("inference",))
    _ask(session, "mode", f"Mode ({', '.join(modes)})", a.mode)
    _ask(session, "precision", "Precision (auto, bf16, fp16, int8, awq, gptq-int4, nf4, q8_0, q4_k_m, ...)",
         a.precision)
    _ask(session, "context", _length_label(session.answers.mode), a.context)
    _ask(session, "batch", "Batch (concurrent sequences)", a.batch)
    _ask(session, "machine", "Machine (this, or a profile name such as rtx-4090; `fitcheck profiles` lists them)",
         a.machine)


def _evaluate(session: Session) -> int:
    """Show the verdict for the current answers; returns how many alternatives can be picked."""
    a = session.answers
    click.echo("")
    from fitcheck.check import check_inference, check_training
    from fitcheck.render.check import render_check_table

    try:
        if a.mode == "inference":
            session.result = check_inference(session.model(), a.request(), session.machine())
        else:  # full, lora, qlora: the same CheckResult, with a TrainingPlan and training alternatives
            session.result = check_training(session.model(), a.training_request(), session.machine())
    except FitcheckError as exc:
        session.result = None
        click.echo(f"  cannot check: {exc.one_line()} — change an answer")
        return 0
    click.echo(render_check_table(session.result))
    return len(session.result.alternatives)


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "auto" if value is None else str(value)


def _loop(session: Session) -> None:
    n = _evaluate(session)
    help_line = HELP.format(fields=", ".join(SHOWN_FIELDS))
    click.echo("")
    click.echo(help_line)
    while True:
        line = _read("> ")
        try:
            command = parse_command(line, n)
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
            if not _set_answer(session, field, text):
                continue
        changed = [f"{k} {_shown(getattr(before, k))} → {_shown(getattr(session.answers, k))}"
                   for k in Answers.__dataclass_fields__ if getattr(before, k) != getattr(session.answers, k)]
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
