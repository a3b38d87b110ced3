"""MT-GRPO and its relatives (critic-free group credit) as a recipe on the shared on-policy trainer.

Credit: for each group of rollouts of one prompt, the configured `rlvr.credit` estimator turns the turn rewards
and outcomes that the environment's rubric wrote into one advantage per turn (`rlvr.rollouts.assign_advantages`).
Its parameters are the training configuration's `credit` merged with the environment's TurnRubric defaults
(`rlvr.credit.merge_params`: a parameter set differently by both is an error). Those advantages become per-token
advantages in `batching.rollout_samples` and enter the PPO-clip loss in `OnPolicyTrainer.training_step`.
"""

from __future__ import annotations

import logging

from rlvr.credit import get_estimator, merge_params
from rlvr.rollouts import CreditError, Rollout, assign_advantages, group_by_example
from rlvr.rubrics import find_turn_rubrics
from rlvr.trainer.config import ConfigError, MTGRPOConfig
from rlvr.trainer.on_policy import OnPolicyTrainer

logger = logging.getLogger(__name__)


def credit_params(env, args: MTGRPOConfig) -> dict:
    """The estimator's parameters for this environment, or a ConfigError that says what to change."""
    # a verifiers v1 environment has no rubric: its turn rewards come with its traces (rlvr.v1.convert)
    rubrics = find_turn_rubrics(env.rubric) if hasattr(env, "rubric") else []
    if get_estimator(args.algo).turn_level and not rubrics and not getattr(env, "turn_rewards", False):
        raise ConfigError(
            f"algo={args.algo!r} assigns credit per turn, but {type(env).__name__}'s rubric "
            f"({type(env.rubric).__name__}) gives no turn rewards. Train with algo='grpo' (outcome only), or score "
            "turns with rlvr.rubrics.TurnRubric(turn_rewards=[(function, weight), ...])"
        )
    defaults = [r.credit for r in rubrics]
    if any(d != defaults[0] for d in defaults):
        raise ConfigError(f"the environment's TurnRubrics declare different credit defaults {defaults}: "
                          "set the parameters explicitly in the training configuration's credit table")
    try:
        return merge_params(args.algo, defaults[0] if defaults else {}, args.credit)
    except ValueError as err:
        raise ConfigError(str(err)) from err


class MTGRPOTrainer(OnPolicyTrainer):
    @classmethod
    def preflight(cls, env, args: MTGRPOConfig) -> None:
        credit_params(env, args)

    def __init__(self, model, env, args: MTGRPOConfig, **kwargs):
        self.credit_params = credit_params(env, args)  # fails before the model loads or a server is asked
        self.label = self.algo = args.algo
        super().__init__(model, env, args, **kwargs)
        logger.info(f"credit: {args.algo} {self.credit_params}")

    def assign_credit(self, rollouts: list[Rollout]) -> list[Rollout]:
        try:
            return [r for group in group_by_example(rollouts)
                    for r in assign_advantages(group, self.args.algo, self.credit_params)]
        except CreditError as err:
            raise ConfigError(str(err)) from err
