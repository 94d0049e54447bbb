"""The local policy store: every target in one YAML or JSON file.

Why a file: the embedded demo and single-node installs need durable, hand-editable
policies without a cluster. Writes are atomic (temp file, fsync, rename, fsync of the
directory), so a crash leaves either the old or the new file, never half of one; nothing
is acknowledged before that rename. Versions come from one file-wide counter (like
Kubernetes' resourceVersion), so a deleted and re-created target never reuses a version
and a stale ``If-Match`` cannot match it by accident. Edits made by hand are picked up by
polling the file's mtime; a target changed that way gets a fresh version.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError
from autoscaler.logging import get_logger
from autoscaler.store.base import NotFound, PreconditionFailed, StoredTarget
from autoscaler.target import TargetSpec, target_spec_from_dict, target_spec_to_dict

log = get_logger(__name__)

# libyaml's safe loader/dumper when present (several times faster), else pure Python.
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[misc,valid-type]
    """Never anchors and aliases: targets written from one shared policy document would
    otherwise share ``&id001`` blocks, and hand-editing one target's block would change
    every target aliasing it."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


API_VERSION: Final = "llm-autoscaler.io/v1"


class PolicyFileInvalid(ConfigError):
    """The file was edited outside the store and no longer validates; writes wait for a fix."""


# --------------------------------------------------------------------------- store


@dataclass(frozen=True, slots=True)
class _Signature:
    """Cheap identity of the file on disk: a changed signature means re-read it."""

    mtime_ns: int
    size: int
    inode: int


def _signature(path: Path) -> _Signature | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return _Signature(st.st_mtime_ns, st.st_size, st.st_ino)


def _canonical(spec: TargetSpec) -> str:
    return json.dumps(target_spec_to_dict(spec), sort_keys=True)


