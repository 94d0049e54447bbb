"""KEDA integration: the external scaler gRPC server and the value both KEDA paths serve."""
