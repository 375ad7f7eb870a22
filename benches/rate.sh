#!/usr/bin/env bash
# The harness's request rate beside wrk's, on the same zero-latency endpoints, in one
# run: the reference vendor with --no-delay, and nginx answering a fixed JSON body.
# Both endpoints and both clients share this machine's cores, as they would in CI.
#
#   apt-get install nginx wrk     # Debian's packages
#   bash benches/rate.sh [SECONDS]
#
# Prints each median and the ratio harness / wrk. docs/performance.md has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
for tool in nginx wrk; do
    command -v "$tool" >/dev/null || { echo "needs $tool: apt-get install nginx wrk" >&2; exit 2; }
done
cargo build --release --quiet
cargo bench --bench rate --no-run --quiet 2>/dev/null
work=$(mktemp -d)
export TENANTCHECK_KEY_A=rate-bench-key-a TENANTCHECK_KEY_B=rate-bench-key-b
cleanup() {
    [ -n "${sim:-}" ] && kill "$sim" 2>/dev/null || true
    [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

./target/release/tenantcheck sim --listen 127.0.0.1:18090 --no-delay >"$work/sim.log" 2>&1 &
sim=$!
body='{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"sim-1","choices":[{"index":0,"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}'
cat >"$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work;
    server {
        listen 127.0.0.1:18091;
        location /v1/chat/completions { default_type application/json; return 200 '$body'; }
    }
}
CONF
nginx -c "$work/nginx.conf"
cat >"$work/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer rate-bench-key-a"
wrk.body = '{"model":"sim-1","messages":[{"role":"user","content":"Say hello in one word."}],"max_tokens":16,"temperature":0,"stream":false}'
LUA
sleep 0.5

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# CPU seconds (user + system) a process has used so far.
cpu() { awk -v t="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }
bench=$(ls -t target/release/deps/rate-* | grep -v '\.d$' | head -n 1)
nginx_worker=$(pgrep -P "$(cat "$work/nginx.pid")" | head -n 1)
for endpoint in sim:18090:$sim nginx:18091:$nginx_worker; do
    IFS=: read -r name port server <<<"$endpoint"
    url="http://127.0.0.1:$port/v1"
    wrk_rates=() wrk_requests=0
    s0=$(cpu "$server")
    /usr/bin/time -f "%U %S" -o "$work/wrk.cpu" bash -c "for i in 1 2 3; do wrk -t2 -c64 -d${secs}s -s '$work/post.lua' '$url/chat/completions'; done" >"$work/wrk.out"
    s1=$(cpu "$server")
    mapfile -t wrk_rates < <(awk '/Requests\/sec/ {print $2}' "$work/wrk.out")
    wrk_requests=$(awk '/requests in/ {n += $1} END {print n}' "$work/wrk.out")
    wrk_median=$(printf '%s\n' "${wrk_rates[@]}" | median)
    requests=$(awk -v r="$wrk_median" -v s="$secs" 'BEGIN {printf "%d", r * s / 2}')
    harness_line=$(/usr/bin/time -f "%U %S" -o "$work/harness.cpu" "$bench" "$url" "$requests" 64 3 2>/dev/null)
    s2=$(cpu "$server")
    harness_median=$(echo "$harness_line" | awk '{print $3}')
    per_request() { awk -v c="$1" -v n="$2" 'BEGIN {printf "%.1f", c / n * 1e6}'; }
    wrk_cpu=$(awk '{print $1 + $2}' "$work/wrk.cpu")
    harness_cpu=$(awk '{print $1 + $2}' "$work/harness.cpu")
    echo "$name: wrk median $wrk_median req/s (runs: ${wrk_rates[*]}); $harness_line"
    echo "  ratio harness/wrk $(awk -v h="$harness_median" -v w="$wrk_median" 'BEGIN {printf "%.2f", h / w}')"
    echo "  CPU per request, client: wrk $(per_request "$wrk_cpu" "$wrk_requests") us, harness $(per_request "$harness_cpu" $((requests * 3))) us"
    echo "  CPU per request, server: under wrk $(per_request "$(awk -v a="$s1" -v b="$s0" 'BEGIN {print a - b}')" "$wrk_requests") us, under the harness $(per_request "$(awk -v a="$s2" -v b="$s1" 'BEGIN {print a - b}')" $((requests * 3))) us"
done
