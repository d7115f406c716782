"""The download itself: the bytes to fetch for the plan's format, where they land, the free space
there, and what fine-tuning's saves write to the output folder.

Pure.  The free space of each place and the copies already on this machine come in as a
:class:`fitcheck.storage.Storage` (read at the edge by :func:`fitcheck.probe.disk.read_storage`, or built from a
hardware profile's ``[disk]`` by :func:`fitcheck.storage.profile_storage`).

What is downloaded is what the printed engine command loads (fitcheck.commands):

- bf16/fp16/fp32 and the bitsandbytes types (int8, nf4) load the checkpoint as it is stored and
  convert at load time, so the download is the checkpoint: its safetensors total (exact from the
  headers when fitcheck read them, else computed from the architecture at the stored dtype);
- FP8 is the pre-quantized repository when the catalog knows one (else vLLM quantizes the 16-bit
  checkpoint at load: the checkpoint is the download);
- AWQ and GPTQ are a pre-quantized repository's safetensors; a GGUF type is that GGUF build (the
  catalog's GGUF repository as ``llama-server -hf`` takes it, or the Ollama tag), computed from
  the parameter count and the format's bits per weight (fitcheck.estimate.weights) unless its
  header was read.

Where it lands: huggingface_hub's cache for Hugging Face repositories (``HF_HUB_CACHE``, else
``HF_HOME/hub``, else ``~/.cache/huggingface/hub``: huggingface_hub/constants.py), llama.cpp's
cache for ``-hf`` downloads (``LLAMA_CACHE``, else ``~/.cache/llama.cpp``: common's
fs_get_cache_directory), the Ollama store for Ollama names (``OLLAMA_MODELS``, else
``~/.ollama/models``), or ``--download-dir``.  Fine-tuning also writes checkpoints to the output
folder (the Trainer's ``output_dir``, under the current folder).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fitcheck.engines import get
from fitcheck.engines.checkpoints import holds_gguf
from fitcheck.estimate.formats import MXFP4_BITS, weight_format, weight_format_or_none
from fitcheck.estimate.lora import trainable_shapes
from fitcheck.estimate.optimizers import ParamShape, state_bytes
from fitcheck.estimate.verdict import DOES_NOT_FIT_ON_DISK, FITS, TIGHT, UNKNOWN, Verdict
from fitcheck.estimate.weights import weight_bytes
from fitcheck.model import spec as S
from fitcheck.model.spec import ModelSpec
from fitcheck.plan.plan import TrainingPlan
from fitcheck.storage import DOWNLOAD_DIR, HF_CACHE, LLAMA_CPP, OLLAMA, OUTPUT, PROFILE_DISK, Place, Storage
from fitcheck.units import format_gib

# Disk statuses (Download.status).
DISK_FITS = "fits"
DISK_DOES_NOT_FIT = "does_not_fit"
DISK_UNKNOWN = "unknown"
DISK_STATUSES = (DISK_FITS, DISK_DOES_NOT_FIT, DISK_UNKNOWN)

# transformers TrainingArguments defaults (training_args.py): save_strategy "steps", save_steps 500,
# save_only_model False (optimizer.pt and scheduler.pt are saved with the model), save_total_limit
# None (every checkpoint is kept).
SAVE_STEPS = 500

_HF_QUANT_KEYS = {"awq": "awq", "gptq-int4": "gptq-int4", "int4": "gptq-int4", "gptq-int8": "gptq-int8", "fp8": "fp8",
                  "mlx-8bit": "mlx-8bit", "mlx-6bit": "mlx-6bit", "mlx-4bit": "mlx-4bit", "mlx-3bit": "mlx-3bit"}
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Artifact:
    """What a plan downloads: one checkpoint or build."""

    key: str          # how a copy already here is found ('hf:ORG/NAME', 'gguf:ORG/NAME:Q4_K_M', 'ollama:NAME', 'own')
    format: str       # 'safetensors, bf16', 'GGUF Q4_K_M', 'safetensors, AWQ 4-bit, group 128'
    repo: str | None  # where it comes from (None: no repository known to fitcheck)
    place: str        # the Place.kind it lands in
    bytes: int
    exact: bool       # from file headers; False: computed from the architecture
    basis: str        # how the bytes were found


@dataclass(frozen=True)
class Saves:
    """What one training checkpoint writes to the output folder."""

    weights_bytes: int      # the adapter, or the full weights
    optimizer_bytes: int    # optimizer.pt (and DeepSpeed's fp32 master partitions)
    detail: str

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.optimizer_bytes


@dataclass(frozen=True)
class Download:
    artifact: Artifact
    download_bytes: int            # 0 when already on this machine
    present_at: str | None         # where the copy already here is
    place: Place | None            # where it lands (None: no disk known)
    status: str                    # one of DISK_STATUSES
    reason: str
    saves: Saves | None = None     # fine-tuning
    output: Place | None = None    # where saves land
    download_dir: str | None = None  # --download-dir as given

    @property
    def fits(self) -> bool:
        return self.status != DISK_DOES_NOT_FIT


# ---- what a plan downloads -------------------------------------------------------------------------
def own_files_are_gguf(model: Any) -> bool:
    """The model was named by GGUF files: a .gguf file, an Ollama name, a ``repo:QUANT`` build."""
    spec: ModelSpec = model.spec
    return (model.source == "ollama" or ":" in (model.hf_id or "")
            or any(str(v).startswith("GGUF") for _, v in spec.sources))


def checkpoint_bytes(spec: ModelSpec) -> int:
    """The checkpoint's weights as stored, computed from the architecture: its stored format
    (pre-quantized), else its stored dtype.  gpt-oss keeps its experts in MXFP4 (4.25 bits) and the
    rest in bf16 (its safetensors: 12.8 GiB for gpt-oss-20b)."""
    if spec.stored_format == "mxfp4":
        keep = 2
        return sum(int(g.params * (MXFP4_BITS / 8 if g.kind == S.EXPERTS else keep)) for g in spec.tensor_groups())
    stored = weight_format_or_none(spec.stored_format) if spec.stored_format else None
    fmt = stored or weight_format_or_none(spec.stored_dtype) or weight_format("bf16")
    return weight_bytes(spec, fmt).total


def _dtype_word(spec: ModelSpec) -> str:
    stored = weight_format_or_none(spec.stored_format) if spec.stored_format else None
    if spec.stored_format == "mxfp4":
        return "MXFP4 experts, bf16"
    if stored is not None:
        return stored.name.upper() if stored.gguf else stored.description
    dtype = weight_format_or_none(spec.stored_dtype)
    return dtype.name if dtype else spec.stored_dtype


def _computed_basis(spec: ModelSpec, how: str = "") -> str:
    return f"estimated from {spec.total_params / 1e9:.2f}B params" + (f" ({how})" if how else "")


def _own(model: Any, gguf: bool) -> Artifact:
    spec: ModelSpec = model.spec
    hf_id = model.hf_id or ""
    if model.source == "local":
        key, repo, place = "own", None, HF_CACHE
    elif model.source == "ollama":
        key, repo, place = f"ollama:{hf_id}", hf_id, OLLAMA
    elif ":" in hf_id:
        repo_id, _, quant = hf_id.partition(":")
        key, repo, place = f"gguf:{repo_id}:{quant.upper()}", hf_id, LLAMA_CPP
    elif model.source == "generic" or not hf_id:
        key, repo, place = "", None, HF_CACHE
    else:
        key, repo, place = f"hf:{hf_id}", hf_id, HF_CACHE
    word = _dtype_word(spec)
    if gguf:
        fmt = f"GGUF {spec.stored_format.upper()}" if spec.stored_format else f"GGUF {word}"
    else:
        fmt = f"safetensors, {word}"
    if spec.stored_weight_bytes:
        return Artifact(key, fmt, repo, place, spec.stored_weight_bytes, True,
                        "exact, from the GGUF header" if gguf else "exact, from the safetensors headers")
    return Artifact(key, fmt, repo, place, checkpoint_bytes(spec), False, _computed_basis(spec))


@dataclass(frozen=True)
class _Base:
    """A catalog entry's checkpoint, asked as a model of its own (its spec is all _own_serves reads)."""

    spec: ModelSpec


