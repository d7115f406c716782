"""Whether the code running here may read the network for a model (the Hugging Face Hub): `fitcheck serve`
answers a request from the catalog, the local Hugging Face cache and the Ollama store only.

A ContextVar: one server thread's request changes nothing for another caller in the same process.
fitcheck.model.hub.hub_offline() is True within :func:`network_refused`, and fitcheck.model.resolve answers a
repository outside the catalog and the cache as unknown, saying why.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_REFUSED: ContextVar[str | None] = ContextVar("fitcheck_network_refused", default=None)


def network_refusal() -> str | None:
    """Why the network is not read here (:func:`network_refused`), or None when it may be."""
    return _REFUSED.get()


@contextmanager
def network_refused(why: str) -> Iterator[None]:
    """Within the block (this thread's context), model lookups never reach the network, ``why`` saying so."""
    token = _REFUSED.set(why)
    try:
        yield
    finally:
        _REFUSED.reset(token)
