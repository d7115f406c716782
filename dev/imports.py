"""The import graph of fitcheck/: every `import fitcheck...` and `from fitcheck... import` (module-level and inside
functions), as (importer, imported) module pairs.  Used by tests/test_layers.py and dev/architecture.py."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "fitcheck").rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The fitcheck module ``name`` refers to (a package's submodule, or the package itself)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def edges(*, type_checking: bool = False) -> list[tuple[str, str, int, bool]]:
    """(importer, imported, line, at module level) for every fitcheck import; imports under
    `if TYPE_CHECKING:` are left out unless ``type_checking``."""
    known = modules()
    out = []
    for mod, path in known.items():
        tree = ast.parse(path.read_text())
        skip: set[int] = set()
        if not type_checking:
            for node in ast.walk(tree):
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    skip |= {id(n) for n in ast.walk(node)}
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                base = node.module
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            found = {_resolve(t, known) for t in targets if t.startswith("fitcheck")}
            # `from fitcheck.x import y`: the submodule y when it is one, else the module x
            if isinstance(node, ast.ImportFrom) and node.module:
                subs = {_resolve(f"{node.module}.{a.name}", known) for a in node.names}
                subs = {s for s in subs if s and s != _resolve(node.module, known)}
                found = subs | ({_resolve(node.module, known)} if len(subs) < len(node.names) else set())
            for target in sorted(t for t in found if t and t != mod):
                out.append((mod, target, node.lineno, id(node) in top))
    return out
