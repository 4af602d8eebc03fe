"""The GEMM shapes a tuning run covers: ``--shapes MxNxK[xB],...`` or a file of them.

A file is either YAML (a list of ``{m, n, k, batch}`` mappings or ``"MxNxK[xB]"`` strings) or the
``.in`` files GEMM benchmarks already use: one ``M N K`` or ``M N K L`` (L = batch) per line, ``#`` comments
and blank lines skipped.  Every mistake names the file and line.

A grouped problem (xegemm.grouped: one launch, one GEMM per group) is its groups joined by ``+`` in a label,
``100x256x128+0x256x128`` (M may be 0), or ``{groups: [{m, n, k}, "MxNxK", ...]}`` in a YAML list; it is a
:class:`~xegemm.grouped.problem.GroupedProblem` among the shapes.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from xegemm.config import Config, Problem, SearchSpace
from xegemm.config.schema import is_problem_axis
from xegemm.errors import XegemmError
from xegemm.files import CONFIG_BYTES, load_yaml_file, read_text
from xegemm.grouped.problem import GROUP_SEPARATOR, GroupedProblem, config_overrides

MAX_SHAPES = 1000
_LABEL = re.compile(r"^\s*(\d+)x(\d+)x(\d+)(?:x(\d+))?\s*$")


Shape = Problem     # a shape the tuner covers is the config's Problem (its label, config keys and dict)


def _shape(values: list[int], where: str) -> Shape:
    if len(values) not in (3, 4) or any(v <= 0 for v in values):
        raise XegemmError(f"{where}: a shape is M N K or M N K BATCH of positive integers, found {values}")
    return Shape(*values)


def parse_label(text: str, where: str = "--shapes") -> Shape:
    """``"1024x512x256"`` or ``"64x64x64x4"`` (the last number is the batch)."""
    match = _LABEL.match(text)
    if not match:
        raise XegemmError(f"{where}: '{text}' is not a shape; write MxNxK or MxNxKxBATCH, e.g. 1024x1024x1024")
    return _shape([int(g) for g in match.groups() if g is not None], where)


def parse_problem(text: str, where: str = "--shapes") -> Shape | GroupedProblem:
    """A label: one shape, or a grouped problem's groups joined by ``+``."""
    if GROUP_SEPARATOR in text:
        try:
            return GroupedProblem.parse(text)
        except XegemmError as exc:
            raise XegemmError(f"{where}: {exc}") from None
    return parse_label(text, where)


def _grouped(item: dict, where: str) -> GroupedProblem:
    if set(item) != {"groups"} or not isinstance(item["groups"], list):
        raise XegemmError(f"{where}: a grouped problem is {{groups: [{{m, n, k}} or 'MxNxK', ...]}}, found {repr(item)[:80]}")
    try:
        return GroupedProblem.of(item["groups"])
    except XegemmError as exc:
        raise XegemmError(f"{where}: {exc}") from None


def _from_yaml(path: Path) -> list[Shape | GroupedProblem]:
    data = load_yaml_file(path, CONFIG_BYTES, "shapes file")
    if isinstance(data, dict) and "shapes" in data:
        data = data["shapes"]
    if not isinstance(data, list) or not data:
        raise XegemmError(f"{path}: expected a list of shapes ({{m, n, k, batch}} or 'MxNxK'), found "
                          f"{repr(data)[:80]}")
    shapes = []
    for i, item in enumerate(data, 1):
        where = f"{path}: shape {i}"
        if isinstance(item, str):
            shapes.append(parse_problem(item, where))
        elif isinstance(item, dict) and "groups" in item:
            shapes.append(_grouped(item, where))
        elif isinstance(item, dict) and set(item) <= {"m", "n", "k", "batch"} and {"m", "n", "k"} <= set(item):
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in item.values()):
                raise XegemmError(f"{where}: m, n, k and batch must be integers, found {repr(item)[:80]}")
            shapes.append(_shape([item["m"], item["n"], item["k"], item.get("batch", 1)], where))
        else:
            raise XegemmError(f"{where}: expected {{m, n, k[, batch]}} or 'MxNxK', found {repr(item)[:80]}")
    return shapes


def _from_lines(path: Path) -> list[Shape]:
    shapes = []
    for number, line in enumerate(read_text(path, CONFIG_BYTES, "shapes file").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            values = [int(word) for word in text.split()]
        except ValueError:
            raise XegemmError(f"{path}:{number}: expected 'M N K' or 'M N K L' (integers), found '{text}'") from None
        shapes.append(_shape(values, f"{path}:{number}"))
    if not shapes:
        raise XegemmError(f"{path}: no shapes (one 'M N K' or 'M N K L' per line)")
    return shapes


def parse_shapes(spec: str) -> list[Shape | GroupedProblem]:
    """Shapes from ``--shapes``: a comma list of labels (a grouped problem's groups joined by ``+``), a YAML
    file, or a ``.in`` file; duplicates dropped."""
    path = Path(spec)
    if path.is_file():
        shapes = _from_yaml(path) if path.suffix in (".yaml", ".yml") else _from_lines(path)
    else:
        shapes = [parse_problem(part.strip()) for part in spec.split(",") if part.strip()]
        if not shapes:
            raise XegemmError(f"--shapes: '{spec}' names no shape and is not a file")
    shapes = list(dict.fromkeys(shapes))
    if len(shapes) > MAX_SHAPES:
        raise XegemmError(f"--shapes: {len(shapes)} shapes; at most {MAX_SHAPES} (each is a study of its own)")
    return shapes


def grouped_shape(problem: GroupedProblem) -> Shape:
    """A grouped problem (not an MoE layer: ``+`` joins groups) as the tuner's Shape: its groups, and M, N, K
    the largest group's, as a config's reader sets them."""
    keys = config_overrides(problem)
    return Shape(keys["problem.m"], keys["problem.n"], keys["problem.k"], 1, keys["problem.groups"])


def config_shapes(config: Config) -> list[Shape]:
    """The shapes a config stands for when none are given: its problem, or every problem its sweep names."""
    problems = SearchSpace(replace(config, sweep={k: v for k, v in config.sweep.items() if is_problem_axis(k)}))
    shapes = []
    for point in problems:
        p = problems.base.with_overrides(problems.overrides(point)).problem
        shapes.append(Shape(p.m, p.n, p.k, p.batch))
    return list(dict.fromkeys(shapes))
