"""The ``fitcheck`` command: a thin click layer over the Python API.

Commands live in their own modules and are imported only when used, so ``fitcheck --help`` and
``fitcheck MODEL`` import nothing they do not need (no pynvml, no tabulate at start-up).
``fitcheck MODEL`` is shorthand for ``fitcheck check MODEL``.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from fitcheck import __version__
from fitcheck.cli.terminal import safe_streams
from fitcheck.errors import EXIT_BAD_INPUT, EXIT_INTERNAL_ERROR, FitcheckError, redact_credentials
from fitcheck.user_config import check_path_variables

# name -> (module, attribute, one-line help shown by `fitcheck --help` without importing it)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "check": ("fitcheck.cli.check_cmd", "check", "Will MODEL run (or train) here? The default command."),
    "probe": ("fitcheck.cli.probe_cmd", "probe", "Show what this machine has: RAM, CPU, GPUs, disk."),
    "profiles": ("fitcheck.cli.profiles_cmd", "profiles", "List the hardware profiles fitcheck can answer for."),
    "models": ("fitcheck.cli.models_cmd", "models", "Search the model catalog, or show one model's spec."),
    "where": ("fitcheck.cli.where_cmd", "where", "Which hardware profiles run MODEL, how fast, at what cost."),
    "interactive": ("fitcheck.cli.interactive_cmd", "interactive",
                    "Ask model, precision, context, batch and machine; explore the alternatives."),
    "measure": ("fitcheck.cli.measure_cmd", "measure",
                "Run MODEL here with random weights and set the measured peak beside the estimate."),
    "plot": ("fitcheck.cli.plot_cmd", "plot", "Draw MODEL's memory against context (or batch) for a few precisions."),
    "serve": ("fitcheck.cli.serve_cmd", "serve", "Answer in a web page on this machine: a local server (127.0.0.1)."),
}
DEFAULT_COMMAND = "check"


class LazyDefaultGroup(click.Group):
    """A group whose commands load on first use and whose unknown first word means `check`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, (module, _, _) in COMMANDS.items() if _module_exists(module))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        # The core's one error type becomes one line on stderr and its exit code, here, so the
        # console script and CliRunner tests behave the same.
        given = ctx.meta.get("fitcheck.args", [])
        try:
            return super().invoke(ctx)
        except FitcheckError as exc:
            click.echo(f"fitcheck: {redact_credentials(exc.one_line())}", err=True)
            _bad_input_annotation(given, redact_credentials(exc.one_line()))
            ctx.exit(exc.exit_code)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # `fitcheck qwen-7b ...` and `fitcheck --strict qwen-7b ...` mean `fitcheck check ...`:
        # anything but a command name or the group's own options starts a `check`.
        ctx.meta["fitcheck.args"] = list(args)  # for the --format github annotation of bad input
        own = {"--help", "-h", "--version"}
        if args and args[0] not in COMMANDS and args[0] not in own:
            _refuse_mistyped_command(args[0])
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Run; in standalone mode every error is one line on stderr and an exit code.

        Usage errors (a bad flag or value) are bad input: exit 2, with click's suggestion kept
        ("No such option: --contex (Possible options: --context)").
        """
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        args = list(sys.argv[1:] if args is None else args)
        debug = _take_debug_flag(args) or os.environ.get("FITCHECK_DEBUG", "") not in ("", "0")
        with safe_streams():
            self._main(args, prog_name, complete_var, debug, **extra)

    def _main(self, args: list[str], prog_name, complete_var, debug: bool, **extra) -> None:
        try:
            check_path_variables()
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except FitcheckError as exc:
            click.echo(f"fitcheck: {redact_credentials(exc.one_line())}", err=True)
            _bad_input_annotation(args, redact_credentials(exc.one_line()))
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("fitcheck: aborted", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            line = usage_error_line(exc)
            click.echo(f"fitcheck: {line}", err=True)
            _bad_input_annotation(args, line)
            sys.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            click.echo("fitcheck: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            sys.exit(0)
        except Exception as exc:  # a bug: its own exit code, never 1 ("does not fit") or 2
            _report_internal_error(exc, _command_of(args), debug)
            sys.exit(EXIT_INTERNAL_ERROR)
        sys.exit(rv if isinstance(rv, int) else 0)


def usage_error_line(exc: click.ClickException) -> str:
    """The one line (after 'fitcheck: ') that bad usage prints: the command, then click's message on one line
    ("check: Invalid value for '--context' / '-c': ..."); `fitcheck serve` answers the same line."""
    failed = getattr(exc, "ctx", None)   # a UsageError's context
    where = f"{failed.command_path}: " if failed and failed.command_path != "fitcheck" else ""
    return redact_credentials(f"{where.removeprefix('fitcheck ')}{' '.join(exc.format_message().split())}")


def _refuse_mistyped_command(word: str) -> None:
    """`fitcheck chek qwen-7b`: a plain word close to a command name, and no model, is a typo."""
    import difflib

    if not word.isalpha() or len(word) < 3:
        return
    close = difflib.get_close_matches(word.lower(), list(COMMANDS), n=1, cutoff=0.75)
    if not close:
        return
    from fitcheck.model.resolve import _known

    if _known(word) is None:
        raise click.UsageError(f"no command {word!r} (did you mean: {close[0]})")


def _bad_input_annotation(args: list[str], line: str) -> None:
    """With --format github, bad input is an ::error annotation too (stdout, where the runner reads
    workflow commands), so a mistyped model in a CI step shows on the run's summary, not only in its log."""
    end = args.index("--") if "--" in args else len(args)
    given = args[:end]
    github = "--format=github" in given or any(a == "--format" and b == "github"
                                                     for a, b in zip(given, given[1:], strict=False))
    if github:
        from fitcheck.preflight.github import annotation

        click.echo(annotation("error", "fitcheck: bad input", line))


