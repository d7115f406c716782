"""A ModelSpec from model files on disk: a folder, config.json, .safetensors, an index, .gguf.

Only headers are read (safetensors: 8 + N bytes per file; GGUF: metadata and tensor infos via
a memory map), never the weights.  What each path means:

* a folder: config.json gives the architecture, the safetensors headers (through
  ``*.safetensors.index.json`` when there is one) give exact stored bytes and the stored format;
  a folder of GGUF files (one model, possibly split ``-00001-of-0000N.gguf``) is read as GGUF.
* ``config.json`` (any other ``.json`` that is not an index): the config alone.
* ``*.safetensors.index.json``: its shards, plus the config.json beside it.
* ``*.safetensors``: with a config.json beside it, that config plus this file's bytes; without
  one, a llama-style architecture is inferred from tensor names and shapes (see
  :func:`spec_from_tensors`, which states its head_dim assumption in ``sources``).
* ``*.gguf``: the GGUF header (all shards of a split file).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from fitcheck.bounded import MAX_TEXT_FILE_BYTES, json_loads_bounded, read_regular_file
from fitcheck.errors import FitcheckError
from fitcheck.model import gguf_header, gguf_spec, safetensors_header
from fitcheck.model.hf_config import spec_from_config
from fitcheck.model.safetensors_header import SafetensorsHeader, TensorInfo
from fitcheck.model.spec import ModelSpec

MAX_JSON_BYTES = MAX_TEXT_FILE_BYTES   # config.json and index files; real ones are under a few MiB
MAX_SHARDS = 10_000

_GGUF_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_ST_SHARD_RE = re.compile(r"-(\d{5})-of-(\d{5})\.safetensors$")
_LAYER_RE = re.compile(r"^(?P<prefix>.*?)layers\.(?P<index>\d+)\.(?P<rest>.+)$")


# ---- stored weights: bytes, format and dtype from safetensors headers ----------------------------

@dataclass(frozen=True)
class StoredWeights:
    """What the checkpoint's headers say about how its weights are stored."""

    total_bytes: int
    stored_format: str | None    # 'gptq-int4', 'awq', 'fp8', 'mxfp4', 'bnb-nf4', ... or None
    stored_dtype: str | None     # torch name of the dominant 16/32-bit dtype, e.g. 'bfloat16'
    format_source: str = ""


def _format_from_tensors(tensors: Mapping[str, TensorInfo]) -> tuple[str | None, str]:
    """stored_format from tensor names and dtypes alone."""
    qweights = {n[: -len(".qweight")]: t for n, t in tensors.items()
                if n.endswith(".qweight") and t.dtype == "I32"}
    if qweights:
        # GPTQ (AutoGPTQ/optimum) also saves g_idx [in]; qweight is [in * bits / 32, out].
        for base, qw in qweights.items():
            g_idx = tensors.get(base + ".g_idx")
            if g_idx is not None and g_idx.shape and g_idx.shape[0] and qw.shape:
                bits = qw.shape[0] * 32 // g_idx.shape[0]
                if bits not in (2, 3, 4, 8):
                    raise FitcheckError(f"{base[:80]}.qweight: shape {list(qw.shape)[:4]} with g_idx "
                                        f"{list(g_idx.shape)[:4]} is not a 2/3/4/8-bit GPTQ layout", "re-download it")
                return f"gptq-int{bits}", "qweight/g_idx int32 tensors"
        return "awq", "qweight/qzeros int32 tensors without g_idx"
    names = tensors.keys()
    if any(n.endswith(".weight_packed") for n in names):
        return "gptq-int4", "weight_packed int32 tensors (compressed-tensors)"
    if any(n.endswith("_blocks") and t.dtype == "U8" for n, t in tensors.items()) \
            and any(n.endswith("_scales") for n in names):
        return "mxfp4", "*_blocks/*_scales uint8 tensors"
    if any(t.dtype in ("F8_E4M3", "F8_E5M2") for t in tensors.values()):
        return "fp8", "float8 tensors"
    for n in names:
        if "quant_state.bitsandbytes__" in n:
            return "bnb-" + n.rsplit("__", 1)[1], "bitsandbytes quant_state tensors"
    if any(n.endswith(".SCB") for n in names):
        return "bnb-int8", "bitsandbytes SCB tensors"
    return None, ""


