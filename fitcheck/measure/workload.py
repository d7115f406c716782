"""The torch side of a measurement: build the model, run the request, count tensors.

Imported only in the measuring child process (``fitcheck.measure.child``) and by
``benchmarks/measure``; nothing else in fitcheck imports torch.

* :func:`build_model` builds the architecture from its config on the **meta** device (no memory),
  allocates it directly on the target device in the requested dtype (``Module.to_empty``) and
  fills it with random values through transformers' own initialisers (``initialize_weights``:
  normal(0, initializer_range) for linears and embeddings, ones for norms, the rotary tables
  computed), so every page is written and counted, and no checkpoint is read: memory does not
  depend on weight values.  bitsandbytes int8/nf4 (CUDA) replace each decoder ``nn.Linear`` on
  the meta model and quantize a random 16-bit matrix one layer at a time on the GPU.
  LoRA/QLoRA adapters come from peft (``get_peft_model``), as a training script makes them.
* :func:`prefill`, :func:`generate`, :func:`forward_loss`, :func:`backward`, :func:`optimizer_step`
  are one phase each; they return what they leave alive and the tensor bytes they *counted*.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import transformers
from packaging.version import Version

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# transformers renamed from_config's ``torch_dtype`` to ``dtype`` in 4.56.
DTYPE_KWARG = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"


def tensor_bytes(obj, _seen: set[int] | None = None) -> int:
    """Bytes of the distinct tensor storages reachable from ``obj``.

    Walks tensors, lists/tuples/dicts and plain objects' attributes (a transformers Cache keeps
    its tensors in per-layer objects whose layout changes between versions).  Storages are
    counted once, so views and shared (tied) tensors are not double counted.
    """
    seen = set() if _seen is None else _seen
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        key = storage.data_ptr()
        if key in seen or storage.nbytes() == 0:
            return 0
        seen.add(key)
        return storage.nbytes()
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple, set)):
        return sum(tensor_bytes(v, seen) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)):
        return sum(tensor_bytes(v, seen) for v in vars(obj).values())
    return 0


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """Parameter, buffer and trainable bytes of a model, counted (tied weights once)."""
    params = list(model.parameters())  # .parameters() yields tied weights once
    trainable = [p for p in params if p.requires_grad]
    return {
        "param_bytes": sum(p.numel() * p.element_size() for p in params),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in model.buffers()),
        "trainable_bytes": sum(p.numel() * p.element_size() for p in trainable),
        "params_built": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in trainable),
    }


def make_config(hf_config: dict):
    """The transformers config object of a config dict (``model_type`` included), modeling code imported.

    transformers imports a model's modeling module lazily; importing it here keeps that memory
    out of the build (call before the baseline).
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    config_dict = dict(hf_config)
    model_type = config_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **config_dict)
    AutoModelForCausalLM._model_mapping[type(config)]  # imports the modeling module
    return config


_FILL_CHUNK = 1 << 22   # elements filled at a time, so no whole-tensor temporary appears


def _fill_random(tensor: torch.Tensor, std: float, ones: bool = False) -> None:
    """Write every element of `tensor` in place (every page touched), a chunk at a time."""
    flat = tensor.detach().view(-1)
    for start in range(0, flat.numel(), _FILL_CHUNK):
        part = flat[start:start + _FILL_CHUNK]
        if ones:
            part.fill_(1.0)
        else:
            part.normal_(0.0, std)


def _rotary_tables(model: Any) -> None:
    """Recompute the rotary embeddings' inverse frequencies (buffers, not weights) after to_empty."""
    for module in model.modules():
        if "RotaryEmbedding" not in type(module).__name__ or not hasattr(module, "inv_freq"):
            continue
        if hasattr(module, "original_inv_freq") and hasattr(model, "_init_weights"):
            model._init_weights(module)           # transformers >= 5 computes them there
        elif hasattr(module, "rope_init_fn"):     # transformers 4.x
            inv_freq, _ = module.rope_init_fn(module.config, module.inv_freq.device)
            module.inv_freq.copy_(inv_freq)


