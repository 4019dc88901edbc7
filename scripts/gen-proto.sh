#!/usr/bin/env bash
# Regenerates exporter/podresources/api_pb2*.py from api.proto with grpcio-tools (pinned by the dev extras).
# Run from the repository root; tests/exporter/test_podresources_proto.py fails when the committed code is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m grpc_tools.protoc -Ixpuwatch/exporter/podresources=exporter/podresources \
  --python_out=. --grpc_python_out=. --pyi_out=. exporter/podresources/api.proto
# xpuwatch/exporter is a link to exporter/: the files land in exporter/podresources/.
