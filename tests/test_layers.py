"""The layering (dev/layers.py): every module stands in one layer; no import, at module level or inside a function,
reaches a layer above its own; the import graph has no cycle; outside fitcheck/engines/ no code compares with an
engine's name."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))

from imports import edges, modules  # noqa: E402
from layers import LAYERS, layer_of  # noqa: E402


def test_every_module_has_a_layer():
    unplaced = []
    for module in modules():
        try:
            layer_of(module)
        except KeyError:
            unplaced.append(module)
    assert not unplaced


def test_no_import_reaches_up_a_layer():
    upward = [f"{a}:{line} imports {b} ({LAYERS[layer_of(a)][0]} -> {LAYERS[layer_of(b)][0]})"
              for a, b, line, _ in edges() if layer_of(a) < layer_of(b)]
    assert not upward, "\n".join(upward)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in edges():
        graph.setdefault(a, set()).add(b)
    assert cycles(graph) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the finder finds one


ENGINE_COMPARISON = re.compile(r"""(==|!=|\bin|\bnot in)\s*\(?\s*["'](vllm|sglang|llama\.cpp|mlx)["']""")


def test_no_engine_comparison_outside_the_engines():
    """A branch on an engine's name belongs to that engine's module (render's words and measure, which runs
    transformers itself, aside)."""
    found = []
    for path in sorted((ROOT / "fitcheck").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("fitcheck/engines/", "fitcheck/render/")):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if ENGINE_COMPARISON.search(line.split("#")[0]):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
