from __future__ import annotations

import os
import sys
from pathlib import Path

# The shared search fixtures and SiLU kernels live in tests/search (and the chat server in tests/llm).
for helper_dir in ("llm", "search"):
    path = str(Path(__file__).resolve().parents[1] / helper_dir)
    if path not in sys.path:
        sys.path.insert(0, path)

# The private cluster stays on the loopback interface (set before Ray is first imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
