"""benchmarks/accuracy.py maps rows of any table in the calibration schema, or says why not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import accuracy as A  # noqa: E402

CONFIGS = {"Llama-2-7B": {"num_hidden_layers": 32, "hidden_size": 4096, "vocab_size": 32000},
           "Qwen-7B": {"num_hidden_layers": 32, "hidden_size": 4096, "vocab_size": 151936}}


def row(**kw):
    base = dict(source="a table", model="Llama-2-7B", mode="inference", precision="FP16", framework="vLLM 0.6",
                gpu="NVIDIA A100 40GB", batch="1", input_len="512", output_len="128", grad_checkpointing="n/a",
                flash_attn="n/a", measured_gb="20.0", notes="", num_gpus="1", memory_scope="per_gpu",
                unit_basis="GiB", metric="nvidia-smi", quality="measured", config_key="Llama-2-7B")
    base.update(kw)
    return base


def test_model_comes_from_the_catalog_with_the_configs_shapes():
    assert A.row_spec(row(), CONFIGS).name == "meta-llama/Llama-2-7b-chat-hf"
    # the set's "Qwen-7B" is the original Qwen, not the catalog's newest "qwen-7b" (Qwen2.5)
    assert A.row_spec(row(model="Qwen-7B", config_key="Qwen-7B"), CONFIGS).architecture == "qwen"


def test_unknown_model_without_config_is_skipped_with_the_reason():
    with pytest.raises(A.Skip, match="not in the catalog"):
        A.row_spec(row(model="NoSuchModel-3B", config_key="NoSuchModel-3B"), CONFIGS)


def test_inference_row_uses_the_engine_gpu_and_counter():
    r = A.inference_row(row(), CONFIGS)
    assert r.measured_gib == 20.0
    # vLLM reserves gpu_memory_utilization × the row's 40 GB card; the CUDA context and CUDA graphs on top
    from fitcheck.engines.vllm.memory import vllm_outside_reservation
    from fitcheck.model.resolve import resolve_model

    spec = resolve_model(row()["model"]).spec
    assert r.predicted_gib == pytest.approx(0.9 * 40 + vllm_outside_reservation(spec, spec.num_layers, 1) / 2**30)
    allocated = A.inference_row(row(framework="transformers", metric="torch_max_allocated"), CONFIGS)
    assert 12 < allocated.predicted_gib < 14  # 6.74B params in fp16 + a 640-token prefill


@pytest.mark.parametrize("basis, scope, gpus, expected", [("GiB", "per_gpu", "1", 20.0),
                                                          ("GB as printed", "per_gpu", "1", 20e9 / 2**30),
                                                          ("GiB", "total_all_gpus", "2", 10.0)])
def test_measured_units_and_scope(basis, scope, gpus, expected):
    assert A._measured_gib(row(unit_basis=basis, memory_scope=scope, num_gpus=gpus)) == pytest.approx(expected)


def test_unknown_precision_is_skipped():
    with pytest.raises(A.Skip, match="precision"):
        A.inference_row(row(precision="mystery-3bit"), CONFIGS)


def test_training_row_reads_its_setup_from_columns_and_notes():
    r = row(mode="lora", precision="bf16", framework="ms-swift", input_len="2048", output_len="", batch="2",
            grad_checkpointing="yes", flash_attn="yes", metric="torch_max_reserved", model="Qwen-7B",
            config_key="Qwen-7B",
            notes="lora rank 64; target_modules=c_attn; lora dropout 0.05; gradient_accumulation_steps 16")
    spec = A.row_spec(r, CONFIGS)
    plan = A.generic_training_plan(r, spec)
    assert (plan.mode, plan.seq_len, plan.batch, plan.grad_accum) == ("lora", 2048, 2, 16)
    assert (plan.lora_rank, plan.lora_targets, plan.lora_dropout) == (64, "c_attn", 0.05)
    assert plan.grad_checkpointing and plan.attention == "flash" and plan.zero is None
    got = A.training_row(r, CONFIGS)
    assert got.mode == "training" and got.predicted_gib > 14  # at least the bf16 weights


def test_training_row_with_deepspeed_and_a_base_the_mode_cannot_take():
    r = row(mode="full", precision="bf16", input_len="1024", output_len="", notes="DeepSpeed ZeRO-3", num_gpus="4",
            grad_checkpointing="yes", flash_attn="no")
    assert A.generic_training_plan(r, A.row_spec(r, CONFIGS)).zero == 3
    with pytest.raises(A.Skip, match="not a lora base"):
        A.generic_training_plan(dict(r, mode="lora", precision="int8 (gptq)"), A.row_spec(r, CONFIGS))


@pytest.mark.parametrize("framework, mode", [("transformers 4.46.0 (+AutoGPTQ 0.7.1)", "last"),
                                             ("transformers 4.40.1", "all-fp32"), ("transformers", "last"),
                                             ("vLLM 0.6", "last")])
def test_old_transformers_return_fp32_logits_for_every_position(framework, mode):
    assert A._logits_mode(framework) == mode
    assert A._logits_mode(framework, "qwen") == "all"  # Qwen1 remote code: every position, compute dtype
