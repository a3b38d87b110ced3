"""A Python sandbox for model-written code: one isolated, resource-limited process per call."""

from rlvr.sandbox.core import Isolation, SandboxConfig, SandboxError, SandboxResult, arun_python, run_python
from rlvr.sandbox.framing import describe_failure, frame, neutralise_tags, observation

__all__ = [
    "Isolation",
    "SandboxConfig",
    "SandboxError",
    "SandboxResult",
    "arun_python",
    "describe_failure",
    "frame",
    "neutralise_tags",
    "observation",
    "run_python",
]
