"""benchmarks.swift_lengths: cls-fudan-news-zh's token lengths from ms-swift's time columns."""

from benchmarks.swift_lengths import CARD, FIT_MODELS, edges, fit, speed_rows, stored, table


def test_the_stored_histogram_keeps_the_cards_moments_and_range():
    h = stored()
    assert abs(h.mean / CARD.mean - 1) < 0.005 and abs(h.sd / CARD.sd - 1) < 0.005
    assert h.bins[0][0] == CARD.minimum and h.bins[-1][1] == CARD.maximum
    assert [lo for lo, _, _ in h.bins[1:]] == [hi for _, hi, _ in h.bins[:-1]] == edges(speed_rows())[1:-1]
    assert abs(sum(w for _, _, w in h.bins) - 1) < 1e-3 and all(w >= 0 for _, _, w in h.bins)


def test_the_histogram_explains_the_time_columns_the_cards_log_normal_does_not():
    got = {label.split()[0] + " " + label.split()[1] + " " + label.split()[2]: (rms, base)
           for label, rms, base, _ in table(stored().bins)}
    for key in FIT_MODELS:
        for mode in ("lora", "full"):
            if f"later {key} {mode}" in got:
                rms, base = got[f"later {key} {mode}"]
                assert rms < 0.03 and base > 0.10, (key, mode, rms, base)
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
