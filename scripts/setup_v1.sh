#!/usr/bin/env bash
# The bridge's interpreter (docs/v1.md): .venv-v1 with verifiers 0.4 (requirements/v1.txt, pinned) and the v1
# environments in environments_v1/, beside rlvr's .venv (verifiers 0.1.9: one distribution name, so never both in
# one environment). Called by scripts/setup.sh; idempotent, and quick when nothing changed (a stamp of the pins
# and the environments' pyproject files).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
VENV=.venv-v1
stamp="$VENV/.setup-$(cat requirements/v1.txt environments_v1/*/pyproject.toml scripts/setup_v1.sh | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && { echo "setup_v1: $VENV up to date"; exit 0; }
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip "$@"; }
pip install -q -r requirements/v1.txt
# rlvr itself, without its dependencies (they pin verifiers 0.1.9): v1 environments ported from rlvr's import the
# parts that need neither verifiers nor torch, e.g. v1-credit-suite imports rlvr.suite.tasks (docs/v1.md)
editable=(-e .)
for env in environments_v1/*/; do [ -f "$env/pyproject.toml" ] && editable+=(-e "$env"); done
[ ${#editable[@]} -eq 0 ] || pip install -q --no-deps "${editable[@]}"
# verifiers' null and bash harnesses (bash: the default for a hub-shaped taskset) install their chat program with
# `uv sync --script` in every process: lock it and fill uv's cache now, while the package index is reachable, so
# that runs need no network (rlvr.v1.worker, prepare_programs; docs/v1.md)
"$VENV/bin/python" src/rlvr/v1/worker.py --prepare-programs
"$VENV/bin/python" -c 'import verifiers, verifiers.v1; print("setup_v1 ok: verifiers", verifiers.__version__)'
rm -f "$VENV"/.setup-* && touch "$stamp"
