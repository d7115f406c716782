"""Options shared by several commands, defined once (machine selection, output format)."""

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
