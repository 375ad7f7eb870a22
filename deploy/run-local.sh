#!/usr/bin/env bash
# The partitioned run on one machine, as the Indexed Job and the CI matrix run it:
# COUNT shares (default 3) of the suite as parallel processes against the embedded
# reference vendor (or VENDOR), then the merge and its verification.
#
#   bash deploy/run-local.sh [COUNT] [REPORTS_DIR]
#
# TENANTCHECK names the binary (default: the newer of target/release/tenantcheck and
# target/debug/tenantcheck, else tenantcheck on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

count=${1:-3}
reports=${2:-reports/runs/shares-$(date -u +%Y%m%dT%H%M%SZ)}
if [[ -z ${TENANTCHECK:-} ]]; then
    for candidate in target/release/tenantcheck target/debug/tenantcheck; do
        if [[ -x $candidate && ( -z ${TENANTCHECK:-} || $candidate -nt ${TENANTCHECK:-} ) ]]; then
            TENANTCHECK=$PWD/$candidate
        fi
    done
fi
export TENANTCHECK=${TENANTCHECK:-tenantcheck}
export REPORTS_DIR=$reports SHARD_COUNT=$count
mkdir -p "$reports"

pids=()
for index in $(seq 1 "$count"); do
    SHARD_INDEX=$index bash deploy/shard.sh >"$reports/log-share-$index.txt" 2>&1 &
    pids+=("$!")
done
failed=0
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
        echo "run-local.sh: share $((i + 1))/$count failed; see $reports/log-share-$((i + 1)).txt" >&2
        failed=1
    fi
done
if [[ $failed -ne 0 ]]; then
    exit 2
fi
bash deploy/merge.sh
