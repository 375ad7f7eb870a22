#!/usr/bin/env bash
# Node coverage against a fleet: the reference vendor as 8 nodes behind a router, the
# stale-pages fault on 1 of them, and a case (default isolation.canary-residue; `all`:
# the whole default suite) run RUNS times with the profile's [fleet] naming the node
# header (and the affinity header for affinity routing). Counts the verdicts (a pass is
# a miss; for `all`, the run's verdict) and the prompt tokens each run sent, beside one
# run against a single healthy node (the cost without a fleet).
#
#   bash benches/fleet.sh [RUNS] [ROUTING] [CASE]   # ROUTING: random (default), prefix-hash, affinity
#
# docs/benchmarks.md has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100}
routing=${2:-random}
case=${3:-isolation.canary-residue}
bin=${TENANTCHECK_BIN:-./target/release/tenantcheck}
[ -n "${TENANTCHECK_BIN:-}" ] || cargo build --release --quiet
work=$(mktemp -d)
export TENANTCHECK_KEY_A=fleet-bench-key-a TENANTCHECK_KEY_B=fleet-bench-key-b
cleanup() {
    [ -n "${sim:-}" ] && kill "$sim" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# One case, against the sim at PORT, with the [fleet] lines given; prints the verdict
# and the case's prompt tokens.
run_one() {
    local port=$1 fleet=$2 out=$work/run
    sed "s#http://127.0.0.1:8080/v1#http://127.0.0.1:$port/v1#" vendors/sim.toml >"$work/profile.toml"
    [ -n "$fleet" ] && printf '\n[fleet]\n%b\n' "$fleet" >>"$work/profile.toml"
    rm -rf "$out"
    local select=(--exact "$case")
    [ "$case" = all ] && select=()
    "$bin" run --vendor "$work/profile.toml" "${select[@]}" --out "$out" >/dev/null 2>&1 || true
    python3 - "$out/report.dsse.json" "$case" <<'PY'
import base64, json, sys
report = json.loads(base64.b64decode(json.load(open(sys.argv[1]))["payload"]))["predicate"]
cases = [c for c in report["cases"] if sys.argv[2] in ("all", c["id"])]
verdict = report["verdict"] if sys.argv[2] == "all" else cases[0]["outcome"]["verdict"]
print(verdict, sum(c["outcome"]["coverage"]["prompt_tokens"] for c in cases))
PY
}

start_sim() {
    "$bin" sim --listen "127.0.0.1:$1" "${@:2}" >"$work/sim.log" 2>&1 &
    sim=$!
    sleep 0.5
}

start_sim 18190
single=$(run_one 18190 "")
kill "$sim"; sim=
echo "single healthy node: $single"
start_sim 18192 --nodes 8 --routing "$routing"
healthy=$(run_one 18192 "$( [ "$routing" = affinity ] && echo 'node_header = "x-served-by"\naffinity_header = "x-session-affinity"' || echo 'node_header = "x-served-by"')")
kill "$sim"; sim=
echo "8 healthy nodes: $healthy"

fleet='node_header = "x-served-by"'
[ "$routing" = affinity ] && fleet="$fleet\naffinity_header = \"x-session-affinity\""
start_sim 18191 --nodes 8 --bad-nodes 1 --routing "$routing" --fault stale-pages
declare -A count=()
tokens=()
for i in $(seq 1 "$runs"); do
    read -r verdict spent < <(run_one 18191 "$fleet")
    count[$verdict]=$(( ${count[$verdict]:-0} + 1 ))
    tokens+=("$spent")
    printf '\r%d/%d' "$i" "$runs" >&2
done
echo >&2
median=$(printf '%s\n' "${tokens[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "$case: 8 nodes, 1 bad (stale-pages), $routing routing, $runs runs: fail ${count[fail]:-0}, inconclusive ${count[inconclusive]:-0}, pass ${count[pass]:-0}"
echo "median prompt tokens per run: $median; a pass over 8 healthy nodes: ${healthy#* }; a single healthy node: ${single#* }"
