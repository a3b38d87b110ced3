#!/usr/bin/env bash
# MT-GRPO (turn-level advantages: outcome + turn term) on vf-triviaqa-search.
#   scripts/run_mt_grpo.sh [cpu|gpu] [extra `rlvr train` arguments]      (DRY_RUN=1 prints the command)
# Settings and environment variables: scripts/_rlvr_train.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_rlvr_train.sh"
run_train mt_grpo "$@"