def _initialise(model: Any, skip=lambda module: False) -> None:
    """Random values in every float parameter (norms: ones) and the rotary tables, after to_empty.

    The values are transformers' (normal with the config's initializer_range, ones for norms); they
    are written in chunks so initialisation adds no temporary a checkpoint load would not have.
    """
    std = float(getattr(model.config, "initializer_range", 0.02) or 0.02)
    model.tie_weights()  # first: a tied lm_head is still its own (empty, untouched) tensor after to_empty
    seen: set[int] = set()
    with torch.no_grad():
        for module in model.modules():
            if skip(module):
                continue
            norm = "Norm" in type(module).__name__
            for tensor in module.parameters(recurse=False):
                if id(tensor) in seen or not tensor.is_floating_point():
                    continue
                seen.add(id(tensor))
                _fill_random(tensor, std, ones=norm)
        _rotary_tables(model)
    model.tie_weights()


def _quantize_linears(model: torch.nn.Module, precision: str, device: str, compute_dtype) -> None:
    """Replace every decoder nn.Linear (not lm_head) of a meta model by a bitsandbytes layer on `device`.

    Each layer's weight is a random 16-bit matrix made on the GPU and quantized there
    (``Int8Params`` / ``Params4bit`` quantize when moved to CUDA), one layer at a time, so the
    16-bit copy of the whole model never exists: what loading a checkpoint with
    ``BitsAndBytesConfig`` holds.
    """
    import bitsandbytes as bnb

    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if not isinstance(child, torch.nn.Linear) or child_name == "lm_head":
                continue
            full = f"{name}.{child_name}" if name else child_name
            if full.endswith("lm_head"):
                continue
            bias = child.bias is not None
            if precision == "int8":
                layer = bnb.nn.Linear8bitLt(child.in_features, child.out_features, bias=bias,
                                            has_fp16_weights=False, threshold=6.0, device="meta")
                weight = torch.empty(child.out_features, child.in_features, dtype=torch.float16, device=device)
                weight.normal_(0.0, 0.02)
                layer.weight = bnb.nn.Int8Params(weight.cpu(), requires_grad=False, has_fp16_weights=False).to(device)
            else:
                layer = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=bias, compute_dtype=compute_dtype,
                                          compress_statistics=True, quant_type="nf4", device="meta")
                weight = torch.empty(child.out_features, child.in_features, dtype=compute_dtype, device=device)
                weight.normal_(0.0, 0.02)
                layer.weight = bnb.nn.Params4bit(weight, requires_grad=False, compress_statistics=True,
                                                 quant_type="nf4").to(device)
            del weight
            if bias:
                layer.bias = torch.nn.Parameter(torch.zeros(child.out_features, dtype=compute_dtype, device=device),
                                                requires_grad=False)
            setattr(module, child_name, layer)


def build_model(job, config) -> tuple[Any, dict[str, int]]:
    """The model of `job` on its device, random weights, adapters and checkpointing as asked."""
    from transformers import AutoModelForCausalLM

    dtype = TORCH_DTYPES[job.dtype]
    kwargs = {DTYPE_KWARG: dtype, "attn_implementation": job.attention if job.training else "sdpa"}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, **kwargs)
    if job.precision in ("int8", "nf4"):
        _quantize_linears(model, job.precision, job.device, dtype)
        # What the quantization left on meta (embeddings, norms, lm_head, rotary tables) goes to the device.
        for module in model.modules():
            if not _is_bnb(module):
                module.to_empty(device=job.device, recurse=False)
        _initialise(model, skip=_is_bnb)
    else:
        model.to_empty(device=job.device)
        _initialise(model)
    if job.training:
        if job.grad_checkpointing:
            # Non-reentrant checkpointing works with a frozen (LoRA) base without
            # enable_input_require_grads(); it is what recent transformers/TRL recommend.
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if job.mode in ("lora", "qlora"):
            model = _with_lora(model, job)
    model.train(job.training)
    counted = parameter_counts(model)
    return model, counted


def _is_bnb(module: torch.nn.Module) -> bool:
    return type(module).__module__.startswith("bitsandbytes")


