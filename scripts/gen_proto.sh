#!/usr/bin/env bash
# Regenerate the KEDA external scaler stubs (committed in autoscaler/keda/gen/).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
OUT=autoscaler/keda/gen
mkdir -p "$OUT"
"$PY" -m grpc_tools.protoc -I autoscaler/keda \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
  autoscaler/keda/externalscaler.proto
# grpc_tools emits a top-level import; make it package-relative.
sed -i 's/^import externalscaler_pb2 as/from autoscaler.keda.gen import externalscaler_pb2 as/' \
  "$OUT/externalscaler_pb2_grpc.py"
[ -f "$OUT/__init__.py" ] || echo '"""Generated from autoscaler/keda/externalscaler.proto; do not edit."""' > "$OUT/__init__.py"
echo "generated $(ls "$OUT")"
