#!/usr/bin/env bash
# Installs what the non-Python example clients need (see docs/clients.md):
#   * C++:     Debian's gRPC/protobuf development packages, libzstd, a compiler.
#   * Go:      protoc-gen-go and protoc-gen-go-grpc (code generation only).
#   * Node.js: @grpc/grpc-js, @grpc/proto-loader and zstd-napi, installed
#              locally under clients/node/node_modules (not committed), and
#              @sabaki/gtp, Sabaki's GTP controller (tests/test_gtp_sabaki.py).
#
# Best effort and idempotent: it never fails the caller because one part is
# unavailable (the tests skip with a reason naming what is missing), but it
# prints what it could not install. Set KGRPC_CLIENT_DEPS_STRICT=1 to exit
# non-zero on any failure instead.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_DIR="$ROOT/clients/node"
SRC_NODE="$ROOT/clients-src/node"
failed=()

log() { echo "install-client-deps: $*"; }

# --- Debian packages -------------------------------------------------------
APT_PKGS=(libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
          libzstd-dev pkg-config cmake g++ make protoc-gen-go protoc-gen-go-grpc)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/kgrpc-apt.log 2>&1; then
      apt-get update -q >>/tmp/kgrpc-apt.log 2>&1
      apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/kgrpc-apt.log 2>&1 \
        || { log "apt-get failed (see /tmp/kgrpc-apt.log)"; failed+=("apt: ${missing[*]}"); }
    fi
  else
    log "not root (or no apt-get): please install ${missing[*]}"
    failed+=("apt: ${missing[*]}")
  fi
else
  log "Debian packages already installed"
fi

# --- npm packages (local to clients/node) ----------------------------------
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  mkdir -p "$NODE_DIR"
  loads() { (cd "$NODE_DIR" && node -e "require('@grpc/grpc-js');require('@grpc/proto-loader');require('protobufjs');require('zstd-napi');require('@sabaki/gtp')") >/dev/null 2>&1; }
  if cmp -s "$SRC_NODE/package.json" "$NODE_DIR/package.json" && loads; then
    log "npm packages already installed in clients/node"
  else
    cp "$SRC_NODE/package.json" "$NODE_DIR/package.json"
    # zstd-napi's install step first looks for a prebuilt binary on the
    # network; build it from its bundled zstd sources instead, against the
    # headers of the installed Node (Debian/NodeSource ship them under
    # /usr/include/node), so no download beyond the npm registry is needed.
    nodedir=""
    node_prefix="$(dirname "$(dirname "$(command -v node)")")"
    if [ -f "$node_prefix/include/node/node_version.h" ]; then nodedir="$node_prefix"; fi
    log "npm install in clients/node (node $(node --version), npm $(npm --version))"
    if ! (cd "$NODE_DIR" && env npm_config_build_from_source=true \
            ${nodedir:+npm_config_nodedir="$nodedir"} \
            npm_config_jobs=max npm install --no-audit --no-fund --loglevel=error >/tmp/kgrpc-npm.log 2>&1); then
      log "npm install failed (see /tmp/kgrpc-npm.log)"
      tail -20 /tmp/kgrpc-npm.log
      failed+=("npm")
    elif ! loads; then
      log "npm packages installed but do not load"
      failed+=("npm (load)")
    fi
  fi
else
  log "node/npm not found: the Node.js client cannot run"
  failed+=("node")
fi

if ((${#failed[@]})); then
  log "incomplete: ${failed[*]}"
  [ "${KGRPC_CLIENT_DEPS_STRICT:-0}" = 1 ] && exit 1
else
  log "ok"
fi
exit 0
