"""The YAML config: defaults, precise errors (file:line, dotted key), sweeps and safe constraints."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
import yaml

from xegemm.config import (
    DTYPES, Config, ConfigError, Constraint, Problem, Variant, config_from_text, expand, load_config,
)
from xegemm.errors import XegemmError

DATA = Path(__file__).parent / "data"
BAD = DATA / "bad_configs"
SMALL_PROBLEM = "problem: {m: 64, n: 64, k: 64}\n"


def load_error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return caught.value


def text_error(text: str, source: str = "t.yaml") -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        config_from_text(text, source)
    return caught.value


# --------------------------------------------------------------------------------------------------------
# Malformed files: exactly one issue each, at the line of the offending key/value, naming the dotted key.

BAD_CONFIGS = [
    # file, line, dotted key (None: not about one key), text the message must contain
    ("yaml_syntax.yaml", 5, None, "invalid YAML: mapping values are not allowed here"),
    ("two_documents.yaml", 3, None, "invalid YAML: expected a single document in the stream"),
    ("top_level_list.yaml", 2, None, "expected a mapping of config keys at the top level"),
    ("missing_problem.yaml", 1, "problem", "missing required key"),
    ("bool_is_not_int.yaml", 4, "problem.n", "expected a positive integer, found true (a boolean)"),
    ("zero_batch.yaml", 6, "problem.batch", "expected a positive integer, found 0"),
    ("short_workgroup.yaml", 4, "tile.workgroup",
     "expected a list of 3 positive integers [BM, BN, BK], found [256, 256]"),
    ("unknown_dtype.yaml", 5, "types.acc",
     "unknown data type 'fp33'; expected one of f16, bf16, tf32, f32, f64, s8, u8, s4, u4, s32, e4m3, e5m2, e2m1, e8m0; "
     "did you mean 'f32'?"),
    ("unknown_layout.yaml", 2, "layout.b", "unknown layout 'transposed'; expected one of row, col"),
    ("misspelled_key.yaml", 4, "tyeps", "unknown key; did you mean 'types'?"),
    ("misspelled_nested_key.yaml", 4, "tile.workgroups", "unknown key; did you mean 'workgroup'?"),
    ("sweep_unknown_key.yaml", 4, "sweep.tile.wrokgroup", "names no config key; did you mean 'tile.workgroup'?"),
    ("sweep_empty_list.yaml", 3, "sweep.pipeline.prefetch",
     "expected a non-empty list of values for pipeline.prefetch, found []"),
    ("sweep_wrong_value.yaml", 7, "sweep.tile.workgroup[2]",
     "expected a list of 3 positive integers [BM, BN, BK], found [256, '256', 32]"),
    ("constraint_syntax.yaml", 4, "constraints[1]", "does not parse as an expression"),
    ("constraint_forbidden.yaml", 3, "constraints[0]", "forbidden construct: dunder name '__import__'"),
    ("bad_mma_atom.yaml", 3, "atoms.mma", "expected an MMA atom name XE_<M>x<N>x<K>_<D><A><B><C>_TT"),
    ("bad_copy_atom.yaml", 4, "atoms.b",
     "expected a block copy atom name XE_2D_[Packed_]<U4|U8|U16|U32|U64|TF32>x<rows>x<cols>_<LD|ST|PF>_<N|T|V> "
     "or XE_1D_<U8|U16|U32|U64>x<rows>x<cols>_<LD|ST|PF>_SG<S>"),
    ("duplicate_key.yaml", 3, "pipeline", "duplicate key (first set at line 2)"),
    ("python_tag.yaml", 2, "name", "unsupported YAML tag 'tag:yaml.org,2002:python/object/apply:os.system'"),
    ("subgroup_size.yaml", 3, "tile.subgroup_size", "expected a sub-group size: one of 8, 16, 32, found 12"),
]


@pytest.mark.parametrize(("file_name", "line", "key", "text"), BAD_CONFIGS, ids=[row[0] for row in BAD_CONFIGS])
def test_bad_config_names_file_line_and_key(file_name, line, key, text):
    path = BAD / file_name
    error = load_error(path)
    assert len(error.issues) == 1, str(error)
    issue = error.issues[0]
    assert (issue.source, issue.line, issue.key) == (str(path), line, key)
    assert text in issue.message
    prefix = f"{path}:{line}: {key}: " if key else f"{path}:{line}: "
    assert str(error).startswith(prefix)


def test_every_bad_config_file_is_covered():
    assert sorted(p.name for p in BAD.glob("*.yaml")) == sorted([row[0] for row in BAD_CONFIGS]
                                                                + ["multiple_errors.yaml"])


def test_config_error_is_a_xegemm_error():
    assert issubclass(ConfigError, XegemmError)


def test_all_errors_of_a_file_are_reported_one_per_line_in_line_order():
    path = BAD / "multiple_errors.yaml"
    error = load_error(path)
    assert [(issue.line, issue.key) for issue in error.issues] == [
        (2, "problem.m"), (3, "types.c"), (5, "tile.workgroup"), (6, "tile.subgroup_size"), (7, "pipelin"),
        (9, "sweep.pipeline.prefetch"), (10, "constraints[0]"),
    ]
    lines = str(error).splitlines()
    assert len(lines) == 7 and all(line.startswith(f"{path}:") for line in lines)
    assert "found '16' (a string)" in lines[3]
    assert "did you mean 'pipeline'?" in lines[4]
    assert "write [2] to sweep over one value" in lines[5]
    assert "forbidden construct: lambda" in lines[6]


def test_python_tag_is_never_constructed(tmp_path):
    marker = tmp_path / "pwned"
    error = text_error(SMALL_PROBLEM + f'name: !!python/object/apply:os.system ["touch {marker}"]\n')
    assert error.issues[0].line == 2
    assert not marker.exists()


def test_empty_file_and_unreadable_file(tmp_path):
    assert str(text_error("# only a comment\n")) == "t.yaml:1: the file is empty; expected a mapping with at " \
                                                     "least a 'problem' key"
    missing = tmp_path / "missing.yaml"
    error = load_error(missing)
    assert str(error).startswith(f"{missing}: cannot read the file")


def test_alias_bombs_and_recursive_aliases_are_refused_quickly():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]\n" for previous, name in zip("abcde", "bcdef"))
    start = time.perf_counter()
    assert "expands to more than" in str(text_error(bomb))
    assert time.perf_counter() - start < 2
    error = text_error(SMALL_PROBLEM + "tile: &t {workgroup: [1, 2, 3], subgroups: *t}\n")
    assert "recursive alias" in str(error)


def test_merge_keys_are_refused_with_a_reason():
    error = text_error(SMALL_PROBLEM + "types:\n  <<: {a: f16}\n  c: f32\n")
    assert [(issue.line, issue.key) for issue in error.issues] == [(3, "types.<<")]
    assert "merge keys (<<) are not supported" in str(error)


# --------------------------------------------------------------------------------------------------------
# Valid configs


def test_defaults_of_a_config_with_only_a_problem():
    config = config_from_text("problem: {m: 64, n: 32, k: 16}\n")
    assert config.name == "gemm" and config.description == "" and config.source == "<string>"
    assert config.problem == Problem(m=64, n=32, k=16, batch=1)
    assert (config.types.a, config.types.b, config.types.acc, config.types.c) == ("bf16", "bf16", "f32", "f32")
    assert (config.layout.a, config.layout.b, config.layout.c) == ("row", "row", "row")
    assert config.tile.workgroup == (256, 256, 32)
    assert config.tile.subgroups == (8, 4)
    assert config.tile.subgroup_size == 16
    assert (config.atoms.mma, config.atoms.a, config.atoms.b, config.atoms.c) == (None, None, None, None)
    assert config.pipeline.prefetch == 2
    assert config.target.grf == 256
    assert config.verify.seed == 0
    assert (config.profile.warmup, config.profile.repeats, config.profile.min_time_ms) == (10, 100, 0.0)
    assert config.sweep == {} and config.constraints == ()


def test_name_defaults_to_the_file_name(tmp_path):
    path = tmp_path / "my config.yaml"
    path.write_text(SMALL_PROBLEM)
    assert load_config(path).name == "my_config"


def test_full_config():
    config = load_config(DATA / "configs" / "full.yaml")
    assert config.name == "bf16_rrr_demo"
    assert config.description.startswith("the sycl-tla 00_bmg_gemm configuration")
    assert config.problem == Problem(1024, 1024, 1024, 2)
    assert config.atoms.mma == "XE_8x16x16_F32BF16BF16F32_TT"
    assert (config.atoms.a, config.atoms.b, config.atoms.c) == (
        "XE_2D_U16x32x32_LD_N", "XE_2D_U16x32x32_LD_V", "XE_2D_U32x8x16_ST_N")
    assert config.verify.seed == 7
    assert (config.profile.warmup, config.profile.repeats, config.profile.min_time_ms) == (5, 50, 20.0)
    assert config.sweep == {"tile.workgroup": ((128, 128, 32), (256, 256, 32)),
                            "tile.subgroups": ((4, 4), (8, 4)), "pipeline.prefetch": (1, 2, 3)}
    assert [c.text for c in config.constraints] == ["tile.workgroup[0] % (tile.subgroups[0] * 32) == 0"]
    variants = expand(config)
    assert len(variants) == 12
    rejected = [v for v in variants if v.rejected]
    assert [v.overrides["tile.workgroup"] for v in rejected] == [(128, 128, 32)] * 3
    assert [v.overrides["tile.subgroups"] for v in rejected] == [(8, 4)] * 3
    assert rejected[0].rejected == ('constraint "tile.workgroup[0] % (tile.subgroups[0] * 32) == 0" is false: '
                                    "tile.workgroup[0]=128, tile.subgroups[0]=8")


def test_to_dict_is_json_and_loads_back_to_the_same_config():
    config = load_config(DATA / "configs" / "full.yaml")
    data = config.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["tile"] == {"workgroup": [256, 256, 32], "subgroups": [8, 4], "subgroup_size": 16, "split_k": 1,
                            "stream_k": 0, "swizzle": 1, "register_block": [0, 0], "persistent": 0,
                            "walk": "static"}
    assert config_from_text(yaml.safe_dump(data, sort_keys=False), config.source) == config
    assert hash(config) == hash(config_from_text(yaml.safe_dump(data), config.source))


def test_dtype_and_layout_aliases_map_to_canonical_names():
    config = config_from_text(SMALL_PROBLEM + "types: {a: int8, b: UINT8, acc: i32, c: float}\n"
                                              "layout: {a: column_major, b: Row, c: col}\n")
    assert (config.types.a, config.types.b, config.types.acc, config.types.c) == ("s8", "u8", "s32", "f32")
    assert (config.layout.a, config.layout.b, config.layout.c) == ("col", "row", "col")
    assert set(DTYPES) == {"f16", "bf16", "tf32", "f32", "f64", "s8", "u8", "s4", "u4", "s32", "e4m3", "e5m2", "e2m1", "e8m0"}


def test_atoms_accept_null_auto_and_packed_or_prefetch_names():
    config = config_from_text(SMALL_PROBLEM + "atoms: {mma: auto, a: XE_2D_Packed_U16x32x32_LD_N, "
                                              "b: XE_2D_U8x32x32_PF_N, c: null}\n")
    assert (config.atoms.mma, config.atoms.a, config.atoms.b, config.atoms.c) == (
        None, "XE_2D_Packed_U16x32x32_LD_N", "XE_2D_U8x32x32_PF_N", None)
    # a well-spelled but illegal name is an error at its line naming the hardware rule, not a rejected variant
    issue = text_error(SMALL_PROBLEM + "atoms:\n  b: XE_2D_U8x32x32_PF_V\n").issues[0]
    assert (issue.line, issue.key) == (3, "atoms.b") and "prefetches take row-major blocks only" in issue.message
    issue = text_error(SMALL_PROBLEM + "atoms: {mma: XE_8x16x16_F32F32F32F32_TT}\n").issues[0]
    assert issue.key == "atoms.mma" and "accumulator types only" in issue.message
    assert config_from_text(SMALL_PROBLEM + "atoms: {mma: XE_8x16x32_S32U8U8S32_TT}\n").atoms.mma == \
        "XE_8x16x32_S32U8U8S32_TT"
    assert text_error(SMALL_PROBLEM + "atoms: {mma: XE_8x16x16_F32BF16BF16_TT}\n").issues[0].key == "atoms.mma"


def test_with_overrides_checks_values_like_the_file():
    config = config_from_text(SMALL_PROBLEM)
    changed = config.with_overrides({"tile.workgroup": [128, 128, 32], "types.a": "half"})
    assert changed.tile.workgroup == (128, 128, 32) and changed.types.a == "f16"
    assert config.tile.workgroup == (256, 256, 32)
    with pytest.raises(ConfigError) as caught:
        config.with_overrides({"tile.workgroup": [128, 128], "tile.wrokgroup": [1, 1, 1]})
    assert [issue.key for issue in caught.value.issues] == ["tile.workgroup", "tile.wrokgroup"]
    assert "did you mean 'tile.workgroup'?" in str(caught.value)


# --------------------------------------------------------------------------------------------------------
# Sweeps


def test_expand_is_the_cartesian_product_in_file_order_last_key_fastest():
    config = config_from_text(SMALL_PROBLEM + "sweep:\n  types.a: [f16, bf16]\n  tile.subgroups: [[4, 4], [8, 4]]\n"
                                              "  pipeline.prefetch: [1, 2, 3]\n")
    variants = expand(config)
    expected = [{"types.a": a, "tile.subgroups": s, "pipeline.prefetch": p}
                for a, s, p in itertools.product(["f16", "bf16"], [(4, 4), (8, 4)], [1, 2, 3])]
    assert [v.overrides for v in variants] == expected
    for variant, overrides in zip(variants, expected):
        assert isinstance(variant, Variant) and variant.accepted
        assert variant.config.sweep == {}
        assert variant.config.types.a == overrides["types.a"]
        assert variant.config.tile.subgroups == overrides["tile.subgroups"]
        assert variant.config.pipeline.prefetch == overrides["pipeline.prefetch"]


def test_a_config_without_sweep_is_one_variant():
    config = config_from_text(SMALL_PROBLEM)
    assert [(v.config, v.overrides, v.rejected) for v in expand(config)] == [(config, {}, None)]


def test_duplicate_variants_collapse_to_the_first():
    config = config_from_text(SMALL_PROBLEM + "sweep:\n  problem: [{m: 64}, {m: 64, n: 64}, {m: 128}]\n"
                                              "  pipeline.prefetch: [2, 3, 2]\n")
    assert [v.overrides for v in expand(config)] == [
        {"problem.m": 64, "pipeline.prefetch": 2}, {"problem.m": 64, "pipeline.prefetch": 3},
        {"problem.m": 128, "pipeline.prefetch": 2}, {"problem.m": 128, "pipeline.prefetch": 3},
    ]


def test_a_section_sweep_sets_its_keys_together():
    config = config_from_text(SMALL_PROBLEM + "sweep:\n  tile:\n"
                                              "    - {workgroup: [256, 256, 32], subgroups: [8, 4]}\n"
                                              "    - {workgroup: [128, 512, 32], subgroups: [4, 8]}\n")
    assert [(v.config.tile.workgroup, v.config.tile.subgroups) for v in expand(config)] == [
        ((256, 256, 32), (8, 4)), ((128, 512, 32), (4, 8))]
    assert config.to_dict()["sweep"]["tile"][1] == {"workgroup": [128, 512, 32], "subgroups": [4, 8]}


def test_swept_values_are_checked_like_the_key_they_replace():
    error = text_error(SMALL_PROBLEM + "sweep:\n  pipeline.prefetch: [1, true]\n"
                                       "  tile:\n    - {workgroup: [256, 256, 32]}\n    - {subgroup: [8, 4]}\n")
    assert [(issue.line, issue.key, issue.message) for issue in error.issues] == [
        (3, "sweep.pipeline.prefetch[1]", "expected a non-negative integer, found true (a boolean)"),
        (6, "sweep.tile[1].subgroup", "unknown key; did you mean 'subgroups'?"),
    ]


def test_sweep_refuses_name_overlapping_keys_and_single_values():
    error = text_error(SMALL_PROBLEM + "sweep:\n  name: [a, b]\n  tile: [{workgroup: [128, 128, 32]}]\n"
                                       "  tile.workgroup: [[256, 256, 32]]\n  tile.subgroups: [8, 4]\n")
    assert [(issue.line, issue.key) for issue in error.issues] == [
        (3, "sweep.name"), (5, "sweep.tile.workgroup"), (6, "sweep.tile.subgroups")]
    messages = [issue.message for issue in error.issues]
    assert "cannot be swept" in messages[0]
    assert "is also swept by sweep key 'tile'" in messages[1]
    assert "found the single value [8, 4]; write [[8, 4]] to sweep over one value" in messages[2]


# --------------------------------------------------------------------------------------------------------
# Constraints


def holds(expression: str, config: Config | None = None) -> bool:
    config = config or config_from_text("problem: {m: 1024, n: 1024, k: 1024}\n")
    return Constraint(expression).check(config.flat_values()) is None


@pytest.mark.parametrize(("expression", "expected"), [
    ("problem.k % tile.workgroup[2] == 0", True),
    ("types.a == 'bf16' and layout.b in ('row', 'col')", True),
    ("max(tile.subgroups) * min(tile.subgroups) == 32", True),
    ("1 < tile.subgroups[1] < tile.subgroups[0]", True),
    ("0 < tile.subgroups[0] < tile.subgroups[1]", False),
    ("all((problem.m > 0, problem.n > 0)) and any([problem.m > 4096, tile.subgroup_size == 16])", True),
    ("len(tile.workgroup) == 3 and abs(-problem.m) == 1024", True),
    ("(tile.workgroup[0] if pipeline.prefetch > 1 else 0) == 256", True),
    ("not atoms.mma and atoms.a == None", True),
    ("problem.m / 3 > 341.3 and 2 ** 10 == problem.n and tile.workgroup[-1] == 32", True),
    ("problem.m < 100 or problem.n < 100", False),
    ("pipeline.prefetch == 2 or problem.m // 0 > 1", True),  # `or` short-circuits: no division
])
def test_constraint_evaluation(expression, expected):
    assert holds(expression) is expected


def test_a_failing_constraint_names_itself_and_the_values_it_read():
    config = config_from_text("problem: {m: 1024, n: 1024, k: 1024}\ntile: {workgroup: [128, 128, 32]}\n"
                              'constraints:\n  - "problem.k % tile.workgroup[2] == 0"\n'
                              '  - "tile.workgroup[0] % (tile.subgroups[0] * 32) == 0"\n')
    [variant] = expand(config)
    assert variant.rejected == ('constraint "tile.workgroup[0] % (tile.subgroups[0] * 32) == 0" is false: '
                                "tile.workgroup[0]=128, tile.subgroups[0]=8")
    assert not variant.accepted


def test_a_constraint_that_cannot_be_evaluated_rejects_the_variant_with_the_error():
    config = config_from_text(SMALL_PROBLEM + "sweep: {pipeline.prefetch: [1, 0]}\n"
                                              'constraints: ["problem.m // pipeline.prefetch > 1"]\n')
    assert [v.rejected for v in expand(config)] == [
        None, 'constraint "problem.m // pipeline.prefetch > 1" could not be evaluated (division by zero): '
              "problem.m=64, pipeline.prefetch=0"]


@pytest.mark.parametrize(("expression", "error"), [
    ("len(types.a * 1000000000) > 0", "'*' needs numbers, got 'bf16' and 1000000000"),
    ("10 ** 10 ** 10 > 0", "10 ** 10000000000 is too large"),
    ("tile.subgroups[2] == 1", "index 2 is out of range for [8, 4]"),
])
def test_runaway_or_ill_typed_expressions_are_stopped_not_run(expression, error):
    start = time.perf_counter()
    reason = Constraint(expression).check(config_from_text(SMALL_PROBLEM).flat_values())
    assert f"could not be evaluated ({error})" in reason
    assert time.perf_counter() - start < 1


@pytest.mark.parametrize(("expression", "named"), [
    ("__import__('os').system('true') == 0", "dunder name '__import__'"),
    ("().__class__", "attribute access '.__class__'"),
    ("tile.workgroup.__class__", "attribute access '.__class__'"),
    ("(lambda: 1)() == 1", "lambda"),
    ("[x for x in tile.workgroup]", "list comprehension"),
    ("all(x > 0 for x in tile.workgroup)", "generator expression"),
    ("open('/etc/passwd')", "call to 'open'"),
    ("max(tile.workgroup, key=abs) > 0", "keyword argument 'key='"),
    ("'abc'.upper() == 'ABC'", "attribute access '.upper' on a value that is not a config key"),
    ("tile.workgroup(0) == 1", "call of 'tile.workgroup'"),
    ("tile.workgroup[0] & 1 == 0", "operator '&'"),
    ("tile.workgroup[:2] == (256, 256)", "slice"),
    ("{'a': 1}", "dict display"),
    ("f'{problem.m}' == '64'", "f-string"),
    ("(n := 3) == 3", "assignment expression (:=)"),
])
def test_forbidden_constructs_are_rejected_at_load_naming_the_construct(expression, named):
    error = text_error(SMALL_PROBLEM + "constraints:\n  - problem.m > 0\n  - " + json.dumps(expression) + "\n")
    [issue] = error.issues
    assert (issue.line, issue.key) == (4, "constraints[1]")
    assert f"forbidden construct: {named}" in issue.message


@pytest.mark.parametrize(("expression", "message"), [
    ("tile.wrkgroup[0] > 1", "unknown name 'tile.wrkgroup'; did you mean 'tile.workgroup'?"),
    ("tile > 1", "'tile' is a section, not a value"),
    ("max > 1", "function 'max' used as a value"),
])
def test_names_in_constraints_must_be_config_keys(expression, message):
    error = text_error(SMALL_PROBLEM + "constraints: [" + json.dumps(expression) + "]\n")
    assert (error.issues[0].line, error.issues[0].key) == (2, "constraints[0]")
    assert message in error.issues[0].message


def test_constraint_objects_refuse_forbidden_text_too():
    with pytest.raises(ConfigError, match="forbidden construct: lambda"):
        Constraint("lambda: 1")


def test_one_dimensional_block_atoms_are_accepted_by_name():
    cfg = config_from_text("problem: {m: 64, n: 64, k: 64}\ntile: {subgroup_size: 8}\n"
                           "atoms: {a: XE_1D_U16x8x16_LD_SG8, c: XE_1D_U32x8x8_ST_SG8}\n")
    assert cfg.atoms.a == "XE_1D_U16x8x16_LD_SG8" and cfg.atoms.c == "XE_1D_U32x8x8_ST_SG8"


def test_verification_cannot_be_switched_off_or_loosened():
    with pytest.raises(ConfigError, match="verify.enabled: unknown key"):
        config_from_text("problem: {m: 8, n: 8, k: 8}\nverify: {enabled: false}\n")
    with pytest.raises(ConfigError, match="verify.rtol: unknown key"):
        config_from_text("problem: {m: 8, n: 8, k: 8}\nverify: {rtol: 0.5}\n")
