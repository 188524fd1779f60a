#!/usr/bin/env bash
# Generates client code for the kgrpc contract (protos/kgrpc/v1) into clients/
# (gitignored). Called by `make clients`. Needs the tools that
# scripts/install-client-deps.sh installs.
#
#   clients/cpp/gen/kgrpc/v1/*.pb.{h,cc} *.grpc.pb.{h,cc}   protoc + grpc_cpp_plugin
#   clients/node/protos/kgrpc/v1/*.proto                      loaded at run time by @grpc/proto-loader
#   clients/node/types/                                       TypeScript types (proto-loader-gen-types),
#                                                             when clients/node/node_modules is installed
#   clients/go/kgrpc/v1/*.pb.go *_grpc.pb.go                  protoc-gen-go + protoc-gen-go-grpc, if installed
#
# Options: --build   also build the C++ example client (clients/cpp/build/kgrpc-client)
#          --only LANG[,LANG]   generate only these (cpp, node, go)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROTO_ROOT="$ROOT/protos"
OUT="$ROOT/clients"
GO_PACKAGE="${KGRPC_GO_PACKAGE:-github.com/kgrpc/kgrpc/clients/go/kgrpc/v1}"
BUILD=0
ONLY="cpp,node,go"
while (($#)); do
  case "$1" in
    --build) BUILD=1 ;;
    --only) ONLY="$2"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gen-clients: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }
die() { echo "gen-clients: $*" >&2; exit 1; }

cd "$PROTO_ROOT"
PROTOS=(kgrpc/v1/*.proto)
((${#PROTOS[@]})) || die "no .proto files under $PROTO_ROOT/kgrpc/v1"

if want cpp; then
  command -v protoc >/dev/null || die "protoc not found (run scripts/install-client-deps.sh)"
  PLUGIN="$(command -v grpc_cpp_plugin || true)"
  [ -n "$PLUGIN" ] || die "grpc_cpp_plugin not found (Debian: protobuf-compiler-grpc)"
  rm -rf "$OUT/cpp/gen.tmp" && mkdir -p "$OUT/cpp/gen.tmp"
  protoc -I. --cpp_out="$OUT/cpp/gen.tmp" --grpc_out="$OUT/cpp/gen.tmp" \
    --plugin=protoc-gen-grpc="$PLUGIN" "${PROTOS[@]}"
  # Replace only files whose content changed, so an incremental build of the
  # client does not recompile unchanged generated code.
  mkdir -p "$OUT/cpp/gen"
  (cd "$OUT/cpp/gen.tmp" && find . -type f) | while read -r f; do
    if ! cmp -s "$OUT/cpp/gen.tmp/$f" "$OUT/cpp/gen/$f"; then
      mkdir -p "$(dirname "$OUT/cpp/gen/$f")"
      cp "$OUT/cpp/gen.tmp/$f" "$OUT/cpp/gen/$f"
    fi
  done
  rm -rf "$OUT/cpp/gen.tmp"
  echo "gen-clients: C++  -> clients/cpp/gen ($(protoc --version), grpc_cpp_plugin)"
fi

if want node; then
  rm -rf "$OUT/node/protos" && mkdir -p "$OUT/node/protos/kgrpc/v1"
  cp "${PROTOS[@]}" "$OUT/node/protos/kgrpc/v1/"
  cp "$ROOT/clients-src/node/client.js" "$OUT/node/client.js"
  [ -f "$OUT/node/package.json" ] || cp "$ROOT/clients-src/node/package.json" "$OUT/node/package.json"
  GEN_TYPES="$OUT/node/node_modules/.bin/proto-loader-gen-types"
  if [ -x "$GEN_TYPES" ]; then
    rm -rf "$OUT/node/types"
    "$GEN_TYPES" --keepCase --longs=String --enums=String --defaults --oneofs --grpcLib=@grpc/grpc-js \
      -I "$OUT/node/protos" -O "$OUT/node/types" "${PROTOS[@]}" >/dev/null
    echo "gen-clients: Node -> clients/node/protos + clients/node/types (proto-loader-gen-types)"
  else
    echo "gen-clients: Node -> clients/node/protos (npm packages not installed: no TypeScript types)"
  fi
fi

if want go; then
  if command -v protoc-gen-go >/dev/null && command -v protoc-gen-go-grpc >/dev/null; then
    rm -rf "$OUT/go" && mkdir -p "$OUT/go"
    mopts=()
    for p in "${PROTOS[@]}"; do mopts+=("--go_opt=M$p=$GO_PACKAGE;kgrpcv1" "--go-grpc_opt=M$p=$GO_PACKAGE;kgrpcv1"); done
    protoc -I. --go_out="$OUT/go" --go_opt=paths=source_relative \
      --go-grpc_out="$OUT/go" --go-grpc_opt=paths=source_relative "${mopts[@]}" "${PROTOS[@]}"
    echo "gen-clients: Go   -> clients/go/kgrpc/v1 (package $GO_PACKAGE)"
  else
    echo "gen-clients: Go   skipped (protoc-gen-go / protoc-gen-go-grpc not installed)"
  fi
fi

if ((BUILD)) && want cpp; then
  make -s -C "$ROOT/clients-src/cpp" -j"$(nproc)" ROOT="$ROOT"
  echo "gen-clients: built clients/cpp/build/kgrpc-client"
fi
