"""TuneOptions (xegemm.tune.options): the one record of a tune's options.  Keyword arguments make one, its checks
refuse what no tune can run with, the `xegemm tune` flags are made from its fields, and the resume command a
stopped tune prints parses back into the same options.  Nothing is tuned here."""

import shlex

import pytest

from xegemm.cli import build_parser
from xegemm.config.shapes import Shape
from xegemm.errors import XegemmError
from xegemm.evaluate.isolated import TimeLimits
from xegemm.tune.options import TuneOptions, cli_fields, max_jobs
from xegemm.tune.study import HEARTBEAT_S


def _parse(words: list[str]) -> TuneOptions:
    return TuneOptions.from_args(build_parser("tune").parse_args(["tune", "c.yaml", *words]))


def test_keyword_arguments_make_the_options_and_limits_set_both_timeouts():
    opts = TuneOptions.of(strategy="tpe", budget=3, limits=TimeLimits(build_s=5, run_s=7))
    assert (opts.strategy, opts.budget, opts.build_timeout_s, opts.run_timeout_s) == ("tpe", 3, 5, 7)
    assert opts.limits == TimeLimits(build_s=5, run_s=7)
    assert TuneOptions.of(opts, seed=1) == TuneOptions.of(strategy="tpe", budget=3, seed=1,
                                                          limits=TimeLimits(build_s=5, run_s=7))
    with pytest.raises(TypeError, match="unexpected keyword arguments: bugdet"):
        TuneOptions.of(bugdet=3)


@pytest.mark.parametrize("change, message", [
    ({"strategy": "nope"}, "nope"), ({"jobs": 0}, "--jobs 0"), ({"seed": 2**32}, "--seed"),
    ({"budget": 0}, "--budget 0"), ({"heartbeat_s": 0}, "--heartbeat 0"),
    ({"leaders": -1}, "--leaders -1"), ({"leader_time_s": 0.0}, "--leader-time 0")])
def test_the_checks_refuse_what_no_tune_can_run_with(change, message):
    with pytest.raises(XegemmError, match=message):
        TuneOptions.of(**change).check()
    TuneOptions().check()


def test_the_defaults_of_the_command_line_are_the_records():
    assert _parse([]) == TuneOptions()
    assert TuneOptions().heartbeat_s == HEARTBEAT_S and TuneOptions().build_timeout_s == TimeLimits.build_s
    flags = {f.metadata["flag"] for f in cli_fields()}
    assert flags == {"--strategy", "--budget", "--time", "--jobs", "--storage", "--study", "--seed", "--device",
                     "--target", "--capabilities", "--compiler", "--out", "--cache", "--retime", "--heartbeat", "--build-timeout",
                     "--run-timeout", "--leaders", "--leader-time"}


def test_the_resume_command_parses_back_into_the_same_options():
    opts = TuneOptions(strategy="random", budget=4, jobs=min(2, max_jobs()), seed=9, device="opencl:cpu:0",
                       out="runs/t", cache=False, retime=True, heartbeat_s=20, build_timeout_s=30.0,
                       run_timeout_s=12.5, storage="sqlite:///s.db", study="s", leaders=5, leader_time_s=7.5,
                       compiler="current")
    command = opts.resume_command("c.yaml", [Shape(64, 64, 64)], "runs/t")
    words = shlex.split(command)
    assert words[:3] == ["xegemm", "tune", "c.yaml"] and "--no-cache" in words and "--retime" in words
    assert words[words.index("--compiler") + 1] == "current"
    shapes = words.index("--shapes")
    again = _parse(words[3:shapes] + words[shapes + 2:])
    assert again == opts
    timed = TuneOptions(time_s=90.0)
    assert "--time 90s" in timed.resume_command("c.yaml", [Shape(8, 8, 8)], "o")
    assert _parse(["--time", "90s"]).time_s == 90.0


def test_budget_and_time_exclude_each_other_on_the_command_line(capsys):
    with pytest.raises(SystemExit):
        _parse(["--budget", "3", "--time", "1m"])
    assert "not allowed with argument" in capsys.readouterr().err
