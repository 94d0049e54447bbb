"""HTTP servers: the REST policy API, the KEDA metrics-api endpoint, health and /metrics."""
