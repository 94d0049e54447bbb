"""Kubernetes integration (kubernetes-asyncio for every call): scale subresource, pod
discovery, GPU capacity, warm pool, leader election, events, and the CRD policy store."""
