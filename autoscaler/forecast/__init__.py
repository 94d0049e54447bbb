"""Demand forecasting and cold-start-aware planning (pure: time comes in as arguments)."""