def _with_lora(model, job):
    from peft import LoraConfig, get_peft_model

    kwargs = {}
    if job.lora_train_embeddings:
        kwargs["modules_to_save"] = ["embed_tokens", "lm_head"]
    lora = LoraConfig(r=job.lora_rank, lora_alpha=2 * job.lora_rank, lora_dropout=0.0,
                      target_modules=job.lora_targets, task_type="CAUSAL_LM", **kwargs)
    try:
        return get_peft_model(model, lora, autocast_adapter_dtype=job.fp32_adapters)
    except TypeError:  # peft < 0.12 has no autocast_adapter_dtype (adapters in the base dtype)
        return get_peft_model(model, lora)


def random_ids(batch: int, length: int, vocab: int, device: str, seed: int = 0) -> torch.Tensor:
    """Random token ids (no tokenizer needed: memory does not depend on which tokens)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=generator).to(device)


def cache_of(output):
    """The KV cache of a model output (``cache`` in transformers 5, ``past_key_values`` before)."""
    for name in ("cache", "past_key_values"):
        if output.get(name) is not None:
            return output[name]
    return None


def prefill(model, ids: torch.Tensor, logits_to_keep: int = 1):
    """One forward over the prompt with the KV cache; returns (output, counted)."""
    with torch.inference_mode():
        output = model(input_ids=ids, use_cache=True, logits_to_keep=logits_to_keep)
    counted = {"kv_cache_bytes": tensor_bytes(cache_of(output)),
               "logits_bytes": output.logits.numel() * output.logits.element_size()}
    return output, counted


def generate(model, ids: torch.Tensor, new_tokens: int, sampling: str = "greedy"):
    """Exactly ``new_tokens`` tokens after the prompt (its own prefill first), picked as the estimate assumes
    (``sampling``: fitcheck.estimate.generate_step.generate_kwargs).  No end-of-sequence token stops it, so
    no min_new_tokens processor is needed: the decoding step holds the tensors the estimate counts."""
    from fitcheck.estimate.generate_step import generate_kwargs

    model.generation_config.eos_token_id = None
    with torch.inference_mode():
        sequences = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
            eos_token_id=None, pad_token_id=0, **generate_kwargs(sampling),
        )
    return sequences, {"generated_tokens": int(sequences.shape[1] - ids.shape[1])}


# Learning rate of every optimizer made here: the states' memory does not depend on it.
LR = 1e-5


def make_optimizer(name: str, model):
    """The optimizer a training script makes for `name` (fitcheck's --optimizer), over the trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "adamw":
        # PyTorch defaults: foreach on CUDA, a per-parameter loop on CPU; states in param dtype.
        return torch.optim.AdamW(params, lr=LR)
    if name == "sgd":
        return torch.optim.SGD(params, lr=LR)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=LR, relative_step=False, scale_parameter=False)
    if name in ("adamw-8bit", "paged-adamw-8bit"):
        import bitsandbytes as bnb

        cls = bnb.optim.PagedAdamW8bit if name.startswith("paged") else bnb.optim.AdamW8bit
        return cls(params, lr=LR)
    raise ValueError(f"unknown optimizer {name!r}")


def forward_loss(model, ids: torch.Tensor):
    """Forward with labels; keeps only the loss, as a training loop does."""
    output = model(input_ids=ids, labels=ids, use_cache=False)
    counted = {"logits_bytes": output.logits.numel() * output.logits.element_size()}
    loss = output.loss
    del output
    return loss, counted


def backward(loss, model) -> dict[str, int]:
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return {"grad_bytes": sum(g.numel() * g.element_size() for g in grads)}


def optimizer_step(optimizer) -> dict[str, int]:
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"optimizer_state_bytes": tensor_bytes(dict(optimizer.state))}


def versions() -> dict[str, str]:
    """torch, transformers, peft, bitsandbytes and CUDA versions of this process ('' when absent)."""
    out = {"torch": torch.__version__, "transformers": transformers.__version__,
           "cuda": torch.version.cuda or "", "peft": "", "bitsandbytes": ""}
    for name in ("peft", "bitsandbytes"):
        with contextlib.suppress(Exception):  # absent or broken: recorded as ''
            out[name] = __import__(name).__version__
    return out
