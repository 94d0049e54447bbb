"""The demo's variants line is derived from the recorded replicas, never written in:
which variant grew first, how many slices were taken when the H100 grew, which shrank
first, and what did not happen."""

from __future__ import annotations

from autoscaler.demo.variants import variant_facts, variants_line


def test_the_line_follows_the_timeline_slices_first_then_the_h100() -> None:
    seen = [(0.0, 0, 1), (70.0, 1, 1), (110.0, 2, 1), (130.0, 3, 1), (170.0, 3, 2)]
    seen += [(240.0, 3, 1), (260.0, 2, 1)]
    facts = variant_facts("qwen", seen)
    assert facts["first_up"] == "mig" and facts["mig_at_h100_up"] == 3
    assert facts["first_down"] == "h100" and facts["end"] == {"mig": 2, "h100": 1}
    assert variants_line(facts) == (
        "variants: mig 0->3 first (cheapest, from t=70 s), h100 1->2 once the 3 slices "
        "were taken; scale-down took h100 first (t=240 s)"
    )


def test_the_line_says_so_when_the_h100_grew_with_slices_free_or_nothing_shrank() -> None:
    facts = variant_facts("qwen", [(0.0, 0, 1), (50.0, 1, 1), (90.0, 1, 2)])
    assert variants_line(facts) == (
        "variants: mig 0->1 first (cheapest, from t=50 s), h100 1->2 with 1/3 slices "
        "taken; no scale-down in the run"
    )
    facts = variant_facts("qwen", [(0.0, 0, 1), (50.0, 0, 2), (60.0, 1, 2), (90.0, 1, 1)])
    assert variants_line(facts) == (
        "variants: h100 1->2 first (t=50 s), mig 0->1; scale-down took h100 first (t=90 s)"
    )


def test_a_model_that_never_grew_says_so() -> None:
    facts = variant_facts("qwen", [(0.0, 0, 1)])
    assert facts["first_up"] is None and facts["first_down"] is None
    assert variants_line(facts) == "variants: qwen never grew (mig 0, h100 1)"
