"""The query of a `fitcheck serve` request as the command line it means, parsed by that command's own click parser:
``context=8192`` -> ``--context=8192``, a flag ``strict=1`` -> ``--strict``, ``model=qwen-7b`` -> ``-- qwen-7b``; every
type, range, choice, envvar and callback is the CLI's.  Which options each endpoint takes, and which it refuses
(files, output formats), is here too."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import click

from fitcheck.errors import EXIT_BAD_INPUT

ON = ("on", "yes", "true", "1")
OFF = ("off", "no", "false", "0")


class ApiError(Exception):
    """A request the API refuses: ``status`` and the one line the answer's "error" says."""

    def __init__(self, status: int, message: str, exit_code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.status = status
        self.message = message
        self.exit_code = exit_code


@dataclass(frozen=True)
class Param:
    """One query parameter: the click parameter it sets."""

    query: str                  # the name in the query string
    param: click.Parameter
    flag: str | None            # the long option (None: the command's argument)
    off: str | None = None      # the --no-X of a flag pair

    @property
    def is_flag(self) -> bool:
        return isinstance(self.param, click.Option) and self.param.is_flag

    @property
    def multiple(self) -> bool:
        return bool(getattr(self.param, "multiple", False))


def params_of(command: click.Command, exclude: Iterable[str] = (), argument: str = "model") -> dict[str, Param]:
    """The query parameters of ``command``: each option by its long flag without dashes, its argument as
    ``argument``; ``exclude`` names click parameters the server does not take (files, output formats)."""
    left_out = set(exclude)
    out: dict[str, Param] = {}
    for p in command.params:
        if p.name in left_out or not p.expose_value:
            continue
        if isinstance(p, click.Argument):
            out[argument] = Param(argument, p, None)
            continue
        long = next(o for o in p.opts if o.startswith("--"))
        off = next((o for o in p.secondary_opts if o.startswith("--")), None)
        out[long[2:]] = Param(long[2:], p, long, off)
    return out


def _flag_value(p: Param, value: str) -> bool | None:
    """A flag's query value: on/off (1/0, yes/no, true/false); None: the default (a pair's "auto")."""
    from fitcheck.options import BY_NAME

    opt = BY_NAME.get(p.param.name or "")
    if opt is not None and opt.kind == "flag":
        return opt.parse(value)           # FitcheckError: "--grad-checkpointing is on or off, got 'x'"
    low = value.strip().lower()
    if low in ON or low in OFF:
        return low in ON
    raise ApiError(400, f"{p.flag} is on or off, got {value[:40]!r}")


def argv_of(params: dict[str, Param], query: list[tuple[str, str]], fixed: Iterable[str] = (),
            command: click.Command | None = None) -> list[str]:
    """The command line the query means (``fixed`` first): an empty value is the option not given; a name given
    twice is refused unless the option repeats (``require``); an option of ``command`` the server does not take
    (a file, an output format) is refused as such."""
    seen: set[str] = set()
    argv = list(fixed)
    argument: str | None = None
    for name, value in query:
        p = params.get(name)
        if p is None:
            raise ApiError(400, _not_taken(command, name) or unknown_parameter(name, params))
        if name in seen and not p.multiple:
            raise ApiError(400, f"parameter {name!r} is given more than once")
        seen.add(name)
        if value == "":
            continue
        if p.flag is None:
            argument = value
        elif p.is_flag:
            on = _flag_value(p, value)
            if on is not None and (on or p.off):
                argv.append(p.flag if on else str(p.off))
        else:
            argv.append(f"{p.flag}={value}")
    return argv + (["--", argument] if argument is not None else [])


def _not_taken(command: click.Command | None, name: str) -> str | None:
    """The refusal of a parameter ``command`` has but the server does not take, else None."""
    if command is None:
        return None
    for p in command.params:
        if isinstance(p, click.Option) and f"--{name}" in (*p.opts, *p.secondary_opts):
            return (f"parameter {name!r} ({p.opts[0]}) is the command line's: the server reads no files, writes none "
                    "and answers in one format")
    return None


def unknown_parameter(name: str, params: Iterable[str]) -> str:
    close = difflib.get_close_matches(name.lower(), list(params), n=1, cutoff=0.5)
    shown = name if len(name) <= 60 else name[:60] + "…"
    return f"unknown parameter {shown!r}" + (f" (did you mean: {close[0]})" if close else "")


def parse(command: click.Command, argv: list[str]) -> click.Context:
    """``argv`` parsed by ``command``'s own parser, as `fitcheck NAME ...` parses it (under the group)."""
    from fitcheck.cli import cli

    parent = click.Context(cli, info_name="fitcheck")
    return command.make_context(command.name, argv, parent=parent)


@contextmanager
def usage_errors_of(ctx: click.Context) -> Iterator[None]:
    """Within the block, a click.UsageError raised without a context gets ``ctx`` (click's augment_usage_errors
    does the same when a command runs), so its line names the command as the CLI's does."""
    try:
        yield
    except click.UsageError as exc:
        if exc.ctx is None:
            exc.ctx = ctx
        raise


# ---- what each endpoint takes ----------------------------------------------------------------------------
def check_command():
    from fitcheck.cli.check_cmd import check

    return check


# `fitcheck check` options the server does not take: files (--plan, --output, --python-env, --download-dir), the
# output's form (--json, --format, -v, --brief: the document is complete), and --no-bench (it never measures).
CHECK_EXCLUDED = ("plan_file", "output", "python_envs", "fmt", "as_json", "download_dir", "verbose", "brief",
                  "no_bench")
WHERE_EXCLUDED = ("as_json", "verbose")
FITS_TAKEN = ("query", "family", "kind", "show_all", "profile", "mode", "context", "batch", "engine", "seq_len",
              "headroom", "sort", "top", "min_speed", "local")
PLOT_EXCLUDED = ("svg_path", "force_ascii", "no_bench")
PROBE_EXCLUDED = ("as_json", "save_path", "bench", "python_envs")


def check_params() -> dict[str, Param]:
    return params_of(check_command(), CHECK_EXCLUDED)


def fits_params() -> dict[str, Param]:
    from fitcheck.cli.models_cmd import models

    taken = set(FITS_TAKEN)
    return params_of(models, [p.name for p in models.params if p.name not in taken], argument="q")


def plot_params() -> dict[str, Param]:
    from fitcheck.cli.plot_cmd import plot

    return params_of(plot, PLOT_EXCLUDED)
