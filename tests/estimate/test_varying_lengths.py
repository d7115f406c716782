"""max_memory_reserved on a roomy GPU when lengths vary between steps: the caching allocator replayed
over the estimate's own step tensors (fitcheck.estimate.varying_lengths)."""

from fitcheck.estimate.training import step_activations, step_tensors
from fitcheck.estimate.varying_lengths import LengthMix, replay_steps
from fitcheck.model.resolve import resolve_model
from fitcheck.plan import TrainingPlan

QWEN1 = resolve_model("Qwen/Qwen-1_8B-Chat").spec
# ms-swift's benchmark setup: LoRA r=8 on c_attn, bf16 autocast, checkpointing, flash attention, batch 1
PLAN = TrainingPlan(mode="lora", precision="bf16", compute_dtype="bf16", seq_len=1024, batch=1, grad_accum=16,
                    optimizer="adamw", master_weights="fp32", grad_checkpointing=True, attention="flash",
                    lora_rank=8, lora_targets="c_attn", lora_dropout=0.05, lora_train_embeddings=False, gpus=1,
                    zero=None, fsdp=None, offload="none", ds_bucket_elements=None, compute_capability=8.0)


def test_the_replayed_live_peak_is_the_estimates_activations_and_loss():
    acts = step_activations(QWEN1, PLAN)
    rep = replay_steps(step_tensors(QWEN1, PLAN), (1024,) * 3)
    assert abs(rep.peak_allocated / (acts.saved + max(acts.recompute, acts.logits)) - 1) < 0.01


def test_fixed_lengths_reserve_little_varying_ones_much_more():
    fixed = replay_steps(step_tensors(QWEN1, PLAN), (1024,) * 40)
    lengths = LengthMix(3234.4, 2547.5, 91, 19548).draw(4959, 1024, delete_longer=True, seed=0)
    varying = replay_steps(step_tensors(QWEN1, PLAN.with_changes(seq_len=max(lengths))), lengths)
    assert fixed.excess < 0.25 * fixed.peak_allocated
    assert varying.excess > varying.peak_allocated
    assert varying.longest <= 1024 and varying.steps == len(lengths)


def test_delete_drops_longer_samples_truncate_clips_them():
    mix = LengthMix(3234.4, 2547.5, 91, 19548)
    kept = mix.draw(1000, 2048, delete_longer=True)
    clipped = mix.draw(1000, 2048, delete_longer=False)
    assert len(clipped) == 1000 and max(clipped) == 2048
    assert len(kept) < 600 and max(kept) <= 2048 and min(kept) >= 91



