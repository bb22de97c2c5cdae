from __future__ import annotations

import sys
from pathlib import Path

# The loopback chat server and the SiLU kernels of the search tests (tests/llm, tests/search).
for helper_dir in ("llm", "search"):
    path = str(Path(__file__).resolve().parents[1] / helper_dir)
    if path not in sys.path:
        sys.path.insert(0, path)
