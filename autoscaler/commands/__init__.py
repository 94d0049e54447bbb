"""CLI subcommands, one module each, each exposing ``register(subparsers)``."""
