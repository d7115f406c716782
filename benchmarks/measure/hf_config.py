"""Moved to :mod:`fitcheck.measure.hf_config` (`fitcheck measure` builds models from it too)."""

from fitcheck.measure.hf_config import (  # noqa: F401
    FULL,
    SLIDING,
    SUPPORTED_ARCHITECTURES,
    UnsupportedSpec,
    architecture_of,
    layer_types,
    scaled_spec,
    spec_to_hf_config,
)
