#!/usr/bin/env bash
# Installs the VS Code that the real-client test runs the extension in, under host/:
# VS Code's server and web workbench as the `code-server` npm package ships them (the
# desktop build is downloaded from Microsoft's update service, which this project's
# machines cannot reach; the npm registry they can). Only VS Code itself (lib/vscode) is
# used, not code-server's own wrapper.
#
# The package's install script cannot run here (it downloads ripgrep from GitHub), so its
# steps are done by hand: the npm dependencies without their scripts, then the native
# modules the server loads built for this Node. Kerberos (proxy authentication only) is
# left out: it needs libkrb5-dev. Needs Node 20 (code-server 4.100's), make and a C++
# compiler. Does nothing when host/ is already installed from the current lock file.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
host="$here/host"
vscode="$host/node_modules/code-server/lib/vscode"
stamp="$host/node_modules/.tessera-host-installed"

if [ -f "$stamp" ] && [ "$stamp" -nt "$host/package-lock.json" ] && [ -f "$vscode/out/server-main.js" ]; then
  exit 0
fi
echo "installing VS Code (code-server's build) for the real-client test in $host"
# node-gyp downloads Node's headers unless told where they are; the registry is all
# that can be reached, so use the installed ones.
if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node.h ]; then
  export npm_config_nodedir=/usr
fi
# `npm rebuild` runs node-pty's script, which asks npx for node-gyp: answer yes.
export npm_config_yes=true

rm -f "$stamp"
(cd "$host" && npm ci --ignore-scripts --no-audit --no-fund)
# VS Code's own dependencies, pinned by its npm-shrinkwrap.json (`npm install`, not
# `npm ci`: the shipped shrinkwrap misses one package, tslib, which npm then resolves).
(cd "$vscode" && npm install --omit=dev --ignore-scripts --no-audit --no-fund)
(cd "$vscode" && npm rebuild @parcel/watcher @vscode/spdlog native-watchdog node-pty)
# VS Code looks for some modules (and extensions for some files) in node_modules.asar.
ln -sfn node_modules "$vscode/node_modules.asar"
touch "$stamp"
echo "installed VS Code $(node -p "require('$vscode/package.json').version") in $host"
