"""`load_source` shares one validated policy per distinct document (issue 16: a fleet's
LLMAutoscalers are mostly templated; each validated policy is ~6 KB of objects)."""

from __future__ import annotations

import gc

import pytest

from autoscaler.errors import ConfigError
from autoscaler.policy import document
from autoscaler.policy.document import load_source

DOC = {"maxReplicaCount": 16, "metrics": [{"signal": "running", "target": 42}]}


def test_equal_documents_share_one_policy_source_whatever_their_key_order() -> None:
    a = load_source(DOC)
    b = load_source({"metrics": [{"target": 42, "signal": "running"}], "maxReplicaCount": 16})
    other = load_source({**DOC, "maxReplicaCount": 8})
    assert a is b and a.policy is b.policy
    assert other is not a and other.policy.max_replica_count == 8
    assert a.policy.max_replica_count == 16 and dict(a.document) == DOC


def test_a_shared_source_goes_with_the_last_target_holding_it() -> None:
    doc = {**DOC, "minReplicaCount": 3}
    source = load_source(doc)
    keys = [k for k, v in document._SOURCES.items() if v is source]
    assert len(keys) == 1
    del source
    gc.collect()
    assert keys[0] not in document._SOURCES
    assert load_source(doc).policy.min_replica_count == 3  # validated again


def test_an_invalid_document_is_refused_every_time_with_every_problem() -> None:
    bad = {**DOC, "maxReplicaCount": -1}
    for _ in range(2):
        with pytest.raises(ConfigError) as err:
            load_source(bad)
        assert "maxReplicaCount" in str(err.value) and "-1" in str(err.value)
