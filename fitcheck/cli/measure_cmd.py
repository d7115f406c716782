"""`fitcheck measure MODEL`: run the request for real, with random weights, beside the estimate.

Thin: options → fitcheck.measure.run (the check pipeline, then a fresh measuring process) →
fitcheck.measure.document.  torch is imported only by the measuring child process.
"""

from __future__ import annotations

import click

from fitcheck.cli.options import json_option, params_option, request_from
from fitcheck.contracts import document_json
from fitcheck.errors import FitcheckError
from fitcheck.options import click_options, finite_float_range

# The request options measure takes (the vocabulary's; the others it has no use for: one device, transformers).
_REQUEST_OPTIONS = ("mode", "precision", "context", "seq_len", "batch", "kv_dtype", "engine", "gpus", "device",
                    "grad_accum", "optimizer", "master_weights", "grad_checkpointing", "attention", "lora_rank",
                    "lora_targets", "lora_train_embeddings", "zero", "fsdp", "offload", "headroom", "sampling")
_TRAINING_ONLY = tuple(n for n in _REQUEST_OPTIONS if n not in ("mode", "precision", "batch", "gpus", "device",
                                                                 "headroom", "context", "kv_dtype", "engine",
                                                                 "sampling"))


def _size(ctx, param, value):
    if value is None:
        return None
    from fitcheck.units import parse_size

    try:
        size = parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if size <= 0:
        raise click.BadParameter("must be more than 0 bytes")
    return size


# The defaults of --new-tokens, --steps and --time-limit are fitcheck.measure's DEFAULT_NEW_TOKENS,
# DEFAULT_STEPS and DEFAULT_TIME_LIMIT_S, written out so the CLI loads without fitcheck.measure
# (tests/measure/test_measure_pure.py holds them equal).
@click.command("measure")
@click.argument("model", required=False)
@click_options(_REQUEST_OPTIONS, help_overrides={
    "mode": "Inference (prefill then generate), or training steps (full, lora, qlora).",
    "precision": "Weights: fp32, fp16, bf16 (default: bf16 where the device has it), int8/nf4 "
                 "(bitsandbytes, CUDA only).",
    "context": "Inference: tokens per sequence, prompt plus generated (default 4096, or the prompt plus "
               "--new-tokens).",
    "engine": "Only transformers is measured.",
    "gpus": "Only one device is measured.",
})
@click.option("--prompt", type=click.IntRange(min=1), default=None,
              help="Inference: prompt tokens prefilled (default: the context minus --new-tokens).")
@click.option("--new-tokens", type=click.IntRange(min=1), default=16, show_default=True,
              help="Inference: tokens generated after the prompt.")
@click.option("--steps", type=click.IntRange(min=1, max=1000), default=2, show_default=True,
              help="Training: optimizer steps run (the first creates the optimizer states).")
@click.option("--layers", type=click.IntRange(min=1), default=None,
              help="Build only the first N layers (real shapes); the estimate is for the same depth.")
@click.option("--time-limit", "time_limit", type=finite_float_range(1), default=600, show_default=True,
              metavar="SECONDS", help="Stop the run after this long (exit 3).")
@click.option("--memory-limit", "memory_limit", callback=_size, default=None, metavar="SIZE",
              help="Treat more than SIZE (e.g. 2GiB) above the baseline as out of memory: the CPU run is "
                   "stopped there, a CUDA run gets set_per_process_memory_fraction.  Default: the memory "
                   "available less the headroom; every run has a limit.")
@click.option("--force", is_flag=True,
              help="Run even what the estimate says does not fit (or fits only tightly); still under the limit.")
@params_option
@json_option
@click.option("--output", "-o", "output", metavar="FILE", default=None, help="Also write the JSON document to FILE.")
@click.option("--no-receipt", is_flag=True, help="Do not append this run to the receipts file.")
@click.option("--receipts", "list_receipts", is_flag=True, help="List the receipts of earlier runs and their errors.")
@click.option("--export", "export", metavar="FILE", default=None,
              help="With --receipts: copy them to FILE (JSON lines) for `python -m benchmarks.measure.compare "
                   "--receipts FILE`.")
