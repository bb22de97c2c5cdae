"""A short search with LLM agents against a real llama.cpp server on loopback.

Starts `llama-cpp-python`'s OpenAI-compatible server (PyPI: `pip install 'llama-cpp-python[server]'`,
which builds llama.cpp) on a small GGUF model you have on disk, runs a short search on an example
kernel with the `llamacpp` preset, and prints what share of the model's replies parsed, compiled,
were correct and were faster, and how the endpoint calls went. Model weights are not fetched:
pass the file.

    python benchmarks/llm_local.py --model ~/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    python benchmarks/llm_local.py --model M.gguf --n-ctx 8192 --iterations 2 --plans 4
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(base_url: str, server: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the llama.cpp server exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1.0)
    raise SystemExit(f"the llama.cpp server did not answer within {timeout_s:g} s")


def shares(events: list[dict[str, object]]) -> dict[str, str]:
    """Of the executor and fixer replies: parsed (became a kernel), compiled, correct, faster."""
    candidates = [e["candidate"] for e in events if e.get("kind") == "candidate"]
    written = [c for c in candidates if isinstance(c, dict) and c.get("iteration", 0) and not c.get("duplicate_of")]
    parsed = [c for c in written if c.get("status") != "agent_error"]
    compiled = [c for c in parsed if c.get("status") not in ("syntax_error", "compile_error")]
    correct = [c for c in compiled if c.get("status") == "ok"]
    faster = [c for c in correct if (c.get("speedup") or 0) > 1.0]

    def share(part: list[object], whole: list[object]) -> str:
        return f"{len(part)}/{len(whole)}" + (f" ({100 * len(part) / len(whole):.0f}%)" if whole else "")

    return {
        "parsed": share(parsed, written),
        "compiled": share(compiled, parsed),
        "correct": share(correct, compiled),
        "faster": share(faster, correct),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a GGUF model file")
    parser.add_argument("--n-ctx", type=int, default=8192, help="the server's context window")
    parser.add_argument("--kernel", default=str(REPO / "kernels_examples" / "silu.py"))
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--plans", type=int, default=4)
    parser.add_argument("--startup-timeout", type=float, default=300.0)
    args = parser.parse_args()
    model = Path(args.model).expanduser()
    if not model.is_file():
        raise SystemExit(f"{model}: no such model file")
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--n_ctx", str(args.n_ctx),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(base_url, server, args.startup_timeout)
        with tempfile.TemporaryDirectory() as scratch:
            config = Path(scratch) / "llm.toml"
            config.write_text(
                f'agents = "llm"\n[llm]\nbase_url = "{base_url}"\nmodel = "{model.stem}"\npreset = "llamacpp"\n'
                f"context_window = {args.n_ctx}\n[search]\niterations = {args.iterations}\nbeam_width = 1\n"
                f"plans_per_kernel = {args.plans}\nsamples_per_plan = 1\nseeds = 2\n"
            )
            out = Path(scratch) / "out"
            started = time.monotonic()
            run = subprocess.run(
                [sys.executable, "-m", "accelopt", "optimize", args.kernel, "--config", str(config), "--out",
                 str(out), "--no-memory", "--size", "small"],
                capture_output=True, text=True, env=dict(os.environ),
            )
            elapsed = time.monotonic() - started
            events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if line]
            finished = next((e for e in events if e.get("kind") == "finished"), {})
            print(f"model {model.name}, window {args.n_ctx} tokens, {elapsed:.0f} s, exit {run.returncode}")
            for name, value in shares(events).items():
                print(f"  {name:9s} {value}")
            endpoint = finished.get("endpoint", {}) if isinstance(finished, dict) else {}
            print(f"  endpoint  {json.dumps(endpoint)}")
            print(f"  outcome   {finished.get('reason')}: {finished.get('message')}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
