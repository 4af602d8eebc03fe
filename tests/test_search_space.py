"""The search space of a config (what a tuner samples): axes, size, points, variants, pruning."""

import pytest

from xegemm.config import ConfigError, SearchSpace, config_from_text, expand

TEXT = """\
problem: {m: 64, n: 64, k: 64}
sweep:
  tile: [{workgroup: [64, 64, 32], subgroups: [2, 2]}, {workgroup: [32, 64, 32], subgroups: [4, 2]}]
  pipeline.prefetch: [0, 1, 2]
  types.a: [bf16, f16]
constraints: ["tile.workgroup[0] % (tile.subgroups[0] * 16) == 0"]
"""


@pytest.fixture
def space():
    return SearchSpace(config_from_text(TEXT, "s.yaml"))


def test_axes_size_and_order(space):
    assert list(space.axes) == ["tile", "pipeline.prefetch", "types.a"]
    assert space.size == len(space) == 2 * 3 * 2
    points = list(space)
    assert points[0] == {"tile": space.axes["tile"][0], "pipeline.prefetch": 0, "types.a": "bf16"}
    assert points[1]["types.a"] == "f16" and points[2]["pipeline.prefetch"] == 1   # the last axis fastest
    assert [space.point(i) for i in range(space.size)] == points
    with pytest.raises(IndexError):
        space.point(space.size)


def test_variants_equal_expand_and_pruning_names_the_constraint(space):
    assert space.variants() == expand(space.config)
    good, bad = space.point(0), space.point(6)
    assert space.prune(good) is None and space.variant(good).config.tile.workgroup == (64, 64, 32)
    reason = space.prune(bad)
    assert reason.startswith('constraint "tile.workgroup[0] % (tile.subgroups[0] * 16) == 0" is false')
    assert space.variant(bad).overrides == {"tile.workgroup": (32, 64, 32), "tile.subgroups": (4, 2),
                                            "pipeline.prefetch": 0, "types.a": "bf16"}


def test_a_point_outside_the_axes_is_a_clear_error(space):
    with pytest.raises(ConfigError, match=r"not a point of this search space: unknown axes \['tile.foo'\]"):
        space.variant({**space.point(0), "tile.foo": 1})
    with pytest.raises(ConfigError, match=r"missing axes \['types.a'\]"):
        space.variant({"tile": space.axes["tile"][0], "pipeline.prefetch": 0})


def test_a_config_without_sweep_is_one_point():
    space = SearchSpace(config_from_text("problem: {m: 8, n: 8, k: 8}\n"))
    assert space.size == 1 and list(space) == [{}] and space.variant({}).accepted
