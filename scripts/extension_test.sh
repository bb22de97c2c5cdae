#!/usr/bin/env bash
# The VS Code extension's checks, from nothing: npm dependencies from the committed lockfile,
# type-check, bundle, unit tests, then the contract test against the real Python language server.
# The server runs on $ACCELOPT_PYTHON, else the project's .venv/bin/python (made by `make setup`).
set -euo pipefail
cd "$(dirname "$0")/.."

export ACCELOPT_PYTHON="${ACCELOPT_PYTHON:-$PWD/.venv/bin/python}"
if ! "$ACCELOPT_PYTHON" -c "import accelopt" 2>/dev/null; then
  echo "extension_test: $ACCELOPT_PYTHON cannot import accelopt; run 'make setup' or set ACCELOPT_PYTHON" >&2
  exit 1
fi

# npm ci reinstalls from the lockfile; skipped when node_modules was installed from this very lockfile.
lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
stamp=node_modules/.accelopt-lock-sha256
if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_hash" ]; then
  echo "== npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_hash" > "$stamp"
fi

echo "== type-check, format check, compile the tests"
rm -rf out
npx tsc -p .
npx tsc -p extension/webview
npx prettier --check --log-level warn "extension/**/*.{ts,mjs}"

echo "== bundle (esbuild)"
npm run --silent build -- --production

echo "== unit tests and contract test"
node --test out/extension/test/*.test.js out/extension/test/contract/*.test.js
