#!/usr/bin/env bash
# Installs the real services the integration tests run against, when missing.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # dashboard browser tests
# etcd for the real-Kubernetes tier (tests/real; runs when the shared k8s binaries or KUBEBUILDER_ASSETS
# provides kube-apiserver & co, skipped otherwise). Small; installed always.
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# The Debian package starts a system service; the tests start their own server instead.
if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus >/dev/null 2>&1 || true; fi
pkill -x prometheus-node-exporter >/dev/null 2>&1 || true
if command -v systemctl >/dev/null 2>&1; then systemctl stop etcd >/dev/null 2>&1 || true; fi
echo "system deps ok: $(prometheus --version 2>&1 | head -1)"
