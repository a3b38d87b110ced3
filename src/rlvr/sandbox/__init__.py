"""A Python sandbox for model-written code: a fresh isolated, resource-limited process tree per call, forked
from a pre-started server, with a private filesystem that vanishes with the call (see docs/sandbox.md)."""

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
