"""Trace-driven simulator: vLLM replica model, GPU cluster, traces and baseline policies."""
