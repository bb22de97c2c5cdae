#!/usr/bin/env bash
# A real independent LSP client, run by hand (not in CI): headless Neovim's built-in client
# (Debian's neovim, installed here when missing and we are root) drives `accelopt lsp` through
# diagnostics, hover, code lens, code action, a small search and applying its best candidate.
# The checks are in scripts/neovim_lsp_smoke.lua; ends with "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
if ! command -v nvim >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim >/dev/null
  else
    echo "install neovim first (e.g. sudo apt-get install neovim)"; exit 2
  fi
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp kernels_examples/silu.py kernels_examples/silu_ref.py tests/lsp/workspace/broken.py "$WORK/"
cd "$WORK"
OUT="$WORK/out.txt" PY="$REPO/.venv/bin/python" OPENBLAS_NUM_THREADS=1 HOME="$WORK" \
  timeout 300 nvim --headless -n -u NONE -c "luafile $REPO/scripts/neovim_lsp_smoke.lua" >"$WORK/nvim.log" 2>&1 || true
if [ -f "$WORK/out.txt" ]; then cat "$WORK/out.txt"; else cat "$WORK/nvim.log"; fi
tail -n 1 "$WORK/out.txt" 2>/dev/null | grep -q " 0 failed"
