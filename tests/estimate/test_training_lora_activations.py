"""LoRA adapter branches' saved tensors (peft lora.Linear.forward) and the fp32 loss backward."""

import pytest
from estimate_specs import QWEN25_7B
from machines import machine, nvidia

from fitcheck.engines.training.memory import estimate_training
from fitcheck.estimate.lora import adapter_saved_bytes_per_token
from fitcheck.estimate.lora_targets import parse_targets
from fitcheck.estimate.result import ACTIVATIONS, LOGITS
from fitcheck.estimate.training_activations import logits_bytes_per_token
from fitcheck.plan import resolve_training
from fitcheck.request import Request

A100 = machine([nvidia("NVIDIA A100-SXM4-80GB", 81920, cc="8.0")])


def gpu(**kw):
    kw.setdefault("mode", "lora")
    kw.setdefault("precision", "bf16")
    plan = resolve_training(Request(seq_len=kw.pop("seq_len", 1024), **kw), QWEN25_7B, A100)
    return estimate_training(QWEN25_7B, plan).gpu_devices[0]


def acts(**kw):
    return gpu(**kw).component(ACTIVATIONS)


def test_fp32_input_copy_per_adapted_module_from_real_shapes():
    # Qwen2.5-7B: q/k/v/o all read 3584 features; r=8; each module its own fp32 copy + rank.
    got = adapter_saved_bytes_per_token(QWEN25_7B, parse_targets("q_proj,k_proj,v_proj,o_proj"), 8,
                                        adapter_bytes=4, compute_bytes=2, dropout=0.0)
    assert got == 4 * (3584 * 4 + 8 * 4)
    # all-linear adds gate/up (3584 in) and down_proj (intermediate 18944 in).
    got = adapter_saved_bytes_per_token(QWEN25_7B, parse_targets("all-linear"), 8,
                                        adapter_bytes=4, compute_bytes=2, dropout=0.0)
    assert got == (6 * 3584 + 18944) * 4 + 7 * 8 * 4


def test_same_dtype_adapters_save_nothing_extra_without_dropout():
    assert adapter_saved_bytes_per_token(QWEN25_7B, parse_targets("all-linear"), 64,
                                         adapter_bytes=2, compute_bytes=2, dropout=0.0) == 0
    # dropout: a dropped-out copy (adapter dtype) and a 1-byte mask per module input.
    assert adapter_saved_bytes_per_token(QWEN25_7B, parse_targets("q_proj"), 8,
                                         adapter_bytes=2, compute_bytes=2, dropout=0.1) == 3584 * 3


def test_fp32_adapters_on_bf16_base_save_more_than_bf16_adapters():
    fp32 = acts(master_weights="fp32")   # peft >= 0.12: adapters kept in fp32
    bf16 = acts(master_weights="none")   # adapters in the base dtype (older peft)
    assert fp32 > bf16


def test_extra_grows_with_rank_and_targets():
    def extra(**kw):
        return acts(master_weights="fp32", **kw) - acts(master_weights="none", **kw)
    attn8 = extra(lora_rank=8, lora_targets="attention")
    attn64 = extra(lora_rank=64, lora_targets="attention")
    all64 = extra(lora_rank=64, lora_targets="all-linear")
    assert 0 < attn8 < attn64 < all64
    # fp32 adapters save their own fp32 input copies; bf16 adapters (no dropout) read the input
    # tensor itself, which the frozen base would not keep: the attention input, 3584 × 2 B.
    assert attn8 == 1024 * QWEN25_7B.num_layers * (adapter_saved_bytes_per_token(
        QWEN25_7B, parse_targets("attention"), 8, adapter_bytes=4, compute_bytes=2, dropout=0.0) - 3584 * 2)


def test_qlora_fp32_adapters_also_save_the_cast():
    # Without checkpointing (the QLoRA recipe turns it on, and then only layer inputs are saved).
    assert acts(mode="qlora", precision="nf4", master_weights="fp32", grad_checkpointing=False) > \
        acts(mode="qlora", precision="nf4", master_weights="none", grad_checkpointing=False)


def test_fp32_compute_has_no_cast():
    assert adapter_saved_bytes_per_token(QWEN25_7B, parse_targets("all-linear"), 64,
                                         adapter_bytes=4, compute_bytes=4, dropout=0.0) == 0