def _take_debug_flag(args: list[str]) -> bool:
    """Remove ``--debug`` (before any ``--``) from ``args``; whether it was there."""
    end = args.index("--") if "--" in args else len(args)
    found = "--debug" in args[:end]
    if found:
        args[:] = [a for a in args[:end] if a != "--debug"] + args[end:]
    return found


def _command_of(args: list[str]) -> str:
    return args[0] if args and args[0] in COMMANDS else DEFAULT_COMMAND


def _report_internal_error(exc: BaseException, command: str, debug: bool) -> None:
    """One line naming the command and asking for a report; the traceback only when debugging."""
    if debug:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    from fitcheck.errors import redact_credentials

    detail = redact_credentials(" ".join(str(exc).split()))[:200]
    click.echo(f"fitcheck {command}: internal error ({type(exc).__name__}{': ' + detail if detail else ''}); "
               f"this is a bug in fitcheck: please report it with the command line"
               f"{'' if debug else ' and the output of --debug (or FITCHECK_DEBUG=1)'}", err=True)


def _module_exists(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@click.group(cls=LazyDefaultGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="fitcheck")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Will this model run (or train) on this machine, and if not, what will?

    \b
    Examples:
      fitcheck qwen-7b                      # inference, this machine
      fitcheck llama3-8b --profile rtx-4090  # for a machine you do not have
      fitcheck probe                        # what this machine has
      fitcheck models qwen                  # what the catalog knows

    Exit codes: 0 fits, 1 does not fit (or tight with --strict), 2 bad input, 3 unknown, 70 internal error
    (--debug or FITCHECK_DEBUG=1 prints its traceback).
    """
    if ctx.invoked_subcommand is None:
        if "interactive" in COMMANDS and sys.stdin.isatty() and _module_exists(COMMANDS["interactive"][0]):
            command = cli.get_command(ctx, "interactive")
            assert command is not None
            ctx.invoke(command)
        else:
            click.echo(ctx.get_help())


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one clear line and exit 2 for bad input, never a traceback."""
    cli.main(args=argv, prog_name="fitcheck")
