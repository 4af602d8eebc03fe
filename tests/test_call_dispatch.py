"""The call API's dispatch on its own (xegemm.api.dispatch): the ranking rules in order, each rule's name in the
reason it gives, the model-ranked rule for unmeasured shapes (its choice follows the model and the measurements
it is given), a rule added to the list, the errors when nothing is legal; and the call kind a Gemm selects per
entry (xegemm.api.kinds).  Dispatch plans and renders (portable lowering) but builds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import xegemm
from xegemm.api import LayoutError, NoKernelError
from xegemm.api.dispatch import (RULES, Candidate, Dispatcher, FastestMeasured, FirstLegal, ModelRanked, Request,
                                 TunedWinner, candidates)
from xegemm.api.kinds import KINDS, GroupedCall, PlainCall, QuantizedCall, TracedCall
from xegemm.config import config_from_text, expand
from xegemm.config.shapes import Shape
from xegemm.lowering import named_lowering
from xegemm.model.ranking import DeviceModel
from xegemm.model.static import Machine, predict

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# two variants: split K 1 (legal at any K) and split K 4 (needs 4 k-tiles of 16: K >= 64)
CONFIG = """\
problem: {m: 64, n: 64, k: 64}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [8, 16, 16], subgroups: [1, 1]}
sweep: {tile.split_k: [1, 4]}
"""
PORTABLE = named_lowering("portable")


def _request(m, n, k):
    return Request(m, n, k, 1, "bf16", "bf16", ("row",), ("row",))


@pytest.fixture(scope="module")
def configs():
    cs = [v.config for v in expand(config_from_text(CONFIG)) if not v.rejected]
    assert [c.tile.split_k for c in cs] == [1, 4]
    return cs


def test_without_measurements_the_first_legal_variant_runs(configs):
    d = Dispatcher(candidates(config_from_text(CONFIG), {}), "t")
    choice = d.choose(PORTABLE, _request(32, 32, 256))
    assert choice.candidate.index == 0 and choice.rule == "first variant legal"
    assert choice.reason == "the first variant legal for 32x32x256 (no measurement applies)"
    assert choice.sizes == choice.call.sizes(32, 32, 256, 1) and choice.layout_a == "row"


def test_the_fastest_variant_measured_at_the_shape_runs_before_the_first(configs):
    at = Shape(64, 64, 64)
    cands = [Candidate(0, configs[0], False, 5.0), Candidate(1, configs[1], False, 9.0)]
    d = Dispatcher(cands, "t")
    fast = d.choose(PORTABLE, _request(64, 64, 64))
    assert fast.candidate.index == 1 and fast.config.tile.split_k == 4
    assert fast.reason == f"the fastest measured variant legal for {at.label} (9.0 GFLOP/s there)"
    elsewhere = d.choose(PORTABLE, _request(32, 32, 256))     # measured at 64x64x64 only: not this shape's
    assert elsewhere.candidate.index == 0 and elsewhere.rule == "first variant legal"


def test_the_tuned_winner_of_the_shape_runs_before_the_fastest(configs):
    cands = [Candidate(0, configs[0], True, 5.0), Candidate(1, configs[1], False, 9.0)]
    d = Dispatcher(cands, "t")
    assert d.choose(PORTABLE, _request(64, 64, 64)).reason == "the tuned winner of 64x64x64"
    assert d.choose(PORTABLE, _request(64, 64, 128)).rule == "first variant legal"     # nothing measured there


CPU = DeviceModel(Machine(2, 2 << 20))          # the relative model, as on the CPU device here
# a skinny decode tile and a square prefill tile, in that order
SKINNY_AND_SQUARE = """\
problem: {m: 16, n: 256, k: 256}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [8, 64, 64], subgroups: [1, 2]}
sweep:
  tile: [{workgroup: [8, 64, 64], subgroups: [1, 2]}, {workgroup: [64, 64, 32], subgroups: [2, 2]}]
