#!/usr/bin/env bash
# `make gpu-bundle`: what `make gpu-check` needs on a GPU machine that its image lacks and no registry can supply
# there, gathered here (the .venv and a package registry) into one folder to carry along (build/gpu-check, ~35 MB):
#   wheels/     DeepSpeed (built here from its sdist: PyPI has no wheel; pure Python, its CUDA ops compile on demand)
#               and what it imports that a torch image usually lacks (hjson, pydantic and its parts), and the build
#               backend with which pip installs rlvr editable (hatchling, trove-classifiers, editables); the
#               versions of this .venv, for CPython 3.12 on x86-64 Linux (the GPU machines' Python)
#   rlvr-home/  the prepared tiny-random (RLVR_HOME): building it needs the SmolLM2 GGUF package and gguf
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
OUT=${GPU_BUNDLE:-build/gpu-check}
rm -rf "$OUT" && mkdir -p "$OUT/wheels" "$OUT/rlvr-home/models"

version() { "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT/wheels" "deepspeed==$(version deepspeed)"
pins=(editables==0.5)  # hatchling asks for it to build an editable wheel; the .venv does not hold it
for name in hjson pydantic pydantic-core annotated-types typing-inspection typing-extensions hatchling \
    trove-classifiers; do
    pins+=("$name==$(version "$name")")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$OUT/wheels" "${pins[@]}"

model=$(HF_HUB_OFFLINE=1 "$PY" -c "from rlvr import models; print(models.prepare('tiny-random'))")
cp -r "$model" "$OUT/rlvr-home/models/tiny-random"
ls "$OUT/wheels" && du -sh "$OUT"
