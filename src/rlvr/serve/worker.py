"""The vLLM worker extension that loads new weights into a running engine.

vLLM mixes this class into every worker (``--worker-extension-cls``); the API server reaches its methods through
``engine.collective_rpc(name, args=...)``. Two transports:

- CPU (and any single machine): every worker reloads from a safetensors file of the state dict (the trainer's,
  or the API server's copy of an uploaded one) with ``reload_weights``. Plain ``model.load_weights`` after
  start-up fails on CPU because some parameters are repacked to size 0 after loading (measured;
  docs/architecture.md, "Serving and weight sync"); ``reload_weights`` re-runs the loader's post-processing.
- GPU: verifiers' NCCL protocol (verifiers 0.1.9.post3 ``verifiers/rl/inference/server.py``
  ``WeightSyncWorkerExtension``): the trainer joins a ``StatelessProcessGroup`` as the last rank and broadcasts
  one tensor per ``update_named_param`` call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from safetensors import safe_open

from rlvr.serve.engine import spare_seeded_generators
from rlvr.serve.protocol import parse_aliases

# vLLM imports this module in the process that runs the worker (to mix the extension in) before it builds the model
# runner: the one hook into that process whatever the executor, so the sampling fix is applied here.
spare_seeded_generators()


class WeightSyncWorkerExtension:
    pynccl_comm = None
    client_rank: int | None = None

    def reload_weights_from_file(self, path: str) -> int:
        """Load every tensor of a safetensors file (checkpoint names) into the model, each tied tensor also under
        its aliases (`rlvr.serve.protocol.parse_aliases`); returns the number of names loaded.

        `get_tensor` returns a view of safetensors' memory map (no copy); vLLM's weight loaders copy it into
        the model, converting the dtype when the file's differs from the served one.
        """
        with safe_open(path, framework="pt", device="cpu") as f:
            names = list(f.keys())
            aliases_of: dict[str, list[str]] = {}
            for alias, stored in parse_aliases(f.metadata(), names).items():
                aliases_of.setdefault(stored, []).append(alias)

            def tensors() -> Iterator[tuple[str, torch.Tensor]]:
                for name in names:
                    tensor = f.get_tensor(name)
                    for loaded_as in (name, *aliases_of.get(name, ())):
                        yield loaded_as, tensor

            # Worker.reload_weights wraps the model runner's in-place reload in the vLLM config context.
            self.reload_weights(weights_iterator=tensors())  # type: ignore[attr-defined]
        return len(names) + sum(map(len, aliases_of.values()))

    def init_communicator(self, host: str, port: int, world_size: int) -> None:
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.parallel_state import get_world_group
        from vllm.distributed.utils import StatelessProcessGroup

        if self.pynccl_comm is not None:
            raise RuntimeError(
                "the weight-update group is already initialised: call /close_communicator first"
            )
        group = StatelessProcessGroup.create(
            host=host, port=port, rank=get_world_group().rank, world_size=world_size
        )
        self.pynccl_comm = PyNcclCommunicator(group, device=self.device)  # type: ignore[attr-defined]
        # The trainer is the last rank of the group (verifiers' VLLMClient.init_communicator).
        self.client_rank = world_size - 1

    def update_named_param(self, name: str, dtype: str, shape: Sequence[int]) -> None:
        if self.pynccl_comm is None:
            raise RuntimeError("no weight-update group: call /init_communicator before /update_named_param")
        weight = torch.empty(tuple(shape), dtype=getattr(torch, dtype.split(".")[-1]), device=self.device)  # type: ignore[attr-defined]
        self.pynccl_comm.broadcast(weight, src=self.client_rank)
        self.pynccl_comm.group.barrier()
        self.model_runner.model.load_weights(weights=[(name, weight)])  # type: ignore[attr-defined]

    def close_communicator(self) -> None:
        self.pynccl_comm = None
        self.client_rank = None