def _own_serves(model: Any, plan: Any, gguf: bool, repos: dict[str, str]) -> bool:
    """Whether the model's own files are what the plan loads."""
    spec: ModelSpec = model.spec
    fmt = weight_format(plan.precision)
    if gguf:
        if isinstance(plan, TrainingPlan) or not get(plan.engine).loads_gguf_files:
            return False
        own = spec.stored_format
        return (own or "").lower() == plan.precision or (own is None and fmt.family == "float")
    if fmt.gguf:
        return False
    stored = weight_format_or_none(spec.stored_format) if spec.stored_format else None
    if stored is not None and stored.name == fmt.name:
        return True
    if fmt.family in ("float", "bnb"):
        return True                       # converted at load time from the checkpoint as stored
    key = _HF_QUANT_KEYS.get(plan.precision)
    if plan.precision == "fp8":
        return key not in repos           # vLLM's --quantization fp8 quantizes the checkpoint at load
    return False


def artifact_for(model: Any, plan: Any) -> Artifact:
    """What ``plan`` downloads for ``model`` (a fitcheck.model.resolve.ResolvedModel)."""
    spec: ModelSpec = model.spec
    entry = getattr(model, "entry", None)
    repos = dict(getattr(entry, "quantized_repos", None) or {}) if entry is not None else {}
    gguf = own_files_are_gguf(model)
    if _own_serves(model, plan, gguf, repos):
        return _own(model, gguf)
    fmt = weight_format(plan.precision)
    if fmt.family == "mlx" and plan.precision not in repos and not gguf:
        # no MLX conversion known: the printed `mlx_lm.convert -q` quantizes the checkpoint, which is the download
        return _own(model, gguf)
    if gguf and not fmt.gguf and entry is not None and _own_serves(_Base(entry.spec), plan, False, repos):
        # An Ollama name or a GGUF build served by transformers or vLLM: the base model's checkpoint.
        base = entry.spec
        return Artifact(f"hf:{entry.hf_id}", f"safetensors, {_dtype_word(base)}", entry.hf_id, HF_CACHE,
                        checkpoint_bytes(base), False, _computed_basis(base))
    computed = weight_bytes(spec, fmt).total
    if fmt.gguf:
        quant = plan.precision.upper()
        basis = _computed_basis(spec, "llama.cpp's tensor types")
        if model.source == "ollama":
            return Artifact("", f"GGUF {quant}", f"an Ollama tag of {quant}", OLLAMA, computed, False, basis)
        hf_id = model.hf_id or ""
        gguf_repo = repos.get("gguf") if holds_gguf(spec.gguf_types, quant) else None
        gguf_repo = gguf_repo or (hf_id.partition(":")[0] if ":" in hf_id else None)
        if gguf_repo:
            return Artifact(f"gguf:{gguf_repo}:{quant}", f"GGUF {quant}", f"{gguf_repo}:{quant}", LLAMA_CPP,
                            computed, False, basis)
        return Artifact("", f"GGUF {quant}", None, LLAMA_CPP, computed, False, basis)
    repo = repos.get(_HF_QUANT_KEYS.get(plan.precision, ""))
    if repo and plan.precision == "fp8" and spec.tie_word_embeddings:
        # a pre-quantized FP8 checkpoint of a tied model stores a bf16 lm_head.weight of its own
        # (fitcheck.engines.transformers.separate_fp8_head), whatever the engine then loads of it
        computed = weight_bytes(spec, fmt, untie_lm_head=True).total
    return Artifact(f"hf:{repo}" if repo else "", f"safetensors, {fmt.description}", repo, HF_CACHE, computed, False,
                    _computed_basis(spec))


