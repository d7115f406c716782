"""cls-fudan-news-zh's token lengths, read off ms-swift's own time columns.

    python -m benchmarks.swift_lengths [--within uniform|log-uniform] [--write [--out FILE]]

The ms-swift benchmark (benchmarks/varying_reserve.py) trains on cls-fudan-news-zh, whose rows are
not at hand: the data set's card states its token lengths as 3234.4 ± 2547.5, min 91, max 19548
(Benchmark.md @4692215, Qwen's tokenizer), and the replay drew a log-normal with those moments.  The
same tables time every run, and a run's time follows its samples' lengths, so the time columns say
what shape the lengths have:

* the later table (truncation_strategy delete) prints samples/s: the seconds per sample of a run at
  max_length L are t0 + a · E[F(l) | l ≤ L], where F(l) is the forward FLOPs of an l-token sample
  (fitcheck.estimate.speed.prefill_flops_per_token × l: 2 × matmul parameters per token plus causal
  attention, 2 × 2 × layers × l/2 × heads × head_dim) -- training's backward and recomputation scale
  both alike, and t0 (launches, the optimizer step shared by 16 samples, the data loader) and a
  (seconds per FLOP) are each run series' own, fitted by least squares;
* the earlier table (truncation_left, the file's first 1,000 rows) prints minutes per run: the same
  with E[F(min(l, L))], every sample kept.

The lengths are a histogram whose edges are the tables' max_lengths and the card's min and max,
uniform within a bin (fitcheck.estimate.varying_lengths.BinnedLengths), its mean and sd held to the
card's, fitted to the later table's Qwen-7B and Qwen-14B series.  What fixes what: the times alone
leave a direction open (with the mean and sd free they are fitted as well by a histogram with almost
nothing under 2,048 tokens and another shape below it), and the card's moments close it: among the
histograms with the card's moments the times pick this one, within 0.03 a share whichever series are
fitted, while the card's log-normal, the other reading of the same moments, misses them by 13-18 % rms.  One histogram stands for the whole file and for its first 1,000 rows (the
later table above 2,048 tokens and the whole earlier table train on those): an assumption the earlier
table's times, not fitted, agree with.  Qwen-1.8B's series are left out of the fit and shown: its runs
are not compute-bound at short lengths (9.88 and 9.90 samples/s at 512 and 1,024 tokens, so time does
not follow tokens there).  What it finds: docs/accuracy.md, "The lengths' shape, from the time
columns".  No memory figure is read.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.accuracy import row_spec
from benchmarks.report import DATA
from fitcheck.estimate.varying_lengths import BinnedLengths, LengthMix
from fitcheck.model.spec import ModelSpec
from fitcheck.speed.decode import prefill_flops_per_token

SPEED = DATA / "ms_swift_speed.csv"
STORED = DATA / "cls-fudan-news-zh-lengths.csv"
# The card's statistics (docs/source_en/LLM/Benchmark.md @4692215: "3234.4±2547.5, min=91, max=19548",
# all 4,959 rows, Qwen's tokenizer).
CARD = LengthMix(3234.4, 2547.5, 91, 19548)
# The fitted series: compute-bound ones (see the module's docstring).
FIT_MODELS = ("Qwen-7B", "Qwen-14B")
# Sub-bins per bin when lengths are log-uniform within each bin (`--within log-uniform`, the check of the
# uniform reading): geometric, each a share of its bin in proportion to its log-width.  Unit: sub-bins;
# 16 puts every sub-bin within 12 % of its neighbours' lengths.
LOG_UNIFORM_STEPS = 16
# How hard the fit holds the histogram's mean and sd to the card's: the weight of a relative miss
# against the sum of the time series' squared relative residuals.  Unit: none; large enough that the
# moments land within 0.1 % (the fit's rms residual is a few per cent).
MOMENT_WEIGHT = 100.0


def edges(rows: Sequence[dict]) -> list[int]:
    """The histogram's edges: the card's min, every max_length timed, the card's max."""
    return [CARD.minimum, *sorted({int(r["max_length"]) for r in rows}), CARD.maximum]


def speed_rows() -> list[dict]:
    with SPEED.open(newline="") as f:
        return list(csv.DictReader(f))


def _specs(rows: Sequence[dict]) -> dict[str, ModelSpec]:
    configs = json.loads((DATA / "calibration" / "model-configs.json").read_text())
    return {r["config_key"]: row_spec({"model": r["model"], "config_key": r["config_key"]}, configs) for r in rows}


def _work_moments(spec: ModelSpec, lo: float, hi: float, steps: int = 8) -> float:
    """∫ F(l) dl over [lo, hi] (Simpson's rule; F is a quadratic, so exact)."""
    h = (hi - lo) / steps
    f = [prefill_flops_per_token(spec, lo + i * h) * (lo + i * h) for i in range(steps + 1)]
    return h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))


