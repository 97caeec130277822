"""A model's parameter count from its shape: 12 L H^2 + V H, None when the shape is unknown."""

from __future__ import annotations

from autoexp.campaign.planning.model_size import param_count


def test_the_count_is_12_l_h2_plus_v_h() -> None:
    shape = {"NUM_LAYERS": 2, "HIDDEN_SIZE": "64", "VOCAB_SIZE": 100}
    assert param_count(shape) == 12 * 64 * 64 * 2 + 100 * 64


def test_no_vocabulary_counts_the_layers_alone() -> None:
    assert param_count({"NUM_LAYERS": 2, "HIDDEN_SIZE": 64}) == 12 * 64 * 64 * 2


def test_an_unknown_shape_has_no_count() -> None:
    assert param_count({"HIDDEN_SIZE": 64}) is None
    assert param_count({"NUM_LAYERS": "two", "HIDDEN_SIZE": 64}) is None
    assert param_count({"NUM_LAYERS": None, "HIDDEN_SIZE": 64}) is None
