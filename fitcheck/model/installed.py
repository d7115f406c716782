"""Engines installed in this Python environment, read from package metadata only (never imported:
importing vLLM or transformers takes seconds and may touch the GPU).

When fitcheck answers for this machine (no --profile), an installed transformers is the default
``--transformers-version`` (it decides the prefill's logits), and the plan's engine version is
named in the assumptions (fitcheck.context).  llama.cpp itself is a binary (``llama-server``) that fitcheck does not
run; its Python binding, llama-cpp-python, is read like the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata

from fitcheck.versions import parse_transformers_version


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken metadata folder is not the user's question
        return None


def installed_versions(distributions: Mapping[str, str]) -> dict[str, str]:
    """{engine: version} of the engines whose package (``distributions``: engine -> its name on PyPI, each
    engine's ``distribution``) is installed in this environment."""
    found = {engine: _version(dist) for engine, dist in distributions.items()}
    return {engine: v for engine, v in found.items() if v}


def default_transformers_version(versions: Mapping[str, str]) -> str | None:
    """The installed transformers version, as --transformers-version takes it (major.minor.patch)."""
    v = versions.get("transformers")
    if not v:
        return None
    try:
        parse_transformers_version(v)
    except Exception:
        return None
    return v
