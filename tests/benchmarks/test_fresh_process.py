"""write_fresh_rows: each case's row is written as it comes, failed cases are skipped, --append keeps rows."""

from __future__ import annotations

import csv

from benchmarks.measure import fresh_process


def test_rows_are_written_in_order_failures_skipped_and_append_keeps_the_old(tmp_path, monkeypatch, capsys):
    results = {"a": {"case": "a", "bytes": 1}, "b": None, "c": {"case": "c", "bytes": 3}}
    monkeypatch.setattr(fresh_process, "run_fresh", lambda module, arg, label: results[arg])
    out = tmp_path / "sub" / "rows.csv"
    fresh_process.write_fresh_rows(out, ["case", "bytes"], "m", ["a", "b", "c"], lambda r: f"got {r['case']}")
    with out.open(newline="") as f:
        assert [r["case"] for r in csv.DictReader(f)] == ["a", "c"]
    assert capsys.readouterr().out.split() == ["got", "a", "got", "c"]
    fresh_process.write_fresh_rows(out, ["case", "bytes"], "m", ["c"], str, append=True)
    with out.open(newline="") as f:
        assert [r["case"] for r in csv.DictReader(f)] == ["a", "c", "c"]
    fresh_process.write_fresh_rows(out, ["case", "bytes"], "m", ["a"], str)
    with out.open(newline="") as f:
        assert [r["case"] for r in csv.DictReader(f)] == ["a"]
