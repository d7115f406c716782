"""``fitcheck profiles``: list the shipped hardware profiles."""

from __future__ import annotations

import click

from fitcheck.cli.options import json_option
from fitcheck.contracts import document_json
from fitcheck.machine import PROFILE_KINDS

KIND_CHOICES = PROFILE_KINDS


@click.command("profiles")
@click.option("--kind", type=click.Choice(KIND_CHOICES, case_sensitive=False), default=None,
              help="Only profiles of this kind.")
@json_option
def profiles(kind: str | None, as_json: bool) -> None:
    """List the hardware profiles fitcheck can answer for (use one with --profile NAME).

    \b
    Examples:
      fitcheck profiles
      fitcheck profiles --kind cloud
      fitcheck probe --profile rtx-4090     # one profile in full

    Prices are indicative on-demand figures with the date they were read.
    """
    from fitcheck.profiles import list_profiles, machines_of_kind

    machines = machines_of_kind(list_profiles(), kind)
    if as_json:

        from fitcheck.render.profiles import profiles_document

        click.echo(document_json(profiles_document(machines), indent=2, ensure_ascii=False))
        return
    from fitcheck.render.profiles import render_profiles

    click.echo(render_profiles(machines) if machines else f"No {kind} profiles.")
