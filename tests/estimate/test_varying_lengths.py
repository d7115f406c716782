"""max_memory_reserved on a roomy GPU when lengths vary between steps: the caching allocator replayed
over the estimate's own step tensors (fitcheck.estimate.varying_lengths)."""

from fitcheck.engines.training.memory import step_activations, step_tensors
from fitcheck.estimate.varying_lengths import BinnedLengths, LengthMix, replay_steps
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


def test_a_histogram_draws_its_shares_uniformly_within_each_bin_and_states_its_moments():
    import statistics

    h = BinnedLengths(((100, 200, 0.25), (200, 1000, 0.5), (1000, 5000, 0.25)))
    got = h.draw(40_000, 10_000, delete_longer=True, seed=3)
    assert len(got) == 40_000 and min(got) >= 100 and max(got) <= 5000
    shares = [sum(lo <= n < hi for n in got) / len(got) for lo, hi in ((100, 200), (200, 1000), (1000, 5001))]
    assert all(abs(a - b) < 0.01 for a, b in zip(shares, (0.25, 0.5, 0.25), strict=True)), shares
    # uniform within a bin: the first bin's lengths average its middle
    assert abs(statistics.fmean(n for n in got if n < 200) - 150) < 2
    assert abs(statistics.fmean(got) / h.mean - 1) < 0.01 and abs(statistics.pstdev(got) / h.sd - 1) < 0.02
    # the same rules as the card's log-normal: delete drops, truncation clips, a seed is an order
    kept = h.draw(1000, 1000, delete_longer=True, seed=1)
    clipped = h.draw(1000, 1000, delete_longer=False, seed=1)
    assert max(kept) <= 1000 and len(kept) < 800
    assert len(clipped) == 1000 and max(clipped) == 1000
    assert h.draw(50, 800, delete_longer=True, seed=7) == h.draw(50, 800, delete_longer=True, seed=7)


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


# Full fine-tuning in pure bf16 as ms-swift's benchmark runs it (Trainer AdamW on bf16 weights)
FULL = PLAN.with_changes(mode="full", master_weights="none", grad_accum=2)


def _full_tensors(plan=FULL):
    from dataclasses import replace

    from fitcheck.engines.training.memory import trained_params

    return replace(step_tensors(QWEN1, plan), params=trained_params(QWEN1, plan))


def test_full_fine_tunings_trained_parameters_are_the_models_tensors_in_backwards_order():
    from fitcheck.engines.training.memory import trained_params

    p = trained_params(QWEN1, FULL)
    assert p is not None
    grads = p.grads(QWEN1.num_layers)
    h = QWEN1.hidden_size
    # 24 layers of c_attn (weight, bias), c_proj, w1, w2, mlp.c_proj, ln_1, ln_2; wte, ln_f, lm_head
    assert len(grads) == 8 * QWEN1.num_layers + 3
    assert sum(n for _, n in grads) == QWEN1.total_params
    # backward meets the MLP's output projection first and the fused q/k/v projection last
    assert p.layer[0] == h * QWEN1.intermediate_size and p.layer[-1] == 3 * h * h
    assert (p.embedding, p.head, p.grad_bytes, p.state_bytes, p.accumulation) == (
        QWEN1.vocab_size * h, QWEN1.vocab_size * h, 2, 2, 2)


def test_lora_and_sharded_runs_keep_their_gradients_static():
    from fitcheck.engines.training.memory import trained_params

    assert trained_params(QWEN1, PLAN) is None
    assert trained_params(QWEN1, FULL.with_changes(zero=2, gpus=2)) is None


def test_the_first_micro_batch_keeps_each_gradient_and_the_others_add_theirs_and_free_it():
    from fitcheck.estimate.varying_lengths import _events

    t = _full_tensors()
    names = {name for name, _ in t.params.grads(t.layers)}
    first = list(_events(t, 256, 0, 256, micro=0))
    kept = [ident[1] for a, ident, _ in first if a and ident[0] == "grad"]
    assert sorted(map(str, kept)) == sorted(map(str, names))   # each once, as p.grad
    later = list(_events(t, 256, 1, 256, micro=1))
    assert not any(ident[0] == "grad" for _, ident, _ in later)
    made = [ident for a, ident, _ in later if a and ident[1] == "grad"]
    freed = {ident for a, ident, _ in later if not a and ident[1] == "grad"}
    assert len(made) == len(names) and set(made) == freed
    # lm_head's weight gradient is made beside the gradient of the logits, before its input's
    order = [ident for a, ident, _ in later if a]
    assert order.index((("s", 1), "grad", "head")) < order.index((("s", 1), "g", t.layers))
    assert order.index((("s", 1), "g_slice")) < order.index((("s", 1), "grad", "head"))