class FilePolicyStore:
    """`PolicyStore` over one YAML (``.yaml``/``.yml``) or JSON (``.json``) file.

    Single-process writer: an asyncio lock serialises writes; other processes may edit the
    file by hand (picked up on the next call or poll), but two stores writing one file
    concurrently are not coordinated.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        poll_interval_s: float = 2.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.path = Path(path)
        self.poll_interval_s = poll_interval_s
        self._sleep = sleep
        self._lock = asyncio.Lock()
        self._watchers: set[asyncio.Event] = set()
        self._targets: dict[TargetRef, StoredTarget] = {}
        self._generation = 0
        self._signature: _Signature | None = None
        self._invalid: PolicyFileInvalid | None = None
        self._loaded = False
        self._yaml = self.path.suffix.lower() in (".yaml", ".yml")
        self.swept = self._sweep_temp_files()

    def _sweep_temp_files(self) -> list[str]:
        """Remove the temp files a killed write left (``.<name>.*.tmp`` next to the file;
        only this store writes them, and nothing is written before it exists)."""
        swept = []
        with contextlib.suppress(OSError):
            for tmp in self.path.parent.glob(f".{self.path.name}.*.tmp"):
                with contextlib.suppress(OSError):
                    tmp.unlink()
                    swept.append(tmp.name)
        if swept:
            log.warning("policy_file_temp_files_removed", path=str(self.path), files=swept)
        return swept

    # -- reading the file

    def _parse(self, text: str) -> tuple[int, dict[TargetRef, tuple[TargetSpec, int | None]]]:
        try:
            data = yaml.load(text, Loader=_Loader) if self._yaml else json.loads(text or "{}")
        except (ValueError, yaml.YAMLError) as err:
            raise PolicyFileInvalid(f"policy file {self.path}: not valid syntax: {err}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise PolicyFileInvalid(
                f"policy file {self.path}",
                [f"top level: must be a mapping, got {type(data).__name__}"],
            )
        generation = data.get("generation", 0)
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise PolicyFileInvalid(
                f"policy file {self.path}",
                [f"generation: value {generation!r} must be a non-negative integer"],
            )
        items = data.get("targets", [])
        if not isinstance(items, list):
            raise PolicyFileInvalid(
                f"policy file {self.path}",
                [f"targets: value must be a list, got {type(items).__name__}"],
            )
        problems: list[str] = []
        out: dict[TargetRef, tuple[TargetSpec, int | None]] = {}
        for i, item in enumerate(items):
            try:
                spec = target_spec_from_dict(item)
            except ConfigError as err:
                problems.extend(f"targets[{i}].{p}" for p in err.problems)
                continue
            version = item.get("version")
            if version is not None and (
                isinstance(version, bool) or not isinstance(version, int) or version < 1
            ):
                problems.append(f"targets[{i}].version: value {version!r} must be an integer >= 1")
                version = None
            if spec.ref in out:
                problems.append(f"targets[{i}]: {spec.ref} appears twice")
            out[spec.ref] = (spec, version)
        if problems:
            raise PolicyFileInvalid(f"policy file {self.path}", problems)
        return generation, out

    def _reload_if_changed(self) -> bool:
        """Re-read the file when its signature changed; True when the target list changed."""
        sig = _signature(self.path)
        if self._loaded and sig == self._signature:
            return False
        first = not self._loaded
        if sig is None:
            changed = first or bool(self._targets)
            self._loaded, self._signature, self._targets, self._invalid = True, None, {}, None
            return changed
        try:
            generation, parsed = self._parse(self.path.read_text(encoding="utf-8"))
        except OSError as err:
            raise ConfigError(f"policy file {self.path}: cannot read ({err.strerror})") from None
        except PolicyFileInvalid as err:
            if first:
                raise  # refuse to start on an invalid file; nothing loaded yet
            log.error("policy_file_invalid", path=str(self.path), problems=err.problems)
            self._signature = sig
            self._invalid = err
            return False
        self._loaded, self._signature, self._invalid = True, sig, None
        gen = max(self._generation, generation)
        new: dict[TargetRef, StoredTarget] = {}
        for ref, (spec, version) in parsed.items():
            old = self._targets.get(ref)
            if old is not None and _canonical(old.spec) == _canonical(spec):
                new[ref] = old
            elif version is not None and (old is None or version > int(old.version)):
                new[ref] = StoredTarget(spec, str(version))  # written with a fresh version
            else:
                gen += 1  # edited by hand, version unchanged: bump so a stale If-Match fails
                new[ref] = StoredTarget(spec, str(gen))
            gen = max(gen, int(new[ref].version))
        self._generation = gen
        before = {r: t.version for r, t in self._targets.items()}
        self._targets = new
        return first or before != {r: t.version for r, t in new.items()}

    async def _refresh(self) -> None:
        if self._loaded and _signature(self.path) == self._signature:
            return  # one stat(): the common case stays on the loop, no thread hop
        changed = await asyncio.to_thread(self._reload_if_changed)
        if changed:
            self._notify()

    async def _read_view(self) -> dict[TargetRef, StoredTarget]:
        """Reads never queue behind a write: during one they see the last committed view
        (the write is not acknowledged yet, so nobody can have been told otherwise)."""
        if self._lock.locked() and self._loaded:
            return self._targets
        async with self._lock:
            await self._refresh()
            return self._targets

    # -- writing the file

    def _render(self, targets: Mapping[TargetRef, StoredTarget], generation: int) -> str:
        items = []
        for ref in sorted(targets, key=lambda r: (r.namespace, r.name)):
            st = targets[ref]
            items.append({**target_spec_to_dict(st.spec), "version": int(st.version)})
        doc = {"apiVersion": API_VERSION, "generation": generation, "targets": items}
        if self._yaml:
            return yaml.dump(doc, Dumper=_Dumper, sort_keys=False)
        return json.dumps(doc, indent=2) + "\n"

    def _write_atomic(self, text: str) -> _Signature | None:
        """Temp file in the same directory, fsync, rename over, fsync the directory."""
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return _signature(self.path)

    async def _commit(self, targets: dict[TargetRef, StoredTarget], generation: int) -> None:
        def render_and_write() -> _Signature | None:
            return self._write_atomic(self._render(targets, generation))

        sig = await asyncio.to_thread(render_and_write)  # YAML rendering is slow: off the loop
        # Only now, durably stored, does the in-memory view change.
        self._targets = targets
        self._generation = generation
        self._signature = sig
        self._notify()

    def _notify(self) -> None:
        for event in self._watchers:
            event.set()

    def _check_writable(self) -> None:
        if self._invalid is not None:
            raise PolicyFileInvalid(
                f"policy file {self.path} was edited outside the API and is invalid; "
                "fix it before writing",
                self._invalid.problems,
            )

    # -- PolicyStore

    async def list(self, namespace: str | None = None) -> list[StoredTarget]:
        view = await self._read_view()
        return [
            t
            for ref, t in sorted(view.items(), key=lambda kv: str(kv[0]))
            if namespace is None or ref.namespace == namespace
        ]

    async def get(self, ref: TargetRef) -> StoredTarget:
        view = await self._read_view()
        try:
            return view[ref]
        except KeyError:
            raise NotFound(f"target {ref} not found") from None

    async def put(self, spec: TargetSpec, if_match: str | None = None) -> StoredTarget:
        async with self._lock:
            await self._refresh()
            self._check_writable()
            # Canonical form (defaults filled in), so what is returned is what a re-read gives.
            spec = target_spec_from_dict(target_spec_to_dict(spec))
            old = self._targets.get(spec.ref)
            if if_match is not None:
                if old is None:
                    raise PreconditionFailed(
                        f"target {spec.ref} does not exist (If-Match {if_match!r})"
                    )
                if if_match != "*" and if_match != old.version:
                    raise PreconditionFailed(
                        f"target {spec.ref} is at version {old.version}, not {if_match!r}"
                    )
            generation = self._generation + 1
            stored = StoredTarget(spec=spec, version=str(generation))
            await self._commit({**self._targets, spec.ref: stored}, generation)
            return stored

    async def delete(self, ref: TargetRef, if_match: str | None = None) -> None:
        async with self._lock:
            await self._refresh()
            self._check_writable()
            old = self._targets.get(ref)
            if old is None and if_match is not None:
                # RFC 9110: If-Match (even "*") is false when there is no current version.
                raise PreconditionFailed(f"target {ref} does not exist (If-Match {if_match!r})")
            if old is None:
                raise NotFound(f"target {ref} not found")
            if if_match is not None and if_match not in ("*", old.version):
                raise PreconditionFailed(
                    f"target {ref} is at version {old.version}, not {if_match!r}"
                )
            remaining = {r: t for r, t in self._targets.items() if r != ref}
            await self._commit(remaining, self._generation + 1)

    async def watch(self) -> AsyncIterator[builtins.list[StoredTarget]]:
        """Current list first, then on every change made here or to the file on disk."""
        event = asyncio.Event()
        self._watchers.add(event)
        try:
            last: dict[TargetRef, str] | None = None
            while True:
                event.clear()  # a change after this point sets it again: none is missed
                async with self._lock:
                    await self._refresh()
                    snapshot = dict(self._targets)
                versions = {r: t.version for r, t in snapshot.items()}
                if versions != last:
                    last = versions
                    yield [snapshot[r] for r in sorted(snapshot, key=str)]
                    continue
                await self._wait_event_or_poll(event)
        finally:
            self._watchers.discard(event)

    async def _wait_event_or_poll(self, event: asyncio.Event) -> None:
        waiter = asyncio.ensure_future(event.wait())
        poll = asyncio.ensure_future(self._sleep(self.poll_interval_s))
        try:
            await asyncio.wait({waiter, poll}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in (waiter, poll):
                if not fut.done():
                    fut.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await fut
