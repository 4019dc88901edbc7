"""Generated gRPC code for the kubelet PodResources v1 API (see api.proto; regenerate with scripts/gen-proto.sh)."""
