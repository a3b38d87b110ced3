"""Per-token policy losses. Pure tensor functions: no model, no trainer state.

All inputs are aligned (B, T) tensors over the *target* tokens: `logprobs` from the model being trained,
`behavior_logprobs` from the rollout server that sampled the tokens, per-token `advantages`, and optionally
`ref_logprobs` from the reference model and `proximal_logprobs` (decoupled_clip: the trained policy's own, detached,
at the start of the batch's training). The caller masks and normalises (token-level mean over the whole
batch, as verifiers' RLTrainer and DAPO do).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossTerms:
    loss: torch.Tensor  # (B, T) per-token loss, before masking
    ratio: torch.Tensor  # (B, T) importance ratio pi_theta / pi_behavior
    is_clipped: torch.Tensor  # (B, T) bool: the token's gradient is cut by clipping or IS masking
    kl: torch.Tensor | None  # (B, T) k3 estimate of KL(pi_theta || pi_ref), when a reference is given
    # (B, T) decoupled_clip: the truncated weight min(pi_prox / pi_behavior, cap), and whether the cap cut it
    behavior_weight: torch.Tensor | None = None
    weight_capped: torch.Tensor | None = None


def ppo_clip_loss(
    logprobs: torch.Tensor, behavior_logprobs: torch.Tensor, advantages: torch.Tensor,
    epsilon_low: float, epsilon_high: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # PPO clipped surrogate (Schulman et al. 2017, arXiv 1707.06347, Eq. 7), per token as in GRPO
    # (DeepSeekMath, arXiv 2402.03300, Eq. 3), with the asymmetric "clip-higher" range of DAPO
    # (arXiv 2503.14476, Eq. 10):  L = -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A),  r = pi_theta / pi_old.
    # pi_old is the sampling policy: the server is synced before every generation, so it is the
    # policy at the start of this batch's iterations (up to inference numerics).
    ratio = torch.exp(logprobs - behavior_logprobs)
    clipped_ratio = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high)
    unclipped = ratio * advantages
    clipped = clipped_ratio * advantages
    loss = -torch.minimum(unclipped, clipped)
    is_clipped = clipped < unclipped  # the min picked the constant branch: no gradient through r
    return loss, ratio, is_clipped


def masked_is_loss(
    logprobs: torch.Tensor, behavior_logprobs: torch.Tensor, advantages: torch.Tensor,
    mask_ratio_low: float, mask_ratio_high: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # verifiers 0.1.9.post3 RLTrainer.compute_loss (verifiers/rl/trainer/trainer.py): L = -r A, with tokens whose
    # ratio leaves [mask_ratio_low, mask_ratio_high] dropped from the loss instead of clipped.
    ratio = torch.exp(logprobs - behavior_logprobs)
    is_masked = (ratio < mask_ratio_low) | (ratio > mask_ratio_high)
    loss = torch.where(is_masked, torch.zeros_like(ratio), -ratio * advantages)
    return loss, ratio, is_masked


def decoupled_clip_loss(
    logprobs: torch.Tensor, proximal_logprobs: torch.Tensor, behavior_logprobs: torch.Tensor,
    advantages: torch.Tensor, epsilon_low: float, epsilon_high: float, weight_cap: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # Decoupled PPO (AReaL, Fu et al. 2025, arXiv 2505.24298, Eq. 5):
    #   J = E[ pi_prox / pi_behav * min(u A, clip(u, 1 - eps, 1 + eps) A) ],  u = pi_theta / pi_prox,
    # so the trust region is around the proximal policy (the weights at the start of this batch's training) and the
    # off-policyness of stale samples is corrected by importance weighting instead of by the clip. The weight is a
    # constant (no gradient) truncated at `weight_cap`, like the truncated weight rho-bar of V-trace's policy gradient
    # (IMPALA, Espeholt et al. 2018, arXiv 1802.01561, Sec. 4.2); AReaL's code (behav_imp_weight_cap) drops tokens above the cap instead.
    loss, ratio, is_clipped = ppo_clip_loss(logprobs, proximal_logprobs, advantages, epsilon_low, epsilon_high)
    weight = torch.exp(proximal_logprobs - behavior_logprobs).detach()
    capped = weight > weight_cap
    weight = torch.clamp(weight, max=weight_cap)
    return loss * weight, ratio, is_clipped, weight, capped


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    # Unbiased, non-negative KL estimator "k3" (J. Schulman, "Approximating KL Divergence", 2020), as in
    # GRPO (DeepSeekMath, arXiv 2402.03300, Eq. 4): KL = pi_ref/pi - log(pi_ref/pi) - 1.
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1.0


def policy_loss(
    logprobs: torch.Tensor, behavior_logprobs: torch.Tensor, advantages: torch.Tensor, *,
    loss_type: str, epsilon_low: float = 0.2, epsilon_high: float = 0.2,
    mask_ratio_low: float = 0.125, mask_ratio_high: float = 8.0,
    ref_logprobs: torch.Tensor | None = None, beta: float = 0.0,
    proximal_logprobs: torch.Tensor | None = None, behavior_weight_cap: float = 5.0,
) -> LossTerms:
    weight = capped = None
    if loss_type == "decoupled_clip":
        if proximal_logprobs is None:
            raise ValueError("loss_type='decoupled_clip' needs proximal_logprobs (the policy at the start of the "
                             "batch's training)")
        loss, ratio, is_clipped, weight, capped = decoupled_clip_loss(
            logprobs, proximal_logprobs, behavior_logprobs, advantages, epsilon_low, epsilon_high,
            behavior_weight_cap)
    elif loss_type == "ppo_clip":
        loss, ratio, is_clipped = ppo_clip_loss(logprobs, behavior_logprobs, advantages, epsilon_low, epsilon_high)
    elif loss_type == "masked_is":
        loss, ratio, is_clipped = masked_is_loss(
            logprobs, behavior_logprobs, advantages, mask_ratio_low, mask_ratio_high
        )
    else:
        raise ValueError(f"unknown loss_type {loss_type!r}: use 'ppo_clip', 'masked_is' or 'decoupled_clip'")
    kl = None
    if ref_logprobs is not None:
        kl = k3_kl(logprobs, ref_logprobs)
        loss = loss + beta * kl  # GRPO objective, DeepSeekMath Eq. 3: ... - beta * KL
    return LossTerms(loss=loss, ratio=ratio, is_clipped=is_clipped, kl=kl, behavior_weight=weight,
                     weight_capped=capped)
