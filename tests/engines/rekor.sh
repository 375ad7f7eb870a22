#!/usr/bin/env bash
# Sigstore's Rekor v2 log server (rekor-tiles, POSIX storage), from the Go module proxy.
#
#   bash tests/engines/rekor.sh install         # build rekor-server once, cached
#   bash tests/engines/rekor.sh start PORT DIR  # a log on 127.0.0.1:PORT, storage in DIR
#
# install: `go install github.com/sigstore/rekor-tiles/v2/cmd/rekor-server/posix@v2.3.0`
# with the machine's Go (1.25.8 or later), into $TENANTCHECK_CACHE (default
# ~/.cache/tenantcheck), about a minute on 2 cores the first time, nothing after.
#
# start: a fresh Ed25519 log key in DIR/log-key.pem (kept if DIR already has one; the
# public half in DIR/log-key.pub), the server's tiles in DIR/tiles, and one origin for
# both halves of the log as a public Rekor v2 instance has: `rekor_front.py` serves the
# checkpoint and the tiles from DIR/tiles and passes `POST /api/v2/log/entries` to the
# server, which it starts on PORT+1 (gRPC on PORT+2, metrics on PORT+3) and stops when
# it stops. The log's origin (the checkpoint's first line) is `127.0.0.1:PORT`; a
# checkpoint is published every second (TENANTCHECK_REKOR_INTERVAL), so an entry is
# answered within about a second. Prints the front's pid once the log answers; the
# server's output goes to DIR/server.log.
set -euo pipefail
version=v2.3.0
cache=${TENANTCHECK_CACHE:-$HOME/.cache/tenantcheck}/rekor-tiles-$version
bin=$cache/posix
here=$(cd "$(dirname "$0")" && pwd)

install() {
    if [ -x "$bin" ]; then
        return 0
    fi
    if ! command -v go >/dev/null; then
        echo "rekor.sh: Go 1.25.8 or later is needed to build rekor-server (no 'go' on PATH)" >&2
        exit 1
    fi
    mkdir -p "$cache"
    echo "building rekor-server $version (cached in $cache afterwards)"
    GOBIN=$cache GOTOOLCHAIN=local GOFLAGS=-mod=mod \
        go install "github.com/sigstore/rekor-tiles/v2/cmd/rekor-server/posix@$version"
    "$bin" version >/dev/null
}

start() {
    local port=$1 dir=$2
    [ -x "$bin" ] || install >&2
    mkdir -p "$dir"
    if [ ! -f "$dir/log-key.pem" ]; then
        openssl genpkey -algorithm ed25519 -out "$dir/log-key.pem" 2>/dev/null
    fi
    openssl pkey -in "$dir/log-key.pem" -pubout -out "$dir/log-key.pub" 2>/dev/null
    python3 "$here/rekor_front.py" --port "$port" --tiles "$dir/tiles" -- \
        "$bin" serve --storage-dir "$dir/tiles" --signer-filepath "$dir/log-key.pem" \
        --hostname "127.0.0.1:$port" --http-address 127.0.0.1 --http-port $((port + 1)) \
        --grpc-address 127.0.0.1 --grpc-port $((port + 2)) --http-metrics-port $((port + 3)) \
        --checkpoint-interval "${TENANTCHECK_REKOR_INTERVAL:-1s}" --client-signing-algorithms ed25519-ph \
        >"$dir/server.log" 2>&1 &
    local pid=$!
    for _ in $(seq 1 60); do
        if curl -fsS "http://127.0.0.1:$port/checkpoint" >/dev/null 2>&1 \
            && curl -fsS -o /dev/null "http://127.0.0.1:$((port + 1))/healthz" 2>/dev/null; then
            echo "$pid"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "the Rekor log exited before it answered:" >&2
            tail -n 30 "$dir/server.log" >&2
            exit 1
        fi
        sleep 0.5
    done
    echo "the Rekor log did not answer in 30 s" >&2
    kill "$pid"
    exit 1
}

case "${1:-}" in
    install) install ;;
    start) start "${2:?port}" "${3:?storage directory}" ;;
    *) echo "usage: $0 install | start PORT DIR" >&2; exit 2 ;;
esac
