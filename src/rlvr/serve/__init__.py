"""The rollout server: vLLM's OpenAI server with verifiers' weight-sync protocol and a CPU weight-sync transport.

Importing this package imports neither vLLM nor FastAPI (the server runs in its own process); the names a
client needs (routes, admin header) are in `rlvr.serve.protocol`.
"""

from rlvr.serve.client import CPUWeightSyncClient, WeightSyncError, load_saved_weights
from rlvr.serve.launch import ServeLaunchError, Server, launch, servers_started_by
from rlvr.serve.protocol import ADMIN_HEADER, ADMIN_TOKEN_ENV

__all__ = [
    "ADMIN_HEADER",
    "ADMIN_TOKEN_ENV",
    "CPUWeightSyncClient",
    "Server",
    "ServeLaunchError",
    "WeightSyncError",
    "launch",
    "load_saved_weights",
    "servers_started_by",
]