"""


def _model_dispatcher(cands, model=CPU):
    return Dispatcher(cands, "t", rules=(TunedWinner(), FastestMeasured(), ModelRanked(model, PORTABLE, cands),
                                         FirstLegal()))


def _two(gflops=(None, None), at=Shape(16, 256, 256)):
    """The skinny and the square candidate, each measured at ``at`` at ``gflops`` (None: not measured)."""
    cs = [v.config for v in expand(config_from_text(SKINNY_AND_SQUARE)) if not v.rejected]
    return [Candidate(i, c.with_overrides(at.overrides()), False, g) for i, (c, g) in enumerate(zip(cs, gflops))]


def test_the_model_ranks_an_unmeasured_shape_skinny_for_decode_square_for_prefill():
    cands = _two()
    d = _model_dispatcher(cands)
    decode = d.choose(PORTABLE, _request(1, 4096, 4096))
    assert decode.rule == "model-ranked" and decode.config.tile.workgroup == (8, 64, 64)
    assert decode.reason.startswith("model-ranked: variant 0, the fastest predicted of those legal for 1x4096x4096 "
                                    "(the static model's relative ranking on this device; ")
    assert "x the next predicted" in decode.reason
    prefill = d.choose(PORTABLE, _request(512, 512, 512))
    assert prefill.rule == "model-ranked" and prefill.config.tile.workgroup == (64, 64, 32)
    # the same order as the model's own scores for the two plans at those shapes
    for shape, choice in ((Shape(1, 4096, 4096), decode), (Shape(512, 512, 512), prefill)):
        scores = [predict(d.rules[2].plan(c, shape), CPU.machine).score for c in cands]
        assert choice.candidate.index == scores.index(max(scores))


def test_measurements_at_the_nearest_shape_scale_the_model_and_can_reverse_its_order():
    """Both measured at 16x256x256: the skinny tile far below its prediction there, so at the unmeasured 8x256x256
    (where the model alone prefers it) the square tile's scaled estimate wins."""
    at, call = Shape(16, 256, 256), Shape(8, 256, 256)
    assert _model_dispatcher(_two()).choose(PORTABLE, _request(8, 256, 256)).candidate.index == 0
    cands = _two(gflops=(0.01, 50.0))
    d = _model_dispatcher(cands)
    rule = d.rules[2]
    est = {c.index: rule.model.predicted(rule.plan(c, call)) * c.gflops / rule.model.predicted(rule.plan(c, at))
           for c in cands}
    assert est[1] > est[0]                       # what the rule must follow
    choice = d.choose(PORTABLE, _request(8, 256, 256))
    assert choice.candidate.index == 1 and choice.rule == "model-ranked"
    assert f"scaled by its measured/predicted at {at.label}" in choice.reason
    assert d.choose(PORTABLE, _request(16, 256, 256)).rule == "fastest measured"     # measured there: measured


def test_the_calibrated_model_names_its_product_and_predicted_speed():
    d = _model_dispatcher(_two(), DeviceModel(Machine(64, 204 << 20), "max1550"))
    choice = d.choose(PORTABLE, _request(1, 4096, 4096))
    assert choice.rule == "model-ranked" and choice.config.tile.workgroup == (8, 64, 64)
    assert "calibrated for max1550" in choice.reason and "GFLOP/s predicted" in choice.reason


def test_every_rule_names_itself_in_its_reason(configs):
    cand, shape = Candidate(0, configs[0], True, 5.0), Shape(64, 64, 64)
    assert [r.name for r in RULES] == ["tuned winner", "fastest measured", "first variant legal"]
    model = ModelRanked(CPU, PORTABLE, [cand])
    model.offer([cand], shape)
    for rule in (*RULES, model):
        assert rule.name in rule.reason(cand, shape)


class LastFirst:
    """A rule of the caller's: the variants left, last first."""

    name = "last variant"

    def offer(self, left, shape):
        return list(reversed(left))

    def reason(self, candidate, shape):
        return f"the {self.name} for {shape.label}"


def test_a_rule_added_to_the_list_takes_part_and_gives_its_reason(configs):
    d = Dispatcher(candidates(config_from_text(CONFIG), {}), "t", rules=(TunedWinner(), LastFirst(), FirstLegal()))
    choice = d.choose(PORTABLE, _request(32, 32, 256))
    assert choice.candidate.index == 1 and choice.rule == "last variant"
    assert choice.reason == "the last variant for 32x32x256"
    assert d.choose(PORTABLE, _request(32, 32, 16)).candidate.index == 0      # its first offer is not legal there


def test_nothing_legal_lists_each_variant_and_a_layout_nobody_has_is_named(configs):
    d = Dispatcher([Candidate(1, configs[1], False, 9.0)], "t")
    with pytest.raises(NoKernelError, match=r"no loaded variant can run 32x32x16 \(bf16 x bf16\): variant 1: ") as err:
        d.choose(PORTABLE, _request(32, 32, 16))
    assert str(err.value).count("variant 1") == 1          # offered by one rule only, so named once
    with pytest.raises(LayoutError, match=r"take \(A, B\) layouts \(row, row\); the call gives A col-major"):
        d.choose(PORTABLE, Request(32, 32, 16, 1, "bf16", "bf16", ("col",), ("row",)))


@pytest.mark.device
def test_a_gemm_selects_one_call_kind_per_entry(sycl_device):
    plain = xegemm.load(CONFIGS / "default.yaml", device=sycl_device)
    assert type(plain.kinds["call"]) is PlainCall
    assert type(plain.kinds["grouped"]) is GroupedCall and plain.kinds["moe"] is plain.kinds["grouped"]
    assert type(xegemm.load(CONFIGS / "w4a16.yaml", device=sycl_device).kinds["call"]) is QuantizedCall
    traced = xegemm.load(CONFIGS / "default.yaml", device=sycl_device, epilogue=lambda acc: acc * 2.0)
    assert type(traced.kinds["call"]) is TracedCall
    assert all(set(k.entries) <= {"call", "grouped", "moe"} for k in KINDS)
