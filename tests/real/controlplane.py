"""A real Kubernetes 1.24 control plane on loopback: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler as child processes (envtest's arrangement).

Binaries come from ``KUBEBUILDER_ASSETS`` (a directory holding ``kube-apiserver`` and
optionally the other two; ``etcd`` from there or ``PATH``) or are decompressed from
``../shared/k8s/*.xz`` (relative to the repository root) into ``.cache/k8s`` after their
SHA-256 is checked against ``SHA256SUMS``. `find_binaries` returns the reason when they are
not there, and the tier is skipped with it.

Authentication is a static token file: an admin (``system:masters``) and one user per
ServiceAccount, so the controller runs under exactly the RBAC that ``deploy/`` ships.
"""

from __future__ import annotations

import contextlib
import hashlib
import lzma
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _shared_dir() -> Path:
    """``../shared/k8s`` next to the clone; for a git worktree, next to its main clone."""
    here = REPO.parent / "shared" / "k8s"
    dotgit = REPO / ".git"
    if not here.exists() and dotgit.is_file():
        gitdir = Path(dotgit.read_text().split("gitdir:", 1)[-1].strip())
        if gitdir.parent.name == "worktrees":  # <main>/.git/worktrees/<name>
            return gitdir.parents[2].parent / "shared" / "k8s"
    return here


SHARED = _shared_dir()
CACHE = REPO / ".cache" / "k8s"
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
CONTROLLERS = (
    "deployment,replicaset,garbagecollector,namespace,disruption,nodelifecycle,endpointslice"
)
ADMIN_TOKEN = "admin-token-for-the-real-tier"
# What a skipped run says: how to get the binaries, not where this machine looked.
HOW_TO_GET = (
    "get kube-apiserver 1.24 (and optionally kube-controller-manager, kube-scheduler) with "
    "`setup-envtest use 1.24 -p path` and export KUBEBUILDER_ASSETS=<that directory>, or put "
    "the .xz files and SHA256SUMS in shared/k8s next to the clone (docs/testing.md)"
)
NO_BINARIES = f"real Kubernetes tier: no kube-apiserver binaries; {HOW_TO_GET}"