def expected_work(spec: ModelSpec, bins: Sequence[tuple[float, float, float]], max_length: int, delete: bool) -> float:
    """E[F(l) | l ≤ L] (delete) or E[F(min(l, L))] (truncation), lengths uniform within each bin."""
    kept = work = 0.0
    for lo, hi, w in bins:
        top = min(hi, max_length)
        if top > lo:
            kept += w * (top - lo) / (hi - lo)
            work += w * _work_moments(spec, lo, top) / (hi - lo)
    if delete:
        return work / kept
    cut = prefill_flops_per_token(spec, max_length) * max_length
    return work + (sum(w for _, _, w in bins) - kept) * cut


def seconds_per_sample(r: dict) -> float:
    value = float(r["value"])
    return 1 / value if r["metric"] == "samples_per_s" else value * 60 / 1000


def series(rows: Sequence[dict]) -> dict[tuple[str, str, str], list[dict]]:
    """The rows by (table, model, mode): one run series each, with its own t0 and a."""
    out: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows:
        out.setdefault((r["table"], r["config_key"], r["mode"]), []).append(r)
    return out


def residuals(bins: Sequence[tuple[float, float, float]], group: Sequence[dict], spec: ModelSpec) -> list[float]:
    """Each run's relative error, (fit − measured) / measured seconds per sample, after the least-squares
    t0 and a of the series (weighted so that the residuals are relative)."""
    x = [expected_work(spec, bins, int(r["max_length"]), r["truncation_strategy"] == "delete") / 1e12 for r in group]
    y = [seconds_per_sample(r) for r in group]
    wt = [1 / v ** 2 for v in y]
    s0, s1, s2 = sum(wt), sum(w * a for w, a in zip(wt, x, strict=True)), sum(w * a * a for w, a in zip(wt, x, strict=True))
    b0, b1 = sum(w * v for w, v in zip(wt, y, strict=True)), sum(w * a * v for w, a, v in zip(wt, x, y, strict=True))
    det = s0 * s2 - s1 * s1
    t0, a = (s2 * b0 - s1 * b1) / det, (s0 * b1 - s1 * b0) / det
    return [(t0 + a * xi) / yi - 1 for xi, yi in zip(x, y, strict=True)]


def lognormal_fine(cuts: Sequence[int], per_cut: int = 64) -> list[tuple[float, float, float]]:
    """The card's log-normal (LengthMix.draw, its tails clamped onto the first and last bins) as a histogram:
    `per_cut` geometric bins between each two edges, fine enough to compare times (uniform within the
    coarse bins would hide its shape in them)."""
    points = [lo * (hi / lo) ** (k / per_cut) for lo, hi in zip(cuts, cuts[1:], strict=False) for k in range(per_cut)]
    points.append(cuts[-1])
    cdf = [0.0] + [CARD.cdf(x) for x in points[1:-1]] + [1.0]
    return [(lo, hi, b - a) for lo, hi, a, b in zip(points, points[1:], cdf, cdf[1:], strict=False)]


def lognormal_shares(cuts: Sequence[int]) -> list[float]:
    """The card's log-normal's share of each bin of `cuts`."""
    return [w for _, _, w in lognormal_fine(cuts, per_cut=1)]


def _bins(cuts: Sequence[int], z: Sequence[float], within: str = "uniform") -> list[tuple[float, float, float]]:
    """The histogram of shares softmax(z) on `cuts`: lengths uniform within each bin, or log-uniform
    (LOG_UNIFORM_STEPS geometric sub-bins, each uniform)."""
    top = max(z)
    e = [math.exp(v - top) for v in z]
    coarse = [(lo, hi, w / sum(e)) for lo, hi, w in zip(cuts, cuts[1:], e, strict=False)]
    if within == "uniform":
        return coarse
    out = []
    for lo, hi, w in coarse:
        points = [lo * (hi / lo) ** (k / LOG_UNIFORM_STEPS) for k in range(LOG_UNIFORM_STEPS)] + [hi]
        out += [(a, b, w * math.log(b / a) / math.log(hi / lo)) for a, b in zip(points, points[1:], strict=False)]
    return out


def coarse_shares(bins: Sequence[tuple[float, float, float]], cuts: Sequence[int]) -> list[float]:
    """A histogram's shares summed over the bins of `cuts` (its sub-bins lie inside them)."""
    return [sum(w for lo, hi, w in bins if lo >= a - 1e-6 and hi <= b + 1e-6) for a, b in zip(cuts, cuts[1:], strict=False)]


def _nelder_mead(f: Callable[[list[float]], float], x0: list[float], step: float = 1.0,
                 iterations: int = 4000, tol: float = 1e-12) -> tuple[list[float], float]:
    """Nelder–Mead (the standard coefficients 1, 2, ½, ½): no SciPy in the test environment."""
    n = len(x0)
    simplex = [list(x0)] + [[v + (step if i == j else 0.0) for j, v in enumerate(x0)] for i in range(n)]
    values = [f(p) for p in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centre = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]

        def towards(t: float, worst: list[float] = worst, centre: list[float] = centre) -> list[float]:
            return [c + t * (w - c) for c, w in zip(centre, worst, strict=True)]

        refl = towards(-1.0)
        fr = f(refl)
        if fr < values[0]:
            exp = towards(-2.0)
            fe = f(exp)
            simplex[-1], values[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = refl, fr
        else:
            con = towards(0.5)
            fc = f(con)
            if fc < values[-1]:
                simplex[-1], values[-1] = con, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (v - b) for b, v in zip(best, p, strict=True)] for p in simplex[1:]]
                values = [values[0]] + [f(p) for p in simplex[1:]]
    i = min(range(n + 1), key=values.__getitem__)
    return simplex[i], values[i]


