#!/usr/bin/env bash
# MS-PO (multi-step policy optimisation: each turn's advantage from its own reward-to-go) on vf-triviaqa-search.
#   scripts/run_ms_po.sh [cpu|gpu] [extra `rlvr train` arguments]        (DRY_RUN=1 prints the command)
# Settings and environment variables: scripts/_rlvr_train.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_rlvr_train.sh"
run_train ms_po "$@"
