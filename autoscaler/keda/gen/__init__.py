"""Generated from autoscaler/keda/externalscaler.proto; do not edit."""
