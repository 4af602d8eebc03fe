"""End to end on the real default device: config -> plan -> OpenCL C -> build -> verify -> profile -> results."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from xegemm import evaluate

from xegemm.jobs import pipeline
from xegemm.config import ConfigError, config_from_text
from xegemm.results.journal import ResultStore
from xegemm.jobs.pipeline import plan_variants, run, run_variant
from xegemm.plan.planner import PlanRejected, plan
from xegemm.library.record import Evaluation

pytestmark = pytest.mark.device

FAST_PROFILE = "profile: {warmup: 1, repeats: 2}\n"


def _one(text: str):
    variants = plan_variants(config_from_text(text + FAST_PROFILE))
    assert len(variants) == 1
    return variants[0]



GEMMS = {
    # M, N, K deliberately not multiples of the tiles: edges use out-of-bounds-zero loads and dropped stores
    "bf16_edges": "problem: {m: 70, n: 50, k: 40}\ntile: {workgroup: [32, 32, 32], subgroups: [1, 2]}\n",
    "f16_two_subgroup_rows": "problem: {m: 96, n: 64, k: 48}\ntypes: {a: f16, b: f16}\n"
                             "tile: {workgroup: [64, 32, 16], subgroups: [2, 1]}\n",
    "bf16_col_major_b": "problem: {m: 40, n: 72, k: 56}\nlayout: {b: col}\n"
                        "tile: {workgroup: [32, 64, 32], subgroups: [2, 2]}\n",
    "bf16_batched_no_prefetch": "problem: {m: 33, n: 17, k: 70, batch: 3}\npipeline: {prefetch: 0}\n"
                                "tile: {workgroup: [16, 16, 16], subgroups: [1, 1]}\n",
    "s8_s32": "problem: {m: 48, n: 40, k: 100}\ntypes: {a: s8, b: s8, acc: s32, c: s32}\n"
              "tile: {workgroup: [32, 32, 64], subgroups: [1, 2]}\n",
    "u8_s32": "problem: {m: 24, n: 48, k: 64}\ntypes: {a: u8, b: u8, acc: s32, c: s32}\n"
              "tile: {workgroup: [16, 32, 32], subgroups: [1, 1]}\n",
    "tf32": "problem: {m: 40, n: 36, k: 30}\ntypes: {a: tf32, b: tf32, acc: f32, c: f32}\n"
            "tile: {workgroup: [32, 32, 16], subgroups: [2, 1]}\n",
    "bf16_small_mma_m": "problem: {m: 20, n: 33, k: 24}\ntile: {workgroup: [4, 32, 16], subgroups: [1, 2]}\n",
}


@pytest.mark.parametrize("name", sorted(GEMMS))
def test_gemm_verifies_against_numpy(name, session):
    pv = _one(GEMMS[name])
    assert pv.plan is not None, pv.reason
    res = run_variant(pv, session)
    assert res.status == "ok", res.reason
    assert res.bad_elements == 0
    assert res.time_ms["runs"] >= 2 and res.gflops > 0


def test_wrong_result_is_failed_verify_and_not_timed(session, monkeypatch):
    pv = _one(GEMMS["bf16_edges"])
    original = evaluate.render_variant
    # a kernel whose accumulator starts from 1 instead of 0 on one fragment row: only verification can notice
    monkeypatch.setattr(evaluate, "render_variant",
                        lambda p, lowering: original(p, lowering).replace("acc_0_0_0 = 0", "acc_0_0_0 = 1", 1))
    res = run_variant(pv, session)
    assert res.status == "failed_verify"
    assert res.time_ms is None and res.gflops is None
    assert res.bad_elements > 0 and "out of tolerance" in res.reason


def test_out_of_bounds_write_is_caught_by_guard_bytes(session, monkeypatch):
    pv = _one(GEMMS["bf16_edges"])
    original = evaluate.render_variant
    # lie about C's height: the bottom edge tile then writes past the end of C
    monkeypatch.setattr(evaluate, "render_variant",
                        lambda p, lowering: original(p, lowering).replace("N * 4, M, ldc", "N * 4, M + 64, ldc"))
    res = run_variant(pv, session)
    assert res.status == "failed_verify" and "guard byte" in res.reason


def test_build_failure_is_recorded_with_its_log(session, monkeypatch, tmp_path):
    pv = _one(GEMMS["bf16_edges"])
    original = evaluate.render_variant
    monkeypatch.setattr(evaluate, "render_variant",
                        lambda p, lowering: original(p, lowering) + "\nthis is not OpenCL C;\n")
    res = run_variant(pv, session, log_dir=tmp_path)
    assert res.status == "failed_build"
    assert Path(res.log).exists() and "error" in Path(res.log).read_text()


@pytest.mark.parametrize("text, rule", [
    ("tile: {workgroup: [256, 256, 32], subgroups: [8, 8]}", "at most 32"),
    ("tile: {workgroup: [256, 256, 64], subgroups: [4, 4]}", "GRF per thread"),
    ("tile: {workgroup: [64, 64, 8], subgroups: [2, 2]}", "not a multiple of the XE_8x16x16"),
    ("layout: {c: col}", "C must be row-major"),
    ("tile: {workgroup: [64, 48, 32], subgroups: [2, 2]}", "not a multiple of the XE_8x16x16"),
    ("tile: {workgroup: [64, 64, 32], subgroups: [2, 2], subgroup_size: 32}", "sub-group size 32"),
    ("tile: {workgroup: [256, 256, 16], subgroups: [8, 4]}\natoms: {a: XE_2D_U16x32x32_LD_N}",
     "A tile 32x16 .* is not a multiple of XE_2D_U16x32x32_LD_N's 32x32 block"),
    ("atoms: {b: XE_2D_U8x32x16_LD_V}", "moves 8-bit elements"),
    ("types: {a: f16, b: bf16}", "no DPAS atom"),
])
def test_rejections_name_the_rule(text, rule):
    with pytest.raises(PlanRejected, match=rule):
        plan(config_from_text("problem: {m: 512, n: 512, k: 512}\n" + text + "\n"))


CONFIG = """name: tiny
problem: {m: 40, n: 48, k: 32}
tile: {workgroup: [32, 32, 16], subgroups: [1, 2]}
profile: {warmup: 1, repeats: 3}
sweep:
  pipeline.prefetch: [0, 1]
  tile.subgroups: [[1, 2], [2, 2], [64, 1]]
