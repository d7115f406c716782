"""A frozen dataclass with some fields replaced, without dataclasses.replace's per-field __init__ work.

Searches build thousands of requests and plans that differ from another in a field or two (every
alternative, every probe of a largest-that-fits search); :func:`dataclasses.replace` re-runs
``__init__`` over all of their ~40 fields each time.  For dataclasses with no ``__post_init__``
and no ``init=False`` field (what replace would run or refuse), copying the instance's field
dictionary gives the same object.  tests/test_caches.py holds each user to those conditions.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def replaced(obj: T, changes: dict[str, Any]) -> T:
    """``dataclasses.replace(obj, **changes)`` for a frozen dataclass without __post_init__ or init=False
    fields; an unknown field name raises TypeError, as replace does."""
    values = obj.__dict__
    unknown = [name for name in changes if name not in values]
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {unknown[0]!r}")
    new = object.__new__(type(obj))
    new.__dict__.update(values)
    new.__dict__.update(changes)
    return new
