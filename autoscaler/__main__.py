"""`python -m autoscaler` is the `llm-autoscaler` command."""

from autoscaler.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