"""


def test_run_writes_results_that_match_the_contract_and_resumes(tmp_path, sycl_device):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    data = run(cfg, device=sycl_device.filter_string, out_dir=out, progress=None, reference_repeats=1)
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["variants"] == json.loads(json.dumps(data.document["variants"]))
    # the typed result: this run's evaluations as results.json lists them, and the headline of the problem
    assert [v.to_row() for v in data.variants] == on_disk["variants"] and data.results_json == out / "results.json"
    assert [h.group.short for h in data.headlines] == ["40x48x32 bf16"] and data.headlines[0].best.status == "ok"
    assert set(on_disk) >= {"device", "problem", "variants"}
    assert on_disk["problem"] == {"m": 40, "n": 48, "k": 32, "batch": 1}
    assert on_disk["device"]["filter_string"] == sycl_device.filter_string
    statuses = sorted(v["status"] for v in on_disk["variants"])
    assert statuses.count("ok") == 4 and statuses.count("rejected") == 2
    for v in on_disk["variants"]:
        assert {"name", "status", "reason", "params", "time_ms", "gflops", "max_abs_err"} <= set(v)
        assert v["status"] in ("ok", "rejected", "failed_build", "failed_verify", "error")
        if v["status"] == "ok":
            assert set(v["time_ms"]) >= {"min", "median", "max"} and v["reason"] is None
            assert v["time_ms"]["min"] <= v["time_ms"]["median"] <= v["time_ms"]["max"]
            assert isinstance(v["gflops"], float) and isinstance(v["max_abs_err"], float)
            ref = v["extra"]["reference"]        # numpy, measured interleaved with this variant's launches
            assert ref["interleaved"] and 1 <= ref["time_ms"]["runs"] <= v["time_ms"]["runs"]
            # the ratio is to the problem's one reference: every variant's interleaved numpy runs, pooled
            assert v["vs_numpy"] == pytest.approx(v["gflops"] / on_disk["reference"]["gflops"])
            assert ref["conditions"]["affinity_cpus"] >= 1 and len(ref["conditions"]["loadavg"]) == 3
        else:
            assert v["time_ms"] is None and v["gflops"] is None and "sub-groups" in v["reason"]
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 6 and {"name", "status", "median_ms", "gflops", "wg_m", "prefetch"} <= set(rows[0])
    report = (out / "report.md").read_text()
    # report.md is `xegemm report --format md` of the same directory: one section per problem, its best first
    section = report.split("\n## M=40 N=48 K=32 batch=1")[1].split("\n| tile")[0]
    assert "\n\nBest: " in section and on_disk["best"] in section
    assert "measured interleaved" in report
    assert on_disk["reference"]["pooled"] == 4 and on_disk["references"] == \
        [{"problem": on_disk["problem"], **on_disk["reference"]}]

    # an interrupted sweep: drop the last journal line, tear another, rerun into the same directory
    journal = out / "results.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:-2] + [lines[-2][:40]]) + "\n")
    messages = []

    class Progress:
        def write(self, s):
            messages.append(s)

        def flush(self):
            pass

    again = run(cfg, device=sycl_device.filter_string, out_dir=out, progress=Progress(), reference_repeats=1)
    text = "".join(messages)
    assert text.count("recorded earlier, kept") == 4
    # the terminal's last lines: the best of the problem and its ratio to numpy, or why it is not reliable
    assert "40x48x32 bf16: best " in text and ("x numpy\n" in text or "not measured reliably (machine busy" in text)
    assert sorted(v.name for v in again.variants) == sorted(v["name"] for v in on_disk["variants"])


def test_generate_writes_kernels_and_manifest(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(CONFIG)
    manifest = pipeline.generate(cfg, tmp_path / "k")
    files = sorted(p.name for p in (tmp_path / "k").glob("*.cl"))
    assert len(files) == 4
    data = json.loads((tmp_path / "k" / "manifest.json").read_text())
    entries = data["configs"]["tiny"]["kernels"]
    assert [e["status"] for e in entries].count("rejected") == 2
    for e in entries:
        if e["status"] == "generated":
            source = (tmp_path / "k" / e["path"]).read_text()
            assert e["name"] in source and "XE_8x16x16_F32BF16BF16F32_TT" in source
    again = pipeline.generate(cfg, tmp_path / "k")
    assert again == manifest  # deterministic


def test_shipped_kernels_are_current(tmp_path):
    """kernels/ holds the generated kernels of the shipped configs; regenerate and compare byte for byte."""
    root = Path(__file__).resolve().parents[1]
    for config in sorted((root / "configs").glob("*.yaml")):
        pipeline.generate(config, tmp_path / "portable")
        pipeline.generate(config, tmp_path / "native", lowering="native", capabilities_name="cl_intel_subgroup_2d_block_io")
        pipeline.generate(config, tmp_path / "coopmat", lowering="coopmat")
    for sub, shipped in (("portable", root / "kernels"), ("native", root / "kernels" / "native"),
                         ("coopmat", root / "kernels" / "coopmat")):
        want = {p.name: p.read_bytes() for p in (tmp_path / sub).iterdir()}
        have = {p.name: p.read_bytes() for p in shipped.iterdir() if p.suffix in (".cl", ".spvasm", ".json")}
        assert sorted(have) == sorted(want), f"{shipped} is stale: run `make kernels`"
        for name in want:
            assert have[name] == want[name], f"{shipped / name} is stale: run `make kernels`"


def test_numpy_values_are_rounded_like_the_device():
    from xegemm.verify.dense import make_operands

    ops = make_operands(config_from_text("problem: {m: 8, n: 8, k: 8}\n"))
    assert np.all(ops.a == np.float32(ops.a))  # bf16 values are exact in f32
    assert ops.a_bytes.dtype == np.uint8 and ops.a_bytes.shape == (1, 8, 16)


@pytest.mark.parametrize("acc", ["bf16", "f16"])
def test_low_precision_accumulators_catch_dropped_k_steps(acc, session, monkeypatch):
    # with a bf16 accumulator and K = 264, a bound from |A||B| would exceed the result itself
    text = (f"problem: {{m: 64, n: 64, k: 264}}\ntypes: {{a: {acc}, b: {acc}, acc: {acc}, c: {acc}}}\n"
            "tile: {workgroup: [32, 32, 32], subgroups: [1, 2]}\n")
    honest = run_variant(_one(text), session)
    assert honest.status == "ok", honest.reason
    original = evaluate.render_variant

    def drop_last_k_tile(p, lowering):
        source = original(p, lowering)
        assert "k0 < k_end; k0 +=" in source
        return source.replace("k0 < k_end; k0 +=", "k0 < k_end - 32; k0 +=")

    monkeypatch.setattr(evaluate, "render_variant", drop_last_k_tile)
    res = run_variant(_one(text), session)
    assert res.status == "failed_verify" and res.time_ms is None, res.reason


def test_a_named_atom_of_the_wrong_kind_is_rejected():
    with pytest.raises(PlanRejected, match="is a LD atom; C needs a store"):
        plan(config_from_text("problem: {m: 64, n: 64, k: 64}\natoms: {c: XE_2D_U32x8x16_LD_N}\n"))


def test_an_illegal_atom_in_a_sweep_is_an_error_at_its_line():
    """An illegal atom name is the config's mistake, not a variant's fate: the reader names its line, key and
    the hardware rule (it used to become a rejected row, which a user found confusing)."""
    with pytest.raises(ConfigError) as caught:
        config_from_text("problem: {m: 64, n: 64, k: 64}\ntile: {workgroup: [32, 32, 32], subgroups: [1, 1]}\n"
                         "sweep:\n  atoms.a: [XE_2D_U16x32x32_LD_N, XE_2D_U16x64x32_LD_N]\n", "s.yaml")
    (issue,) = caught.value.issues
    assert (issue.line, issue.key) == (4, "sweep.atoms.a[1]") and "block height 64" in issue.message


def test_problem_sweeps_keep_every_problem(tmp_path, sycl_device):
    cfg = tmp_path / "shapes.yaml"
    cfg.write_text("name: shapes\nproblem: {m: 32, n: 32, k: 32}\ntile: {workgroup: [32, 32, 32], subgroups: [1, 2]}\n"
                   "profile: {warmup: 0, repeats: 1}\nsweep:\n  problem.m: [32, 48]\n")
    data = run(cfg, device=sycl_device.filter_string, out_dir=tmp_path / "r", progress=None, reference_repeats=1)
    assert sorted(v.params["m"] for v in data.variants) == [32, 48]
    assert all(v.status == "ok" and v.vs_numpy for v in data.variants)
    assert len(data.document["references"]) == 2 and "problem" in (tmp_path / "r" / "report.md").read_text()


def test_journal_with_a_torn_tail_keeps_the_next_record(tmp_path, device_info):
    cfg = config_from_text("problem: {m: 8, n: 8, k: 8}\n")
    store = ResultStore(tmp_path, cfg, device_info)
    store.add("k1", Evaluation("one", "ok", None, {}))
    with open(store.journal, "a") as f:
        f.write('{"key": "k2", "res')                 # killed mid-write: no newline
    store.close()                                     # (the killed process's lock is gone with it)
    again = ResultStore(tmp_path, cfg, device_info)
    again.add("k3", Evaluation("three", "ok", None, {}))
    again.close()
    final = ResultStore(tmp_path, cfg, device_info)
    assert set(final.records) == {"k1", "k3"}


def test_reports_show_only_this_runs_variants(tmp_path, sycl_device):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    first = run(cfg, device=sycl_device.filter_string, out_dir=out, progress=None, reference_repeats=1)
    cfg.write_text(CONFIG.replace("k: 32", "k: 48"))        # another problem into the same directory
    second = run(cfg, device=sycl_device.filter_string, out_dir=out, progress=None, reference_repeats=1)
    assert len(second.variants) == len(first.variants)
    assert {v.params["k"] for v in second.variants if v.status == "ok"} == {48}
    assert second.document["lowering"] == "portable"
