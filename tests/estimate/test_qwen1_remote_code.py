"""Qwen(1) remote code (modeling_qwen.py as shipped since 2023-12-07) in a training step.

Sources: Qwen/Qwen-7B modeling_qwen.py @d4efd21 (history mirrored at github.com/zhangningboo/Qwen-7B);
accelerate Accelerator.prepare_model / convert_outputs_to_fp32.  Measured: the saved storages of a
4- and a 2-layer bf16 QWen of that code with peft LoRA on c_attn under bf16 autocast, its forward
wrapped as accelerate wraps it (saved_tensors_hooks, torch 2.13 CPU SDPA):
benchmarks/results/qwen1-remote-saved-cpu-2026-12-01.csv.
"""

import csv
from dataclasses import replace
from pathlib import Path

import pytest
from machines import machine, nvidia

from fitcheck.engines import estimate_inference
from fitcheck.engines.training.memory import (
    TEMP_BUFFERS,
    after_forward_bytes,
    estimate_training,
    remote_code_layer_bytes,
)
from fitcheck.estimate.result import ACTIVATIONS, LOGITS, WEIGHTS
from fitcheck.estimate.training_activations import layer_bytes_per_token
from fitcheck.model.hf_config import spec_from_config
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import TrainingPlan, resolve_inference, resolve_training
from fitcheck.request import Request

A100 = machine([nvidia("NVIDIA A100-SXM4-80GB", 81920, cc="8.0")])
# Qwen/Qwen-7B-Chat config.json (8,192 positions)
QWEN1_7B = ModelSpec("Qwen/Qwen-7B-Chat", 32, 4096, 11008, 32, 32, 151936, head_dim=128, qkv_bias=True,
                     architecture="qwen", max_context=8192)
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "qwen1-remote-saved-cpu-2026-12-01.csv"
# The measured model's config.json (QWenConfig, bf16)
TINY = spec_from_config({"architectures": ["QWenLMHeadModel"], "model_type": "qwen", "vocab_size": 4096,
                         "hidden_size": 256, "num_attention_heads": 4, "kv_channels": 64, "num_hidden_layers": 4,
                         "intermediate_size": 1376, "max_position_embeddings": 1024, "seq_length": 1024,
                         "no_bias": True, "torch_dtype": "bfloat16"}, "tiny-qwen1")


def _plan(spec, *, attention="sdpa", batch=1, seq_len=2048, ckpt=False, **kw) -> TrainingPlan:
    return resolve_training(Request(mode="lora", seq_len=seq_len, batch=batch, attention=attention,
                                    grad_checkpointing=ckpt, lora_targets="c_attn", **kw), spec, A100)


def _dev(spec, **kw):
    return estimate_training(spec, _plan(spec, **kw)).devices[0]


def _measured() -> dict[str, dict]:
    with RESULTS.open(newline="") as f:
        return {r["case_id"]: r for r in csv.DictReader(f)}


def _per_layer(rows, seq, batch, drop):
    """Saved bytes of one decoder layer: the 4-layer run minus the 2-layer run, halved."""
    four = int(rows[f"qwen1-tiny-L4-s{seq}-b{batch}-d{drop}"]["saved_bytes"])
    two = int(rows[f"qwen1-tiny-L2-s{seq}-b{batch}-d{drop}"]["saved_bytes"])
    return (four - two) // 2


def test_each_layer_keeps_the_fused_qkv_output_and_its_own_mask_as_measured():
    rows = _measured()
    # Per layer: a fixed part (peft's bf16 casts of the fp32 adapter weights under autocast) plus a
    # per-token part; batch 2 at 256 tokens separates them.
    fixed = 2 * _per_layer(rows, 256, 1, 0) - _per_layer(rows, 256, 2, 0)
    assert fixed == 8 * 256 * 2 + 768 * 8 * 2  # lora_A and lora_B weights in bf16
    for seq in (256, 512):
        per_token = (_per_layer(rows, seq, 1, 0) - fixed) // seq
        plan = _plan(TINY, seq_len=seq)
        # LoRA under autocast: lora_A keeps its input recast to bf16 (h × 2 B), lora_B the r outputs (r × 2 B)
        lora = TINY.hidden_size * 2 + 8 * 2
        block = layer_bytes_per_token(TINY, attention="sdpa", seq_len=seq, act_bytes=2, trainable_base=False,
                                      saved_inputs=frozenset(), lora_saved_bytes=lora)
        assert per_token == block + remote_code_layer_bytes(TINY, plan, 2)


def test_the_mask_grows_with_the_sequence_as_measured():
    # 1 × 1 × s × s bf16 per layer: s × 2 B per token, growing with s
    rows = _measured()
    fixed = 2 * _per_layer(rows, 256, 1, 0) - _per_layer(rows, 256, 2, 0)
    per_256 = (_per_layer(rows, 256, 1, 0) - fixed) // 256
    per_512 = (_per_layer(rows, 512, 1, 0) - fixed) // 512
    assert per_512 - per_256 == (512 - 256) * 2
    assert (remote_code_layer_bytes(TINY, _plan(TINY, seq_len=512), 2)
            - remote_code_layer_bytes(TINY, _plan(TINY, seq_len=256), 2)) == (512 - 256) * 2


