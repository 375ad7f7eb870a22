#!/usr/bin/env bash
# What entering a transparency log costs a run: RUNS runs of the default suite against
# the embedded reference vendor, alternately unlogged and under a challenge on a Rekor v2
# log on 127.0.0.1 (tests/engines/rekor.sh, a checkpoint a second), each run's wall time
# and the seconds its start and end entries took; the medians and their difference.
#
#   cargo build --release && bash benches/logging.sh [RUNS]    # default 5 of each
#   TENANTCHECK_BIN=target/debug/tenantcheck bash benches/logging.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
bin=${TENANTCHECK_BIN:-target/release/tenantcheck}
work=$(mktemp -d)
bash tests/engines/rekor.sh install >&2
port=18130
pid=$(bash tests/engines/rekor.sh start "$port" "$work/log")
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin" challenge --log "http://127.0.0.1:$port" --log-key "$work/log/log-key.pub" --out "$work/challenge.json" >&2
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
: >"$work/plain"; : >"$work/logged"; : >"$work/start"; : >"$work/end"
for i in $(seq 1 "$runs"); do
    t0=$(date +%s.%N)
    "$bin" run --out "$work/plain-$i" >/dev/null
    t1=$(date +%s.%N)
    "$bin" run --challenge "$work/challenge.json" --out "$work/logged-$i" >"$work/out-$i"
    t2=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f\n", b - a}' >>"$work/plain"
    awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.2f\n", b - a}' >>"$work/logged"
    grep '^logged: run start' "$work/out-$i" | sed 's/.*; \([0-9.]*\) s)$/\1/' >>"$work/start"
    grep '^logged: run end' "$work/out-$i" | sed 's/.*; \([0-9.]*\) s)$/\1/' >>"$work/end"
    echo "run $i: plain $(tail -1 "$work/plain") s, logged $(tail -1 "$work/logged") s (start $(tail -1 "$work/start") s, end $(tail -1 "$work/end") s)" >&2
done
p=$(median <"$work/plain"); l=$(median <"$work/logged")
echo "median of $runs: unlogged $p s, logged $l s, difference $(awk -v a="$p" -v b="$l" 'BEGIN {printf "%.2f", b - a}') s; start entry $(median <"$work/start") s, end entry $(median <"$work/end") s; requests to the log per run: 2"
