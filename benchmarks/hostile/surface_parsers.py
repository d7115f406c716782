"""The surfaces battery's parser cases: each reader of benchmarks/hostile/surfaces.py called in-process (a
reader that could block on a FIFO runs in a child process with a time limit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.hostile import files as F
from benchmarks.hostile.cases import BIG, ParserCase
from benchmarks.hostile.surfaces import (
    COMMIT,
    HUB_ID,
    RECEIPT_SCHEMA,
    ROOT,
    _deep,
    _fifo,
    _hf_repo,
    _link,
    _metadata,
    _receipt,
    _site_packages,
    _sparse,
)

# ---- parsers, in-process (a FIFO in a child process with a time limit) ------------------------------

CHILD_LIMIT_S = 6.0


def _in_child(code: str) -> None:
    """Run ``code`` (which calls one reader) in a fresh interpreter: a reader that blocks on a FIFO would
    stop the battery itself.  FitcheckError and ValueError are answers; anything else, or blocking, is raised."""
    wrapped = ("from fitcheck.errors import FitcheckError\ntry:\n"
               + "".join(f"    {line}\n" for line in code.splitlines())
               + "except (FitcheckError, ValueError):\n    pass\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    try:
        out = subprocess.run([sys.executable, "-c", wrapped], capture_output=True, text=True, timeout=CHILD_LIMIT_S,
                             env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"blocked for {CHILD_LIMIT_S:g} s (killed)") from None
    if out.returncode:
        raise AssertionError((out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1])


def _receipt_lines(path: Path) -> object:
    """Every receipt receipts.read takes from ``path``, as check would name it (receipt_line): no 'nan' or 'inf'
    figure.  (Control characters are the terminal layer's to escape: the CLI cases' raw-control check.)"""
    from fitcheck.measure import receipts

    lines = [receipts.receipt_line(r) for r in receipts.read(path)]
    for line in lines:
        bad = [w for w in ("nan", "inf") if w in line.lower()]
        if bad:
            raise AssertionError(f"receipt_line printed {', '.join(bad)}: {line[:80]!r}")
    return lines


def _torch_build(prefix: Path) -> object:
    """The torch build read_stack reads from the environment at ``prefix`` (and no other)."""
    from fitcheck.probe.software import read_stack

    build = read_stack(env={}, extra=(str(prefix),), own=()).torch
    if build is not None and build.backend_version:
        major = build.backend_version.split(".")[0]
        if len(major) > 3:
            raise AssertionError(f"impossible {build.backend} {build.backend_version[:20]} taken as a fact")
    return build


def _cached_ids(hub: Path) -> object:
    """The repositories cached_models lists in ``hub``: none named '..', '.' or ''."""
    from fitcheck.model.hf_cache import cached_models

    repos = cached_models(hub)
    for repo in repos:
        if any(part in ("", ".", "..") for part in repo.repo_id.split("/")):
            raise AssertionError(f"{repo.folder.name} listed as repository {repo.repo_id!r}")
    return repos


def _plan_parses(text: str) -> object:
    from fitcheck.errors import FitcheckError
    from fitcheck.preflight.plan_file import parse_plan

    try:
        return parse_plan(text, "plan.toml")
    except FitcheckError as exc:
        raise AssertionError(f"refused: {exc.one_line()[:120]}") from None


def _read_all(path: Path) -> object:
    from fitcheck.measure import receipts

    return list(receipts.read(path))


def _find_snapshot(folder: Path, revision: str | None) -> object:
    from fitcheck.model.hf_cache import find_snapshot

    return find_snapshot(folder, HUB_ID, revision)


def _model_blob(path: Path) -> object:
    from fitcheck.model.ollama import model_blob

    return model_blob(path)


def _read_memory(root: Path) -> object:
    from fitcheck.probe.memory import read_memory

    return read_memory(str(root))


def parser_cases(work: Path) -> list[ParserCase]:
    root = work / "surfaces" / "parsers"
    root.mkdir(parents=True, exist_ok=True)
    g = "surface parsers"
    cases: list[ParserCase] = []
    odd: list[tuple[str, dict[str, Any]]] = [
        ("peak 'x'", {"measured": {"peak_bytes": "x"}}), ("peak 400 digits", {"measured": {"peak_bytes": int(BIG)}}),
        ("peak NaN", {"measured": {"peak_bytes": float("nan")}}),
        ("peak Infinity", {"measured": {"peak_bytes": float("inf")}}), ("peak a list", {"measured": {"peak_bytes": [1]}}),
        ("error_pct NaN", {"error_pct": float("nan")}), ("estimated not an object", {"estimated": "x"})]
    for i, (label, over) in enumerate(odd):
        path = F.write(root / f"receipts-{i}.jsonl", json.dumps(_receipt("m", {}, "f", **over)) + "\n")
        cases.append(ParserCase(g, f"read + receipt_line, {label}", partial(_receipt_lines, path)))
    deep = F.write(root / "receipts-deep.jsonl", json.dumps({"schema": RECEIPT_SCHEMA, "measured": {}})[:-1]
                   + ', "x": ' + _deep() + "}\n")
    cases.append(ParserCase(g, "receipts.read, a line nested 5000", partial(_read_all, deep)))
    for i, version in enumerate(("2.4.0+cu999999999", "2.4.0+cu" + "9" * 400, "2.4.0+rocm" + "9" * 400)):
        prefix = root / f"env-torch-{i}"
        F.write(_site_packages(prefix) / "torch-2.4.0.dist-info" / "METADATA", _metadata(version))
        cases.append(ParserCase(g, f"read_stack torch {version[:22]}", partial(_torch_build, prefix)))
    for i, folder in enumerate(("models--..--..", "models--org--..", "models--.--x", "models----x")):
        hub = root / f"hub-names-{i}"
        F.write_json(hub / folder / "snapshots" / COMMIT / "config.json", F.llama_config())
        cases.append(ParserCase(g, f"cached_models lists {folder}", partial(_cached_ids, hub)))
    cases.append(ParserCase(g, 'plan cpu_moe = "all"', partial(
        _plan_parses, '[[case]]\nmodel = "Qwen/Qwen3-30B-A3B"\nprofile = "rtx-4090"\ncpu_moe = "all"\n')))
    ok = _hf_repo(root / "hub", HUB_ID)
    cases.append(ParserCase(g, "find_snapshot --revision 5000 chars", partial(_find_snapshot, ok, "a" * 5000)))
    manifest = F.write(root / "manifest-deep", '{"layers": ' + _deep() + "}")
    cases.append(ParserCase(g, "ollama model_blob, manifest nested 5000", partial(_model_blob, manifest)))
    for label, make in (("-> /dev/zero", lambda p: _link(p, "/dev/zero")),
                        ("2 GiB sparse", lambda p: _sparse(p, 2 * 1024**3))):
        proc_root = root / f"root-{label.replace(' ', '-').replace('/', '')}"
        make(proc_root / "proc" / "meminfo")
        cases.append(ParserCase(g, f"read_memory, /proc/meminfo {label}", partial(_read_memory, proc_root)))
    # FIFOs, each reader in a child process
    fifo_hf = _hf_repo(root / "hub-fifo", HUB_ID, _fifo)
    egg = _site_packages(root / "env-egg-fifo")
    (egg / "torch-2.4.0-py3.11.egg-info").mkdir(parents=True, exist_ok=True)
    _fifo(egg / "torch-2.4.0-py3.11.egg-info" / "PKG-INFO")
    receipts_fifo = _fifo(root / "receipts.fifo")
    manifest_fifo = _fifo(root / "manifest.fifo")
    for label, code in (
            ("find_snapshot, refs/main FIFO", "from fitcheck.model.hf_cache import find_snapshot\n"
                                              f"find_snapshot(__import__('pathlib').Path({str(fifo_hf)!r}), 'a/b')"),
            ("read_packages, egg-info/PKG-INFO FIFO", "from fitcheck.probe.software import read_packages\n"
                                                      f"read_packages({str(egg)!r})"),
            ("receipts.read, FIFO", "from fitcheck.measure import receipts\n"
                                    f"list(receipts.read(__import__('pathlib').Path({str(receipts_fifo)!r})))"),
            ("ollama model_blob, manifest FIFO", "from fitcheck.model.ollama import model_blob\n"
                                                 f"model_blob(__import__('pathlib').Path({str(manifest_fifo)!r}))")):
        cases.append(ParserCase(g, label, partial(_in_child, code)))
    return cases
