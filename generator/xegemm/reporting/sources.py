"""Reading results for a report: one small loader per kind of output directory.

A loader turns what a job wrote into a :class:`Source`: what ran where (``meta``), one row per variant
(``variants``: each row of results.json / trials.json / build.json read back as an
:class:`xegemm.library.record.Evaluation`, with its ``source``), the references measured
in the same run, and ``missing``: every part that could not be read, said in words, so a report of a broken
or partial directory still renders and tells the reader what is absent.

Kinds: ``run`` (``xegemm run``: results.json, or its journal results.jsonl when results.json is missing or
damaged), ``tune`` (``xegemm tune``: trials.json, every trial of the study as a result row with its trial
number, finish time and strategy) and ``build`` (``xegemm build``: build.json with ISA statistics).  Another
kind is one more loader in :data:`LOADERS` (see :func:`load_source`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from xegemm.errors import XegemmError
from xegemm.files import RESULTS_BYTES, FileRefused, read_bytes
from xegemm.library.parts import Reference, RunInfo
from xegemm.library.record import DeviceRecord, Evaluation, RowFieldError


@dataclass
class Source:
    """One job's results as a report reads them."""

    kind: str                     # "run" | "tune" | "build"
    path: Path                    # the directory the job wrote
    label: str                    # how the report names it (the directory's name)
    meta: dict = field(default_factory=dict)
    variants: list[Evaluation] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)   # each with its problem {m, n, k, batch}
    missing: list[str] = field(default_factory=list)

    @property
    def info(self) -> RunInfo:
        """What ``meta`` says about the run, as a record."""
        return RunInfo.from_dict(self.meta)

    @property
    def device(self) -> DeviceRecord | None:
        """The device the results were measured on (None: not recorded, e.g. an ahead-of-time build)."""
        return DeviceRecord.from_dict(self.info.device)


def _read_json(path: Path, missing: list[str]):
    """The JSON in ``path``, or None with the reason appended to ``missing``."""
    if not path.exists():
        missing.append(f"{path.name} is missing")
        return None
    try:
        return json.loads(read_bytes(path, RESULTS_BYTES, "results file").decode("utf-8", errors="replace"))
    except (ValueError, FileRefused) as exc:
        missing.append(f"{path.name} is damaged and was not read ({exc})")
        return None


def _checked_variants(rows, where: str, src: Source) -> list[Evaluation]:
    """The well-formed variant rows of ``rows`` (a dict with name and a known status) as results, each tagged
    with its source's label and kind; the others are named in the source's ``missing``."""
    missing = src.missing
    good = []
    for number, row in enumerate(rows if isinstance(rows, list) else [], 1):
        try:
            result = Evaluation.from_row(row)
        except RowFieldError as exc:
            name = row.get("name") if isinstance(row.get("name"), str) else "?"
            missing.append(f"{src.path / where}: variant {number} ({name[:80]}): {exc}; skipped")
            continue
        except ValueError:
            missing.append(f"{where}: variant {number} is not a result row (no name or an unknown status); skipped")
            continue
        result.source, result.source_kind = src.label, src.kind
        good.append(result)
    if not isinstance(rows, list):
        missing.append(f"{where}: no list of variants")
    return good


def _journal_rows(journal: Path, src: Source) -> list[Evaluation]:
    """Variant rows from a run's results.jsonl in journal order (the last record of a name and problem wins)."""
    missing = src.missing
    if not journal.exists():
        missing.append(f"{journal.name} is missing too: no variant can be shown")
        return []
    rows: dict[tuple, dict] = {}
    try:
        text = read_bytes(journal, RESULTS_BYTES, "results journal").decode("utf-8", errors="replace")
    except FileRefused as exc:
        missing.append(f"{journal.name} was not read ({exc})")
        return []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            entry = json.loads(line)
            result = {**entry["result"], **{k: entry[k] for k in ("finished_at", "load1") if k in entry}}
        except (ValueError, KeyError, TypeError) as exc:
            missing.append(f"{journal.name}:{number}: not a result record ({exc}); skipped")
            continue
        for row in _checked_variants([result], f"{journal.name}:{number}", src):
            rows.pop((row.name, json.dumps(row.params, sort_keys=True)), None)
            rows[(row.name, json.dumps(row.params, sort_keys=True))] = row
    ordered = list(rows.values())
    for trial, row in enumerate(ordered, 1):
        row.trial = trial
    return ordered


