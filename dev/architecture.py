"""Shape figures of a fitcheck tree (the closing note of issue 34 reports them before and after).

    python dev/architecture.py [ROOT]      # ROOT: a checkout (default: this one), e.g. a `git worktree` of a commit

Files over 500 and 600 lines, the files that name each engine (anywhere, and as a quoted literal), comparisons
with an engine's quoted name outside fitcheck/engines/, function-level imports of fitcheck modules, the largest
McCabe complexity (ruff C901) and fitcheck/'s line count.  Upward imports and cycles: tests/test_layers.py.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ENGINES = {"transformers": "transformers", "vllm": "vllm", "sglang": "sglang", "llama.cpp": r"llama\.cpp",
           "mlx": "mlx"}
COMPARISON = re.compile(r"""(==|!=|\bin|\bnot in)\s*\(?\s*["'](vllm|sglang|llama\.cpp|mlx|transformers)["']""")


def figures(root: Path) -> dict:
    files = sorted((root / "fitcheck").rglob("*.py"))
    texts = {p: p.read_text() for p in files}
    lines = {p: t.count("\n") for p, t in texts.items()}
    out: dict = {
        "lines": sum(lines.values()),
        "files": len(files),
        "files_over_500": sum(n > 500 for n in lines.values()),
        "files_over_600": sum(n > 600 for n in lines.values()),
    }
    for name, pattern in ENGINES.items():
        out[f"files_naming_{name}"] = sum(bool(re.search(pattern, t, re.I)) for t in texts.values())
        out[f"files_quoting_{name}"] = sum(bool(re.search(rf"[\"']{pattern}[\"']", t)) for t in texts.values())
    outside = [p for p in files if "fitcheck/engines/" not in p.as_posix()]
    out["engine_comparisons_outside_engines"] = sum(len(COMPARISON.findall(texts[p])) for p in outside)
    out["files_with_engine_comparisons_outside_engines"] = sum(bool(COMPARISON.search(texts[p])) for p in outside)
    local = 0
    for t in texts.values():
        for node in ast.walk(ast.parse(t)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                local += sum(1 for sub in ast.walk(node) if isinstance(sub, ast.ImportFrom) and sub.level == 0
                             and (sub.module or "").startswith("fitcheck"))
    out["function_level_fitcheck_imports"] = local
    ruff = subprocess.run([sys.executable, "-m", "ruff", "check", str(root / "fitcheck"), "--select", "C901",
                           "--config", "lint.mccabe.max-complexity = 0", "--output-format", "json",
                           "--no-cache", "--isolated"], capture_output=True, text=True)
    found = [int(m.group(1)) for d in json.loads(ruff.stdout or "[]")
             for m in [re.search(r"\((\d+) > 0\)", d["message"])] if m]
    out["max_mccabe"] = max(found, default=0)
    out["functions_over_15"] = sum(c > 15 for c in found)
    return out


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    for key, value in figures(root).items():
        print(f"{key:48s} {value}")
