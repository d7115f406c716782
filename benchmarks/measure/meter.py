"""Moved to :mod:`fitcheck.measure.meter` (`fitcheck measure` reads the same meters)."""

from fitcheck.measure.meter import CudaMeter, PhaseReading, RssMeter, make_meter  # noqa: F401
