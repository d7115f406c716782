"""QLoRA's recipe under the HF Trainer: the fp32 residual stream and transformers 4.46–4.48's shifted
fp32 logits copy (benchmarks/results/cpu-kbit-step-*.csv; transformers#35646)."""

import pytest
from estimate_specs import LLAMA3_8B
from machines import machine, nvidia

from fitcheck.engines.training.memory import estimate_training
from fitcheck.engines.transformers.releases import loss_shift_copy_mode
from fitcheck.estimate.result import ACTIVATIONS, LOGITS
from fitcheck.plan import resolve_training
from fitcheck.request import Request

A100 = machine([nvidia("NVIDIA A100-SXM4-80GB", 81920, cc="8.0")])
SEQ = 8192


def _dev(**kw):
    req = Request(**{"mode": "qlora", "seq_len": SEQ, "lora_rank": 32, "lora_targets": "all-linear",
                     "grad_checkpointing": True, "attention": "flash", **kw})
    return estimate_training(LLAMA3_8B, resolve_training(req, LLAMA3_8B, A100)).devices[0]


@pytest.mark.parametrize("version, copies", [(None, False), ("4.38.2", False), ("4.45", False), ("4.46", True),
                                             ("4.47.1", True), ("4.48.3", True), ("4.49", False), ("5.24", False)])
def test_the_shift_copy_releases(version, copies):
    assert loss_shift_copy_mode("llama", version) is copies


def test_remote_code_qwen1_keeps_its_own_loss():
    assert not loss_shift_copy_mode("qwen", "4.47")


def test_447_holds_one_more_fp32_vocabulary_tensor_per_token_at_batch_2():
    old, new = _dev(transformers_version="4.47", batch=2), _dev(transformers_version="4.49", batch=2)
    # 16-bit logits + fp32 upcast + shifted copy + log-softmax while log_softmax runs: 14 B per entry,
    # above the 12 B of the loss's backward (saved log-softmax, its gradient, its input's gradient)
    head = LLAMA3_8B.vocab_size * LLAMA3_8B.hidden_size * 2  # autocast's bf16 copy of the fp32 lm_head
    assert old.component(LOGITS) == 2 * SEQ * LLAMA3_8B.vocab_size * 14 + head
    assert new.component(LOGITS) == 2 * SEQ * LLAMA3_8B.vocab_size * 12 + head


def test_the_fp32_lm_head_is_cast_for_autocast_and_kept_for_backward():
    # measured 12.49 B per vocabulary entry per token at 512 tokens (h=128): 12 + 2·h/T
    nf4, gptq = _dev(precision="nf4"), _dev(precision="gptq-int4")
    head = LLAMA3_8B.vocab_size * LLAMA3_8B.hidden_size * 2
    assert nf4.component(LOGITS) - gptq.component(LOGITS) == head


def test_at_batch_1_the_shifted_slice_is_not_copied():
    # logits[..., :-1, :] of a (1, T, V) tensor is contiguous: .contiguous() returns it (measured:
    # 12.5 B per vocabulary entry per token under 4.47.1 and 5.24 alike)
    assert _dev(transformers_version="4.47").component(LOGITS) == _dev(transformers_version="4.49").component(LOGITS)


def test_nf4_bases_checkpoint_an_fp32_residual_stream():
    # prepare_model_for_kbit_training upcasts the embeddings: every layer input is fp32 (4 B), where
    # a GPTQ base (not upcast) keeps them in bf16.
    nf4, gptq = _dev(precision="nf4"), _dev(precision="gptq-int4")
    h, L = LLAMA3_8B.hidden_size, LLAMA3_8B.num_layers
    assert nf4.component(ACTIVATIONS) - gptq.component(ACTIVATIONS) == SEQ * L * h * 2
