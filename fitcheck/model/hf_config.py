"""Map a Hugging Face ``config.json`` (already parsed into a dict) to a :class:`ModelSpec`.

One parser for every source: the catalog stores config-like dicts and goes through here, and so
do local checkpoints and Hub downloads.  Pure: no I/O.

Each family's reading (fitcheck.model.architectures) follows its transformers ``configuration_*.py`` /
``modeling_*.py`` (or the remote code its repo ships); fitcheck.model.config_reader checks every value, so anything
missing, of the wrong type, or absurd raises :class:`FitcheckError` naming the field.  Here: the family's reader
chosen, the stored format, the rotary tables, vision towers, and the checks across fields.
"""

from __future__ import annotations

import math
from typing import Any

from fitcheck.errors import FitcheckError
from fitcheck.model.architectures import FAMILIES, SUPPORTED_ARCHITECTURES, family_of, finish_moe
from fitcheck.model.config_reader import DTYPES, MAX, ConfigReader, show
from fitcheck.model.spec import ModelSpec

# ---- vision towers (parameters outside the text decoder) ---------------------------------------


def _siglip_params(v: ConfigReader, text_hidden: int) -> int:
    """SigLIP vision tower (modeling_siglip) + Gemma 3 projector (input projection and soft-emb norm)."""
    d = v.int("vision_hidden_size", "hidden_size", default=1152)
    inner = v.int("vision_intermediate_size", "intermediate_size", default=4304)
    layers = v.int("vision_layers", "num_hidden_layers", default=27)
    patch = v.int("vision_patch_size", "patch_size", default=14)
    image = v.int("vision_image_size", "image_size", default=896)
    channels = v.int("vision_channels", "num_channels", default=3)
    embeddings = channels * patch * patch * d + d + (image // patch) ** 2 * d
    per_layer = 4 * (d * d + d) + (d * inner + inner) + (inner * d + d) + 2 * 2 * d
    projector = d * text_hidden + d
    return embeddings + layers * per_layer + 2 * d + projector


def _llama4_vision_params(v: ConfigReader, text_hidden: int) -> int:
    """Llama 4 vision encoder (modeling_llama4 Llama4VisionModel), pixel-shuffle adapter, projector."""
    d = v.int("vision_hidden_size", "hidden_size", default=1408)
    inner = v.int("vision_intermediate_size", "intermediate_size", default=5632)
    layers = v.int("vision_layers", "num_hidden_layers", default=34)
    patch = v.int("vision_patch_size", "patch_size", default=14)
    image = v.int("vision_image_size", "image_size", default=336)
    channels = v.int("vision_channels", "num_channels", default=3)
    proj_in = v.int("projector_input_dim", "projector_input_dim", default=4096)
    proj_out = v.int("projector_output_dim", "projector_output_dim", default=4096)
    out_dim = v.int("vision_output_dim", "vision_output_dim", default=4096)
    shuffled = d * 4  # pixel_shuffle_ratio 0.5 folds 2 x 2 patches into one token
    embeddings = channels * patch * patch * d + d + ((image // patch) ** 2 + 1) * d + 2 * 2 * d
    per_layer = 4 * (d * d + d) + (d * inner + inner) + (inner * d + d) + 2 * 2 * d
    adapter = shuffled * proj_in + proj_in * proj_out
    return embeddings + layers * per_layer + adapter + out_dim * text_hidden


# ---- storage: dtype and pre-quantized formats -------------------------------------------------

def _stored_dtype(config: dict, source: str, fields: dict, sources: list) -> None:
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise FitcheckError(f"{source}: {key} must be a string such as 'bfloat16'")
        dtype = DTYPES.get(value.lower().removeprefix("torch."))
        if dtype:
            fields["stored_dtype"] = dtype
            sources.append(("stored_dtype", f"{source}: {key}"))
        return


def stored_format_of(quant: Any, source: str = "config.json") -> str | None:
    """'gptq-int4', 'gptq-int8', 'awq', 'fp8', 'mxfp4', 'nf4' / 'fp4' / 'int8' (bitsandbytes), or the
    quant_method itself for a scheme fitcheck does not model separately; None when not quantized."""
    if quant is None:
        return None
    if not isinstance(quant, dict):
        raise FitcheckError(f"{source}: quantization_config must be an object")
    method = quant.get("quant_method")
    if not isinstance(method, str):
        raise FitcheckError(f"{source}: quantization_config.quant_method must be a string")
    method = method.lower()
    bits = quant.get("bits", quant.get("w_bit"))
    if method == "gptq":
        if bits not in (2, 3, 4, 8) or isinstance(bits, bool):
            raise FitcheckError(f"{source}: quantization_config.bits must be 2, 3, 4 or 8 for GPTQ")
        return f"gptq-int{bits}"
    if method == "awq":
        return "awq"
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method == "bitsandbytes":
        if quant.get("load_in_4bit") is True:
            return "fp4" if quant.get("bnb_4bit_quant_type") == "fp4" else "nf4"
        return "int8"
    if method == "compressed-tensors":
        return "fp8" if quant.get("format") == "float-quantized" else "compressed-tensors"
    return method


# ---- rotary tables: what vLLM and SGLang cache at load ------------------------------------------
# vLLM's get_rope builds one RotaryEmbedding per distinct setting (_ROPE_DICT) and each registers a cos/sin cache
# of [positions, rotary_dim] (base.py RotaryEmbedding.__init__, _compute_cos_sin_cache); the positions follow the
# scaling type: `linear` and `dynamic` (factor) max_position × factor, `yarn` and `deepseek_yarn`
# original_max_position_embeddings × factor, `longrope` the short table of original_max_position_embeddings and
# the long one of max_position, every other type max_position
# (https://github.com/vllm-project/vllm/blob/v0.19.0/vllm/model_executor/layers/rotary_embedding/__init__.py and
# linear_scaling_rope.py, dynamic_ntk_scaling_rope.py, yarn_scaling_rope.py, phi3_long_rope_scaled_rope.py).
# SGLang's rotary_embedding.py is the same code.  Families without rotary positions: MPT (ALiBi), GPTBigCode
# (learned positions), Baichuan unless hidden_size is 4096 (vLLM baichuan.py: "ROPE" for the 7B, "ALIBI" else),
# Falcon with alibi.  The model files pass max_position_embeddings (the config class's default where config.json
# has none, else vLLM's 8192); ChatGLM passes seq_length and rotates half of each head (chatglm.py); MLA rotates
# qk_rope_head_dim; Gemma 3's sliding layers use their own unscaled rope (gemma3.py), a second table.
_NO_ROPE = {"mpt", "gpt_bigcode"}
_ROPE_FACTOR_MAX = 10**4


def _rope_positions(r: ConfigReader, positions: int, scaling: Any, where: str) -> int:
    if not isinstance(scaling, dict):
        return positions
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    factor = scaling.get("factor", 1.0)
    # the comparison alone refuses nan, ±inf and integers too large for a float
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= _ROPE_FACTOR_MAX:
        raise FitcheckError(f"{r._where(where)}.factor must be a number in (0, {_ROPE_FACTOR_MAX}], "
                            f"not {show(factor)}")
    original = scaling.get("original_max_position_embeddings", r.raw.get("original_max_position_embeddings"))
    if isinstance(original, bool) or not isinstance(original, int) or not 0 < original <= MAX["max_context"]:
        original = None
    if kind == "linear" or (kind == "dynamic" and "alpha" not in scaling):
        return int(positions * factor)
    if kind in ("yarn", "deepseek_yarn", "deepseek_llama_scaling") and original:
        return math.ceil(original * factor)
    if kind in ("longrope", "su") and original:
        return positions + original
    return positions


def _rope_tables(r: ConfigReader, f: dict, model_type: str) -> tuple[tuple[int, int], ...]:
    """(positions, rotary dims) of each cos/sin table vLLM and SGLang build for this model (comment above)."""
    raw = r.raw
    if model_type in _NO_ROPE or (model_type == "baichuan" and f["hidden_size"] != 4096) \
            or (model_type == "falcon" and raw.get("alibi") is True):
        return ()
    head = f.get("head_dim") or f["hidden_size"] // f["num_attention_heads"]
    if model_type in ("deepseek_v2", "deepseek_v3"):
        dims = f["qk_rope_head_dim"]
    elif model_type == "chatglm":
        dims = head // 2
    else:
        # transformers 5 moves partial_rotary_factor into rope_parameters, where vLLM's get_rope reads it
        params = raw.get("rope_parameters")
        nested = params.get("partial_rotary_factor") if isinstance(params, dict) else None
        fraction = raw.get("partial_rotary_factor", nested if nested is not None else raw.get("rotary_pct", 1.0))
        ok = not isinstance(fraction, bool) and isinstance(fraction, (int, float)) and 0 < fraction <= 1
        dims = int(head * fraction) if ok else head
    key = ("seq_length",) if model_type == "chatglm" else ("max_position_embeddings",)
    positions = r.opt_int("rope_tables", *key, maximum=MAX["max_context"]) or f.get("max_context") or 8192
    where = "rope_scaling" if raw.get("rope_scaling") else "rope_parameters"
    scaling = raw.get(where)
    if model_type in ("gemma3", "gemma3_text"):
        if isinstance(scaling, dict) and isinstance(scaling.get("full_attention"), dict):
            scaling, where = scaling["full_attention"], where + ".full_attention"
        tables = [(_rope_positions(r, positions, scaling, where), dims)]
        if f.get("num_sliding_layers"):
            tables.append((positions, dims))
        return tuple(tables)
    return ((_rope_positions(r, positions, scaling, where), dims),)


# ---- entry point ------------------------------------------------------------------------------

_NESTED_TEXT_TYPES = {"gemma3": "gemma3", "llama4": "llama4"}


def spec_from_config(config: dict, name: str, *, source: str = "config.json") -> ModelSpec:
    """The :class:`ModelSpec` a Hugging Face config.json describes.

    Raises :class:`FitcheckError` (one line, naming the field) for an architecture fitcheck cannot
    read, a missing field, a wrong type or an absurd value.
    """
    if not isinstance(config, dict):
        raise FitcheckError(f"{source}: expected a JSON object, got {type(config).__name__}")
    model_type = family_of(config, source)
    top = ConfigReader(config, source)
    reader = top
    vision = None
    text = top.sub("text_config") if model_type in _NESTED_TEXT_TYPES else None
    if text is not None:
        reader = text
        vision = top.sub("vision_config")
    family_reader = FAMILIES.get(model_type)
    fields: dict[str, Any] = {}
    if family_reader is None:
        known = ", ".join(SUPPORTED_ARCHITECTURES)
        raise FitcheckError(f"{source}: model_type {show(model_type) if model_type else '(none)'} is not an architecture fitcheck reads",
                            f"known: {known}; or give --params for a generic estimate")
    family_reader(reader, fields)
    _validate(fields, reader)
    fields["rope_tables"] = _rope_tables(reader, fields, model_type)
    if fields["rope_tables"]:
        top.sources.append(("rope_tables", f"{source}: max_position_embeddings, rope_scaling (vLLM's get_rope)"))

    quant = reader.raw.get("quantization_config", config.get("quantization_config"))
    stored_format = stored_format_of(quant, source)
    if stored_format:
        fields["stored_format"] = stored_format
        top.sources.append(("stored_format", f"{source}: quantization_config.quant_method"))
    _stored_dtype(reader.raw if reader.raw.get("torch_dtype") or reader.raw.get("dtype") else config,
                  source, fields, top.sources)

    if vision is not None:
        if model_type == "gemma3":
            fields["extra_params"] = _siglip_params(vision, fields["hidden_size"])
            fields["extra_params_note"] = "SigLIP vision tower and projector (counted from vision_config)"
        else:
            fields["extra_params"] = _llama4_vision_params(vision, fields["hidden_size"])
            fields["extra_params_note"] = "vision encoder, adapter and projector (counted from vision_config)"
        top.sources.append(("extra_params", f"{source}: vision_config"))

    latest = dict(top.sources)  # a field read twice keeps where its final value came from
    sources = tuple((key, latest[key]) for key in dict.fromkeys(k for k, _ in top.sources))
    return ModelSpec(name=name, architecture=model_type, sources=sources, **fields)


def _validate(f: dict, r: ConfigReader) -> None:
    heads, kv, h = f["num_attention_heads"], f["num_kv_heads"], f["hidden_size"]
    if kv > heads or heads % kv:
        raise FitcheckError(f"{r.source}: {kv} key/value heads do not divide {heads} attention heads")
    if not f.get("head_dim") and not f.get("kv_lora_rank") and h % heads:
        raise FitcheckError(f"{r.source}: hidden_size {h} is not divisible by num_attention_heads {heads}",
                            "give head_dim explicitly")
    finish_moe(f, r)
    if f.get("num_sliding_layers", 0) > f["num_layers"]:
        raise FitcheckError(f"{r.source}: more sliding-window layers than layers")
