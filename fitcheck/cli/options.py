"""Options shared by several commands, defined once (machine selection, output format).

Settings a user keeps for every run can come from the environment instead of the command line
(the command line wins): FITCHECK_PROFILE, FITCHECK_NO_BENCH, FITCHECK_GPU, FITCHECK_VRAM, FITCHECK_RAM here, and
FITCHECK_PRECISION, FITCHECK_ENGINE, FITCHECK_KV_DTYPE, FITCHECK_HEADROOM and
FITCHECK_TRANSFORMERS_VERSION declared with their options in fitcheck.options (click's ``envvar``;
``--help`` names each one).
"""

from __future__ import annotations

import click

from fitcheck.options import finite_float_range


def profile_option(func=None, *, bench: bool = True):
    """``--profile NAME|PATH``: answer for a described machine instead of probing this one; with ``bench`` (the
    commands that answer with a speed: check, models --fits) also ``--no-bench`` (:func:`no_bench_option`).
    Usable bare (``@profile_option``) or called (``@profile_option(bench=False)``, `fitcheck probe`)."""
    def apply(f):
        f = no_bench_option(f) if bench else f  # applied first: listed after --profile
        return click.option(
            "--profile",
            "profile",
            metavar="NAME|PATH",
            default=None,
            envvar="FITCHECK_PROFILE",
            show_envvar=True,
            shell_complete=complete_profile,
            help="Answer for a hardware profile (a name from `fitcheck profiles`, yours from `probe --save NAME`, "
            "or a TOML file) instead of this machine.",
        )(f)

    return apply if func is None else apply(func)


# ---- measuring this machine's RAM bandwidth once, for its CPU speed (fitcheck.probe.bench) -----------
BENCH_META = "fitcheck.bench"  # click's ctx.meta key: whether the running command may measure RAM bandwidth