def test_the_first_step_makes_adamws_states_every_step_its_temporaries_and_zero_grad_frees_the_gradients():
    from fitcheck.estimate.varying_lengths import _optimizer_events

    t = _full_tensors()
    n = len(t.params.grads(t.layers))
    for window, states in ((0, 2 * n), (1, 0)):
        ev = list(_optimizer_events(t, window))
        assert sum(a and ident[0] in ("exp_avg", "exp_avg_sq") for a, ident, _ in ev) == states
        assert sum(not a and ident[0] == "grad" for a, ident, _ in ev) == n
        temps = [ident for a, ident, _ in ev if a and ident[0] == ("opt", window)]
        assert set(temps) == {ident for a, ident, _ in ev if not a and ident[0] == ("opt", window)}
        assert sum(ident[1] == "sqrt" for ident in temps) == n


def test_a_full_step_reserves_the_gradients_states_and_the_steps_temporaries():
    # short steps: the optimizer step is the live peak -- gradients, two states and one state-sized
    # temporary per parameter (plus clip_grad_norm_'s scalars), bf16 all; a block is handed out whole
    # when what it would leave is 1 MiB or less (should_split), which CUDA counts as allocated too
    t = _full_tensors()
    size = 2 * QWEN1.total_params
    rep = replay_steps(t, (64, 64))
    assert 4 * size <= rep.peak_allocated < 4 * size * 1.015
    assert rep.peak_reserved >= rep.peak_allocated
    # without them (static, own segments) the replay holds only the step's activations
    assert replay_steps(step_tensors(QWEN1, FULL), (64, 64)).peak_allocated < size // 4


def test_the_trainer_steps_every_window_and_at_the_end_only_of_an_epoch_shorter_than_one(monkeypatch):
    # transformers v4.36.2 _inner_training_loop: a step every gradient_accumulation_steps micro-batches,
    # or at the last one of an epoch shorter than that; a longer epoch's trailing micro-batches keep
    # their gradients
    from dataclasses import replace

    from fitcheck.estimate import varying_lengths as V

    t = _full_tensors()
    calls: list[int] = []
    real = V._optimizer_events
    monkeypatch.setattr(V, "_optimizer_events", lambda tensors, window: (calls.append(window), real(tensors, window))[1])
    V.replay_steps.cache_clear()
    V.replay_steps(t, (64,) * 5)
    assert calls == [0, 1]
    calls.clear()
    V.replay_steps(replace(t, params=replace(t.params, accumulation=16)), (64,) * 3)
    assert calls == [0]
    V.replay_steps.cache_clear()


def test_torch_2_1s_padded_attention_mask_is_kept_per_layer_at_lengths_not_a_multiple_of_16():
    # Qwen(1) without flash-attention, no checkpointing: its float mask goes to the memory-efficient SDPA,
    # which writes heads x q x roundup16(k) mask bytes per layer when k % 16 != 0 and saves them for backward
    from dataclasses import replace

    plan = PLAN.with_changes(attention="sdpa", grad_checkpointing=False, seq_len=1000)
    base = step_tensors(QWEN1, plan)
    masked = replace(base, expanded_mask_heads=QWEN1.num_attention_heads)
    per_layer = QWEN1.num_attention_heads * 1000 * 1008 * 2
    grown = replay_steps(masked, (1000,)).peak_allocated - replay_steps(base, (1000,)).peak_allocated
    assert grown == QWEN1.num_layers * per_layer
    aligned = plan.with_changes(seq_len=1024)
    assert (replay_steps(replace(step_tensors(QWEN1, aligned), expanded_mask_heads=16), (1024,)).peak_allocated
            == replay_steps(step_tensors(QWEN1, aligned), (1024,)).peak_allocated)
    # under checkpointing it is one layer's working set: at most one layer's copy is live at a time
    ckpt = plan.with_changes(grad_checkpointing=True)
    c_base = step_tensors(QWEN1, ckpt)
    c_grown = (replay_steps(replace(c_base, expanded_mask_heads=QWEN1.num_attention_heads), (1000,)).peak_allocated
               - replay_steps(c_base, (1000,)).peak_allocated)
    assert 0 <= c_grown <= per_layer
