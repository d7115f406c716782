"""Options shared by several commands that are not request options (machine selection, output);
the request options come from the vocabulary (fitcheck.options.click_options)."""

from __future__ import annotations

import click


def profile_option(func):
    """``--profile NAME|PATH``: answer for a described machine instead of probing this one."""
    return click.option(
        "--profile",
        "profile",
        metavar="NAME|PATH",
        default=None,
        help="Answer for a hardware profile (a name from `fitcheck profiles` or a TOML file) "
        "instead of this machine.",
    )(func)


def json_option(func):
    """``--json``: print the versioned JSON document instead of tables."""
    return click.option("--json", "as_json", is_flag=True, help="Print a JSON document instead of tables.")(func)


def load_machine(profile: str | None):
    """The machine to answer for: the named/pathed profile, else this machine probed."""
    if profile:
        from fitcheck.profiles import load_profile

        return load_profile(profile)
    from fitcheck.probe import probe

    return probe()


params_option = click.option(
    "--params", default=None, metavar="COUNT",
    help="For a model fitcheck does not know: its parameter count (7b, 1.5b) for a generic estimate.")


def request_from(values: dict):
    """The Request of a command's parsed options (those that are request options)."""
    from fitcheck.options import BY_NAME
    from fitcheck.request import Request

    return Request(**{k: v for k, v in values.items() if k in BY_NAME})


def typed_for_other_mode(ctx: click.Context, mode: str) -> None:
    """An option typed for the other mode is a mistake to point out, not to ignore."""
    from click.core import ParameterSource

    from fitcheck.options import mode_error, not_applying

    typed = [p.name for p in ctx.command.params
             if p.name and ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE]
    wrong = not_applying(mode, typed)
    if wrong:
        raise click.UsageError(mode_error(mode, wrong).message)
