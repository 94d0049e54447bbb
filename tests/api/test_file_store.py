"""FilePolicyStore: durable, versioned, atomic, and aware of edits made by hand."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
import yaml

from autoscaler.domain import TargetRef
from autoscaler.store.base import NotFound, PreconditionFailed, StoredTarget
from autoscaler.store.file import FilePolicyStore, PolicyFileInvalid
from autoscaler.target import TargetSpec, target_spec_to_dict
from tests.api.support import spec


def _read(path: Path) -> bytes:
    return path.read_bytes()


@pytest.fixture(params=["policies.yaml", "policies.json"])
def path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return tmp_path / request.param


async def test_put_is_visible_to_a_new_store_over_the_same_file(path: Path) -> None:
    store = FilePolicyStore(path)
    stored = await store.put(spec(maxReplicaCount=5))
    restarted = FilePolicyStore(path)
    again = await restarted.get(stored.spec.ref)
    assert again.version == stored.version
    assert again.spec == stored.spec
    assert again.spec.policy.max_replica_count == 5


async def test_every_write_gets_a_new_version_and_stale_if_match_fails(path: Path) -> None:
    store = FilePolicyStore(path)
    first = await store.put(spec())
    second = await store.put(spec(maxReplicaCount=6), if_match=first.version)
    assert second.version != first.version
    with pytest.raises(PreconditionFailed, match=first.version):
        await store.put(spec(maxReplicaCount=7), if_match=first.version)
    assert (await store.get(first.spec.ref)).spec.policy.max_replica_count == 6


async def test_recreated_target_never_reuses_a_version(path: Path) -> None:
    store = FilePolicyStore(path)
    first = await store.put(spec())
    await store.delete(first.spec.ref, if_match=first.version)
    recreated = await store.put(spec())
    assert recreated.version != first.version
    with pytest.raises(PreconditionFailed):
        await store.delete(recreated.spec.ref, if_match=first.version)


async def test_if_match_on_missing_target_fails_and_delete_of_missing_is_not_found(
    path: Path,
) -> None:
    store = FilePolicyStore(path)
    with pytest.raises(PreconditionFailed):
        await store.put(spec(), if_match="1")
    with pytest.raises(NotFound):
        await store.delete(TargetRef("llm", "nope"))
    assert await store.list() == []


async def test_failed_write_leaves_file_and_memory_unchanged(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FilePolicyStore(path)
    good = await store.put(spec(maxReplicaCount=4))
    before = _read(path)

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        await store.put(spec(maxReplicaCount=9))
    monkeypatch.undo()
    assert _read(path) == before
    assert (await store.get(good.spec.ref)).version == good.version
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


async def test_invalid_file_at_startup_names_field_value_and_rule(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    doc = {"targets": [{"namespace": "llm", "name": "chat", "policy": {"maxReplicaCount": 0}}]}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(PolicyFileInvalid) as err:
        await FilePolicyStore(path).list()
    assert any("targets[0].policy.maxReplicaCount" in p and "0" in p for p in err.value.problems)


async def test_hand_edit_gets_a_new_version_so_stale_writers_fail(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    store = FilePolicyStore(path)
    stored = await store.put(spec(maxReplicaCount=4))
    doc = json.loads(path.read_text())
    doc["targets"][0]["policy"]["maxReplicaCount"] = 12  # edited by hand, version kept
    path.write_text(json.dumps(doc))
    os.utime(path, ns=(1, 1))  # make sure the signature differs even on coarse clocks
    edited = await store.get(stored.spec.ref)
    assert edited.spec.policy.max_replica_count == 12
    assert edited.version != stored.version
    with pytest.raises(PreconditionFailed):
        await store.put(spec(maxReplicaCount=3), if_match=stored.version)


async def test_invalid_hand_edit_keeps_last_good_and_blocks_writes(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    store = FilePolicyStore(path)
    stored = await store.put(spec(maxReplicaCount=4))
    path.write_text("targets: [ {namespace: llm, name: chat, policy: {maxReplicaCount: -1}} ]\n")
    os.utime(path, ns=(2, 2))
    assert (await store.get(stored.spec.ref)).version == stored.version
    with pytest.raises(PolicyFileInvalid, match="edited outside"):
        await store.put(spec(maxReplicaCount=5))


class ManualPoll:
    """A fake sleep: the poll interval elapses only when the test says so."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self._tick = asyncio.Event()
        self.parked = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.calls.append(seconds)
        self.parked.set()
        self._tick.clear()
        await self._tick.wait()

    def elapse(self) -> None:
        self._tick.set()


async def _next(it: object) -> list[StoredTarget]:
    return await asyncio.wait_for(it.__anext__(), 5.0)  # type: ignore[attr-defined]


async def test_watch_yields_current_then_changes_made_through_the_store(path: Path) -> None:
    poll = ManualPoll()
    store = FilePolicyStore(path, poll_interval_s=30.0, sleep=poll.sleep)
    watch = store.watch()
    assert await _next(watch) == []
    stored = await store.put(spec())
    assert await _next(watch) == [stored]  # no poll needed: the write wakes the watcher
    await watch.aclose()


async def test_watch_picks_up_external_edit_on_next_poll(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    poll = ManualPoll()
    store = FilePolicyStore(path, poll_interval_s=7.0, sleep=poll.sleep)
    watch = store.watch()
    assert await _next(watch) == []
    pending = asyncio.ensure_future(_next(watch))
    await asyncio.wait_for(poll.parked.wait(), 5.0)  # the watcher waits on its poll interval
    other = spec(name="code")
    path.write_text(yaml.safe_dump({"targets": [target_spec_to_dict(other)]}))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not pending.done()  # nothing wakes it before the poll interval elapses
    poll.elapse()
    seen = await pending
    assert [t.spec.ref for t in seen] == [other.ref]
    assert poll.calls[0] == 7.0
    await watch.aclose()


async def test_yaml_is_written_without_anchors_so_editing_one_target_changes_only_it(
    tmp_path: Path,
) -> None:
    import dataclasses

    from autoscaler.policy.document import load_source

    path = tmp_path / "policies.yaml"
    store = FilePolicyStore(path)
    source = load_source({"metrics": [{"signal": "waiting", "target": 4}]})  # shared by both
    for name in ("a", "b"):
        base = TargetSpec.from_source(TargetRef("llm", name), source)
        await store.put(dataclasses.replace(base))
    text = path.read_text()
    assert "&id" not in text and "*id" not in text
    edited = text.replace("target: 4", "target: 8", 1)  # the first target's block only
    path.write_text(edited)
    reread = {t.spec.ref.name: t for t in await FilePolicyStore(path).list()}
    assert reread["a"].spec.policy.metrics[0].target == 8.0
    assert reread["b"].spec.policy.metrics[0].target == 4.0


def test_temp_files_left_by_a_killed_write_are_swept_at_start(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    left = tmp_path / ".policies.yaml.x8k2.tmp"
    left.write_text("half a write")
    other = tmp_path / ".other.yaml.x8k2.tmp"  # not this store's
    other.write_text("keep")
    store = FilePolicyStore(path)
    assert store.swept == [left.name]
    assert not left.exists() and other.exists()