# ---- what fine-tuning saves ------------------------------------------------------------------------
def training_saves(spec: ModelSpec, plan: Any) -> Saves:
    """One Trainer checkpoint (``checkpoint-N/``, every save_steps): the adapter or the full weights,
    and optimizer.pt with the optimizer states (save_only_model=False, the default).

    LoRA: r × (d_in + d_out) per adapted matrix (fitcheck.estimate.lora), saved in the adapters'
    dtype — fp32 on a 16-bit base (peft's autocast_adapter_dtype=True), the compute dtype under
    DeepSpeed — plus modules_to_save copies of the embeddings in 16 bits.  Full fine-tuning: every
    weight, in fp32 when the parameters are the fp32 master copy (Trainer/FSDP mixed precision),
    16-bit under DeepSpeed (its 16-bit model save) or pure bf16; DeepSpeed's optimizer files also
    hold the fp32 master partitions.  States per parameter: fitcheck.estimate.optimizers."""
    act_b = _BYTES.get(plan.compute_dtype, 2)
    ds = plan.zero is not None
    fp32_compute = plan.compute_dtype == "fp32"
    master_on = plan.master_weights == "fp32" and not fp32_compute
    shapes = trainable_shapes(spec, plan)
    trainable = sum(s.params for s in shapes)
    if plan.mode == "full":
        weight_b = 4 if (fp32_compute or (master_on and not ds)) else act_b
        weights = spec.total_params * weight_b
        what = f"full weights {format_gib(weights)} ({'fp32' if weight_b == 4 else plan.compute_dtype})"
        state_b = 4 if master_on else weight_b
        master = trainable * 4 if (master_on and ds) else 0
        emb_opt = 0
    else:
        adapters_fp32 = master_on and not ds
        param_b = 4 if (fp32_compute or adapters_fp32) else act_b
        emb = (spec.vocab_size * spec.hidden_size * (1 if spec.tie_word_embeddings else 2)
               if plan.lora_train_embeddings else 0)
        weights = trainable * param_b + emb * act_b
        what = (f"LoRA adapter r={plan.lora_rank} on {plan.lora_targets} {format_gib(weights)} "
                f"({'fp32' if param_b == 4 else plan.compute_dtype}"
                + (", with the embeddings and lm_head" if emb else "") + ")")
        state_b = 4 if master_on else param_b
        master = trainable * 4 if (master_on and not adapters_fp32) else 0
        emb_opt = state_bytes(plan.optimizer, (ParamShape(emb, 1),), act_b) if emb else 0
    optimizer = state_bytes(plan.optimizer, tuple(shapes), state_b) + master + emb_opt
    detail = (f"{what} + optimizer.pt {format_gib(optimizer)}; the Trainer's save_strategy 'steps' writes one "
              f"every {SAVE_STEPS} steps, ×save_total_limit kept")
    return Saves(int(weights), int(optimizer), detail)


