"""Fuzzing the config reader, the planner and the constraint evaluator with Hypothesis.

Random and mutated configs (types, shapes, tiles, atoms, sweeps, constraints, layouts, unknown keys, unicode,
huge numbers) must give either a valid config whose variants are each planned or rejected with a reason, or
a ConfigError whose every issue names the file, the line and (where there is one) the key.  Never another
exception.  A sample of valid plans is built and verified on the device.  Malicious constraint expressions
are refused without being evaluated.

Budget: ``XEGEMM_FUZZ_EXAMPLES`` examples per property (default 150, what CI runs in well under a minute);
set it to thousands (and ``XEGEMM_FUZZ_RANDOM=1`` for new seeds) for a long campaign.  Hostile seeds, and
every input that breaks something, are kept in ``tests/data/fuzz_corpus/`` and replayed by ``test_corpus``.
"""

import os
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xegemm.config import ConfigError, config_from_text
from xegemm.evaluate import plan_variants
from xegemm.jobs.pipeline import run_variant

EXAMPLES = int(os.environ.get("XEGEMM_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=os.environ.get("XEGEMM_FUZZ_RANDOM") is None)
CORPUS = Path(__file__).parent / "data" / "fuzz_corpus"
SOURCE = "fuzz.yaml"

BASE = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "default.yaml").read_text())
KEYS = {
    "problem": ["m", "n", "k", "batch"], "types": ["a", "b", "acc", "c"], "layout": ["a", "b", "c"],
    "tile": ["workgroup", "subgroups", "subgroup_size"], "atoms": ["mma", "a", "b", "c"],
    "pipeline": ["prefetch"], "target": ["grf"], "verify": ["seed"], "profile": ["warmup", "repeats", "min_time_ms"],
}
words = st.sampled_from(["bf16", "f16", "tf32", "f32", "f64", "s8", "u8", "s4", "u4", "s32", "row", "col", "fp8",
                         "XE_2D_U16x32x32_LD_N", "XE_2D_U16x32x32_LD_V", "XE_2D_U32x8x16_ST_N", "XE_2D_U8x99x7_LD_Q",
                         "XE_8x16x16_F32BF16BF16F32_TT", "XE_8x16x16_F32F32F32F32_TT", "XE_1D_U16x8x16_LD_SG8",
                         "__class__", "a.b.c", "<script>", "ü€😀", ""])
scalars = st.one_of(st.integers(-3, 300), st.integers(-2 ** 70, 2 ** 70), st.sampled_from([1, 8, 16, 32, 64, 256]),
                    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(), words,
                    st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.one_of(words, st.text(max_size=6)), inner,
                                                                       max_size=4)), max_leaves=12)
expressions = st.one_of(
    st.sampled_from(["tile.workgroup[0] % 8 == 0", "problem.m > 0 and tile.subgroups[1] < 8", "9 ** 9 ** 9 > 1",
                     "().__class__.__bases__[0]", "__import__('os').system('true')", "problem.__dict__",
                     "(lambda: 1)()", "[x for x in (1, 2)]", "open('/etc/passwd')", "problem.m if 1 else 2",
                     "tile.workgroup[99]", "1 / 0", "(" * 200 + "1" + ")" * 200, "not" + " not" * 300 + " 1"]),
    st.text(max_size=40))


@st.composite
def mutated_configs(draw):
    """The shipped demo config with a few keys replaced, removed or added."""
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["set", "drop", "unknown", "sweep", "constraint"]))
        section = draw(st.sampled_from(sorted(KEYS)))
        key = draw(st.sampled_from(KEYS[section]))
        if action == "set":
            doc.setdefault(section, {}) if isinstance(doc.get(section), dict) else doc.__setitem__(section, {})
            doc[section][key] = draw(values)
        elif action == "drop":
            doc.pop(section, None) if draw(st.booleans()) else (doc.get(section) or {}).pop(key, None)
        elif action == "unknown":
            doc[draw(st.one_of(words, st.text(min_size=1, max_size=8)))] = draw(values)
        elif action == "sweep":
            doc.setdefault("sweep", {})[f"{section}.{key}"] = draw(st.lists(values, max_size=3))
        else:
            doc["constraints"] = draw(st.lists(expressions, max_size=3))
    return doc


@st.composite
def random_configs(draw):
    """Configs built from the schema's keys with random values."""
    doc = {section: {key: draw(values) for key in draw(st.lists(st.sampled_from(fields), unique=True))}
           for section, fields in KEYS.items() if draw(st.booleans())}
    if draw(st.booleans()):
        doc["sweep"] = draw(st.dictionaries(st.sampled_from([f"{s}.{k}" for s in KEYS for k in KEYS[s]]),
                                            st.lists(values, max_size=3), max_size=3))
    return doc


def check_outcome(text: str) -> list:
    """Load a config text: a list of planned variants, or [] after a well-formed ConfigError; anything else
    (a traceback) fails the test."""
    try:
        config = config_from_text(text, SOURCE)
    except ConfigError as exc:
        assert exc.issues, "a ConfigError must say what is wrong"
        for issue in exc.issues:
            assert str(issue).startswith(f"{SOURCE}:"), str(issue)
            assert issue.line is None or issue.line >= 1, str(issue)
            assert issue.message.strip(), str(issue)
        return []
    planned = plan_variants(config)
    for pv in planned:
        assert (pv.plan is None) != (pv.reason is None), pv.name
        assert pv.plan is not None or pv.reason.strip()
    return planned


def _dump(doc) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


@FUZZ
@given(mutated_configs())
def test_mutated_configs_load_or_say_why(doc):
    check_outcome(_dump(doc))


@FUZZ
@given(random_configs())
def test_random_configs_load_or_say_why(doc):
    check_outcome(_dump(doc))


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_loads_or_says_why(text):
    check_outcome(text)


@FUZZ
@given(expressions)
def test_constraint_expressions_are_never_evaluated_as_python(expression):
    started = time.monotonic()
    check_outcome(_dump({"problem": {"m": 64, "n": 64, "k": 64}, "constraints": [expression]}))
    assert time.monotonic() - started < 5      # no huge power or deep recursion is ever computed


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.yaml")), ids=lambda p: p.stem)
def test_corpus(path):
    """Hostile seeds and inputs that once broke the reader or the planner, kept as regression tests."""
    check_outcome(path.read_text(encoding="utf-8"))



@settings(max_examples=max(3, EXAMPLES // 50), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(1, 70), st.integers(1, 70), st.integers(1, 70), st.integers(1, 2),
       st.sampled_from([("bf16", "f32"), ("f16", "f32"), ("s8", "s32"), ("u8", "s32")]),
       st.sampled_from([((32, 32, 32), (1, 2)), ((16, 32, 32), (2, 1)), ((32, 64, 16), (1, 4))]), st.integers(0, 2))
def test_sampled_valid_plans_build_and_verify(session, m, n, k, batch, types, tile, prefetch):
    (a, acc), (workgroup, subgroups) = types, tile
    text = _dump({"problem": {"m": m, "n": n, "k": k, "batch": batch},
                  "types": {"a": a, "b": a, "acc": acc, "c": acc},
                  "tile": {"workgroup": list(workgroup), "subgroups": list(subgroups)},
                  "pipeline": {"prefetch": prefetch}, "profile": {"warmup": 0, "repeats": 1}})
    for pv in check_outcome(text):
        if pv.plan is not None:
            result = run_variant(pv, session)
            assert result.status == "ok", (text, result.status, result.reason)