@dataclass(frozen=True, slots=True)
class Binaries:
    etcd: Path
    apiserver: Path
    controller_manager: Path | None
    scheduler: Path | None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _decompress(shared: Path, cache: Path) -> str | None:
    """Unpack ``shared/*.xz`` into ``cache`` once; returns a reason on checksum mismatch."""
    sums = {}
    for line in (shared / "SHA256SUMS").read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            sums[name.lstrip("*")] = digest
    cache.mkdir(parents=True, exist_ok=True)
    for name in KUBE_BINARIES:
        dest = cache / name
        if dest.exists() and _sha256(dest) == sums.get(name):
            continue
        tmp = dest.with_suffix(".part")
        with lzma.open(shared / f"{name}.xz") as src, tmp.open("wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        if _sha256(tmp) != sums.get(name):
            tmp.unlink()
            return f"{shared / name}.xz: SHA-256 does not match SHA256SUMS"
        tmp.chmod(0o755)
        tmp.replace(dest)
    return None


def find_binaries() -> Binaries | str:
    """The binaries, or why the real tier cannot run (shown as the skip reason)."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        d = Path(assets)
    elif (SHARED / "SHA256SUMS").exists():
        reason = _decompress(SHARED, CACHE)
        if reason:
            return reason
        d = CACHE
    else:
        return NO_BINARIES
    etcd = d / "etcd" if (d / "etcd").exists() else shutil.which("etcd")
    if etcd is None:
        return "real Kubernetes tier: etcd not found (apt-get install etcd-server)"
    if not (d / "kube-apiserver").exists():
        return f"real Kubernetes tier: KUBEBUILDER_ASSETS has no kube-apiserver; {HOW_TO_GET}"
    if shutil.which("openssl") is None:
        return "real Kubernetes tier: openssl not found (needed for the service-account key)"
    opt = {n: (d / n if (d / n).exists() else None) for n in KUBE_BINARIES[1:]}
    return Binaries(
        Path(etcd), d / "kube-apiserver", opt["kube-controller-manager"], opt["kube-scheduler"]
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


@dataclass
class ControlPlane:
    """Start with `start()`, stop with `stop()`; `restart_apiserver()` for outage tests."""

    bins: Binaries
    service_accounts: tuple[tuple[str, str], ...] = ()
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="realk8s-")))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    api_port: int = 0
    etcd_port: int = 0
    tokens: dict[str, str] = field(default_factory=dict)  # user -> bearer token

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    # ---------------------------------------------------------------- files
    def _write_files(self) -> None:
        w = self.workdir
        subprocess.run(
            ["openssl", "genrsa", "-out", str(w / "sa.key"), "2048"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            ["openssl", "rsa", "-in", str(w / "sa.key"), "-pubout", "-out", str(w / "sa.pub")],
            check=True,
            capture_output=True,
        )
        lines = [f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"']
        self.tokens["admin"] = ADMIN_TOKEN
        for i, (ns, name) in enumerate(self.service_accounts):
            user = service_account_user(ns, name)
            token = f"sa-token-{i}-{ns}-{name}"
            self.tokens[user] = token
            groups = f"system:serviceaccounts,system:serviceaccounts:{ns}"
            lines.append(f'{token},{user},sa-uid-{i},"{groups}"')
        (w / "tokens.csv").write_text("\n".join(lines) + "\n")
        self.write_kubeconfig(w / "admin.kubeconfig", ADMIN_TOKEN)

    def write_kubeconfig(self, path: Path, token: str) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: real\n  cluster:\n    server: {self.url}\n"
            "    insecure-skip-tls-verify: true\n"
            f"users:\n- name: u\n  user:\n    token: {token}\n"
            "contexts:\n- name: real\n  context:\n    cluster: real\n    user: u\n"
            "current-context: real\n"
        )
        return path

    def kubeconfig_for(self, user: str) -> Path:
        safe = user.replace(":", "_")
        return self.write_kubeconfig(self.workdir / f"{safe}.kubeconfig", self.tokens[user])

    # ---------------------------------------------------------------- processes
    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True
        )
        log.close()

    def _start_etcd(self) -> None:
        peer = free_port()
        self.etcd_port = free_port()
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                str(self.bins.etcd),
                "--data-dir", str(self.workdir / "etcd"),
                "--listen-client-urls", client,
                "--advertise-client-urls", client,
                "--listen-peer-urls", peer_url,
                "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"default={peer_url}",
                "--unsafe-no-fsync",
            ],
        )  # fmt: skip

    def start_apiserver(self) -> None:
        """(Re)start kube-apiserver on the same port, so clients reconnect to one URL."""
        w = self.workdir
        self.api_port = self.api_port or free_port()
        self._spawn(
            "kube-apiserver",
            [
                str(self.bins.apiserver),
                "--etcd-servers", f"http://127.0.0.1:{self.etcd_port}",
                "--bind-address", "127.0.0.1",
                "--advertise-address", "127.0.0.1",
                "--secure-port", str(self.api_port),
                "--cert-dir", str(w / "certs"),
                "--token-auth-file", str(w / "tokens.csv"),
                "--authorization-mode", "RBAC",
                "--anonymous-auth=false",
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file", str(w / "sa.pub"),
                "--service-account-signing-key-file", str(w / "sa.key"),
                "--service-cluster-ip-range", "10.96.0.0/24",
                "--disable-admission-plugins", "ServiceAccount",
                "--endpoint-reconciler-type", "none",
                "--feature-gates", "CustomResourceValidationExpressions=true",
                "--profiling=false",
                "--allow-privileged=true",  # as kubeadm clusters (device-plugin DaemonSets)
            ],
        )  # fmt: skip

    def _start_others(self) -> None:
        kc = str(self.workdir / "admin.kubeconfig")
        common = ["--kubeconfig", kc, "--bind-address", "127.0.0.1", "--secure-port", "0"]
        common += ["--leader-elect=false"]
        if self.bins.controller_manager is not None:
            self._spawn(
                "kube-controller-manager",
                [
                    str(self.bins.controller_manager),
                    *common,
                    "--use-service-account-credentials=false",
                    "--controllers",
                    CONTROLLERS,
                    "--node-monitor-grace-period",
                    "3600s",
                ],
            )
        if self.bins.scheduler is not None:
            self._spawn("kube-scheduler", [str(self.bins.scheduler), *common])

    def wait_ready(self, deadline_s: float = 60.0) -> None:
        """Poll ``/readyz`` with the admin token (the server's cert is self-signed)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        end = time.monotonic() + deadline_s
        req = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        while True:
            proc = self.procs["kube-apiserver"]
            if proc.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited: {self.log_tail('kube-apiserver')}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(req, timeout=2, context=ctx) as resp,
            ):
                if resp.status == 200:
                    return
            if time.monotonic() > end:
                raise RuntimeError(f"kube-apiserver not ready: {self.log_tail('kube-apiserver')}")
            time.sleep(0.1)

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.workdir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> None:
        self.api_port = free_port()
        self._write_files()
        self._start_etcd()
        self.start_apiserver()
        self.wait_ready()
        self._start_others()

    def stop_process(self, name: str, grace_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s`` (the apiserver can take that long)."""
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        try:
            proc.wait(grace_s if grace_s > 0 else 5.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def restart_apiserver(self, *, kill: bool = True) -> None:
        """Kill (SIGKILL, as a crashed or OOM-killed server) or stop, then start again."""
        self.stop_process("kube-apiserver", grace_s=0.0 if kill else 10.0)
        self.start_apiserver()
        self.wait_ready()

    def stop(self) -> None:
        """SIGTERM each, SIGKILL after 3 s (a terminating apiserver drains its watches for
        longer, and nothing is left to drain for)."""
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            self.stop_process(name, grace_s=3.0)
        shutil.rmtree(self.workdir, ignore_errors=True)
