"""Selector semantics live in `autoscaler.kube.selectors` (the controller uses them too);
re-exported here for the local API endpoint and its tests."""

from autoscaler.kube.selectors import (
    FIELD_PATHS,
    Predicate,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
    selector_string,
)

__all__ = [
    "FIELD_PATHS",
    "Predicate",
    "SelectorError",
    "parse_field_selector",
    "parse_label_selector",
    "selector_string",
]
