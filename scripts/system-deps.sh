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
# The Debian packages start and enable system services (prometheus on :9090, the demo's gRPC
# port, again after every reboot; prometheus-node-exporter; etcd). The tests start their own
# servers: stop the services and disable them so a reboot does not bring them back.
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
services=(prometheus prometheus-node-exporter etcd)
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  for svc in "${services[@]}"; do $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; done
else  # no systemd (containers): the packages' SysV scripts
  for svc in "${services[@]}"; do
    if [ -x "/etc/init.d/$svc" ]; then
      $SUDO "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
      command -v update-rc.d >/dev/null 2>&1 && { $SUDO update-rc.d "$svc" disable >/dev/null 2>&1 || true; }
    fi
  done
fi
echo "system deps ok: $(prometheus --version 2>&1 | head -1)"