# ---- the disk verdict ------------------------------------------------------------------------------
def plan_download(model: Any, plan: Any, storage: Storage | None, download_dir: str | None = None) -> Download:
    """The download of ``plan``, where it lands and whether it (and a training checkpoint) fits there."""
    art = artifact_for(model, plan)
    storage = storage or Storage(unknown_reason="free disk not checked")
    present = storage.where_present(art.key)
    need = 0 if present else art.bytes
    place = storage.place(DOWNLOAD_DIR if download_dir else art.place)
    if download_dir and place is not None and place.disk_id == PROFILE_DISK:
        place = replace(place, path=download_dir)      # a profile's one disk, at the folder asked
    saves = training_saves(model.spec, plan) if getattr(plan, "training", False) else None
    output = storage.place(OUTPUT) if saves is not None else None
    # What lands on each disk: the download, and one checkpoint in the output folder.
    needs: list[tuple[Place | None, int, str]] = [(place, need, "the download")]
    if saves is not None:
        needs.append((output, saves.total_bytes, "a checkpoint"))
    status, reason = _disk_status(needs, storage)
    return Download(art, need, present, place, status, reason, saves, output, download_dir)


def _disk_status(needs: list[tuple[Place | None, int, str]], storage: Storage) -> tuple[str, str]:
    by_disk: dict[str, list[tuple[Place, int, str]]] = {}
    unknown = ""
    for place, need, what in needs:
        if not need:
            continue
        if place is None or place.free_bytes is None:
            unknown = unknown or (place.why_unknown if place is not None and place.why_unknown
                                  else storage.unknown_reason or "free disk not checked")
            continue
        by_disk.setdefault(place.disk_id or place.path, []).append((place, need, what))
    for items in by_disk.values():
        total = sum(n for _, n, _ in items)
        place = items[0][0]
        free = place.free_bytes or 0
        if total > free:
            what = " and ".join(w for _, _, w in items)
            return DISK_DOES_NOT_FIT, (f"{what} need{'s' if len(items) == 1 else ''} {format_gib(total)} on disk "
                                       f"at {place.path} but only {format_gib(free)} is free")
    if unknown:
        return DISK_UNKNOWN, unknown
    if not by_disk:
        return DISK_FITS, "nothing to download"
    place, need, _ = next(iter(by_disk.values()))[0]
    return DISK_FITS, f"{format_gib(need)} of {format_gib(place.free_bytes)} free at {place.path}"


def with_disk(verdict: Any, download: Download | None) -> Any:
    """The memory verdict with the disk's: a request that runs (or whose memory is unknown) but whose
    download does not fit on disk is DOES NOT FIT ON DISK (exit 1), the memory verdict kept as the next
    reason; a request that does not fit in memory or cannot run keeps that verdict (the download line
    says the disk too)."""
    if download is None or download.status != DISK_DOES_NOT_FIT or verdict.status not in (FITS, TIGHT, UNKNOWN):
        return verdict
    return Verdict(DOES_NOT_FIT_ON_DISK, verdict.devices, verdict.headroom,
                   (download.reason, f"memory: {verdict.summary()}"))
