"""If-Match per RFC 9110 over a real socket, and in the file store's conditional writes.

Before: ``If-Match: ""`` was treated as absent (an unconditional write) and weak or
unquoted tags were accepted; ``*`` on a missing target deleted nothing with 404.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from autoscaler.api.app import create_app
from autoscaler.api.preconditions import IfMatch, MalformedIfMatch, parse_if_match
from autoscaler.api.security import ApiSettings
from autoscaler.api.server import serve_http
from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef
from autoscaler.store.base import NotFound, PreconditionFailed
from autoscaler.store.file import FilePolicyStore
from tests.api.conftest import WRITE
from tests.api.support import WRITE_TOKEN, spec

URL = "/v1/targets/llm/chat"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (['"7"'], IfMatch(versions=("7",))),
        (['"7", "9"'], IfMatch(versions=("7", "9"))),
        (['"7"', '"9"'], IfMatch(versions=("7", "9"))),  # one list over two field lines
        (['"7", , "9",'], IfMatch(versions=("7", "9"))),  # empty list elements ignored
        (["*"], IfMatch(any_version=True)),
        ([" * "], IfMatch(any_version=True)),
    ],
)
def test_if_match_parses_star_and_lists_of_strong_tags(
    header: list[str], expected: IfMatch
) -> None:
    assert parse_if_match(header) == expected


@pytest.mark.parametrize(
    ("header", "explains"),
    [
        (['""'], "not an entity-tag"),
        ([""], "empty"),
        (["  "], "empty"),
        (["7"], "not an entity-tag"),
        (['W/"7"'], "weak entity-tag"),
        (['"7", W/"8"'], "weak entity-tag"),
        (['*, "7"'], 'mixes "*"'),
        (['"7'], "not an entity-tag"),
        (['"a"b"'], "not an entity-tag"),
    ],
)
def test_malformed_if_match_is_refused_with_an_explanation(
    header: list[str], explains: str
) -> None:
    with pytest.raises(MalformedIfMatch, match=explains):
        parse_if_match(header)


async def test_if_match_rules_over_a_socket(tmp_path: Path) -> None:
    store = FilePolicyStore(tmp_path / "policies.yaml")
    handle = await serve_http(
        create_app(ControllerState(), store, ApiSettings(write_token=WRITE_TOKEN))
    )
    body = {"policy": {"maxReplicaCount": 4}}
    try:
        async with httpx.AsyncClient(base_url=handle.url) as c:

            async def put(if_match: str, max_replicas: int = 4) -> httpx.Response:
                doc = {"policy": {"maxReplicaCount": max_replicas}}
                return await c.put(URL, json=doc, headers={**WRITE, "If-Match": if_match})

            # "*" means "exists": 412 on a missing target for PUT, PATCH and DELETE
            assert (await put("*")).status_code == 412
            patch = await c.patch(URL, json=body, headers={**WRITE, "If-Match": "*"})
            assert patch.status_code == 412
            assert (await c.delete(URL, headers={**WRITE, "If-Match": "*"})).status_code == 412
            assert (await c.get(URL)).status_code == 404
            etag = (await c.put(URL, json=body, headers=WRITE)).headers["etag"]
            r = await put("*", 5)
            assert r.status_code == 200
            etag2 = r.headers["etag"]
            # a list matches any of its tags; all stale is 412
            assert (await put(f'"999", {etag2}', 6)).status_code == 200
            assert (await put(f'{etag}, "998"', 7)).status_code == 412
            # malformed is 400 and writes nothing, never an unconditional write
            before = (await c.get(URL)).headers["etag"]
            for bad in ('""', 'W/"3"', "3", "", f"*, {before}", f"W/{before}"):
                r = await put(bad, 9)
                assert r.status_code == 400, (bad, r.text)
                assert "If-Match" in r.json()["detail"]
                r = await c.patch(URL, json=body, headers={**WRITE, "If-Match": bad})
                assert r.status_code == 400
                assert (await c.delete(URL, headers={**WRITE, "If-Match": bad})).status_code == 400
            after = await c.get(URL)
            assert after.headers["etag"] == before
            assert after.json()["policy"]["maxReplicaCount"] == 6
            # PATCH and the policy sub-resource take lists too
            r = await c.patch(
                f"{URL}/policy",
                json={"maxReplicaCount": 3},
                headers={**WRITE, "If-Match": f'"1", {before}'},
            )
            assert r.status_code == 200, r.text
            assert (await c.delete(URL, headers={**WRITE, "If-Match": "*"})).status_code == 204
    finally:
        await handle.stop()


async def test_file_store_star_means_exists_and_missing_with_if_match_is_412(
    tmp_path: Path,
) -> None:
    store = FilePolicyStore(tmp_path / "p.yaml")
    ref = TargetRef("llm", "chat")
    with pytest.raises(PreconditionFailed, match="does not exist"):
        await store.put(spec(), if_match="*")
    with pytest.raises(PreconditionFailed, match="does not exist"):
        await store.delete(ref, if_match="*")
    with pytest.raises(PreconditionFailed, match="does not exist"):
        await store.delete(ref, if_match="1")
    with pytest.raises(NotFound):
        await store.delete(ref)
    first = await store.put(spec())
    second = await store.put(spec(maxReplicaCount=5), if_match="*")
    assert second.version != first.version
    with pytest.raises(PreconditionFailed):
        await store.put(spec(), if_match="")  # an empty tag is a mismatch, not "absent"
    await store.delete(ref, if_match="*")
    assert await store.list() == []
