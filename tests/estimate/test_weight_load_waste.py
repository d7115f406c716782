"""What the caching allocator's segments hold beyond a model's weights as they load."""

from estimate_specs import QWEN25_7B
from machines import machine, nvidia

from fitcheck.engines import estimate_inference
from fitcheck.estimate.allocator import load_waste
from fitcheck.estimate.formats import weight_format
from fitcheck.estimate.parts import weight_load_waste
from fitcheck.estimate.weights import weight_tensor_sizes
from fitcheck.model.spec import ModelSpec
from fitcheck.plan import resolve_inference
from fitcheck.request import Request

MiB = 1 << 20
# Qwen-1.8B's shape: 2048 hidden, MHA, 5504 MLP (Qwen1.5-1.8B in transformers)
QWEN_18 = ModelSpec("Qwen/Qwen1.5-1.8B-Chat", 24, 2048, 5504, 16, 16, 151936, qkv_bias=True, architecture="qwen2")


def test_tensors_of_ten_mib_or_more_round_up_to_two_mib():
    assert load_waste([64 * MiB, 32 * MiB]) == 0
    assert load_waste([21 * MiB + MiB // 2]) == MiB // 2


def test_smaller_tensors_share_twenty_mib_segments_and_leave_their_ends():
    # two 8 MiB matrices per 20 MiB segment; the 4 MiB left fits neither of the next pair
    assert load_waste([8 * MiB] * 4) == 2 * 4 * MiB
    # a 2 MiB tensor after them fills part of what was left
    assert load_waste([8 * MiB, 8 * MiB, 2 * MiB]) == 2 * MiB


def test_load_order_and_sizes_follow_the_modules():
    sizes = weight_tensor_sizes(QWEN_18, weight_format("bf16"))
    embedding = 151936 * 2048 * 2
    assert sizes[0] == sizes[-1] == embedding            # untied: embeddings first, lm_head last
    assert sizes[1:8] == [2048 * 2048 * 2] * 4 + [2048 * 5504 * 2] * 3
    assert len(sizes) == 2 + 24 * 7
    packed = weight_tensor_sizes(QWEN_18, weight_format("gptq-int4"))
    assert packed[0] == embedding and packed[1] < sizes[1] / 3


def test_qwen_18b_attention_matrices_leave_a_quarter_of_their_segments():
    # 96 attention matrices of 8 MiB, two per 20 MiB segment: 48 × 4 MiB; the MLP's 21.5 MiB ones 0.5 each
    assert 48 * 4 * MiB <= weight_load_waste(QWEN_18, "bf16") <= 48 * 4 * MiB + 24 * 3 * MiB


def test_inference_overhead_counts_the_segments_once_per_gpu_share():
    one = resolve_inference(Request(), QWEN25_7B, machine([nvidia()]))
    two = resolve_inference(Request(gpus=2), QWEN25_7B, machine([nvidia(index=0), nvidia(index=1)]))
    waste = weight_load_waste(QWEN25_7B, "bf16")
    detail = next(c.detail for c in estimate_inference(QWEN25_7B, one).devices[0].components if c.name == "overhead")
    assert f"{waste / MiB:,.0f} MiB" in detail

    def overhead(plan):
        gpu = estimate_inference(QWEN25_7B, plan).devices[0]
        return sum(c.bytes for c in gpu.components if c.name == "overhead" and c.counted_in == "reserved")

    # both transient slacks are at their 64 MiB floor: the difference is the waste of the weights GPU0 does not
    # hold (a little more than half: device_map="auto" caps GPU0 below an even share)
    from fitcheck.engines import get

    _weights = get("transformers").weights

    from fitcheck.engines.transformers.memory import device_map_split

    wb = _weights(QWEN25_7B, "bf16")
    share = device_map_split(QWEN25_7B, wb, 2, two.gpu_total_bytes).weight_bytes[0] / wb.total
    assert 0.4 < share < 0.5
    assert overhead(one) - overhead(two) == waste - int(waste * share)


# load_waste's fast path (only free-block sizes, whole periods of equal requests at once) must
# equal replaying every request through CachingAllocator.
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fitcheck.estimate.allocator import load_waste_replayed  # noqa: E402

_SIZES = st.sampled_from([100, 512, 700, 300 * 1024, MiB, MiB + 1, 3 * MiB, 7 * MiB + 5, 8 * MiB, 9 * MiB,
                          10 * MiB, 12 * MiB + 3, 19 * MiB, 33 * MiB])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_SIZES, st.integers(1, 40)), max_size=12))
def test_fast_load_waste_equals_the_replay(runs):
    sizes = [size for size, count in runs for _ in range(count)]
    assert load_waste(sizes) == load_waste_replayed(sizes)


def test_fast_load_waste_equals_the_replay_for_catalog_moe_models():
    from fitcheck.estimate.formats import weight_format
    from fitcheck.estimate.weights import weight_tensor_sizes
    from fitcheck.model.catalog import get_entry

    for hf_id in ("Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V2-Lite", "mistralai/Mixtral-8x7B-Instruct-v0.1"):
        spec = get_entry(hf_id).spec
        for precision in ("bf16", "awq", "int8"):
            sizes = list(weight_tensor_sizes(spec, weight_format(precision)))
            assert load_waste(sizes) == load_waste_replayed(sizes), (hf_id, precision)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(_SIZES, min_size=1, max_size=6), st.integers(1, 20)), min_size=1, max_size=5))
def test_load_waste_by_layer_cycles_equals_the_replay(runs):
    # runs of layers whose smallest requests differ: free blocks dead for the later runs are dropped
    from fitcheck.estimate.allocator import load_waste_runs

    sizes = [size for layer, count in runs for _ in range(count) for size in layer]
    assert load_waste_runs(runs) == load_waste_replayed(sizes)
