#!/usr/bin/env bash
# GRPO baselines of the MT-GRPO paper on vf-triviaqa-search:
#   STEP_REWARDS=0 (default): GRPO on the outcome reward only (algo grpo);
#   STEP_REWARDS=1: GRPO on the outcome plus the turn (step) rewards merged into one scalar (algo grpo_mr).
#   scripts/run_grpo.sh [cpu|gpu] [extra `rlvr train` arguments]          (DRY_RUN=1 prints the command)
# Settings and environment variables: scripts/_rlvr_train.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_rlvr_train.sh"
if [[ "${STEP_REWARDS:-0}" == "1" ]]; then
    run_train grpo_mr "$@"
else
    run_train grpo "$@"
fi
