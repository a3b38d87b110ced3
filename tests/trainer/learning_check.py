"""The learning checks' bound (assert_learned) and the callback their runs train with
(`run_training(..., callbacks=[StopOnceLearned()])`): each run ends at the first step where the bound holds, so its
step budget is a limit, not a cost. The assertion is the same as with a fixed number of steps; only the steps after the policy has learned are not spent (the synchronous MT-GRPO run
learned by steps 5-9 of its 20; one batch ahead by steps 7-12, and in one realization not within 20: seeds fix a run
only up to floating-point order, which a busy machine changes through the server's batching)."""

from __future__ import annotations

from statistics import mean

from transformers import TrainerCallback

WINDOW, LEARNED = 3, 0.9


def assert_learned(turn_rewards: list[float]) -> None:
    """The choice environment's turn reward rose from tiny-random's base rate to nearly always, in 32-rollout steps.

    The base rate, step 1 of 46 runs: 0.38-0.75 at 16 rollouts, 0.47-0.62 at 32 (about 0.55). An earlier check,
    last 3 steps >= first 3 + 0.25, failed when learning was fast (steps 2-3 already count it: 0.75, 0.81, 0.81)
    as well as when it was slow: 2 of 8 MT-GRPO runs at 16 rollouts x 15 steps failed it."""
    assert turn_rewards[0] <= 0.85, turn_rewards  # something is left to learn (28+ of 32 by chance: p < 1e-3)
    # 96 rollouts in the last 3 steps: at the base rate their mean is 0.55 +- 0.05, and 0.9 is 7 sigma above it
    assert learned(turn_rewards), turn_rewards


def learned(turn_rewards: list[float]) -> bool:
    return len(turn_rewards) >= WINDOW and mean(turn_rewards[-WINDOW:]) >= LEARNED


class StopOnceLearned(TrainerCallback):
    """Stops training after the step at which the turn-1 reward's last WINDOW steps reach LEARNED."""

    def __init__(self):
        self.turn_rewards: list[float] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs and "turn/1/reward" in logs:  # a step's record (as step_records reads them)
            self.turn_rewards.append(logs["turn/1/reward"])
            control.should_training_stop = learned(self.turn_rewards)