def stored_weights(headers: Mapping[str, SafetensorsHeader]) -> StoredWeights:
    """Exact stored bytes, format (from tensors) and dtype from the headers of all shards."""
    tensors: dict[str, TensorInfo] = {}
    for header in headers.values():
        tensors.update(header.tensors)
    fmt, src = _format_from_tensors(tensors)
    float_bytes: dict[str, int] = {}
    for t in tensors.values():
        if t.dtype in safetensors_header.TORCH_DTYPE_NAMES:
            float_bytes[t.dtype] = float_bytes.get(t.dtype, 0) + t.nbytes
    dtype = safetensors_header.TORCH_DTYPE_NAMES[max(float_bytes, key=float_bytes.__getitem__)] if float_bytes else None
    total = sum(h.total_bytes for h in headers.values())
    return StoredWeights(total, fmt, dtype, src)


def with_stored(spec: ModelSpec, stored: StoredWeights, where: str) -> ModelSpec:
    """``spec`` with the headers' exact bytes, format and dtype.

    A format config.json's quantization_config names (method and bits) wins over the one guessed
    from tensors; tensors decide when the config names none or only 'compressed-tensors'.
    """
    sources = [("stored_weight_bytes", f"{where} (exact)")]
    fmt = spec.stored_format
    if stored.stored_format and fmt in (None, "compressed-tensors"):
        fmt = stored.stored_format
        sources.append(("stored_format", stored.format_source))
    return replace(
        spec,
        stored_weight_bytes=stored.total_bytes,
        stored_format=fmt,
        stored_dtype=stored.stored_dtype or spec.stored_dtype,
        sources=tuple(spec.sources) + tuple(sources),
    )

# ---- architecture from tensor names (no config.json) ------------------------------------------


def _assumed_head_dim(q_out: int, kv_out: int) -> int:
    # 128 is the head size of Llama 2/3, Mistral, Qwen2.5 >= 3B; 64 of the small ones.
    for d in (128, 64):
        if q_out % d == 0 and kv_out % d == 0:
            return d
    return kv_out


