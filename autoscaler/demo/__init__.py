"""The embedded demo: emulated vLLM pods behind a local Kubernetes-API endpoint, scaled by
the real control loop, with the REST API, KEDA gRPC server and dashboard."""
