"""ModelSpecs for estimator tests, transcribed from each model's config.json (numbers only, so
the estimator tests do not depend on the catalog)."""

from fitcheck.model.spec import ModelSpec

# Qwen/Qwen2.5-7B-Instruct config.json
QWEN25_7B = ModelSpec("Qwen/Qwen2.5-7B-Instruct", 28, 3584, 18944, 28, 4, 152064, qkv_bias=True,
                      architecture="qwen2", max_context=32768)
# Qwen/Qwen2.5-0.5B-Instruct (tied embeddings)
QWEN25_05B = ModelSpec("Qwen/Qwen2.5-0.5B-Instruct", 24, 896, 4864, 14, 2, 151936, qkv_bias=True,
                       tie_word_embeddings=True, architecture="qwen2", max_context=32768)
# meta-llama/Meta-Llama-3-8B-Instruct
LLAMA3_8B = ModelSpec("meta-llama/Meta-Llama-3-8B-Instruct", 32, 4096, 14336, 32, 8, 128256,
                      architecture="llama", max_context=8192)
# meta-llama/Llama-2-7b-hf (MHA, fp16 checkpoint)
LLAMA2_7B = ModelSpec("meta-llama/Llama-2-7b-hf", 32, 4096, 11008, 32, 32, 32000, architecture="llama",
                      max_context=4096, stored_dtype="float16")
# mistralai/Mixtral-8x7B-Instruct-v0.1
MIXTRAL = ModelSpec("mistralai/Mixtral-8x7B-Instruct-v0.1", 32, 4096, 14336, 32, 8, 32000, architecture="mixtral",
                    num_experts=8, experts_per_token=2, moe_intermediate_size=14336, max_context=32768)
# deepseek-ai/DeepSeek-V3
DEEPSEEK_V3 = ModelSpec("deepseek-ai/DeepSeek-V3", 61, 7168, 18432, 128, 128, 129280, architecture="deepseek_v3",
                        num_experts=256, experts_per_token=8, moe_intermediate_size=2048, num_shared_experts=1,
                        num_dense_layers=3, q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64,
                        qk_nope_head_dim=128, v_head_dim=128, max_context=163840)
# google/gemma-2-9b-it: sliding window 4096 on every other layer
GEMMA2_9B = ModelSpec("google/gemma-2-9b-it", 42, 3584, 14336, 16, 8, 256000, head_dim=256, tie_word_embeddings=True,
                      architecture="gemma2", norms_per_layer=4, sliding_window=4096, num_sliding_layers=21,
                      max_context=8192)
