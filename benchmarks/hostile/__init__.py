"""The hostile-input battery: ``python -m benchmarks.hostile`` (see __main__ for what it reports)."""
