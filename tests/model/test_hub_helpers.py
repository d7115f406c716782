"""fitcheck.model.hub's helpers that other modules share are its public API: no module reaches into the
hub module's private names (review: resolve.py's GGUF lookup called `_within`, `_DeadlineExceeded`,
`_silence_hub_logs`)."""

from __future__ import annotations

import ast
import logging
import threading
import time
from pathlib import Path

import pytest

from fitcheck.model import hub
from fitcheck.model.hub import DeadlineExceeded, call_within, silence_hub_logs

PACKAGE = Path(hub.__file__).resolve().parents[1]


def test_call_within_returns_reraises_or_gives_up_at_the_deadline():
    assert call_within(time.monotonic() + 5, lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(KeyError):
        call_within(time.monotonic() + 5, {}.__getitem__, "missing")
    release = threading.Event()
    with pytest.raises(DeadlineExceeded):
        call_within(time.monotonic() + 0.05, release.wait, 5)
    release.set()


def test_silence_hub_logs_quiets_the_retry_loggers():
    silence_hub_logs()
    assert logging.getLogger("huggingface_hub").getEffectiveLevel() > logging.CRITICAL


def test_no_module_uses_a_private_name_of_the_hub_module():
    private = {node.name for node in ast.parse(Path(hub.__file__).read_text()).body
               if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.startswith("_")}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.resolve() == Path(hub.__file__).resolve():
            continue
        tree = ast.parse(path.read_text())
        aliases = set()  # the names the hub module is bound to in this file
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "fitcheck.model":
                aliases |= {a.asname or a.name for a in node.names if a.name == "hub"}
            if isinstance(node, ast.ImportFrom) and node.module == "fitcheck.model.hub":
                offenders += [f"{path.name}: {a.name}" for a in node.names if a.name in private]
            if isinstance(node, ast.Import):
                aliases |= {a.asname for a in node.names if a.name == "fitcheck.model.hub" and a.asname}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in private and isinstance(node.value, ast.Name)
                    and node.value.id in aliases):
                offenders.append(f"{path.name}: {node.value.id}.{node.attr}")
    assert not offenders
    assert {"call_within", "DeadlineExceeded", "silence_hub_logs"} <= set(dir(hub))
