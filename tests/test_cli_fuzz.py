"""A Hypothesis campaign over the command line's arguments: every command with hostile option values and hostile
files (missing, empty, a device, a FIFO, a directory, binary, an alias bomb, an empty study database, names too
long).  Whatever it is given, ``xegemm`` must answer with an exit code and at most a message: never a traceback,
never an internal error, never a hang (a FIFO or /dev/zero must be refused, not read).

Budget: ``XEGEMM_FUZZ_EXAMPLES`` examples (default 150; 40 when ``CI`` is set, about a minute); set it to
thousands and ``XEGEMM_FUZZ_RANDOM=1`` for a long campaign with new seeds.  docs/reliability.md has the counts.
"""

import contextlib
import io
import os
import tempfile
from pathlib import Path

from conftest import TINY_TUNE_CONFIG
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xegemm.cli import main

EXAMPLES = int(os.environ.get("XEGEMM_FUZZ_EXAMPLES", "40" if os.environ.get("CI") else "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("XEGEMM_FUZZ_RANDOM") is None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

ROOT = Path(tempfile.mkdtemp(prefix="xegemm-cli-fuzz-"))
(ROOT / "dir").mkdir()
(ROOT / "empty.yaml").write_text("")
(ROOT / "binary.yaml").write_bytes(os.urandom(256))
(ROOT / "study.db").write_bytes(b"")
(ROOT / "bomb.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)))
(ROOT / "tiny.yaml").write_text(TINY_TUNE_CONFIG)
os.mkfifo(ROOT / "fifo")
HOSTILE_PATHS = [str(ROOT / name) for name in ("missing.yaml", "dir", "empty.yaml", "binary.yaml", "study.db",
                                               "bomb.yaml", "fifo")] + ["/dev/zero", "/dev/null", "", "-",
                                                                          str(ROOT / ("x" * 300))]

words = st.one_of(st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e309", "99999999999999999999", "1.5", "abc",
                                   "", " ", "\u202e", "%s", "{}", "../../etc/passwd", "postgresql://u:p@127.0.0.1:1/x",
                                   "sqlite:///" + str(ROOT / "study.db"), "nosuch://", "64x64x64", "0x0x0",
                                   "100000x100000x100000", "1,2", "90s", "-5m"]),
                  st.text(max_size=12), st.integers(-2**70, 2**70).map(str))
paths = st.sampled_from(HOSTILE_PATHS)

WRITTEN = ("--out", "--cache")        # options naming a place xegemm writes to

# per command: its positional arguments and the options it takes (value or flag)
COMMANDS = {
    "generate": (st.lists(paths, min_size=1, max_size=2), ["--out", "--lowering", "--capabilities"], []),
    "run": (paths.map(lambda p: [p]), ["--device", "--out", "--lowering", "--build-timeout", "--run-timeout"],
            ["--strict"]),
    "build": (paths.map(lambda p: [p]), ["--target", "--grf", "--out", "--capabilities"], ["--strict"]),
    "report": (st.lists(st.one_of(paths, words), min_size=1, max_size=2), ["--out", "--format", "--compare"], []),
    "tune": (st.one_of(paths.map(lambda p: [p]), st.just([str(ROOT / "tiny.yaml")])),
             ["--shapes", "--strategy", "--budget", "--time", "--jobs", "--storage", "--study", "--seed", "--device",
              "--target", "--capabilities", "--cache", "--heartbeat", "--build-timeout", "--run-timeout"],
             ["--no-cache", "--retime", "--export"]),
    "atoms show": (words.map(lambda w: [w]), [], ["--json", "--all"]),
    "atoms coopmatrix": (st.just([]), ["--use", "--rows", "--cols", "--sg", "--dtype"], ["--json"]),
}


@st.composite
def command_lines(draw):
    name = draw(st.sampled_from(sorted(COMMANDS)))
    positional, options, flags = COMMANDS[name]
    argv = name.split() + draw(positional)
    for option in draw(st.lists(st.sampled_from(options), max_size=4, unique=True)) if options else []:
        value = draw(st.one_of(words, paths))
        if option in WRITTEN and value.startswith(("/", "~")) and value not in HOSTILE_PATHS:
            value = value.lstrip("/~")      # what xegemm writes stays in the campaign's directory
        argv += [option, value]
    argv += draw(st.lists(st.sampled_from(flags), max_size=2, unique=True)) if flags else []
    if name == "tune" and argv[1] == str(ROOT / "tiny.yaml") and "--export" not in argv:
        argv.append("--export")      # a valid config: only ever export (nothing is built or timed)
    if name == "run" or name == "build":
        assert argv[1] in HOSTILE_PATHS     # never a config that would really run
    return argv


@FUZZ
@given(command_lines())
def test_no_argument_gives_a_traceback_or_an_internal_error(argv):
    err = io.StringIO()
    cwd, retry = os.getcwd(), os.environ.get("XEGEMM_DB_RETRY_S")
    os.chdir(ROOT / "dir")          # a report written with a default name lands here
    # an unreachable server is refused at once, not waited for; set only around the call, since the environment
    # is the whole test process's (set at import, it took the retries from every later test's `xegemm tune`)
    os.environ["XEGEMM_DB_RETRY_S"] = "0"
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as exc:           # argparse refused the arguments
                code = exc.code
    finally:
        os.chdir(cwd)
        if retry is None:
            os.environ.pop("XEGEMM_DB_RETRY_S", None)
        else:
            os.environ["XEGEMM_DB_RETRY_S"] = retry
    said = err.getvalue()
    assert isinstance(code, int) and code in (0, 1, 2), (argv, code, said[-2000:])
    assert "Traceback" not in said and "internal error" not in said, (argv, said[-2000:])
