"""Mutation testing of the verifier: break a rendered kernel the way a code-generator bug would, run it on the
device, and require verification to catch it (``failed_verify``; never ``ok``, never timed).

Each mutant is a textual change of the portable kernel of a ragged problem (M, N, K not multiples of the
tile, batch 2), so edge tiles, guard bytes and the batch stride are all exercised.  :data:`MUTANTS` is the
list docs/reliability.md refers to.
"""

import re

import pytest

from xegemm import evaluate
from xegemm.config import config_from_text
from xegemm.evaluate import plan_variants
from xegemm.jobs.pipeline import run_variant

CONFIG = """\
problem: {m: 48, n: 40, k: 40, batch: 2}
tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}
profile: {warmup: 0, repeats: 1}
"""


def _sub(pattern: str, repl: str, count: int = 1):
    def mutate(source: str) -> str:
        mutated, n = re.subn(pattern, repl, source, count=count)
        assert n, f"mutant pattern {pattern!r} did not apply"
        return mutated
    return mutate


# name -> (what a generator bug it stands for, the mutation)
MUTANTS = {
    "bounds off by one (rows)": ("a bounds check that lets row == height through",
                                 _sub(r"\(row < height\)", "(row <= height)")),
    "bounds off by one (columns)": ("a bounds check one element too wide",
                                    _sub(r"\(long\)col \* bits / 8 < width_bytes", "(long)col * bits / 8 <= width_bytes")),
    "missing edge mask": ("an edge tile read without its column mask",
                          _sub(r" & \(\(long\)col \* bits / 8 < width_bytes\)", "")),
    "swapped lane index": ("two lanes' elements exchanged in a copy atom",
                           _sub(r"(v\[\(16 \* xe_i\)\] = xe_ldu_u16\([^;]*?x \+ )lane\)", r"\1(lane ^ 1))")),
    "wrong VNNI pack": ("the two k rows of a VNNI dword in the wrong halves",
                        _sub(r"v\[\(16 \* xe_i\)\] = \(uint\)(xe_ldu_u16\([^|]*?\)) \| \(uint\)(xe_ldu_u16\([^;]*?\)) << 16;",
                             r"v[(16 * xe_i)] = (uint)\2 | (uint)\1 << 16;")),
    "dropped k-step": ("the main loop stopping one k-tile early",
                       _sub(r"k0 < k_end; k0 \+=", "k0 < k_end - 32; k0 +=")),
    "dropped DPAS row": ("one accumulator row of a register block never updated in a DPAS k-chunk",
                         _sub(r" c0_0 \+= a \* bk0;", "", count=1)),
    "wrong fragment offset": ("an A fragment taken from the wrong register offset",
                              _sub(r"\(uint\)a0\[\(512 \+ 16 \* xe_i\)\]", "(uint)a0[(384 + 16 * xe_i)]")),
    "wrong k order": ("B staged at the wrong k of a DPAS chunk",
                      _sub(r"sb\[\(32 \* xe_i\) \+ lane\] = ", "sb[(16 + 32 * xe_i) + lane] = ")),
    "wrong batch stride": ("C of batch 1 written over batch 0",
                           _sub(r"C \+= get_group_id\(2\) \* batch_stride_c;", "")),
    "accumulator not cleared": ("an accumulator starting from garbage instead of 0",
                                _sub(r"float acc_0_0_0 = 0", "float acc_0_0_0 = 1")),
}



@pytest.fixture(scope="module")
def planned():
    (pv,) = plan_variants(config_from_text(CONFIG))
    return pv


def test_the_unmutated_kernel_verifies(session, planned):
    assert run_variant(planned, session).status == "ok"


@pytest.mark.parametrize("name", MUTANTS)
def test_verification_catches_the_mutant(name, session, planned, monkeypatch):
    _, mutate = MUTANTS[name]
    original = evaluate.render_variant
    monkeypatch.setattr(evaluate, "render_variant", lambda pv, lowering: mutate(original(pv, lowering)))
    result = run_variant(planned, session)
    assert result.status == "failed_verify", (name, result.status, result.reason)
    assert result.time_ms is None and result.gflops is None

