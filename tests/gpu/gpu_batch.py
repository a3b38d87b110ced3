"""A padded micro-batch laid out as `OnPolicyTrainer.accumulate_gradients` lays one out (right padding, an
attention mask from the lengths, `keep` = the positions whose next token is trained), and the step's masked loss."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.trainer.loss import LossTerms


@dataclass(frozen=True)
class MicroBatch:
    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    keep: torch.Tensor  # (K,) positions p whose token p + 1 is trained in some row
    loss_mask: torch.Tensor  # (B, K) bool: the token after keep[k] is trained in row b
    advantages: torch.Tensor  # (B, K)

    def to(self, device: torch.device) -> MicroBatch:
        return MicroBatch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def micro_batch(vocab_size: int, lengths: tuple[int, ...] = (48, 40, 29), prompt: int = 9, pad_id: int = 2,
                seed: int = 0) -> MicroBatch:
    """Random tokens; in each row the tokens after the prompt are trained, with advantages of both signs."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), pad_id)
    trained = torch.zeros(len(lengths), width - 1, dtype=torch.bool)
    for row, length in enumerate(lengths):
        input_ids[row, :length] = torch.randint(0, vocab_size, (length,), generator=generator)
        trained[row, prompt - 1:length - 1] = True  # position p predicts token p + 1
    attention_mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    keep = trained.any(0).nonzero().squeeze(-1)
    loss_mask = trained[:, keep]
    advantages = torch.where(loss_mask, torch.randn(loss_mask.shape, generator=generator), 0.0)
    return MicroBatch(input_ids, attention_mask, keep, loss_mask, advantages)


def masked_mean_loss(terms: LossTerms, loss_mask: torch.Tensor) -> torch.Tensor:
    # As accumulate_gradients: a select (inf x 0 is NaN), then the token-level mean over the batch (verifiers'
    # RLTrainer; DAPO, arXiv 2503.14476, Eq. 8).
    return torch.where(loss_mask, terms.loss, 0.0).sum() / loss_mask.sum()