def test_checkpointing_bounds_the_extra_to_one_layer():
    kw = dict(lora_rank=64, lora_targets="all-linear", grad_checkpointing=True, seq_len=8192)
    full = dict(kw, grad_checkpointing=False)
    per_layer = 8192 * adapter_saved_bytes_per_token(QWEN25_7B, parse_targets("all-linear"), 64,
                                                      adapter_bytes=4, compute_bytes=2, dropout=0.0)
    no_ckpt = gpu(master_weights="fp32", **full).component(ACTIVATIONS) - \
        gpu(master_weights="none", **full).component(ACTIVATIONS)
    # bf16 adapters keep the attention input, the MLP input and down_proj's input (h, h, I).
    assert no_ckpt == QWEN25_7B.num_layers * (per_layer - 8192 * (3584 + 3584 + 18944) * 2)
    on, off = gpu(master_weights="fp32", **kw), gpu(master_weights="none", **kw)
    # One recomputed layer's worth at most (it shows only where that layer outweighs the logits).
    assert 0 <= (on.component(ACTIVATIONS) + on.component(LOGITS)) - \
        (off.component(ACTIVATIONS) + off.component(LOGITS)) <= per_layer


@pytest.mark.parametrize("act_bytes", [2, 4])
def test_fp32_loss_backward_holds_three_fp32_vocab_tensors(act_bytes):
    v = QWEN25_7B.vocab_size
    assert logits_bytes_per_token(QWEN25_7B, act_bytes=act_bytes, upcast=True, shifts_logits=False) == 12 * v


# Bytes per token of one decoder layer saved for backward, measured tensor by tensor with
# torch.autograd.graph.saved_tensors_hooks on transformers 5.24 / torch 2.13 / peft 0.21 (CPU,
# 2-layer models built from config; layer 1, whose input already requires grad).
def _smol():
    from fitcheck.model.spec import ModelSpec
    return ModelSpec("HuggingFaceTB/SmolLM2-135M", 30, 576, 1536, 9, 3, 49152, architecture="llama",
                     tie_word_embeddings=True)


@pytest.mark.parametrize("case, expected", [
    ("qwen05 bf16 full sdpa", 57408),
    ("smol135 fp32 full sdpa", 44588),
    ("smol135 fp32 full eager", 52232),
    ("smol135 bf16 full eager", 33032),
])
def test_full_fine_tuning_layer_matches_measured_saved_tensors(case, expected):
    from estimate_specs import QWEN25_05B

    from fitcheck.estimate.training_activations import layer_bytes_per_token
    spec = QWEN25_05B if case.startswith("qwen05") else _smol()
    got = layer_bytes_per_token(spec, attention=case.split()[-1], seq_len=128,
                                act_bytes=2 if " bf16 " in case else 4)
    assert got == expected


@pytest.mark.parametrize("rank, targets, expected", [(8, "q_proj,k_proj,v_proj,o_proj", 54976),
                                                      (64, "all-linear", 83264)])
def test_lora_layer_on_frozen_bf16_base_matches_measured_saved_tensors(rank, targets, expected):
    # Frozen linears keep no inputs and frozen norms no normalised copy; peft's fp32 adapters
    # keep their own fp32 input copies.
    from estimate_specs import QWEN25_05B

    from fitcheck.estimate.training_activations import layer_bytes_per_token
    lora = adapter_saved_bytes_per_token(QWEN25_05B, parse_targets(targets), rank, adapter_bytes=4,
                                         compute_bytes=2, dropout=0.0)
    got = layer_bytes_per_token(QWEN25_05B, attention="sdpa", seq_len=128, act_bytes=2, trainable_base=False,
                                saved_inputs=frozenset(), lora_saved_bytes=lora)
    assert got == expected


def test_frozen_base_keeps_less_than_full_fine_tuning():
    from fitcheck.estimate.training_activations import layer_bytes_per_token
    full = layer_bytes_per_token(QWEN25_7B, attention="sdpa", seq_len=1, act_bytes=2)
    frozen = layer_bytes_per_token(QWEN25_7B, attention="sdpa", seq_len=1, act_bytes=2, trainable_base=False,
                                   saved_inputs=frozenset())
    h, inter = 3584, 18944
    # two norms' normalised copies, the two linear inputs (h) and down_proj's input (I), in bf16
    assert full - frozen == (2 * h + 2 * h + inter) * 2


def test_layernorm_keeps_its_input_not_an_fp32_copy():
    from dataclasses import replace

    from fitcheck.estimate.training_activations import norm_bytes_per_token
    ln = replace(QWEN25_7B, norm_has_bias=True)
    assert norm_bytes_per_token(ln, 2, trainable=True) == 3584 * 2 + 8
    assert norm_bytes_per_token(QWEN25_7B, 2, trainable=True) == 3584 * 4 + 4 + 3584 * 2
    assert norm_bytes_per_token(QWEN25_7B, 2, trainable=False) == 3584 * 4 + 4
