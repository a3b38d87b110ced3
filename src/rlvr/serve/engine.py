"""What rlvr changes inside vLLM's engine processes: the engine core that the API server spawns and the workers that
the engine core spawns (vLLM 0.32, multiprocessing "spawn"; with `--cpu-engine inline` the model runs in the engine
core and there is no worker).

- `watch_parent`: each of them dies with the process that spawned it, however that one dies (and the API server
  with the process that `launch`ed it). vLLM's own links
  do not cover a SIGKILL of the API server: the engine core then lives on as an orphan of init, and its worker
  with it (it only watches the engine core), one of them busy-polling a core (measured; docs/serve.md).
- `spare_seeded_generators`: seeded sampling does not crash the engine on CPU when a prompt is prefilled in chunks.

The API server installs the first through the spawn targets (`install_parent_watches`, called before the engine
starts); the second is applied where the worker runs, when vLLM imports rlvr's worker extension (`rlvr.serve.worker`).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import threading
import time

PARENT_POLL_S = 0.5


def watch_parent(parent: int, sig: int = signal.SIGKILL, grace_s: float = 30.0) -> None:
    """Send this process `sig` as soon as `parent`, the process that started it, has gone (it is then re-parented,
    so `os.getppid()` is another pid; also when that happened before this call, e.g. while this process imported),
    and SIGKILL `grace_s` seconds later if it still runs; from a daemon thread polling every PARENT_POLL_S seconds.

    A thread rather than PR_SET_PDEATHSIG: that signal fires when the *thread* that started the child ends (a
    server launched from a worker thread, e.g. an evaluation's restart in `asyncio.to_thread`, died with the
    thread). SIGKILL for the engine core and its worker: vLLM's engine core answers SIGTERM with a graceful
    shutdown that waits on requests whose answers nobody can receive any more; a worker's watch then kills it in turn.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), sig)
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="rlvr-parent-watch", daemon=True).start()


def run_engine_core(*args, **kwargs):
    """vLLM's `EngineCoreProc.run_engine_core` (vllm/v1/engine/core.py), the engine-core process's target, with a
    parent watch; and the workers this engine core spawns get one too."""
    from vllm.v1.engine.core import EngineCoreProc
    from vllm.v1.executor.multiproc_executor import WorkerProc

    watch_parent(multiprocessing.parent_process().pid)
    _replace(WorkerProc, "worker_main", worker_main)
    return _original(EngineCoreProc, "run_engine_core")(*args, **kwargs)


def worker_main(*args, **kwargs):
    """vLLM's `WorkerProc.worker_main` (vllm/v1/executor/multiproc_executor.py), a worker process's target, with a
    parent watch."""
    from vllm.v1.executor.multiproc_executor import WorkerProc

    watch_parent(multiprocessing.parent_process().pid)
    return _original(WorkerProc, "worker_main")(*args, **kwargs)


def install_parent_watches() -> None:
    """In the API server, before the engine starts: the engine core it spawns runs `run_engine_core`.

    The spawn start method pickles a process's target by its qualified name, so the child imports this module and
    runs these functions, which call vLLM's own (unreplaced in the child)."""
    from vllm.v1.engine.core import EngineCoreProc

    _replace(EngineCoreProc, "run_engine_core", run_engine_core)


def _replace(cls: type, name: str, function) -> None:
    """cls.name = staticmethod(function), keeping the original for `_original` (once: a second call is a no-op)."""
    saved = f"_rlvr_original_{name}"
    if saved not in vars(cls):
        setattr(cls, saved, staticmethod(getattr(cls, name)))
        setattr(cls, name, staticmethod(function))


def _original(cls: type, name: str):
    return getattr(cls, f"_rlvr_original_{name}", getattr(cls, name))


def spare_seeded_generators() -> None:
    """Seeded requests whose prompt is still being prefilled in chunks do not draw from their own generator.

    vLLM samples a token for every scheduled request, also for one whose prompt is not fully prefilled yet, then
    discards it. A seeded request (SamplingParams.seed) samples with a torch.Generator of its own, so the discarded
    draw is rewound: `GPUModelRunner._bookkeeping_sync` (vllm/v1/worker/gpu_model_runner.py) calls
    `gen.set_offset(gen.get_offset() - 4)`, which only a CUDA (Philox) generator has: on CPU it raises "CPU
    Generator does not use offset" and the engine dies. Here, on CPU, such requests are taken out of the batch's
    generators while the step samples (their discarded token is drawn from the shared generator instead) and put
    back afterwards: their generator is untouched, the rewind finds nothing to rewind, and the first token they
    keep is their generator's first draw, as with a prompt prefilled in one step or found in the prefix cache
    (the seed's promise: same seed, same tokens).
    """
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return  # a CUDA generator rewinds its offset as vLLM expects
    import numpy as np
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    if "_rlvr_spares_seeded_generators" in vars(CPUModelRunner):
        return
    sample_tokens = CPUModelRunner.sample_tokens

    @functools.wraps(sample_tokens)
    def sample_sparing_seeded_generators(self, *args, **kwargs):
        generators = self.input_batch.generators  # the dict the step's sampling metadata holds
        # The requests whose sampled token this step discards (GPUModelRunner._prepare_inputs sets the mask).
        discarded = np.nonzero(self.discard_request_mask.np[: self.input_batch.num_reqs])[0]
        held = {int(i): generators.pop(int(i)) for i in discarded if int(i) in generators}
        try:
            return sample_tokens(self, *args, **kwargs)
        finally:
            generators.update(held)

    CPUModelRunner.sample_tokens = sample_sparing_seeded_generators
    CPUModelRunner._rlvr_spares_seeded_generators = True
