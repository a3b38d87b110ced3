"""Turn-level credit assignment: advantage estimators as pure functions (no verifiers import).

    compute_advantages("mt_grpo", turn_rewards, outcome_rewards, first_result_turn, coef=1.0)

See estimators.py for the formulas, their sources and the registry (`ESTIMATORS`), normalize.py for the
normalisations, tokens.py for the per-token expansion and the packed token view of a rollout.
"""

from rlvr.credit.estimators import (
    ESTIMATORS,
    Estimator,
    compute_advantages,
    estimator_parameters,
    get_estimator,
    gigpo,
    grpo,
    grpo_mr,
    merge_params,
    ms_grpo,
    ms_po,
    mt_grpo,
    mt_grpo_k,
    turn_return,
)
from rlvr.credit.gae import (
    GAE_ESTIMATORS,
    Estimate,
    bi_level_gae,
    cross_level_gae,
    discounted_returns,
    estimate,
    gae,
    multi_turn_gae,
    token_gae,
    token_rewards,
    whiten,
)
from rlvr.credit.normalize import EPSILON, batch_whiten, group_normalize
from rlvr.credit.tokens import (
    NotPrefixConsistent,
    TokenView,
    TurnTokens,
    build_token_view,
    expand_to_tokens,
    prefix_mismatch,
)

__all__ = [
    "EPSILON",
    "ESTIMATORS",
    "Estimate",
    "GAE_ESTIMATORS",
    "Estimator",
    "NotPrefixConsistent",
    "TokenView",
    "TurnTokens",
    "batch_whiten",
    "build_token_view",
    "compute_advantages",
    "estimator_parameters",
    "get_estimator",
    "expand_to_tokens",
    "gigpo",
    "group_normalize",
    "grpo",
    "grpo_mr",
    "merge_params",
    "ms_grpo",
    "ms_po",
    "mt_grpo",
    "mt_grpo_k",
    "prefix_mismatch",
    "turn_return",
    "bi_level_gae",
    "cross_level_gae",
    "discounted_returns",
    "estimate",
    "gae",
    "multi_turn_gae",
    "token_gae",
    "token_rewards",
    "whiten",
]
