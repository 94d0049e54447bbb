"""A few ``kubectl`` verbs over plain HTTP for the real tier (aiohttp, bearer token).

Resources are found by API discovery (``/api/v1``, ``/apis/<group>/<version>``), so any
kind — including other projects' CRDs once installed — can be applied (server-side apply)
or server-side dry-run without a table of plurals.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import aiohttp

Obj = dict[str, Any]
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class KubeError(Exception):
    def __init__(self, status: int, body: Obj | str, what: str) -> None:
        msg = body.get("message", body) if isinstance(body, dict) else body
        super().__init__(f"{what}: HTTP {status}: {msg}")
        self.status = status
        self.body = body


class Kube:
    """``async with Kube(url, token) as k``; one aiohttp session, TLS unverified (test CA)."""

    def __init__(self, url: str, token: str, *, manager: str = "realk8s-tests") -> None:
        self.url = url
        self.token = token
        self.manager = manager
        self._session: aiohttp.ClientSession | None = None
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    async def __aenter__(self) -> Kube:
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}"},
            connector=aiohttp.TCPConnector(ssl=False),
            timeout=aiohttp.ClientTimeout(total=30),
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        ok: Iterable[int] = (200, 201),
    ) -> Obj:
        assert self._session is not None
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type}
        async with self._session.request(
            method, self.url + path, data=data, headers=headers, params=params
        ) as resp:
            text = await resp.text()
            try:
                parsed: Obj = json.loads(text) if text else {}
            except ValueError:
                parsed = {"message": text}
            if resp.status not in tuple(ok):
                raise KubeError(resp.status, parsed, f"{method} {path}")
            return parsed

    async def get(self, path: str, **params: str) -> Obj:
        return await self.request("GET", path, params=params or None)

    # ------------------------------------------------------------ discovery
    async def _discover(self, api_version: str, *, refresh: bool = False) -> dict[str, Any]:
        if refresh or api_version not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            doc = await self.get(base)
            self._resources[api_version] = {
                r["kind"]: (r["name"], r["namespaced"])
                for r in doc.get("resources", [])
                if "/" not in r["name"]
            }
        return self._resources[api_version]

    async def path_for(self, obj: Obj, *, name: bool = True) -> str:
        api_version, kind = obj["apiVersion"], obj["kind"]
        found = await self._discover(api_version)
        if kind not in found:
            found = await self._discover(api_version, refresh=True)
        plural, namespaced = found[kind]
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        path = f"{base}/namespaces/{ns}/{plural}" if namespaced else f"{base}/{plural}"
        return f"{path}/{meta['name']}" if name else path

    # ------------------------------------------------------------ verbs
    async def apply(self, obj: Obj, *, dry_run: bool = False) -> Obj:
        """Server-side apply (``kubectl apply --server-side [--dry-run=server]``)."""
        params = {"fieldManager": self.manager, "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        return await self.request(
            "PATCH", await self.path_for(obj), obj, content_type=APPLY_PATCH, params=params
        )

    async def create(self, obj: Obj, *, dry_run: bool = False) -> Obj:
        params = {"dryRun": "All"} if dry_run else None
        return await self.request("POST", await self.path_for(obj, name=False), obj, params=params)

    async def delete(self, obj: Obj) -> None:
        await self.request("DELETE", await self.path_for(obj), ok=(200, 202, 404))

    async def read(self, obj: Obj) -> Obj:
        return await self.request("GET", await self.path_for(obj))

    async def wait_established(self, crd_name: str, deadline_s: float = 30.0) -> None:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}"
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        while True:
            crd = await self.get(path)
            status = crd.get("status") or {}
            conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if conds.get("Established") == "True" and await self._discoverable(crd):
                return
            if loop.time() > end:
                raise AssertionError(f"CRD {crd_name} not established and discoverable: {conds}")
            await asyncio.sleep(0.1)

    async def _discoverable(self, crd: Obj) -> bool:
        """Every served version lists the CRD's resource in discovery: the API server can
        answer Established a moment before /apis/<group>/<version> serves it (404)."""
        spec = crd["spec"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            api_version = f"{spec['group']}/{version['name']}"
            try:
                found = await self._discover(api_version, refresh=True)
            except KubeError as err:
                if err.status == 404:
                    return False
                raise
            if spec["names"]["kind"] not in found:
                return False
        return True
