#!/usr/bin/env bash
# End-to-end test of the extension in a real editor: code-server (VS Code in a browser) driven by
# headless Chromium. Builds the .vsix, installs it into an isolated profile, opens a scratch
# workspace holding the SiLU example and runs tests/editor_e2e/e2e.mjs against it.
#
# Screenshots and the logs land in test-artifacts/editor-e2e/ (kept on failure too).
# Environment: ACCELOPT_PYTHON (default .venv/bin/python), E2E_KEEP=1 keeps the scratch directory.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
PYTHON="${ACCELOPT_PYTHON:-$REPO/.venv/bin/python}"
ARTIFACTS="$REPO/test-artifacts/editor-e2e"
started=$(date +%s)

"$PYTHON" -c "import accelopt" || { echo "editor-e2e: $PYTHON cannot import accelopt (run make setup)" >&2; exit 1; }

./scripts/editor_env.sh >/dev/null
# shellcheck source=/dev/null
source "${ACCELOPT_EDITOR_CACHE:-$HOME/.cache/accelopt-editor}/env.sh"

rm -rf "$ARTIFACTS"
mkdir -p "$ARTIFACTS"

# The extension as a user gets it: the packaged .vsix (vsce runs the production bundle first).
[ -d node_modules/@vscode/vsce ] || npm ci --no-audit --no-fund >/dev/null
SCRATCH=$(mktemp -d /tmp/accelopt-editor-e2e.XXXXXX)
VSIX="$SCRATCH/accelopt.vsix"
npm run --silent package -- --out "$VSIX" >"$ARTIFACTS/package.log" 2>&1 ||
  { cat "$ARTIFACTS/package.log" >&2; rm -rf "$SCRATCH"; exit 1; }

PROFILE="$SCRATCH/profile"
EXTENSIONS="$SCRATCH/extensions"
WORKSPACE="$SCRATCH/workspace"
mkdir -p "$PROFILE/User" "$EXTENSIONS" "$WORKSPACE"
cp kernels_examples/silu.py kernels_examples/silu_ref.py "$WORKSPACE/"

# A small search (2 iterations, beam 2, 3 plans, 1 sample) with the offline agents on the
# reference's full shapes (on its small ones SiLU's rewrites gain nothing measurable); the
# optimization memory lives in the scratch directory, not in the user's.
cat >"$PROFILE/User/settings.json" <<JSON
{
  "security.workspace.trust.enabled": false,
  "workbench.startupEditor": "none",
  "workbench.tips.enabled": false,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "chat.disableAIFeatures": true,
  "extensions.ignoreRecommendations": true,
  "extensions.autoCheckUpdates": false,
  "extensions.autoUpdate": false,
  "telemetry.telemetryLevel": "off",
  "update.mode": "none",
  "editor.codeLens": true,
  "editor.hover.delay": 200,
  "editor.minimap.enabled": false,
  "diffEditor.renderSideBySide": true,
  "diffEditor.hideUnchangedRegions.enabled": false,
  "accelopt.pythonPath": "$PYTHON",
  "accelopt.backend": "simulator",
  "accelopt.hardware": "trn1",
  "accelopt.inputSize": "full",
  "accelopt.agents": "offline",
  "accelopt.search.iterations": 2,
  "accelopt.search.beamWidth": 2,
  "accelopt.search.plansPerCandidate": 3,
  "accelopt.search.samplesPerPlan": 1,
  "accelopt.memory.path": "$SCRATCH/memory.sqlite"
}
JSON

node "$CODE_SERVER" --user-data-dir "$PROFILE" --extensions-dir "$EXTENSIONS" \
  --install-extension "$VSIX" >"$ARTIFACTS/install.log" 2>&1

PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Its own process group, so stopping it also stops the extension host and the language server.
setsid node "$CODE_SERVER" --user-data-dir "$PROFILE" --extensions-dir "$EXTENSIONS" --auth none \
  --bind-addr "127.0.0.1:$PORT" --disable-telemetry --disable-update-check --disable-workspace-trust \
  "$WORKSPACE" >"$ARTIFACTS/code-server.log" 2>&1 &
SERVER_PID=$!

cleanup() {
  kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
  # The extension host's log names the server's stderr; keep it with the screenshots.
  find "$PROFILE/logs" -name '*AccelOpt*' -exec cp {} "$ARTIFACTS/" \; 2>/dev/null || true
  if [ "${E2E_KEEP:-0}" = 1 ]; then echo "scratch kept: $SCRATCH"; else rm -rf "$SCRATCH"; fi
}
trap cleanup EXIT

for _ in $(seq 300); do
  curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$ARTIFACTS/code-server.log" >&2; exit 1; }
  sleep 0.2
done

echo "editor-e2e: editor ready after $(($(date +%s) - started)) s (environment, .vsix, install, start)"
status=0
E2E_URL="http://127.0.0.1:$PORT/?folder=$WORKSPACE" E2E_WORKSPACE="$WORKSPACE" E2E_ARTIFACTS="$ARTIFACTS" \
  node tests/editor_e2e/e2e.mjs || status=$?
echo "editor-e2e: $([ $status = 0 ] && echo passed || echo FAILED) in $(($(date +%s) - started)) s; screenshots in ${ARTIFACTS#"$REPO"/}/"
exit $status
