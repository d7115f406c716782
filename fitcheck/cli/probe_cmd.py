"""``fitcheck probe``: show what this machine (or a hardware profile) has; save it as a profile."""

from __future__ import annotations

import click

from fitcheck.cli.options import json_option, machine_override_options, profile_option, python_env_option
from fitcheck.contracts import document_json
from fitcheck.profiles.overrides import load_machine


@click.command("probe")
@profile_option(bench=False)  # probe measures only when asked (--bench), and then anew
@machine_override_options
@json_option
@click.option("--save", "save_path", metavar="NAME|FILE", default=None,
              help="Also write the machine as a TOML hardware profile: a bare NAME goes to your config folder "
                   "(profiles/NAME.toml; then --profile NAME), FILE anywhere (then --profile FILE).")
@click.option("--bench", is_flag=True,
              help="Also measure RAM bandwidth (a memory copy of 4 × the CPU's last-level cache, 64 MiB to 1 GiB; "
                   "about 0.25 s with 128 MiB on a 2-core VM) for CPU speed estimates, and keep it for later "
                   "answers on this machine.")
@python_env_option
def probe(profile: str | None, as_json: bool, save_path: str | None, bench: bool = False,
          python_envs: tuple[str, ...] = (), gpu: str | None = None, vram: str | None = None,
          ram: str | None = None) -> None:
    """Show what this machine has: RAM, CPU, GPUs, driver, disk.

    \b
    Examples:
      fitcheck probe                         # this machine
      fitcheck probe --json | python -m json.tool
      fitcheck probe --save my-box           # then: fitcheck qwen-7b --profile my-box
      fitcheck probe --save my-box.toml      # a file here: --profile my-box.toml
      fitcheck probe --bench --save my-box.toml  # with measured RAM bandwidth (CPU speeds)
      fitcheck probe --profile h100-sxm      # what a profile describes

    --json prints {"schema": "fitcheck.probe/1", "fitcheck_version": ..., "machine": {...},
    "software": {...}} (schemas/probe.schema.json): facts that could not be read are null, with
    the reason in the sibling "unknown" map of the same object.
    """
    machine = load_machine(profile, gpu=gpu, vram=vram, ram=ram)
    if bench:
        if profile:
            raise click.UsageError("--bench measures this machine; it cannot be combined with --profile")
        from fitcheck.probe import bandwidth_cache
        from fitcheck.probe.bench import measure_bandwidth, with_measured_bandwidth

        reading = measure_bandwidth()
        machine = with_measured_bandwidth(machine, reading)
        if not (gpu or vram or ram):  # this machine as it is: later answers use the reading
            from fitcheck.errors import FitcheckError

            try:
                path = bandwidth_cache.store(machine, reading.bytes_per_s, reading.how)
                kept = f"Kept the measured RAM bandwidth in {path}: later answers for this machine use it"
            except FitcheckError as exc:  # an unwritable cache loses the reading, not the answer
                kept = f"Could not keep the measured RAM bandwidth ({exc.one_line()})"
    software = None
    if profile and python_envs:
        raise click.UsageError("--python-env reads this machine's packages; it cannot be combined with --profile")
    if not (profile or gpu or vram or ram):  # the installed stack describes this machine, never a profile or a what-if
        from fitcheck.engines.stack import check_stack
        from fitcheck.probe.software import read_stack

        software = check_stack(read_stack(extra=tuple(python_envs)), machine)
    if save_path:
        from fitcheck.profiles import save_profile

        written = save_profile(machine, save_path)
    if as_json:

        from fitcheck.render.machine import probe_document

        click.echo(document_json(probe_document(machine, software), indent=2, ensure_ascii=False))
    else:
        from fitcheck.render.machine import render_machine

        click.echo(render_machine(machine, software))
    if bench and not (gpu or vram or ram):
        click.echo(kept, err=True)
    if save_path:
        import shlex

        from fitcheck.user_config import is_bare_name

        use = save_path.strip() if is_bare_name(save_path) else str(written)
        click.echo(f"Saved profile to {written} (use it with --profile {shlex.quote(use)})", err=True)
