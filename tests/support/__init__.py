"""Reusable test helpers (real local services)."""