def is_run_dir(path: Path) -> bool:
    return (path / "results.json").exists() or (path / "results.jsonl").exists()


def load_run(path: Path) -> Source:
    """An ``xegemm run`` directory: results.json, else (missing or damaged) the journal results.jsonl."""
    src, read = _load_results(path, "run", "results.json")
    if not read:
        src.variants = _journal_rows(path / "results.jsonl", src)
        src.missing.append("device, problem and references are unknown: results.json could not be read, the rows "
                           "come from the journal results.jsonl")
    return src


def is_tune_dir(path: Path) -> bool:
    return (path / "trials.json").exists()


def load_tune(path: Path) -> Source:
    """An ``xegemm tune`` directory: trials.json (written by the export from the study database)."""
    return _load_results(path, "tune", "trials.json")[0]


def _load_results(path: Path, kind: str, name: str) -> tuple[Source, bool]:
    """A results document (``run``'s results.json, ``tune``'s trials.json): meta, variant rows, references;
    and whether it could be read."""
    src = Source(kind, path, path.resolve().name)
    data = _read_json(path / name, src.missing)
    if isinstance(data, dict):
        src.meta = {k: v for k, v in data.items() if k not in ("variants", "references", "reference")}
        # a damaged or interrupted document, or one older than references, may lack either list
        src.variants = _checked_variants(data.get("variants"), name, src)
        refs = data.get("references")
        src.references = [ref for r in refs if (ref := Reference.from_dict(r)) and isinstance(ref.problem, dict)] \
            if isinstance(refs, list) else []
        if not src.references:
            src.missing.append(f"no reference was measured (an interrupted {kind}, or {name} predates them)")
        return src, True
    if data is not None:
        src.missing.append(f"{name} is not a results object")
    return src, False


def is_build_dir(path: Path) -> bool:
    return (path / "build.json").exists()


def load_build(path: Path) -> Source:
    """An ``xegemm build`` directory: build.json, with each variant's ISA statistics and prediction."""
    src = Source("build", path, path.resolve().name)
    data = _read_json(path / "build.json", src.missing)
    if isinstance(data, dict):
        src.meta = {k: v for k, v in data.items() if k != "variants"}
        src.variants = _checked_variants(data.get("variants"), "build.json", src)   # absent in a damaged one
    elif data is not None:
        src.missing.append("build.json is not a build object")
    return src


# (kind, does this directory hold that kind's output?, loader); the first that matches reads the directory
LOADERS = (("run", is_run_dir, load_run), ("tune", is_tune_dir, load_tune), ("build", is_build_dir, load_build))


def load_source(path: Path | str) -> Source:
    """Read one output directory (or a results file inside it) with the loader of its kind."""
    path = Path(path)
    if path.is_file():
        path = path.parent
    if not path.is_dir():
        raise XegemmError(f"{path}: no such results directory")
    for _, matches, loader in LOADERS:
        if matches(path):
            return loader(path)
    raise XegemmError(f"{path}: holds no results xegemm can read (looked for results.json or results.jsonl of "
                      "`xegemm run`, trials.json of `xegemm tune`, build.json of `xegemm build`)")


def load_sources(paths) -> list[Source]:
    """:func:`load_source` for each path; sources whose directories share a name are labelled by their path."""
    sources = [load_source(p) for p in paths]
    names = [s.label for s in sources]
    for src in sources:
        if names.count(src.label) > 1:
            src.label = str(src.path)
            for v in src.variants:
                v.source = src.label
    return sources
