from __future__ import annotations

import sys
from pathlib import Path

# Shared test helpers live beside the tests that introduced them: the loopback chat server and
# scripted endpoint in tests/llm, the SiLU kernels in tests/search.
for helper_dir in ("llm", "search"):
    path = str(Path(__file__).resolve().parents[1] / helper_dir)
    if path not in sys.path:
        sys.path.insert(0, path)

from search_fixtures import *  # noqa: E402,F403