def test_a_gpu_without_room_gives_cached_segments_back():
    lengths = LengthMix(3234.4, 2547.5, 91, 19548).draw(4959, 1024, delete_longer=True, seed=0)
    tensors = step_tensors(QWEN1, PLAN.with_changes(seq_len=max(lengths)))
    roomy = replay_steps(tensors, lengths)
    tight = replay_steps(tensors, lengths, capacity=roomy.peak_allocated + roomy.excess // 4)
    assert tight.peak_reserved <= roomy.peak_allocated + roomy.excess // 4 < roomy.peak_reserved


def test_the_needed_capacity_is_the_smallest_room_the_steps_run_in():
    from fitcheck.estimate.allocator import ROUND_LARGE, OutOfMemory
    from fitcheck.estimate.varying_lengths import needed_capacity

    tensors = step_tensors(QWEN1, PLAN)
    roomy = replay_steps(tensors, (1024,) * 3)
    need = needed_capacity(tensors, (1024,) * 3)
    assert roomy.peak_allocated <= need <= roomy.peak_reserved and need % ROUND_LARGE == 0
    replay_steps(tensors, (1024,) * 3, capacity=need)
    try:
        replay_steps(tensors, (1024,) * 3, capacity=need - ROUND_LARGE)
    except OutOfMemory:
        pass
    else:
        raise AssertionError("the steps also ran in 2 MiB less")


def test_a_working_set_split_into_its_tensors_keeps_the_live_peak():
    from dataclasses import replace

    tensors = step_tensors(QWEN1, PLAN)
    h = QWEN1.hidden_size
    split = replace(tensors, layer_pieces=(4 * h, 2 * h, 2 * h, 4 * h))
    whole, apart = replay_steps(tensors, (1024,) * 3), replay_steps(split, (1024,) * 3)
    assert abs(apart.peak_allocated - whole.peak_allocated) <= 5 * 512
    assert apart.peak_reserved >= apart.peak_allocated


def test_a_prelude_of_static_tensors_counts_in_the_peak_and_its_freed_blocks_are_reused():
    from fitcheck.estimate.varying_lengths import needed_capacity

    tensors = step_tensors(QWEN1, PLAN)
    bare = replay_steps(tensors, (1024,) * 3)
    big = 64 << 20
    # bitsandbytes' load: a 16-bit copy, the quarter-size packed weight made from it, the copy freed
    prelude = ((True, "copy", big), (True, "packed", big // 4), (False, "copy", 0))
    loaded = replay_steps(tensors, (1024,) * 3, prelude=prelude)
    assert loaded.peak_allocated == bare.peak_allocated + big // 4
    assert needed_capacity(tensors, (1024,) * 3, prelude=prelude) >= needed_capacity(tensors, (1024,) * 3)
    assert loaded.peak_reserved < bare.peak_reserved + big   # the copy's freed segment held step tensors


def test_only_a_step_longer_than_all_before_grows_the_reserve_by_its_fp32_loss_tensors():
    # The ratchet behind ms-swift's max_memory_reserved: a longer step finds no cached block for its
    # vocabulary-sized fp32 tensors (cast, log-softmax, its gradient: three live at once) and allocates
    # three new segments; the shorter ones fit in what is cached, and blocks of other segments never merge.
    from fitcheck.estimate.allocator import ROUND_LARGE

    tensors = step_tensors(QWEN1, PLAN.with_changes(seq_len=1100))
    segment = -(-4 * QWEN1.vocab_size * 1100 // ROUND_LARGE) * ROUND_LARGE
    short, longest = replay_steps(tensors, (1000,)), replay_steps(tensors, (1100,))
    assert replay_steps(tensors, (1000, 1100)).peak_reserved - short.peak_reserved == 3 * segment
    assert replay_steps(tensors, (1100, 1000, 1050)).peak_reserved == longest.peak_reserved


def test_the_shifted_loss_covers_one_position_fewer():
    # Qwen(1)'s QWenLMHeadModel.forward: cross_entropy(lm_logits[..., :-1, :], labels[..., 1:])
    from dataclasses import replace

    tensors = step_tensors(QWEN1, PLAN)
    whole = replay_steps(tensors, (1024,)).peak_allocated
    shifted = replay_steps(replace(tensors, shifted_loss=True), (1024,)).peak_allocated
    assert 0 < whole - shifted <= 3 * 4 * QWEN1.vocab_size + 3 * (1 << 20)   # 1 MiB: an unsplit block's tail


def test_accelerates_fp32_copy_of_the_logits_is_allocated_but_leaves_the_peak():
    # accelerate v0.25.0 ConvertOutputsToFp32: the bf16 logits become .float() as forward returns;
    # forward then holds 2 + 4 + 4 bytes per logit, backward 12, so the peak stays the backward's.
    from dataclasses import replace

    from fitcheck.estimate.varying_lengths import _events

    tensors = replace(step_tensors(QWEN1, PLAN), output_fp32_copy=True)
    events = list(_events(tensors, 1024, 0, 1024))
    copies = [n for alloc, ident, n in events if alloc and ident[-1] == "logits32"]
    assert copies == [4 * QWEN1.vocab_size * 1024]
    assert (replay_steps(tensors, (1024,)).peak_allocated
            == replay_steps(step_tensors(QWEN1, PLAN), (1024,)).peak_allocated)


def test_cuda_autocasts_loss_holds_two_fp32_vocabulary_tensors_so_a_longer_step_adds_two_segments():
    # torch 2.1 CUDA autocast: cross_entropy_loss is in no list and calls log_softmax with the logits'
    # dtype, which fp32_set_opt_dtype keeps; nll_loss (fp32) casts the 16-bit log-probs and saves the copy.
    from dataclasses import replace

    from fitcheck.estimate.allocator import ROUND_LARGE

    tensors = step_tensors(QWEN1, PLAN.with_changes(seq_len=1100))
    segment = -(-4 * QWEN1.vocab_size * 1100 // ROUND_LARGE) * ROUND_LARGE
    late = replace(tensors, upcast_log_probs=True)
    assert replay_steps(late, (1000, 1100)).peak_reserved - replay_steps(late, (1000,)).peak_reserved == 2 * segment
    # 2 + 4 + 4 bytes per logit at backward's peak, not 4 + 4 + 4 ...
    whole = replay_steps(tensors, (1100,)).peak_allocated
    assert abs(whole - replay_steps(late, (1100,)).peak_allocated - 2 * QWEN1.vocab_size * 1100) < 1 << 20
    # ... and accelerate's fp32 copy of the logits brings forward back to 12 (2 + 2 + 4 + 4)
    copied = replace(late, output_fp32_copy=True)
    assert abs(replay_steps(copied, (1100,)).peak_allocated - whole) < 1 << 20
    assert replay_steps(copied, (1000, 1100)).peak_reserved - replay_steps(copied, (1000,)).peak_reserved == 2 * segment