@click.pass_context
def measure(ctx: click.Context, model: str | None, prompt: int | None, new_tokens: int, steps: int,
            layers: int | None, time_limit: float, memory_limit: int | None, force: bool, params: str | None,
            as_json: bool, output: str | None, no_receipt: bool, list_receipts: bool, export: str | None,
            **options) -> None:
    """Run MODEL's request here, with random weights, and set the measured peak beside the estimate.

    Builds the model from its config (no weights downloaded, no tokenizer: random token ids),
    runs exactly the request in a fresh process — inference: a prefill of the prompt, then
    --new-tokens generated; training: --steps optimizer steps — and reports the peak memory
    above what the process held before the model (peak RSS on the CPU; max_memory_allocated,
    max_memory_reserved and the NVML view on CUDA) beside the estimate, component by component.
    Needs: pip install 'fitcheck[measure]'.

    \b
    Examples:
      fitcheck measure qwen-0.5b --context 2048
      fitcheck measure qwen-0.5b --mode lora --seq-len 512 --steps 2 --json
      fitcheck measure llama3-8b --layers 2 --prompt 4096 --new-tokens 32
      fitcheck measure --receipts

    Exit codes: 0 measured, 1 out of memory (or refused: the estimate does not call it FITS),
    2 bad input or the extra missing, 3 time limit or the run failed.
    """
    from fitcheck.measure import receipts as R

    if list_receipts:
        ctx.exit(_receipts(export, as_json))
    if export:
        raise click.UsageError("--export goes with --receipts")
    if not model:
        raise click.UsageError("missing MODEL (or --receipts)")
    mode = options["mode"]
    _check_mode_options(ctx, mode)
    request = request_from(options)
    engine, gpus, headroom = request.engine or "transformers", request.gpus, request.headroom
    if engine != "transformers":
        raise FitcheckError(f"fitcheck measure runs transformers, not --engine {engine}",
                            "drop --engine; `fitcheck MODEL --engine ...` estimates it")
    if gpus and gpus > 1:
        raise FitcheckError("fitcheck measure runs on one device",
                            "drop --gpus; `fitcheck MODEL --gpus N` estimates it")
    from fitcheck.measure import require_extra

    require_extra()
    from click.core import ParameterSource

    from fitcheck.context import read_context
    from fitcheck.measure.document import measure_document, render_measure
    from fitcheck.measure.run import MeasureOptions, measure_inference, measure_training, receipt_of
    from fitcheck.probe import probe

    run_options = MeasureOptions(time_limit_s=time_limit, memory_limit_bytes=memory_limit, force=force, layers=layers,
                                 context=read_context(True))
    machine = probe()
    if mode == "inference":
        context = request.context if ctx.get_parameter_source("context") == ParameterSource.COMMANDLINE else None
        result = measure_inference(model, machine=machine, precision=request.precision, context=context,
                                   prompt=prompt, new_tokens=new_tokens, batch=request.batch, device=request.device,
                                   kv_dtype=request.kv_dtype, headroom=headroom / 100, params=params,
                                   options=run_options)
    else:
        result = measure_training(model, request, machine=machine, steps=steps, headroom=headroom / 100,
                                  params=params, options=run_options)
    doc = measure_document(result)
    if result.run is not None and not no_receipt:
        try:
            R.append(receipt_of(result, doc))
        except OSError as exc:
            click.echo(f"fitcheck: receipt not written ({R.receipts_path()}: {exc.strerror or exc})", err=True)
    if as_json:
        click.echo(document_json(doc, indent=2, sort_keys=True))
    else:
        click.echo(render_measure(result, doc))
    if output:
        from fitcheck.preflight.emit import write_output

        write_output(output, doc)
    ctx.exit(result.exit_code)


def _check_mode_options(ctx: click.Context, mode: str) -> None:
    from click.core import ParameterSource

    inference_only = ("context", "prompt", "new_tokens", "kv_dtype")
    wrong = ("steps", *_TRAINING_ONLY) if mode == "inference" else inference_only
    typed = [n for n in wrong if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE]
    if typed:
        flags = ", ".join("--" + n.replace("_", "-") for n in typed)
        if mode == "inference":
            raise click.UsageError(f"{flags} applies to training: add --mode full, lora or qlora")
        raise click.UsageError(f"{flags} applies to inference, not --mode {mode}")


def _receipts(export: str | None, as_json: bool) -> int:
    from tabulate import tabulate

    from fitcheck import __version__
    from fitcheck.measure import receipts as R

    path = R.receipts_path()
    items = list(R.read(path))
    if export:
        from fitcheck.bounded import write_regular_file

        write_regular_file(export, "".join(document_json(r, sort_keys=True) + "\n" for r in items), "--export")
    if as_json:
        click.echo(document_json({"schema": "fitcheck.receipts/1", "fitcheck_version": __version__, "path": str(path),
                                "receipts": items},
                              indent=2, sort_keys=True))
        return 0
    if not items:
        click.echo(f"No receipts yet ({path}); `fitcheck measure MODEL` writes one per run.")
        return 0
    rows = []
    for r in items:
        req = r.get("request") or {}
        what = req.get("mode", "")
        if what == "inference":
            what += f" {req.get('precision')} ctx {req.get('context')} b{req.get('batch')}"
        else:
            what += f" {req.get('precision')} seq {req.get('seq_len')} b{req.get('batch')}"
        measured = (r.get("measured") or {}).get("peak_bytes")
        estimated = (r.get("estimated") or {}).get("peak_bytes")
        err = r.get("error_pct")
        rows.append((str(r.get("date", ""))[:16], r.get("model", ""), what, r.get("device", ""), r.get("status", ""),
                     f"{measured / 2**30:.3f}" if isinstance(measured, int) else "—",
                     f"{estimated / 2**30:.3f}" if isinstance(estimated, int) else "—",
                     f"{err:+.1f} %" if isinstance(err, (int, float)) else "—"))
    click.echo(tabulate(rows, headers=["date (UTC)", "model", "request", "device", "status", "measured GiB",
                                       "estimated GiB", "error"], disable_numparse=True))
    click.echo(f"{len(items)} receipts in {path}" + (f"; copied to {export}" if export else ""))
    return 0
