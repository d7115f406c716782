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


# ---- inference options shared by `check` and `where` -----------------------------------------------
# Each decorator works bare (``@kv_dtype_option``) or called with overrides of click.option's settings
# (``@engine_option(help="...")``), so a command keeps its own help text where its default differs.

PRECISION_CHOICES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "gptq-int4", "gptq-int8", "awq", "nf4",
                     "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0", "q3_k_m", "q2_k")
KV_DTYPE_CHOICES = ("auto", "fp16", "bf16", "fp8", "q8_0", "q4_0")
ENGINE_CHOICES = ("transformers", "vllm", "llama.cpp")


def _shared_option(*decls, **attrs):
    def decorator(func=None, **overrides):
        def apply(f):
            return click.option(*decls, **{**attrs, **overrides})(f)

        return apply if func is None else apply(func)

    return decorator


precision_option = _shared_option(
    "--precision", "-p", type=click.Choice(PRECISION_CHOICES, case_sensitive=False), default=None,
    help="Weights format. Default: bf16 on GPUs with compute capability >= 8.0 and Apple, fp16 on "
    "older GPUs, q4_k_m on CPU-only machines; a checkpoint read from files keeps its format.")
context_option = _shared_option(
    "--context", "-c", type=click.IntRange(min=1), default=4096, show_default=True,
    help="Tokens per sequence, prompt plus generated (not the model's maximum).")
prompt_option = _shared_option(
    "--prompt", "prompt_tokens", type=click.IntRange(min=1), default=None, metavar="N",
    help="Tokens prefilled in one call (the prompt); the rest of --context is generated. Prefill-sized "
    "memory (logits, activations, attention scores) follows the prompt, the KV cache the context. "
    "Default: the whole context.")
batch_option = _shared_option(
    "--batch", "-b", type=click.IntRange(min=1), default=1, show_default=True, help="Concurrent sequences.")
kv_dtype_option = _shared_option(
    "--kv-dtype", type=click.Choice(KV_DTYPE_CHOICES), default="auto", show_default=True,
    help="KV-cache element type.")
engine_option = _shared_option(
    "--engine", type=click.Choice(ENGINE_CHOICES), default=None,
    help="Default: llama.cpp for GGUF types and CPU-only machines, transformers otherwise.")
gpus_option = _shared_option(
    "--gpus", type=click.IntRange(min=1), default=None, help="GPUs to use (tensor parallel with vLLM).")
headroom_option = _shared_option(
    "--headroom", type=click.FloatRange(0, 99), default=10.0, show_default=True,
    help="Safety margin, percent of free memory kept unused.")
transformers_version_option = _shared_option(
    "--transformers-version", default=None, metavar="X.Y",
    help="transformers version that will run the model (engine transformers). Before 4.45 the prompt's "
    "logits are fp32 for every position, not just the last. Default: 4.45 or later.")
params_option = _shared_option(
    "--params", default=None, metavar="COUNT",
    help="For a model fitcheck does not know: its parameter count (7b, 1.5b) for a generic estimate.")
