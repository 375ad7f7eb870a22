#!/usr/bin/env bash
# One share of a partitioned tenantcheck run: what each container of the Kubernetes
# Indexed Job, each job of the CI matrix, or each local process runs.
#
#   SHARD_INDEX   which share, from 1; or JOB_COMPLETION_INDEX (from 0), which
#                 Kubernetes sets in every pod of an Indexed Job
#   SHARD_COUNT   how many shares (the Job's completions, the matrix's size)
#   REPORTS_DIR   where the share's run folder goes: REPORTS_DIR/share-INDEX-of-COUNT
#   VENDOR        a vendor profile (TOML); unset: the embedded reference vendor
#   SIGNING_KEY   the private key to sign with (PKCS#8 PEM); unset: a fresh pair in
#                 the run folder (then merge with the keys beside each report)
#   TENANTCHECK   the binary; default: tenantcheck on PATH
#
# Exits 0 once a signed report is written, whatever its verdict: the verdict is
# judged once, by `tenantcheck merge` over every share, so a failing vendor does not
# make an orchestrator retry the share. Exits non-zero when no report was judged
# (a usage, profile or key error: 2) or the run was interrupted (130, resumable with
# `tenantcheck run --resume` on the same run folder).
set -euo pipefail

tenantcheck=${TENANTCHECK:-tenantcheck}
count=${SHARD_COUNT:?set SHARD_COUNT to the number of shares}
if [[ -n ${SHARD_INDEX:-} ]]; then
    index=$SHARD_INDEX
elif [[ -n ${JOB_COMPLETION_INDEX:-} ]]; then
    index=$((JOB_COMPLETION_INDEX + 1))
else
    echo "shard.sh: set SHARD_INDEX (from 1) or JOB_COMPLETION_INDEX (from 0)" >&2
    exit 2
fi
reports=${REPORTS_DIR:?set REPORTS_DIR to the folder the shares write into}
out="$reports/share-$index-of-$count"

args=(run --partition "$index/$count" --out "$out")
if [[ -n ${VENDOR:-} ]]; then
    args+=(--vendor "$VENDOR")
fi
if [[ -n ${SIGNING_KEY:-} ]]; then
    args+=(--key "$SIGNING_KEY")
fi

set +e
"$tenantcheck" "${args[@]}"
code=$?
set -e
case $code in
    0 | 1 | 3)
        echo "shard.sh: share $index/$count wrote $out/report.dsse.json (exit $code: its verdict; merge judges them all)"
        exit 0
        ;;
    *)
        echo "shard.sh: share $index/$count judged nothing (exit $code)" >&2
        exit "$code"
        ;;
esac
