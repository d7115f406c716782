"""`fitcheck plot MODEL`: memory against context (or batch) for a few precisions, drawn in the terminal or as SVG."""

from __future__ import annotations

import os
import shutil
import sys

import click

from fitcheck.cli.options import (
    bench_requested,
    complete_model,
    machine_override_options,
    params_option,
    profile_option,
    request_from,
    revision_option,
    typed_for_other_mode,
)
from fitcheck.options import OPTIONS, click_options

DEFAULT_WIDTH = 80
MIN_WIDTH = 20


@click.command("plot")
@click.argument("model", shell_complete=complete_model)
# --download-dir is about the disk: a plot is about memory.
@click_options([o.name for o in OPTIONS if not o.this_machine], help_overrides={
    "precision": "The precision of the first curve (default: check's). Beside it: the machine's 16-bit type, "
                 "an 8-bit and a 4-bit format the same engine runs here (4 curves at most).",
})
@click.option("--against", type=click.Choice(["context", "batch"]), default="context", show_default=True,
              help="The x axis: context (512 doubling to the model's maximum, and --context) or batch "
                   "(1 doubling to 256, and --batch).")
@click.option("--svg", "svg_path", metavar="FILE", default=None,
              help="Also write the chart as a standalone SVG document to FILE ('-': print the SVG instead of "
                   "the text chart).")
@click.option("--ascii", "force_ascii", is_flag=True,
              help="Draw with ASCII characters only (the default when the terminal's encoding cannot show the "
                   "Unicode ones, or TERM=dumb).")
@params_option
@revision_option
@profile_option
@machine_override_options
@click.pass_context
def plot(ctx: click.Context, model: str, against: str, svg_path: str | None, force_ascii: bool, params: str | None,
         revision: str | None, profile: str | None, gpu: str | None = None, vram: str | None = None,
         ram: str | None = None, **options) -> None:
    """Draw the memory MODEL needs against context (or batch), for a few precisions.

    Each curve is the total needed on the busiest device (GiB), exactly as `fitcheck check` computes it at
    that context: the request as given (its precision first), and beside it the machine's 16-bit type, an
    8-bit and a 4-bit format on the same engine. The dashed line is the free memory of that device; the
    marked point on each curve is its largest context (or batch) that fits, the headroom kept. Under the
    chart: each curve's need at the asked context and its largest, then the request as asked as a bar per
    device.

    \b
    Examples:
      fitcheck plot qwen-7b --profile rtx-4090
      fitcheck plot llama-3.1-8b --context 32768 --profile rtx-3060 -p q4_k_m
      fitcheck plot qwen-7b --profile rtx-4090 --against batch --engine vllm
      fitcheck plot mistral-7b --gpu rtx-4090 --svg memory.svg     # also an SVG file
      fitcheck plot qwen-7b --profile rtx-4090 --ascii             # ASCII characters only

    Exit codes: 0 (whatever the verdict), 2 bad input.
    """
    from fitcheck.context import read_context
    from fitcheck.profiles.overrides import load_machine
    from fitcheck.render.charts import can_draw_unicode
    from fitcheck.render.plot import plot_lines, plot_svg
    from fitcheck.search.sweep import sweep

    if svg_path and svg_path != "-":
        from fitcheck.bounded import check_output_target, checked_path

        check_output_target(checked_path(svg_path, "--svg"), "--svg")  # a folder or FIFO: exit 2 before any work
    typed_for_other_mode(ctx, options["mode"])
    request = request_from(options)
    machine = load_machine(profile, gpu=gpu, vram=vram, ram=ram, bench=bench_requested())
    edge = read_context(profile is None and not (gpu or vram or ram))  # this machine's installed stack, as check
    result = sweep(model, request, machine, against=against, params=params, revision=revision, ctx=edge)
    if svg_path == "-":
        click.echo(plot_svg(result), nl=False)
        return
    ascii = force_ascii or os.environ.get("TERM") == "dumb" or not can_draw_unicode(getattr(sys.stdout, "encoding",
                                                                                            None))
    click.echo("\n".join(plot_lines(result, terminal_width(), ascii)))
    if svg_path:
        from fitcheck.bounded import write_regular_file

        write_regular_file(svg_path, plot_svg(result), "--svg")
        click.echo(f"\nWrote the chart to {svg_path} (SVG).")


def terminal_width() -> int:
    """The terminal's columns ($COLUMNS first; 80 when there is no terminal), at least MIN_WIDTH."""
    return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, MIN_WIDTH)