def test_the_returned_cache_is_converted_to_fp32_as_measured():
    for r in _measured().values():
        layers, seq, batch = int(r["layers"]), int(r["seq_len"]), int(r["batch"])
        assert r["past_key_values_dtype"] == "float32"
        assert int(r["past_key_values_bytes"]) == layers * 2 * batch * seq * TINY.hidden_size * 4


def test_without_flash_attention_each_layer_saves_a_batch_by_seq_squared_mask():
    for batch in (1, 2):
        sdpa = _dev(QWEN1_7B, batch=batch)
        flash = _dev(QWEN1_7B, attention="flash", batch=batch)
        fused = 0 if batch == 1 else (4096 + 4096) * 2 * batch * 2048 * 32  # flash unpads at batch > 1
        assert sdpa.component(ACTIVATIONS) - flash.component(ACTIVATIONS) == 32 * batch * 2048 ** 2 * 2 + fused


def test_flash_attention_keeps_the_fused_output_only_at_batch_1():
    q_plus_k = (4096 + 4096) * 2
    assert remote_code_layer_bytes(QWEN1_7B, _plan(QWEN1_7B, attention="flash"), 2) == q_plus_k
    assert remote_code_layer_bytes(QWEN1_7B, _plan(QWEN1_7B, attention="flash", batch=2), 2) == 0
    assert remote_code_layer_bytes(QWEN1_7B, _plan(QWEN1_7B, batch=2), 2) == q_plus_k + 2048 * 2
    llama_like = replace(QWEN1_7B, architecture="llama")
    assert remote_code_layer_bytes(llama_like, _plan(llama_like), 2) == 0


def test_no_fixed_size_causal_mask_buffer():
    # Removed upstream 2023-11-14 ("remove fix-sized causal mask"): weights and buffers do not depend on
    # the attention kernel, for training and inference.
    sdpa, flash = _dev(QWEN1_7B), _dev(QWEN1_7B, attention="flash")
    for name in (WEIGHTS, TEMP_BUFFERS):
        assert sdpa.component(name) == flash.component(name)
    inf = {a: estimate_inference(QWEN1_7B, resolve_inference(Request(context=2048, attention=a), QWEN1_7B, A100))
           for a in ("sdpa", "flash")}
    assert inf["sdpa"].devices[0].component(WEIGHTS) == inf["flash"].devices[0].component(WEIGHTS)


@pytest.mark.parametrize("ckpt", [False, True])
def test_fp32_copies_of_the_returned_cache_without_checkpointing(ckpt):
    v, tokens = 151936, 2048
    logits = _dev(QWEN1_7B, attention="flash", ckpt=ckpt).component(LOGITS)
    if ckpt:  # use_cache is off: the loss's own peak, 16-bit logits, shifted copy, fp32 cast and log-softmax
        assert logits == tokens * v * 12
    else:  # 16-bit and fp32 logits, the saved fp32 log-softmax, fp32 k and v of 32 layers
        assert logits == tokens * (v * 2 + v * 4 + v * 4 + 32 * 2 * 4096 * 4)


def test_no_fp32_cache_copies_without_native_amp_or_for_other_models():
    assert after_forward_bytes(QWEN1_7B, _plan(QWEN1_7B, zero=2, gpus=1), 2, False) == 0
    assert after_forward_bytes(QWEN1_7B, _plan(QWEN1_7B, ckpt=True), 2, True) == 0
    llama_like = replace(QWEN1_7B, architecture="llama")
    assert after_forward_bytes(llama_like, _plan(llama_like), 2, True) == 0


def test_the_logits_line_says_when_the_returned_outputs_are_its_peak():
    no_ckpt = _dev(QWEN1_7B, attention="flash")
    ckpt = _dev(QWEN1_7B, attention="flash", ckpt=True)
    assert "fp32 copies" in next(c.detail for c in no_ckpt.components if c.name == LOGITS)
    assert "fp32 copies" not in next(c.detail for c in ckpt.components if c.name == LOGITS)


def test_the_first_releases_per_layer_mask_buffers_are_weights_on_the_gpu():
    # August 2023 code: a 6,144² bool buffer in each of the 32 layers, flash-attention or not; current
    # code: none.  Inference splits them with the layers; every training rank holds them whole.
    import json

    cfg = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "configs" /
                      "Qwen-7B-Chat-2023-08.json").read_text())
    old = spec_from_config(cfg, "Qwen-7B-Chat-2023-08")
    new = replace(old, load_buffer_bytes=0, load_buffer_note="")
    buffers = 32 * 6144 * 6144

    def weights(spec, est):
        return sum(c.bytes for c in est.devices[0].components if c.name == WEIGHTS)

    inf = [estimate_inference(s, resolve_inference(Request(), s, A100)) for s in (old, new)]
    assert weights(old, inf[0]) - weights(new, inf[1]) == buffers
    trn = [estimate_training(s, resolve_training(Request(mode="lora"), s, A100)) for s in (old, new)]
    assert weights(old, trn[0]) - weights(new, trn[1]) == buffers
