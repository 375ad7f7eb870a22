#!/usr/bin/env bash
# LiteLLM's proxy, a real gateway, from PyPI at a pinned version.
#
#   bash tests/engines/litellm.sh install     # a virtual environment with litellm[proxy]
#   bash tests/engines/litellm.sh bin         # prints the path of its `litellm` command
#
# install: litellm[proxy] 1.108.7 with every dependency at the version in
# tests/engines/litellm/constraints.txt, in a virtual environment kept in
# $TENANTCHECK_CACHE (default ~/.cache/tenantcheck), so a second run on the same
# machine takes seconds (about 40 s the first time); it ends by asking the command for
# its version. No database, no account: tests/it/gateways.rs starts the proxy itself
# with one of the configurations in tests/engines/litellm/ in front of the reference
# vendor, its callers' keys checked by tests/engines/litellm/custom_auth.py.
set -euo pipefail
version=1.108.7
here=$(cd "$(dirname "$0")" && pwd)
venv=${TENANTCHECK_CACHE:-$HOME/.cache/tenantcheck}/litellm-$version
bin=$venv/bin/litellm

case "${1:-}" in
install)
    if [ ! -x "$bin" ]; then
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            -c "$here/litellm/constraints.txt" "litellm[proxy]==$version"
    fi
    "$bin" --version >/dev/null 2>&1 || { echo "litellm in $venv does not run" >&2; exit 1; }
    echo "litellm $version: $bin"
    ;;
bin)
    [ -x "$bin" ] || { echo "litellm is not installed: bash $0 install" >&2; exit 1; }
    echo "$bin"
    ;;
*)
    echo "usage: $0 install|bin" >&2
    exit 2
    ;;
esac
