"""What a client of `rlvr serve` needs to know: routes, the admin header, the weight-file layout, loopback.

Imports neither FastAPI nor vLLM nor torch, so a trainer's client (`rlvr.serve.client`) and the launcher load
without the server's dependencies. The server's route modules (`nccl_routes`, `cpu_routes`) import these names.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterable


class ServerError(RuntimeError):
    """The rollout server is missing or does not fit its client (a trainer, an evaluation, the v1 bridge), with what
    to do about it. Here, below every client, so that each can raise it and `rlvr train` prints it in one line."""

# Weight versions: every JSON answer of a generation route carries the server's weight version when the request
# arrived and when its answer left (`rlvr.serve.versions`); GET WEIGHT_VERSION_PATH answers the current one.
GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
WEIGHT_VERSION_FIELD = "weight_version"
WEIGHT_VERSION_END_FIELD = "weight_version_end"
WEIGHT_VERSION_PATH = "/rlvr/weight_version"

# Admin token: required on the weight-changing routes when the server binds a non-loopback address.
ADMIN_HEADER = "X-RLVR-Admin-Token"
ADMIN_TOKEN_ENV = "RLVR_ADMIN_TOKEN"

# verifiers 0.1.9.post3's weight-sync protocol (verifiers/rl/inference/server.py), same paths and shapes.
WORLD_SIZE_PATH = "/get_world_size"
INIT_COMMUNICATOR_PATH = "/init_communicator"
UPDATE_NAMED_PARAM_PATH = "/update_named_param"
RESET_PREFIX_CACHE_PATH = "/reset_prefix_cache"
NUM_BACKGROUND_TASKS_PATH = "/get_num_background_tasks"
CLOSE_COMMUNICATOR_PATH = "/close_communicator"
NCCL_PATHS = (INIT_COMMUNICATOR_PATH, UPDATE_NAMED_PARAM_PATH, CLOSE_COMMUNICATOR_PATH)

# rlvr's CPU transport: the body is a safetensors file (http), or {"path": ...} of one on this machine (file).
CPU_UPDATE_PATH = "/rlvr/update_weights"
CPU_UPDATE_FROM_PATH = "/rlvr/update_weights_from_path"
# The file transport's directories are named rlvr-weights-<uuid> (CPUWeightSyncClient creates them, 0700).
WEIGHTS_DIR_PREFIX = "rlvr-weights-"
# Safetensors header metadata key of the tied-tensor aliases (`aliases_metadata`).
ALIASES_METADATA_KEY = "rlvr.aliases"
# `"reason"` of a 400 from CPU_UPDATE_FROM_PATH. The first two mean the server cannot see or will not read the
# client's file (another container, another temp dir): a client may then send the bytes instead.
REASON_NOT_FOUND = "not_found"
REASON_NOT_ALLOWED = "not_allowed"
REASON_BAD_REQUEST = "bad_request"

# Routes that change weights or engine state. Without a loopback bind they need the admin token. The vLLM ones
# are only mounted in some configurations (dev mode, runtime LoRA, elastic EP); guarding an absent path is harmless.
ADMIN_PATHS = frozenset(
    {
        CPU_UPDATE_PATH,
        CPU_UPDATE_FROM_PATH,
        *NCCL_PATHS,
        RESET_PREFIX_CACHE_PATH,
        "/reset_mm_cache",
        "/reset_encoder_cache",
        "/collective_rpc",
        "/sleep",
        "/wake_up",
        "/pause",
        "/resume",
        "/abort_requests",
        "/inference/v1/abort_requests",
        "/init_weight_transfer_engine",
        "/shutdown_weight_transfer_engine",
        "/start_weight_update",
        "/start_draft_weight_update",
        "/update_weights",
        "/finish_weight_update",
        "/update_weight_version",
        "/scale_elastic_ep",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
    }
)


def is_loopback(host: str | None) -> bool:
    """True when every address `host` resolves to is a loopback address ("" / None / 0.0.0.0 = all interfaces)."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def aliases_metadata(aliases: dict[str, str]) -> dict[str, str]:
    """The safetensors header metadata that records tied tensors: ``{alias name: name of the stored tensor}``.

    safetensors stores no two names for one tensor, so a client writes a tied tensor (lm_head / embed_tokens) once
    and the server loads it under every name (`parse_aliases`).
    """
    return {ALIASES_METADATA_KEY: json.dumps(aliases, sort_keys=True)} if aliases else {}


def parse_aliases(metadata: dict[str, str] | None, names: Iterable[str]) -> dict[str, str]:
    """The aliases in a weights file's header metadata; ValueError when one names no tensor of the file."""
    text = (metadata or {}).get(ALIASES_METADATA_KEY)
    if text is None:
        return {}
    try:
        aliases = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"header metadata {ALIASES_METADATA_KEY!r} is not JSON: {exc}") from None
    stored = set(names)
    if not isinstance(aliases, dict) or not all(
        isinstance(alias, str) and target in stored and alias not in stored
        for alias, target in aliases.items()
    ):
        raise ValueError(
            f"header metadata {ALIASES_METADATA_KEY!r} must map new names to tensors stored in the file, "
            f"got {text[:200]}"
        )
    return aliases