def _record_bench(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    ctx.meta[BENCH_META] = not value
    return value


def no_bench_option(func):
    """``--no-bench`` (FITCHECK_NO_BENCH): the machine loading (fitcheck.profiles.overrides.load_machine) reads
    it through :func:`bench_requested`, so a command need not pass it on."""
    return click.option(
        "--no-bench", "no_bench", is_flag=True, envvar="FITCHECK_NO_BENCH", show_envvar=True, expose_value=False,
        callback=_record_bench,
        help="On this machine without a RAM-bandwidth reading, do not measure it now (a memory copy of about "
             "0.25 s, at most about 0.5 s, done once and kept for later answers; `fitcheck probe --bench` "
             "measures it anew): its CPU speed stays unknown.")(func)


def bench_requested() -> bool:
    """Whether the running command measures this machine's RAM bandwidth when no reading is known: it has
    ``--no-bench`` and neither it nor FITCHECK_NO_BENCH is set.  False outside a command (library callers)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(BENCH_META, False))


def complete_profile(ctx, param, incomplete: str):
    """Shell completion of --profile: the saved and shipped profile names."""
    from fitcheck.cli.completion import profile_completions

    return profile_completions(incomplete)


def complete_model(ctx, param, incomplete: str):
    """Shell completion of MODEL: catalog ids and aliases, and the user's extra models."""
    from fitcheck.cli.completion import model_completions

    return model_completions(incomplete)


def json_option(func):
    """``--json``: print the versioned JSON document instead of tables."""
    return click.option("--json", "as_json", is_flag=True, help="Print a JSON document instead of tables.")(func)


def machine_override_options(func):
    """``--gpu [Nx]NAME``, ``--vram [Nx]SIZE``, ``--ram SIZE``: "what if I had ..." without a TOML file
    (passed to :func:`load_machine` as ``gpu``, ``vram``, ``ram``)."""
    opts = [
        click.option("--gpu", "gpu", metavar="[Nx]NAME", default=None, envvar="FITCHECK_GPU", show_envvar=True,
                     shell_complete=complete_profile,
                     help="Answer as if the GPUs were N of this one from the profile catalogue (a profile such "
                          "as rtx-4090, or a GPU model such as \"H100\").", ),
        click.option("--vram", "vram", metavar="[Nx]SIZE", default=None, envvar="FITCHECK_VRAM", show_envvar=True,
                     help="Answer as if every GPU had SIZE of memory, all free (24GiB; 2x24GiB for two GPUs)."),
        click.option("--ram", "ram", metavar="SIZE", default=None, envvar="FITCHECK_RAM", show_envvar=True,
                     help="Answer as if the machine had SIZE of RAM installed (available: minus the OS allowance)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


# ---- options that are not request options (the request options come from fitcheck.options) ---------
def _shared_option(*decls, **attrs):
    """A decorator usable bare (``@params_option``) or called with overrides of click.option's settings."""
    def decorator(func=None, **overrides):
        def apply(f):
            return click.option(*decls, **{**attrs, **overrides})(f)

        return apply if func is None else apply(func)

    return decorator


params_option = _shared_option(
    "--params", default=None, metavar="COUNT",
    help="For a model fitcheck does not know: its parameter count (7b, 1.5b) for a generic estimate.")


# ---- what it costs (fitcheck.estimate.cost), shared by `check` and `where` -------------------------
def _count(ctx, param, value):
    """--tokens 100M -> 100000000 (k, M, B, T suffixes)."""
    if value is None:
        return None
    from fitcheck.units import parse_count

    try:
        n = parse_count(value)
    except ValueError:
        raise click.BadParameter(f"expected a token count like 100M, 2.5B or 500000, got {value!r}") from None
    if n < 1:
        raise click.BadParameter(f"expected at least 1 token, got {value!r}")
    return n


kwh_price_option = _shared_option(
    "--kwh-price", type=finite_float_range(0, 100), default=None, metavar="USD",
    help="Electricity price per kWh for owned machines. Default: $FITCHECK_KWH_PRICE, else 0.1648, the U.S. "
    "average residential price in 2024 (EIA Electric Power Monthly, table 5.3).")
amortize_years_option = _shared_option(
    "--amortize-years", type=finite_float_range(0.1, 50), default=3.0, show_default=True,
    help="Owned machines: years the purchase price is spread over.")
hours_per_day_option = _shared_option(
    "--hours-per-day", type=finite_float_range(0.1, 24), default=8.0, show_default=True,
    help="Owned machines: hours of use a day the purchase price is spread over.")
tokens_option = _shared_option(
    "--tokens", default=None, metavar="N", callback=_count,
    help="Training: tokens to train on (dataset tokens × epochs, e.g. 100M): the run's wall time and cost.")
python_env_option = _shared_option(
    "--python-env", "python_envs", multiple=True, metavar="PATH", type=click.Path(exists=True, file_okay=False),
    help="Also read the installed packages (torch and its CUDA build, vLLM, bitsandbytes, flash-attn) of this "
    "Python environment (a venv or conda prefix, or a site-packages folder); repeatable. $VIRTUAL_ENV, "
    "$CONDA_PREFIX and fitcheck's own environment are always read.")


def cost_options(func):
    """--kwh-price, --amortize-years, --hours-per-day."""
    return kwh_price_option(amortize_years_option(hours_per_day_option(func)))


def cost_settings(kwh_price: float | None, amortize_years: float, hours_per_day: float):
    """The CostSettings of these options ($FITCHECK_KWH_PRICE when --kwh-price is not given)."""
    import os

    from fitcheck.errors import FitcheckError
    from fitcheck.speed.cost import CostSettings, kwh_price_from

    try:
        price, source = kwh_price_from(kwh_price, os.environ)
    except ValueError as exc:
        raise FitcheckError(str(exc), "unset it or give --kwh-price") from None
    return CostSettings(price, amortize_years, hours_per_day, source)


revision_option = _shared_option(
    "--revision", default=None, metavar="REV",
    help="Hugging Face model: the branch, tag or commit to read (the local cache's refs/REV or "
    "snapshots/REV first). Default: main.")


# ---- the request options come from the vocabulary (fitcheck.options) -------------------------------
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
    if mode == "inference" and "tokens" in typed:
        raise click.UsageError("--tokens applies to training: add --mode full, lora or qlora")
    wrong = not_applying(mode, typed)
    if wrong:
        raise click.UsageError(mode_error(mode, wrong).message)