def spec_from_tensors(tensors: Mapping[str, TensorInfo], name: str) -> ModelSpec:
    """Infer a dense llama-style ModelSpec from tensor names and shapes (no config.json).

    Layers from the ``layers.N.`` indices; hidden and vocab from ``embed_tokens``; the MLP width
    from ``gate_proj`` (``up_proj`` when there is no gate); kv width from ``k_proj``.  Head
    counts need a head size, which the header does not hold: ``q_norm`` gives it when present,
    else 128 is assumed (64 when widths are not multiples of 128) and ``sources`` says so.  KV-cache
    size depends only on the kv width, so that assumption does not change memory figures.
    Tensors outside the decoder (vision tower, ...) count as ``extra_params``.
    """
    hint = "point at the model folder that holds config.json"
    embeds = [n for n in tensors if n.endswith("embed_tokens.weight")]
    if len(embeds) != 1 or len(tensors[embeds[0]].shape) != 2:
        raise FitcheckError(f"{name}: cannot infer the architecture (no single embed_tokens tensor)", hint)
    prefix = embeds[0][: -len("embed_tokens.weight")]
    vocab, hidden = tensors[embeds[0]].shape
    if not vocab or not hidden:
        raise FitcheckError(f"{name}: cannot infer the architecture (embed_tokens has shape "
                            f"[{vocab}, {hidden}]: an empty vocabulary or hidden size)", hint)
    layer_ids = set()
    layer0: dict[str, TensorInfo] = {}
    for n, t in tensors.items():
        m = _LAYER_RE.match(n)
        if m and m.group("prefix") == prefix:
            layer_ids.add(int(m.group("index")))
            if m.group("index") == "0":
                layer0[m.group("rest")] = t
    if not layer_ids or layer_ids != set(range(len(layer_ids))):
        raise FitcheckError(f"{name}: cannot infer the architecture (layers missing or not numbered 0..N-1)", hint)
    if any(r.startswith("mlp.experts.") or r.startswith("block_sparse_moe.") for r in layer0):
        raise FitcheckError(f"{name}: a mixture-of-experts checkpoint needs its config.json "
                            "(experts per token is not in the tensors)", hint)

    def out_width(rest: str) -> int | None:
        t = layer0.get(rest)
        return t.shape[0] if t is not None and len(t.shape) == 2 else None

    q_out = out_width("self_attn.q_proj.weight")
    kv_out = out_width("self_attn.k_proj.weight")
    gate = out_width("mlp.gate_proj.weight")
    inter = gate or out_width("mlp.up_proj.weight")
    if not (q_out and kv_out and inter):
        raise FitcheckError(f"{name}: cannot infer the architecture (no llama-style q_proj/k_proj/"
                            "gate_proj weights; a quantized or unusual checkpoint)", hint)
    q_norm = layer0.get("self_attn.q_norm.weight")
    if q_norm is not None and len(q_norm.shape) == 1 and q_norm.shape[0] and q_out % q_norm.shape[0] == 0:
        head_dim, head_src = q_norm.shape[0], "q_norm shape"
    else:
        head_dim = _assumed_head_dim(q_out, kv_out)
        head_src = f"assumed head_dim {head_dim} (the safetensors header does not hold it)"
    norms = sum(1 for r in layer0 if r.endswith("norm.weight")
                and not r.startswith("self_attn.")) or 2
    stored = stored_weights({name: SafetensorsHeader(dict(tensors))})
    spec = ModelSpec(
        name=name,
        num_layers=len(layer_ids),
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=q_out // head_dim,
        num_kv_heads=max(kv_out // head_dim, 1),
        vocab_size=vocab,
        head_dim=head_dim if head_dim * (q_out // head_dim) != hidden else None,
        tie_word_embeddings="lm_head.weight" not in tensors,
        architecture="llama",
        gated_mlp=gate is not None,
        qkv_bias="self_attn.q_proj.bias" in layer0,
        attn_out_bias="self_attn.o_proj.bias" in layer0,
        mlp_bias="mlp.down_proj.bias" in layer0,
        norm_has_bias="input_layernorm.bias" in layer0,
        norms_per_layer=norms,
        qk_norm=q_norm is not None,
        stored_dtype=stored.stored_dtype or "bfloat16",
        sources=(("architecture", "inferred from llama-style tensor names (no config.json)"),
                 ("num_attention_heads", head_src), ("num_kv_heads", head_src),
                 ("num_layers", "layers.N tensor names"), ("vocab_size", "embed_tokens shape"),
                 ("intermediate_size", "gate_proj/up_proj shape")),
    )
    header_params = sum(t.elements for t in tensors.values())
    extra = header_params - spec.total_params
    if extra < -0.01 * header_params:
        raise FitcheckError(f"{name}: tensor shapes do not fit a llama-style model", hint)
    if extra > 0.01 * header_params:
        spec = replace(spec, extra_params=extra,
                       extra_params_note="tensors outside the llama-style decoder")
    return spec

# ---- files ------------------------------------------------------------------------------------


def read_json_file(path: Path, what: str) -> dict:
    data = read_regular_file(path, what, MAX_JSON_BYTES)
    try:
        doc = json_loads_bounded(data.decode("utf-8-sig"))  # a UTF-8 BOM is valid JSON to everyone else
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise FitcheckError(f"{path}: {what} is not valid JSON", "re-download it") from None
    if not isinstance(doc, dict):
        raise FitcheckError(f"{path}: {what} is not a JSON object", "re-download it")
    return doc


def _spec_from_config(config: dict, name: str, source: Path) -> ModelSpec:
    return spec_from_config(config, name, source=str(source))


def _index_shards(index_path: Path) -> tuple[list[Path], int | None]:
    """Shard files an index names (resolved beside it) and its metadata.total_size."""
    index = read_json_file(index_path, "the safetensors index")
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise FitcheckError(f"{index_path}: no weight_map in the safetensors index", "re-download it")
    files = sorted({str(f) for f in weight_map.values()})
    if len(files) > MAX_SHARDS:
        raise FitcheckError(f"{index_path}: names more than {MAX_SHARDS} shards", "re-download it")
    for f in files:
        if os.path.isabs(f) or ".." in Path(f).parts:
            raise FitcheckError(f"{index_path}: shard name {f[:80]!r} points outside the folder",
                                "re-download it")
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    total = total if isinstance(total, int) and not isinstance(total, bool) and total >= 0 else None
    return [index_path.parent / f for f in files], total


def _spec_from_safetensors(files: list[Path], config_path: Path | None, name: str,
                           index_total: int | None = None, named: Path | None = None) -> ModelSpec:
    root = _allowed_root(files[0].parent)
    if config_path is not None:
        _inside(config_path, root, name)
    for f in files:
        if f != named and os.path.lexists(f):  # the file named itself is the user's choice
            _inside(f, root, name)
    present = [f for f in files if f.is_file()]
    config = read_json_file(config_path, "config.json") if config_path else None
    if len(present) < len(files):
        missing = [f.name for f in files if not f.is_file()]
        if config is not None and config_path is not None and index_total is not None:
            # A snapshot with config and index but not (all) weights: the index's total_size is
            # the sum of tensor bytes (transformers writes it when sharding).
            spec = _spec_from_config(config, name, config_path)
            _check_index_total(index_total, spec, name)
            return with_stored(spec, StoredWeights(index_total, None, None),
                               "index metadata.total_size (shards not on disk)")
        raise FitcheckError(f"{name}: shard {missing[0]} is missing ({len(missing)} of {len(files)})",
                            "download all shards, or point at config.json alone")
    headers = {str(f): safetensors_header.read_header(f) for f in present}
    if config is None or config_path is None:  # config is read from config_path: both are None or neither
        tensors: dict[str, TensorInfo] = {}
        for h in headers.values():
            tensors.update(h.tensors)
        spec = spec_from_tensors(tensors, name)
    else:
        spec = _spec_from_config(config, name, config_path)
    where = "safetensors headers" if len(present) > 1 else "safetensors header"
    return with_stored(spec, stored_weights(headers), where)


# Bytes per parameter a checkpoint can plausibly store: 2-bit GGUF/GPTQ with scales (~0.25) up to fp32
# with some untracked buffers (4, plus slack).  Outside this range the index's total_size is not believed.
_MIN_BYTES_PER_PARAM = 0.2
_MAX_BYTES_PER_PARAM = 4.5


def _check_index_total(total: int, spec: ModelSpec, name: str) -> None:
    """The index's metadata.total_size must agree with the config's parameter count (it is taken as exact)."""
    params = spec.total_params
    if params > 0 and not _MIN_BYTES_PER_PARAM * params <= total <= _MAX_BYTES_PER_PARAM * params:
        raise FitcheckError(f"{name}: the index's metadata.total_size ({total:,} bytes) does not match the "
                            f"config's {params:,} parameters ({total / params:.3g} bytes each)",
                            "download the shards, or point at config.json alone")


def _real(path: Path) -> Path:
    """``path`` with its links followed; a symlink loop is one line of bad input (Path.resolve raises
    RuntimeError for one before Python 3.13, OSError from it)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        raise FitcheckError(f"{path}: cannot be read: a symlink loop" if "loop" in str(exc).lower()
                            else f"{path}: cannot be read: {getattr(exc, 'strerror', None) or exc}") from None


def _allowed_root(folder: Path) -> Path:
    """Where a model folder's files may live: the folder itself, or for a Hugging Face cache snapshot
    (``models--org--name/snapshots/REV``) the repo folder, whose ``blobs/`` its symlinks point into."""
    real = _real(folder)
    if real.parent.name == "snapshots" and (real.parent.parent / "blobs").is_dir():
        return real.parent.parent
    return real


def _inside(path: Path, root: Path, name: str) -> Path:
    """``path`` when it resolves inside ``root``; a symlink out of the model folder is refused (it could
    point at a token or any private file, and fitcheck would read it)."""
    real = _real(path)
    # huggingface_hub's older --local-dir downloads symlink big files into the cache's blobs: allowed
    in_hub_blobs = real.parent.name == "blobs" and real.parent.parent.name.startswith("models--")
    if real != root and root not in real.parents and not in_hub_blobs:
        raise FitcheckError(f"{name}: {path.name} resolves outside the model folder ({real}); refused",
                            "copy the file into the folder, or point at the file itself")
    return path


def _gguf_shards(path: Path) -> list[Path]:
    m = _GGUF_SPLIT_RE.match(path.name)
    if not m:
        return [path]
    count = int(m.group("count"))
    if not 1 <= count <= MAX_SHARDS:
        return [path]
    shards = [path.with_name(f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    root = _allowed_root(path.parent)
    for shard in shards:
        if shard != path and os.path.lexists(shard):  # the file named itself is the user's choice
            _inside(shard, root, path.name)
    missing = [s.name for s in shards if not s.is_file()]
    if missing:
        raise FitcheckError(f"{path.name}: split GGUF shard {missing[0]} is missing",
                            "download all shards of the model")
    return shards


def _spec_from_gguf(path: Path) -> ModelSpec:
    shards = _gguf_shards(path)
    headers = [gguf_header.read_header(s) for s in shards]
    m = _GGUF_SPLIT_RE.match(path.name)
    name = m.group("stem") if m else path.stem
    return gguf_spec.spec_from_gguf(headers, name)


def _spec_from_dir(folder: Path) -> ModelSpec:
    name = _real(folder).name or str(folder)
    config = folder / "config.json"
    config_path = config if config.is_file() else None
    indexes = sorted(folder.glob("*.safetensors.index.json"))
    st_files = sorted(folder.glob("*.safetensors"))
    ggufs = sorted(p for p in folder.glob("*.gguf") if not p.name.startswith("mmproj"))
    if indexes:
        _inside(indexes[0], _allowed_root(folder), name)
        files, total = _index_shards(indexes[0])
        return _spec_from_safetensors(files, config_path, name, total)
    if st_files and (config_path or not ggufs):
        return _spec_from_safetensors(st_files, config_path, name)
    if ggufs:
        root = _allowed_root(folder)
        for g in ggufs:
            _inside(g, root, name)
        models = sorted({_GGUF_SPLIT_RE.sub(r"\g<stem>", p.name) if _GGUF_SPLIT_RE.match(p.name)
                         else p.name for p in ggufs})
        if len(models) > 1:
            listed = ", ".join(models[:5]) + (" ..." if len(models) > 5 else "")
            raise FitcheckError(f"{folder} holds {len(models)} GGUF models ({listed})",
                                "point at one .gguf file")
        return _spec_from_gguf(ggufs[0])
    if config_path:
        _inside(config_path, _allowed_root(folder), name)
        return _spec_from_config(read_json_file(config_path, "config.json"), name, config_path)
    if (folder / "config.json").is_symlink():  # there, but a dangling link or a loop: say so, not "no config.json"
        _real(folder / "config.json")
        raise FitcheckError(f"{folder / 'config.json'}: cannot be read: a link to nothing",
                            "point at a model folder or file")
    raise FitcheckError(f"{folder}: no config.json, *.safetensors or *.gguf here",
                        "point at a model folder or file")


def spec_from_path(path: str | os.PathLike) -> ModelSpec:
    """ModelSpec for the model at ``path`` (a folder or a config/index/safetensors/gguf file)."""
    try:
        return _with_generation(_spec_from_path(Path(path).expanduser()), Path(path).expanduser())
    except OSError as exc:  # an unreadable folder: Path.is_file/is_dir/glob raise PermissionError
        where = exc.filename or path
        raise FitcheckError(f"cannot read {where}: {exc.strerror or exc}", "check the permissions") from None
    except RecursionError:
        raise FitcheckError(f"{path}: symlinks or folders nested too deeply") from None


def _with_generation(spec: ModelSpec, p: Path) -> ModelSpec:
    """``spec`` with the generation_config.json of its folder (generate()'s default sampling), if any."""
    if p.name.lower().endswith(".gguf"):
        return spec  # llama.cpp's own sampler; transformers never loads it from here
    from fitcheck.model.generation_config import read_beside

    found = read_beside(p if p.is_dir() else p.parent)
    return replace(spec, generation=found) if found is not None else spec


def has_model_files(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds anything fitcheck reads (config.json, safetensors, GGUF); False when unreadable."""
    try:
        with os.scandir(folder) as entries:
            return any(e.name == "config.json" or e.name.endswith((".safetensors", ".gguf", ".safetensors.index.json"))
                       for e in entries)
    except OSError:
        return True  # let the reader say why it cannot read it


def _spec_from_path(p: Path) -> ModelSpec:
    if p.is_dir():
        return _spec_from_dir(p)
    if not p.is_file():
        if os.path.lexists(p):  # a device, FIFO or socket (/dev/zero): there, but never read
            raise FitcheckError(f"{p} is not a regular file or folder",
                                "point at a model folder, config.json, .safetensors or .gguf file")
        raise FitcheckError(f"no such file or folder: {p}", "check the path")
    lower = p.name.lower()
    if lower.endswith(".gguf"):
        return _spec_from_gguf(p)
    if lower.endswith(".safetensors.index.json"):
        files, total = _index_shards(p)
        config = p.parent / "config.json"
        return _spec_from_safetensors(files, config if config.is_file() else None,
                                      _real(p.parent).name, total)
    if lower.endswith(".json"):
        name = _real(p.parent).name if lower == "config.json" else p.stem
        return _spec_from_config(read_json_file(p, p.name), name, p)
    if lower.endswith(".safetensors"):
        if _ST_SHARD_RE.search(p.name):
            raise FitcheckError(f"{p.name} is one shard of a sharded checkpoint",
                                "point at its folder or at model.safetensors.index.json")
        config = p.parent / "config.json"
        return _spec_from_safetensors([p], config if config.is_file() else None, p.stem
                                      if not config.is_file() else _real(p.parent).name, named=p)
    raise FitcheckError(f"{p.name}: not a model file fitcheck reads",
                        "point at a folder with config.json, a .safetensors or a .gguf file")
