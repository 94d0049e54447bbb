"""Start a real `prometheus` server on 127.0.0.1 for integration tests.

    async with PrometheusServer(["127.0.0.1:8001"], scrape_interval_s=1) as prom:
        url = prom.url                        # http://127.0.0.1:<free port>
        await prom.wait_for("up", deadline_s=30)

Uses the Debian package's binary (`make system-deps`), a temp config and data dir, and a
free port; `stop()` terminates the process it started (and only that one).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    def __init__(
        self,
        targets: Sequence[str],
        *,
        scrape_interval_s: float = 1.0,
        metrics_path: str = "/metrics",
        target_labels: Sequence[dict[str, str]] | None = None,
        binary: str = "prometheus",
        rule_groups: Sequence[dict[str, Any]] = (),
    ) -> None:
        path = shutil.which(binary)
        if path is None:
            raise RuntimeError("prometheus binary not found: run `make system-deps`")
        self.binary = path
        self.targets = list(targets)
        self.target_labels = list(target_labels) if target_labels else [{} for _ in targets]
        self.scrape_interval_s = scrape_interval_s
        self.metrics_path = metrics_path
        self.rule_groups = list(rule_groups)  # recording/alerting rule groups to load
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def _config(self) -> str:
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        groups = [
            {"targets": [t], "labels": labels}
            for t, labels in zip(self.targets, self.target_labels, strict=True)
        ]
        rules = {"rule_files": ["rules.json"]} if self.rule_groups else {}
        return json.dumps(
            {
                "global": {"scrape_interval": interval, "evaluation_interval": interval},
                **rules,
                "scrape_configs": [
                    {
                        "job_name": "pods",
                        "metrics_path": self.metrics_path,
                        "scrape_timeout": interval,
                        "static_configs": groups,
                    }
                ],
            }
        )

    def start(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="prom-test-")
        root = Path(self._dir.name)
        (root / "prometheus.yml").write_text(self._config())  # JSON is valid YAML
        if self.rule_groups:
            (root / "rules.json").write_text(json.dumps({"groups": self.rule_groups}))
        self._log = (root / "prometheus.log").open("wb")
        self._proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
            self._proc = None
            self._log.close()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query (blocking; call through `asyncio.to_thread` in async tests)."""
        qs = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{qs}", timeout=5) as resp:
            body = json.loads(resp.read())
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    async def wait_for(
        self, promql: str, *, deadline_s: float = 30.0, min_series: int = 1
    ) -> list[dict[str, Any]]:
        """Poll until ``promql`` returns ``min_series`` series, or raise at the deadline."""
        end = time.monotonic() + deadline_s
        last: BaseException | None = None
        while time.monotonic() < end:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._proc.returncode}")
            try:
                result = await asyncio.to_thread(self.query, promql)
                if len(result) >= min_series:
                    return result
            except OSError as exc:
                last = exc
            await asyncio.sleep(0.25)
        raise TimeoutError(f"no data for {promql!r} within {deadline_s}s (last error: {last})")

    async def __aenter__(self) -> PrometheusServer:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class FileSdPrometheus(PrometheusServer):
    """A real Prometheus discovering its targets from a JSON file it re-reads every second
    (pods come and go during a test; see `write_sd`)."""

    def __init__(self, sd_file: Path, scrape_interval_s: float) -> None:
        super().__init__([], scrape_interval_s=scrape_interval_s)
        self.sd_file = sd_file

    def _config(self) -> str:
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        timeout = f"{int(min(self.scrape_interval_s, 10.0) * 1000)}ms"
        return json.dumps(
            {
                "global": {"scrape_interval": interval, "evaluation_interval": interval},
                "scrape_configs": [
                    {
                        "job_name": "vllm",
                        "scrape_timeout": timeout,
                        "file_sd_configs": [
                            {"files": [str(self.sd_file)], "refresh_interval": "1s"}
                        ],
                    }
                ],
            }
        )


def write_sd(path: Path, urls: list[str]) -> None:
    """Atomically write the file-discovery targets (base URLs -> host:port)."""
    hosts = [u.removeprefix("http://") for u in urls]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": hosts, "labels": {"namespace": "demo"}}]))
    tmp.replace(path)
