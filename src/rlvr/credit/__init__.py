"""Turn-level credit assignment: advantage estimators as pure functions (no verifiers import).

    compute_advantages("mt_grpo", turn_rewards, outcome_rewards, first_result_turn, coef=1.0)

See estimators.py for the formulas and their sources, normalize.py for the normalisations, tokens.py for the
per-token expansion and the packed token view of a rollout.
"""

from rlvr.credit.estimators import (
    ESTIMATORS,
    compute_advantages,
    grpo,
    grpo_mr,
    ms_po,
    mt_grpo,
    mt_grpo_k,
    turn_return,
)
from rlvr.credit.normalize import EPSILON, batch_whiten, group_normalize
from rlvr.credit.tokens import (
    NotPrefixConsistent,
    TokenView,
    build_token_view,
    expand_to_tokens,
    prefix_mismatch,
)

__all__ = [
    "EPSILON",
    "ESTIMATORS",
    "NotPrefixConsistent",
    "TokenView",
    "batch_whiten",
    "build_token_view",
    "compute_advantages",
    "expand_to_tokens",
    "group_normalize",
    "grpo",
    "grpo_mr",
    "ms_po",
    "mt_grpo",
    "mt_grpo_k",
    "prefix_mismatch",
    "turn_return",
]