def fit(rows: Sequence[dict] | None = None, starts: int = 8, within: str = "uniform",
        models: Sequence[str] = FIT_MODELS, moment_weight: float = MOMENT_WEIGHT) -> list[tuple[float, float, float]]:
    """The histogram that best explains the later table's series of `models`, its mean and sd held to the
    card's with `moment_weight`; Nelder–Mead from the log-normal's shares and `starts` − 1 seeded
    perturbations of them; lengths uniform or log-uniform `within` each bin (`_bins`)."""
    rows = speed_rows() if rows is None else rows
    cuts = edges(rows)
    specs = _specs(rows)
    groups = [(g, specs[k[1]]) for k, g in series(rows).items() if k[0] == "later" and k[1] in models]

    def loss(z: list[float]) -> float:
        bins = _bins(cuts, z, within)
        h = BinnedLengths(tuple(bins))
        miss = ((h.mean - CARD.mean) / CARD.mean) ** 2 + ((h.sd - CARD.sd) / CARD.sd) ** 2
        return sum(e * e for g, spec in groups for e in residuals(bins, g, spec)) + moment_weight * miss

    rng = random.Random(0)
    z0 = [math.log(max(w, 1e-4)) for w in lognormal_shares(cuts)]
    best: tuple[list[float], float] | None = None
    for k in range(starts):
        start = z0 if k == 0 else [v + rng.gauss(0, 1) for v in z0]
        x, v = _nelder_mead(loss, start)
        x, v = _nelder_mead(loss, x, step=0.2)  # a restart: Nelder–Mead stalls on flat ridges
        if best is None or v < best[1]:
            best = (x, v)
    assert best is not None
    return _bins(cuts, best[0], within)


def stored(path: Path = STORED) -> BinnedLengths:
    """The histogram `--write` stored (or another in its format)."""
    with path.open(newline="") as f:
        return BinnedLengths(tuple((int(r["low"]), int(r["high"]), float(r["share"])) for r in csv.DictReader(f)))


def write(bins: Sequence[tuple[float, float, float]], path: Path = STORED) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["low", "high", "share"])
        for lo, hi, share in bins:
            w.writerow([round(lo), round(hi), f"{share:.4f}"])


def table(bins: Sequence[tuple[float, float, float]], rows: Sequence[dict] | None = None) -> list[tuple[str, float, float, list[float]]]:
    """Per run series: (label, rms of the histogram's residuals, rms of the log-normal's, the
    histogram's residuals by max_length)."""
    rows = speed_rows() if rows is None else rows
    specs = _specs(rows)
    ln = lognormal_fine(edges(rows))
    out = []
    for (tab, key, mode), g in series(rows).items():
        got, base = residuals(bins, g, specs[key]), residuals(ln, g, specs[key])
        label = f"{tab:7s} {key:8s} {mode:4s} {'fitted' if tab == 'later' and key in FIT_MODELS else 'not fitted'}"
        out.append((label, _rms(got), _rms(base), got))
    return out


def _rms(xs: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in xs) / len(xs))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--within", choices=("uniform", "log-uniform"), default="uniform",
                    help="lengths within a bin (log-uniform: the check of the stored, uniform reading)")
    ap.add_argument("--write", action="store_true", help=f"store the fitted histogram in {STORED.name} (or --out)")
    ap.add_argument("--out", type=Path, help="where --write puts it (required with --within log-uniform)")
    args = ap.parse_args(argv)
    if args.write and args.within != "uniform" and args.out is None:
        ap.error(f"{STORED.name} keeps the uniform reading: give --out for another")
    bins = fit(within=args.within)
    h = BinnedLengths(tuple(bins))
    cuts = edges(speed_rows())
    print(f"bin (tokens)    fitted share ({args.within} within)   the card's log-normal")
    for (lo, hi), w, b in zip(zip(cuts, cuts[1:], strict=False), coarse_shares(bins, cuts),
                              lognormal_shares(cuts), strict=True):
        print(f"{int(lo):>6}–{int(hi):<7} {w:10.3f} {b:24.3f}")
    print(f"mean {h.mean:.0f} (card {CARD.mean}), sd {h.sd:.0f} (card {CARD.sd})")
    print("\nseconds per sample, relative residuals after each series' own t0 and a (rms: histogram / log-normal)")
    for label, rms, base, got in table(bins):
        print(f"{label:30s} rms {rms:6.1%} / {base:6.1%}   " + " ".join(f"{e:+.1%}" for e in got))
    if args.write:
        write(bins, args.out or STORED)
        print(f"wrote {args.out or STORED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
