"""The full battery: every request of tests/test_battery.py asked of every model on every profile.

    python benchmarks/battery.py        # FITCHECK_BATTERY=full pytest tests/test_battery.py

The default test run samples the heavier requests to stay fast; this runs them all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "FITCHECK_BATTERY": "full"}
    sys.exit(subprocess.call([sys.executable, "-m", "pytest", "-q", str(root / "tests" / "test_battery.py"),
                              *sys.argv[1:]], env=env, cwd=root))
