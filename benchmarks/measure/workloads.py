"""The work each phase of a case does (torch, transformers, peft), and tensor-byte counting.

Each function does one phase's work and returns the objects it leaves alive plus a dict of
tensor bytes it *counted* (from the live tensors, not measured); the caller wraps it in the
meter.  Models are built from a config with random initialisation: memory does not depend on
the weight values, so this measures the same as a real checkpoint without downloading one.
"""

from __future__ import annotations

import torch
import transformers
from transformers import AutoModelForCausalLM

# The helpers `fitcheck measure` uses too live in fitcheck.measure.workload (one copy).
from fitcheck.measure.workload import DTYPE_KWARG as _DTYPE_KWARG
from fitcheck.measure.workload import TORCH_DTYPES, make_config, tensor_bytes
from fitcheck.measure.workload import cache_of as _cache_of
from fitcheck.measure.workload import parameter_counts as _parameter_counts

from .cases import LORA_TARGETS, Case
from .hf_config import scaled_spec, spec_to_hf_config
from .models import spec_for


def prepare(case: Case) -> dict:
    """The config to build, with the model's code imported (call before the baseline).

    transformers imports a model's modeling module lazily, and peft is imported on first use;
    doing both here keeps their memory out of the build phase.
    """
    spec, spec_source = spec_for(case.model)
    config_dict = spec_to_hf_config(spec, case.layers)
    config = make_config(config_dict)  # imports the modeling module too
    if case.mode == "train_lora":
        import peft  # noqa: F401
    return {"spec": spec, "spec_source": spec_source, "config": config, "model_type": config_dict["model_type"]}


def build(case: Case, device: str, prepared: dict):
    """Build the model (and its LoRA adapter) on ``device``; return (model, counted, info)."""
    spec, config, model_type = prepared["spec"], prepared["config"], prepared["model_type"]
    kwargs = {_DTYPE_KWARG: TORCH_DTYPES[case.dtype], "attn_implementation": case.attn}
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, **kwargs)
    training = case.mode.startswith("train")
    if training and case.grad_checkpointing:
        # Non-reentrant checkpointing works with a frozen (LoRA) base without
        # enable_input_require_grads(); it is what recent transformers/TRL recommend.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if case.mode == "train_lora":
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=case.lora_rank, lora_alpha=2 * case.lora_rank, lora_dropout=0.0,
                          target_modules=LORA_TARGETS[case.lora_targets], task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    model.train(training)
    counted = _parameter_counts(model)
    info = {
        "architecture": model_type,
        "spec_source": prepared["spec_source"],
        "layers_full": spec.num_layers,
        "layers_used": config.num_hidden_layers,
        "spec_params": scaled_spec(spec, case.layers).total_params,
        "params_built": counted.pop("params_built"),
        "trainable_params": counted.pop("trainable_params"),
        "attn_impl_used": getattr(config, "_attn_implementation", "") or "",
    }
    return model, counted, info


def random_ids(case: Case, model, device: str) -> torch.Tensor:
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (case.batch, case.seq_len), generator=generator)
    return ids.to(device)


def prefill(case: Case, model, ids: torch.Tensor):
    """One forward over the prompt with the KV cache; returns (output, counted)."""
    with torch.inference_mode():
        output = model(input_ids=ids, use_cache=True, logits_to_keep=case.logits_to_keep)
    counted = {"kv_cache_bytes": tensor_bytes(_cache_of(output)),
               "logits_bytes": output.logits.numel() * output.logits.element_size()}
    return output, counted


def generate(case: Case, model, ids: torch.Tensor):
    """Greedy generation of exactly ``new_tokens`` tokens after the prompt."""
    with torch.inference_mode():
        sequences = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=case.new_tokens,
            min_new_tokens=case.new_tokens, do_sample=False, pad_token_id=0,
        )
    return sequences, {"generated_tokens": int(sequences.shape[1] - ids.shape[1])}


def make_optimizer(case: Case, model):
    params = [p for p in model.parameters() if p.requires_grad]
    if case.optimizer == "adamw":
        # PyTorch defaults: foreach on CUDA, a per-parameter loop on CPU; states in param dtype.
        return torch.optim.AdamW(params, lr=1e-5)
    raise ValueError(f"unknown optimizer {case.optimizer!r}")


def forward_loss(case: Case, model, ids: torch.Tensor, device: str):
    """Forward with labels; keeps only the loss, as a training loop does."""
    if case.autocast:
        with torch.autocast(device_type=device, dtype=TORCH_DTYPES[case.autocast]):
            output = model(input_ids=ids, labels=ids, use_cache=False)
    else:
        output = model(input_ids=ids, labels=ids, use_cache=False)
    counted = {"logits_bytes": output.logits.numel() * output.logits.element_size()}
    loss = output.loss
    del output
    return loss, counted


def backward(loss, model):
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return {"grad_bytes": sum(g.numel() * g.element_size() for g in grads)}


def optimizer_step(optimizer):
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"optimizer_state_bytes": tensor_bytes(dict(optimizer.state))}


def versions() -> dict[str, str]:
    try:
        import peft

        peft_version = peft.__version__
    except ImportError:
        peft_version = ""
    return {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "peft_version": peft_version}
