"""benchmarks.swift_lengths: cls-fudan-news-zh's token lengths from ms-swift's time columns."""

from benchmarks.swift_lengths import (
    CARD,
    FIT_MODELS,
    _specs,
    _work_moments,
    edges,
    expected_work,
    fit,
    residuals,
    speed_rows,
    stored,
    table,
)


def test_the_stored_histogram_keeps_the_cards_moments_and_range():
    h = stored()
    assert abs(h.mean / CARD.mean - 1) < 0.005 and abs(h.sd / CARD.sd - 1) < 0.005
    assert h.bins[0][0] == CARD.minimum and h.bins[-1][1] == CARD.maximum
    assert [lo for lo, _, _ in h.bins[1:]] == [hi for _, hi, _ in h.bins[:-1]] == edges(speed_rows())[1:-1]
    assert abs(sum(w for _, _, w in h.bins) - 1) < 1e-3 and all(w >= 0 for _, _, w in h.bins)


def test_the_histogram_explains_the_time_columns_the_cards_log_normal_does_not():
    got = {label.split()[0] + " " + label.split()[1] + " " + label.split()[2]: (rms, base)
           for label, rms, base, _ in table(stored().bins)}
    fitted = ("later Qwen-7B lora", "later Qwen-14B lora", "later Qwen-7B full")
    assert {f"later {k} {m}" for k in FIT_MODELS for m in ("lora", "full")} & set(got) == set(fitted)
    for name in fitted:
        rms, base = got[name]
        assert rms < 0.03 and base > 0.10, (name, rms, base)
    # held out: the earlier table (truncation, the first 1,000 rows) and the later table's Qwen-1.8B series
    for name in ("earlier Qwen-7B lora", "earlier Qwen-14B lora", "earlier Qwen-7B full"):
        rms, base = got[name]
        assert rms < 0.02 and rms < base / 2, (name, rms, base)
    for mode in ("lora", "full"):
        rms, base = got[f"later Qwen-1.8B {mode}"]
        assert rms < base / 2, (mode, rms, base)


def test_the_fit_reproduces_the_stored_histogram():
    got = fit(starts=2)
    assert all(abs(w - s) < 0.01 for (_, _, w), (_, _, s) in zip(got, stored().bins, strict=True))


def test_the_shares_hold_whichever_series_are_fitted_and_the_cards_moments_are_what_close_the_fit():
    # docs/accuracy.md, "What fixes what": within 0.03 a share fitted to Qwen-7B alone or Qwen-14B alone ...
    kept = [w for _, _, w in stored().bins]
    for models in (("Qwen-7B",), ("Qwen-14B",)):
        got = [w for _, _, w in fit(starts=2, models=models)]
        assert max(abs(a - b) for a, b in zip(got, kept, strict=True)) < 0.03, (models, got)
    # ... and with the mean and sd free the times leave almost nothing under 2,048 tokens, fitted as well
    free = fit(starts=2, moment_weight=0.0)
    assert sum(w for lo, hi, w in free if hi <= 2048) < 0.01
    rms = {label.split()[0] + " " + label.split()[1] + " " + label.split()[2]: r for label, r, _, _ in table(free)}
    assert all(rms[f"later {k} {m}"] < 0.03 for k, m in (("Qwen-7B", "lora"), ("Qwen-14B", "lora"), ("Qwen-7B", "full")))


def _qwen7b():
    rows = [r for r in speed_rows() if r["config_key"] == "Qwen-7B"]
    return _specs(rows)["Qwen-7B"]


def test_a_samples_work_integrates_the_forward_flops_in_closed_form():
    # F(l) = 2 P l + 2 layers d_attn l^2 (prefill_flops_per_token x l): its integral over [lo, hi]
    from fitcheck.speed.efficiency import matmul_params

    spec = _qwen7b()
    p, d = matmul_params(spec), spec.num_attention_heads * spec.attn_head_dim
    for lo, hi in ((91, 512), (2048, 4096), (8192, 19548)):
        exact = p * (hi * hi - lo * lo) + 2 / 3 * spec.num_attention_layers * d * (hi ** 3 - lo ** 3)
        assert abs(_work_moments(spec, lo, hi) / exact - 1) < 1e-9


def test_the_expected_work_is_what_drawn_samples_average():
    from fitcheck.speed.decode import prefill_flops_per_token

    spec = _qwen7b()
    h = stored()
    for cut in (1024, 4096):
        for delete in (True, False):
            drawn = h.draw(40_000, cut, delete_longer=delete, seed=5)
            mc = sum(prefill_flops_per_token(spec, n) * n for n in drawn) / len(drawn)
            assert abs(expected_work(spec, h.bins, cut, delete) / mc - 1) < 0.02, (cut, delete)


def test_runs_whose_time_is_exactly_linear_in_the_work_leave_no_residual():
    spec = _qwen7b()
    h = stored()
    group = [{"max_length": str(c), "truncation_strategy": "delete", "metric": "samples_per_s",
              "value": str(1 / (0.07 + 3e-14 * expected_work(spec, h.bins, c, True)))} for c in (512, 1024, 2048, 4096)]
    assert max(abs(e) for e in residuals(h.bins, group, spec)) < 1e-9
    # and a wrong histogram does leave one
    assert max(abs(e) for e in residuals(((91, 19548, 1.0),), group, spec)) > 0.02


def test_log_uniform_within_bins_keeps_each_bins_share_and_spreads_it_by_log_width():
    import math

    from benchmarks.swift_lengths import LOG_UNIFORM_STEPS, _bins, coarse_shares

    cuts = [91, 512, 2048, 19548]
    z = [0.0, 1.0, -0.5]
    flat = _bins(cuts, z)
    fine = _bins(cuts, z, "log-uniform")
    assert len(fine) == LOG_UNIFORM_STEPS * len(flat)
    assert all(abs(a - b) < 1e-12 for a, b in zip(coarse_shares(fine, cuts), (w for _, _, w in flat), strict=True))
    first = fine[:LOG_UNIFORM_STEPS]
    assert first[0][0] == 91 and abs(first[-1][1] - 512) < 1e-9
    # equal log-widths, equal shares; more of the bin's lengths near its low edge than uniform puts there
    assert max(w for _, _, w in first) - min(w for _, _, w in first) < 1e-12
    assert abs(first[0][2] / flat[0][2] - 1 / LOG_UNIFORM_STEPS) < 1e-12
    assert (first[0][1] - first[0][0]) / (512 - 91) < 1 / LOG_UNIFORM_STEPS
    assert math.isclose(sum(w for _, _, w in fine), 1.0)


def test_the_replay_takes_another_reading_of_the_lengths_only_as_a_check(tmp_path):
    import pytest

    from benchmarks.swift_lengths import write
    from benchmarks.varying_reserve import _lengths, main

    path = tmp_path / "h.csv"
    write([(91, 4000, 0.5), (4000, 19548, 0.5)], path)
    notes = "cls-fudan-news-zh (token lengths 3234±2547, min 91, max 19548, samples deleted)"
    assert _lengths(notes, path) == stored(path) != stored()
    with pytest.raises(SystemExit) as exc:
        main(["--lengths", str(path), "--write"])
    assert exc.value.code == 2
