"""`CPUWeightSyncClient`: the trainer's side of the CPU weight-sync transport of `rlvr serve`."""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx
import torch
from safetensors.torch import save

from rlvr.serve.server import ADMIN_HEADER, ADMIN_TOKEN_ENV, CPU_UPDATE_PATH


class WeightSyncError(RuntimeError):
    """The server refused or failed a weight update."""


def serialize_state_dict(state_dict: Mapping[str, torch.Tensor]) -> bytes:
    """A state dict as safetensors bytes (CPU, contiguous, detached).

    Tied weights (embed_tokens / lm_head) share storage, which safetensors refuses, so a tensor whose storage was
    already taken is cloned (docs/ARCHITECTURE.md section 1).
    """
    if not state_dict:
        raise ValueError(
            "the state dict is empty: pass model.state_dict() (checkpoint names, e.g. model.layers.0...)"
        )
    tensors: dict[str, torch.Tensor] = {}
    seen_storages: set[int] = set()
    for name, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"state_dict[{name!r}] is a {type(tensor).__name__}, not a torch.Tensor")
        tensor = tensor.detach().to("cpu").contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if storage in seen_storages:
            tensor = tensor.clone()
        seen_storages.add(tensor.untyped_storage().data_ptr())
        tensors[name] = tensor
    return save(tensors)


class CPUWeightSyncClient:
    """Loads new weights into a running `rlvr serve` without NCCL (POST /rlvr/update_weights).

    `url` is the server root (`server.url`; a trailing /v1 is accepted). The admin token is needed only when the
    server binds a non-loopback address; it defaults to $RLVR_ADMIN_TOKEN.
    """

    def __init__(self, url: str, admin_token: str | None = None, timeout: float = 600.0) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        token = admin_token if admin_token is not None else os.environ.get(ADMIN_TOKEN_ENV)
        self._headers = {ADMIN_HEADER: token} if token else {}
        self.timeout = timeout

    def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> dict:
        """Send the whole state dict; returns once the server generates with it (the server's JSON answer)."""
        body = serialize_state_dict(state_dict)
        response = httpx.post(
            f"{self.url}{CPU_UPDATE_PATH}",
            content=body,
            headers={**self._headers, "content-type": "application/octet-stream"},
            timeout=self.timeout,
        )
        if response.status_code != 200:
            raise WeightSyncError(
                f"POST {self.url}{CPU_UPDATE_PATH} answered {response.status_code}: {response.text}"
            )
        return response.json()
