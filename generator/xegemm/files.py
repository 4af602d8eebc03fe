"""File safety, in one place: bounded reads, guarded YAML, atomic writes, and setting a file aside.

Every file xegemm reads goes through :func:`read_bytes` / :func:`read_text`: it must be a regular file (a FIFO
would block, a device like ``/dev/zero`` never ends) no larger than a cap named by the caller.  Every YAML
document goes through :func:`load_yaml`: plain values, lists and mappings only, no object tags, no merge keys,
and a cap on the values an alias-laden document expands to (an "alias bomb" is a few hundred bytes that expand
to billions of values).  Every file xegemm writes goes through :func:`write_text_atomic` /
:func:`write_json_atomic` (a temporary file fsync'ed and renamed: a reader sees the old or the new content,
never a torn one).  An existing file that must not be replaced is moved aside by :func:`set_aside`
(``results.json`` -> ``results.json.1``, ``.2`` ...).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from xegemm.errors import XegemmError

MiB = 1 << 20
RESULTS_BYTES = 256 * MiB    # a results.json, trials.json or journal of a large sweep
CONFIG_BYTES = 1 * MiB        # a config or a shapes file: the shipped ones are under 10 KiB
YAML_VALUES = 100_000         # values one YAML document may expand to (aliases counted each time they are used)
_PLAIN_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null")}


class FileRefused(XegemmError):
    """A file xegemm will not read: not a regular file, too large, not text."""


def _regular(path: Path, what: str) -> os.stat_result:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise FileRefused(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise FileRefused(f"{path}: the {what} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a device" if
                stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "not a regular file")
        raise FileRefused(f"{path}: the {what} is {kind}; give a regular file")
    return st


def read_bytes(path: Path | str, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or :class:`FileRefused` naming the path."""
    path = Path(path)
    st = _regular(path, what)
    if st.st_size > limit:
        raise FileRefused(f"{path}: the {what} is {st.st_size} bytes; at most {limit} are read")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)        # the file may have grown since stat
    except OSError as exc:
        raise FileRefused(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FileRefused(f"{path}: the {what} is more than {limit} bytes; at most {limit} are read")
    return data


def read_range(path: Path | str, offset: int, size: int, limit: int, what: str = "file") -> bytes:
    """``size`` bytes at ``offset`` of a regular file (``size`` at most ``limit``; the range inside the file), or
    :class:`FileRefused` naming the path: a part of a large file, such as one tensor of a checkpoint."""
    path = Path(path)
    st = _regular(path, what)
    if size > limit or offset < 0 or size < 0 or offset + size > st.st_size:
        raise FileRefused(f"{path}: bytes {offset}..{offset + size} of the {what} are not inside its {st.st_size} "
                          f"bytes (or more than the {limit} read at once)")
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(size)
    except OSError as exc:
        raise FileRefused(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) != size:
        raise FileRefused(f"{path}: the {what} ended at byte {offset + len(data)}, before {offset + size}")
    return data


def read_text(path: Path | str, limit: int, what: str = "file") -> str:
    """A regular UTF-8 text file of at most ``limit`` bytes (see :func:`read_bytes`)."""
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(f"{path}: the {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


class _Values:
    """A composed YAML node graph -> plain values, counting every value built (aliases included)."""

    def __init__(self, source: str, limit: int):
        self.source, self.limit, self.built = source, limit, 0
        self.constructor = yaml.constructor.SafeConstructor()

    def fail(self, node: yaml.Node, message: str) -> XegemmError:
        return XegemmError(f"{self.source}:{node.start_mark.line + 1}: {message}")

    def build(self, node: yaml.Node, active: frozenset[int] = frozenset()) -> Any:
        self.built += 1
        if self.built > self.limit:
            raise self.fail(node, f"the document expands to more than {self.limit} values (aliases count each "
                                  "time they are used)")
        if id(node) in active:
            raise self.fail(node, "recursive alias: a value that contains itself")
        active = active | {id(node)}
        if isinstance(node, yaml.MappingNode) and node.tag == "tag:yaml.org,2002:map":
            values = {}
            for key, value in node.value:
                if key.tag == "tag:yaml.org,2002:merge":
                    raise self.fail(key, "merge keys (<<) are not supported; write the keys out")
                if not isinstance(key, yaml.ScalarNode):
                    raise self.fail(key, "keys must be plain words, found a list or mapping as a key")
                values[self.build(key, active)] = self.build(value, active)
            return values
        if isinstance(node, yaml.SequenceNode) and node.tag == "tag:yaml.org,2002:seq":
            return [self.build(item, active) for item in node.value]
        if isinstance(node, yaml.ScalarNode) and node.tag in _PLAIN_TAGS:
            try:
                return self.constructor.construct_object(node)
            except (yaml.YAMLError, ValueError):
                raise self.fail(node, f"cannot read {node.value[:40]!r} as {node.tag.rsplit(':', 1)[-1]}") from None
        raise self.fail(node, f"unsupported YAML tag {node.tag[:60]!r}; only plain values, lists and mappings are "
                              "allowed")


def compose_yaml(text: str, source: str) -> yaml.Node | None:
    """The YAML node graph of ``text`` (safe loader), or XegemmError with the file and line."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise XegemmError(f"{source}:{mark.line + 1 if mark else 1}: invalid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise XegemmError(f"{source}: invalid YAML: {str(exc)[:200]}") from None
    except RecursionError:
        raise XegemmError(f"{source}: invalid YAML: nested too deeply") from None


def load_yaml(text: str, source: str, limit: int = YAML_VALUES) -> Any:
    """Plain values of one YAML document, with the guards described in the module docstring."""
    root = compose_yaml(text, source)
    if root is None:
        return None
    try:
        return _Values(source, limit).build(root)
    except RecursionError:
        raise XegemmError(f"{source}: invalid YAML: nested too deeply") from None


def load_yaml_file(path: Path | str, limit: int = CONFIG_BYTES, what: str = "YAML file") -> Any:
    """:func:`load_yaml` of a file read with :func:`read_text`."""
    return load_yaml(read_text(path, limit, what), str(path))


SQLITE_MAGIC = b"SQLite format 3\0"


def sqlite_problem(path: Path | str) -> str | None:
    """What is wrong with an existing SQLite file (empty, another kind of file, damaged pages), or None when
    it is healthy or absent.  SQLite itself takes an empty file as a new database and reports damage only when
    a query touches the damaged page."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    if not path.is_file():
        return "not a regular file"
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if not head:
        return "empty (0 bytes), not an SQLite database"
    if head != SQLITE_MAGIC:
        return "not an SQLite database"
    try:
        db = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True, timeout=60)   # rw: a WAL reader may need to rebuild its index
        try:
            verdict = db.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        return f"damaged ({exc})"
    return None if verdict == "ok" else f"damaged ({verdict[:200]})"


def create_sqlite(path: Path | str) -> None:
    """Create an SQLite database at ``path`` unless one is there, atomically: made under a temporary name and
    linked into place, so that no process ever sees the empty file SQLite itself creates first (which
    :func:`sqlite_problem` rightly calls empty)."""
    path = Path(path)
    if os.path.lexists(path):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:64]}.", suffix=".new")
    os.close(fd)
    try:
        db = sqlite3.connect(tmp)
        try:
            db.execute("PRAGMA journal_mode=WAL")    # writes the header (WAL mode is kept in it)
        finally:
            db.close()
        os.chmod(tmp, 0o666 & ~_umask())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass                                     # another process made it first
    finally:
        for leftover in (tmp, f"{tmp}-wal", f"{tmp}-shm"):
            if os.path.lexists(leftover):
                os.unlink(leftover)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """Write a file so that readers see the old or the new content, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:64]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:     # a full disk: say which file it was
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def write_text_atomic(path: Path | str, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path | str, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def set_aside(path: Path | str, companions: tuple[str, ...] = ()) -> Path:
    """Move ``path`` to the first free ``path.1``, ``path.2`` ... and return where it went; ``companions``
    (suffixes such as ``-wal``) move beside it when they exist."""
    path = Path(path)
    for n in range(1, 10_000):
        target = path.with_name(f"{path.name}.{n}")
        if not os.path.lexists(target):
            os.replace(path, target)
            for suffix in companions:
                if os.path.lexists(f"{path}{suffix}"):
                    os.replace(f"{path}{suffix}", f"{target}{suffix}")
            return target
    raise XegemmError(f"{path}: cannot set it aside: {path.name}.1 to .9999 all exist; remove some")
