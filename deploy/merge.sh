#!/usr/bin/env bash
# Joins the shares a partitioned run wrote into REPORTS_DIR: `tenantcheck merge`
# verifies each share's report with its transcript and signs one summary into
# REPORTS_DIR/merged, then `tenantcheck verify` re-derives it.
#
#   REPORTS_DIR   the folder the shares wrote into (share-INDEX-of-COUNT folders)
#   SHARD_KEY     the public key (SPKI PEM) every share must be signed by; unset: the
#                 key beside each report (integrity, not who signed)
#   MERGE_KEY     the private key to sign the summary with; unset: a fresh pair
#   TENANTCHECK   the binary; default: tenantcheck on PATH
#
# Exits as `tenantcheck merge` does: 0 pass, 1 a case failed or a share does not
# verify, 2 unreadable input, 3 inconclusive.
set -euo pipefail

tenantcheck=${TENANTCHECK:-tenantcheck}
reports=${REPORTS_DIR:?set REPORTS_DIR to the folder the shares wrote into}
shopt -s nullglob
shares=("$reports"/share-*-of-*/)
if [[ ${#shares[@]} -eq 0 ]]; then
    echo "merge.sh: no share-INDEX-of-COUNT folder in $reports" >&2
    exit 2
fi
args=(merge "${shares[@]}" --out "$reports/merged")
if [[ -n ${SHARD_KEY:-} ]]; then
    args+=(--shard-key "$SHARD_KEY")
fi
if [[ -n ${MERGE_KEY:-} ]]; then
    args+=(--key "$MERGE_KEY")
fi

set +e
"$tenantcheck" "${args[@]}"
code=$?
set -e
if [[ -f "$reports/merged/summary.dsse.json" ]]; then
    "$tenantcheck" verify "$reports/merged/summary.dsse.json" --key "$reports/merged/signing-key.pub.pem"
fi
exit "$code"
