"""The reaction-latency benchmark's parts: the world (emulated pods, local API, Prometheus),
the chains and their bursts, and the statistics/report. Entry point: bench_reaction.py."""
