"""The bridge to verifiers v1 environments (verifiers 0.4, in their own interpreter .venv-v1): docs/v1.md.

rlvr.v1.env: `V1Environment`, what the trainer and `rlvr evaluate` load for `--env v1:<taskset-id>`;
rlvr.v1.bridge: the worker process and its protocol, rlvr's side; rlvr.v1.worker: the worker (runs in .venv-v1);
rlvr.v1.convert: v1 traces as rlvr rollouts; rlvr.v1.renderer: the token renderer for rlvr's models (.venv-v1).
"""

from rlvr.v1.bridge import V1Error
from rlvr.v1.convert import V1TraceError
from rlvr.v1.env import V1Environment, is_v1

__all__ = ["V1Environment", "V1Error", "V1TraceError", "is_v1"]
