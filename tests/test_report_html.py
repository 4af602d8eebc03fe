"""`xegemm report` and the report.html every run writes, from real runs on the default device: grouping per
problem, escaping of hostile config text, profiler CSV against JSON, comparisons, broken and empty inputs;
and the pages opened in Debian's headless chromium with the network off (the ``browser`` tests)."""

import csv
import html
import io
import json
import re
import shutil
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest
from matplotlib import image

from xegemm import evaluate
from xegemm.cli import main
from xegemm.evaluate import STATUSES
from xegemm.jobs.pipeline import build_config, run
from xegemm.reporting import load_source, render
from xegemm.reporting.model import PROFILER_COLUMNS, PROFILER_OUTCOME, Group, groups
from xegemm.reporting.plots import variant_bars
from xegemm.library.record import Evaluation

pytestmark = pytest.mark.device

HOSTILE = "<script>alert(2)</script> & <b>bold</b>"
# two problems x three sub-group grids: 4 variants verify, 2 are rejected by a constraint whose text is hostile;
# the first kernel gets a line of "C" the compiler rejects (a real failed_build whose log echoes <script>)
CONFIG = f"""\
name: xss-demo
description: "{HOSTILE}"
problem: {{m: 64, n: 64, k: 64}}
tile: {{workgroup: [32, 32, 16], subgroups: [1, 2]}}
profile: {{warmup: 1, repeats: 3}}
constraints: ["tile.subgroups[0] != 4 or '<script>alert(5)</script>' == 'x'"]
sweep:
  problem: [{{m: 64, n: 64, k: 64}}, {{m: 48, n: 40, k: 32}}]
  tile.subgroups: [[1, 2], [2, 2], [4, 1]]
"""
ALL_REJECTED = """\
name: nothing-verifies
problem: {m: 32, n: 32, k: 32}
sweep:
  tile.subgroups: [[64, 1], [1, 64]]
"""
BODY_START = "    A += get_group_id(2) * batch_stride_a;"
OUT_NAME = "run<img src=x onerror=alert(4)>"


def _break_first_kernel(monkeypatch):
    original, seen = evaluate.render_variant, []

    def render_variant(pv, lowering):
        source = original(pv, lowering)
        seen.append(pv.name)
        return source.replace(BODY_START, "    <script>alert(6)</script>\n" + BODY_START, 1) if len(seen) == 1 \
            else source
    monkeypatch.setattr(evaluate, "render_variant", render_variant)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, sycl_device):
    """Run A (a real failed build among its variants) and run B (the same config again, every kernel intact)."""
    root = tmp_path_factory.mktemp("report")
    cfg = root / "xss.yaml"
    cfg.write_text(CONFIG)
    a, b = root / "a" / OUT_NAME, root / "b" / OUT_NAME
    with pytest.MonkeyPatch.context() as mp:
        _break_first_kernel(mp)
        run(cfg, device=sycl_device.filter_string, out_dir=a, progress=None, reference_repeats=1,
            command="xegemm run xss.yaml")
    run(cfg, device=sycl_device.filter_string, out_dir=b, progress=None, reference_repeats=1)
    return a, b


def _results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def _rows(page: str, table_id: str) -> int:
    """The rows (header included) of the table with ``table_id`` in a page."""
    return page.split(f'id="{table_id}"')[1].split("</table>")[0].count("<tr>")


def test_run_writes_report_html_with_one_section_per_problem(runs):
    a, _ = runs
    page = (a / "report.html").read_text()
    data = _results(a)
    statuses = sorted(v["status"] for v in data["variants"])
    assert statuses == ["failed_build", "ok", "ok", "ok", "rejected", "rejected"], statuses
    assert "M=64 N=64 K=64 batch=1" in page and "M=48 N=40 K=32 batch=1" in page
    for best in data["best_per_problem"]:
        assert best["name"] in page
    assert "xegemm run xss.yaml" in page and data["device"]["driver_version"] in page
    assert "numpy" in page and "float32 matmul" in page
    peak = data["device_peak"]                        # measured by the device worker after the sweep
    assert peak["gflops"] > 0 and peak["gbps"] > 0 and peak["fma_ms"]["runs"] == 5
    assert "the device&#39;s roofline as measured by" in page


def test_hostile_text_from_configs_names_and_logs_is_escaped(runs):
    a, _ = runs
    page = (a / "report.html").read_text()
    assert "<script" not in page.lower() and "<img" not in page.lower() and "<b>" not in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page      # description
    assert "&#39;&lt;script&gt;alert(5)&lt;/script&gt;&#39;" in page                     # constraint in a reason
    assert "run&lt;img src=x onerror=alert(4)&gt;" in page                               # directory name
    failed = next(v for v in _results(a)["variants"] if v["status"] == "failed_build")
    log = Path(failed["log"])
    assert "<script>alert(6)</script>" in log.read_text()                                # the compiler echoed it
    assert f'href="logs/{log.name}"' in page                                             # linked relative to the page


def test_profiler_csv_parses_and_matches_the_json(runs, tmp_path):
    a, _ = runs
    assert main(["report", str(a), "--out", str(tmp_path / "r.csv")]) == 0
    assert main(["report", str(a), "--format", "json", "--out", str(tmp_path / "r.json")]) == 0
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r.csv").read_text())))
    data = json.loads((tmp_path / "r.json").read_text())
    assert tuple(rows[0]) == PROFILER_COLUMNS == tuple(data["columns"])
    assert list(PROFILER_COLUMNS[:6]) == ["Problem", "Provider", "OperationKind", "Operation", "Disposition", "Status"]
    assert len(rows) == len(data["rows"]) == 6 + 2            # six variants and a numpy reference per problem
    for row, want in zip(rows, data["rows"]):
        assert row == {k: "" if want[k] is None else str(want[k]) for k in PROFILER_COLUMNS}
    ok = [r for r in rows if r["Provider"] == "xegemm" and r["xegemm_status"] == "ok"]
    assert len(ok) == 3 and all(r["Disposition"] == "passed" and r["Status"] == "success" for r in ok)
    for r in ok:
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        assert int(r["Flops"]) == 2 * m * n * k and int(r["Bytes"]) == 2 * m * k + 2 * k * n + 4 * m * n
        assert r["A"] == "bf16:row" and r["cta_m"] == "32" and r["inst_m"] == "8" and float(r["GFLOPs"]) > 0
        assert abs(float(r["GFLOPs"]) - int(r["Flops"]) / (float(r["Runtime"]) * 1e6)) < 1e-6 * float(r["GFLOPs"])
    assert {r["Problem"] for r in rows} == {"1", "2"} and sum(r["Provider"] == "numpy" for r in rows) == 2


def test_every_status_has_a_profiler_disposition():
    assert set(PROFILER_OUTCOME) == set(STATUSES)


def _changes(new, base) -> dict:
    """(name, m) -> change, for run ``new`` against ``base`` (a kernel name recurs on every problem of a sweep)."""
    return {(r["name"], r["problem"]["m"]): r["change"] for r in json.loads(render([new], "json", baseline=[base]))["compare"]}


def test_compare_shows_run_b_against_run_a(runs, tmp_path):
    a, b = runs
    out = tmp_path / "cmp.html"
    assert main(["report", str(b), "--compare", str(a), "--out", str(out)]) == 0
    page = out.read_text()
    assert "Comparison: B" in page and 'id="compare-speedups"' in page
    assert page.split('id="compare-table"')[1].count("<td>bf16/bf16/f32/f32</td>") == 6      # labelled with types
    changes = _changes(b, a)
    failed = next((v["name"], v["params"]["m"]) for v in _results(a)["variants"] if v["status"] == "failed_build")
    assert len(changes) == 6 and changes[failed] == "fixed"      # broken in A, verified in B
    assert sorted(changes.values()).count("still failing") == 2   # the rejected pair
    assert all(c in ("faster", "slower", "same", "no reliable difference") for key, c in changes.items()
               if key != failed and "rejected" not in key[0])
    # the other way round the fixed kernel is a new failure; a variant only in A has vanished
    assert _changes(a, b)[failed] == "new failure"
    trimmed = tmp_path / "trimmed"
    shutil.copytree(b, trimmed)
    results = _results(trimmed)
    gone = results["variants"].pop(0)
    (trimmed / "results.json").write_text(json.dumps(results))
    assert _changes(trimmed, b)[(gone["name"], gone["params"]["m"])] == "vanished"
    assert list(_changes(trimmed, b).values()).count("vanished") == 1


def test_a_broken_results_file_still_renders_from_the_journal(runs, tmp_path):
    a, _ = runs
    broken = tmp_path / "broken"
    shutil.copytree(a, broken)
    text = (broken / "results.json").read_text()
    (broken / "results.json").write_text(text[: len(text) // 2])          # torn
    journal = (broken / "results.jsonl").read_text().splitlines()
    (broken / "results.jsonl").write_text("\n".join(journal[:3] + ["{not json"] + journal[3:]) + "\n")
    src = load_source(broken)
    assert len(src.variants) == 6 and [v.trial for v in src.variants] == [1, 2, 3, 4, 5, 6]
    assert any("results.json is damaged" in m for m in src.missing)
    assert any("results.jsonl:4: not a result record" in m for m in src.missing)
    page = render([broken], "html", page_dir=broken)
    assert "results.json is damaged" in page and "device, problem and references are unknown" in page
    assert page.count('class="status status-ok"') >= 3


def test_a_run_with_no_verified_variant_and_an_empty_directory(tmp_path, sycl_device):
    cfg = tmp_path / "none.yaml"
    cfg.write_text(ALL_REJECTED)
    run(cfg, device=sycl_device.filter_string, out_dir=tmp_path / "none", progress=None, reference_repeats=1)
    page = (tmp_path / "none" / "report.html").read_text()
    assert 'id="no-verified"' in page
    # rejected variants were never built: their own table, not marks in a chart of GFLOP/s
    assert 'id="g1-variants"' not in page and _rows(page, "rejected-table") == 1 + 2
    assert 'id="roofline"' not in page and 'id="g1-effects"' not in page
    assert _results(tmp_path / "none")["device_peak"] is None     # nothing timed: no worker was started for it
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "results.json").write_text("{}")
    empty = render([tmp_path / "empty"], "html")
    assert "No variant could be read" in empty and "results.json: no list of variants" in empty
    assert main(["report", str(tmp_path / "nowhere")]) == 2


def test_text_formats_print_to_stdout_unless_a_file_is_named(runs, tmp_path, monkeypatch, capsys):
    a, _ = runs
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(a), "--format", "md"]) == 0
    assert capsys.readouterr().out.startswith("# xegemm report")
    assert main(["report", str(a), "--out", "-", "--format", "csv"]) == 0
    printed = capsys.readouterr().out
    assert main(["report", str(a), "--out", "r.csv"]) == 0
    assert printed == (tmp_path / "r.csv").read_text()
    assert capsys.readouterr().out == "wrote r.csv\n"
    assert main(["report", str(a), "--out", "-"]) == 0                  # any format, HTML by default
    assert capsys.readouterr().out.lstrip().lower().startswith("<!doctype html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]      # no report.md, no file named '-'


def test_groups_keep_problems_and_types_apart(runs):
    a, _ = runs
    group_list = groups([load_source(a)])
    data = _results(a)
    assert [g.problem for g in group_list] == [{"m": 48, "n": 40, "k": 32, "batch": 1},
                                               {"m": 64, "n": 64, "k": 64, "batch": 1}]
    for g in group_list:
        assert len(g.variants) == 3 and len(g.references) == 1
        assert {(v.params["m"], v.params["n"]) for v in g.variants} == {(g.problem["m"], g.problem["n"])}
        assert [title for title, _ in g.swept_axes()] == ["sub-group grid"] or len(g.timed) < 2
        # one numpy reference per problem: every variant's interleaved runs pooled, in results.json and here
        (listed,) = [r for r in data["references"] if r["problem"] == g.problem]
        assert listed["pooled"] == len(g.timed) and listed["interleaved"]
        assert g.reference.gflops == listed["gflops"]
        for v in g.timed:
            assert v.vs_numpy == pytest.approx(v.gflops / listed["gflops"]) == g.ratio(v)
        if g.best:
            (numpy,) = [r for r in g.best_against_references() if r["provider"] == "numpy"]
            assert numpy["ratio"] == pytest.approx(g.best.vs_numpy)


def _synthetic_run(root: Path, cv: float, load: float, numpy_ms=(2.0, 2.0)) -> Path:
    """A run directory with two type combinations of one problem, their kernels' and numpy's timings at ``cv``,
    numpy's medians ``numpy_ms`` beside each."""
    out = root / f"cv{cv}"
    out.mkdir()
    params = {"m": 64, "n": 64, "k": 64, "batch": 1, "acc": "f32", "c": "f32", "layout": "row/row/row",
              "wg_m": 32, "wg_n": 32, "wg_k": 16, "sg_m": 2, "sg_n": 2, "prefetch": 1, "grf": 256}
    times = {"min": 0.9, "median": 1.0, "max": 1.1, "mean": 1.0, "cv": cv, "runs": 8}
    variants = []
    for dtype, gflops, numpy_ms in zip(("bf16", "f16"), (0.5, 0.4), numpy_ms):
        ref = {"provider": "numpy", "numpy": np.__version__, "gflops": 0.524288 / numpy_ms, "interleaved": True,
               "high_cv": cv > 0.1, "time_ms": {**times, "median": numpy_ms, "mean": numpy_ms},
               "conditions": {"loadavg": [load, load, load]}}
        variants.append(Evaluation(f"k_{dtype}", "ok", None, {**params, "a": dtype, "b": dtype}, time_ms=times,
                                   gflops=gflops, extra={"reference": ref}, load1=load).to_row())
    variants.append(Evaluation("k_big", "rejected", "too big", {**params, "a": "bf16", "b": "bf16"}).to_row())
    (out / "results.json").write_text(json.dumps({"variants": variants}))
    return out


def test_a_ratio_is_headlined_only_when_both_sides_are_stable(tmp_path):
    quiet = render([_synthetic_run(tmp_path, 0.02, 0.3)], "html", page_dir=tmp_path)
    busy_dir = _synthetic_run(tmp_path, 0.3, 7.5, numpy_ms=(2.0, 4.0))    # numpy itself measured 2x apart
    busy = render([busy_dir], "html", page_dir=tmp_path)
    assert 'id="best-overall-table"' in quiet and 'id="unreliable"' not in quiet and "not measured reliably" not in quiet
    assert 'id="unreliable"' in busy and "machine busy: load 7.5" in busy
    overall = busy.split('id="best-overall-table"')[1].split("</table>")[0]
    assert overall.count("<tr>") == 2 and "k_bf16" in overall and 'class="num unreliable"' in overall
    # the two sections of the problem show one numpy reference, pooled from both measurements
    (g_bf16, g_f16) = groups([load_source(busy_dir)])
    assert g_bf16.reference == g_f16.reference and g_bf16.reference.pooled == 2
    assert busy.count(f'<td class="num">{g_bf16.reference.gflops:.1f}</td>') >= 2
    text = render([busy_dir], "md")
    assert text.index("not measured reliably (machine busy: load 7.5") < text.index("\n## M=")
    # the profiler CSV's numpy row is the same reference the page headlines
    rows = list(csv.DictReader(io.StringIO(render([busy_dir], "csv"))))
    numpy_rows = [float(r["GFLOPs"]) for r in rows if r["Provider"] == "numpy"]
    assert numpy_rows == [pytest.approx(g_bf16.reference.gflops)] * 2       # one per section, the same


def test_markdown_groups_per_problem(runs):
    a, _ = runs
    text = render([a], "md")
    assert text.count("\n## M=") == 2 and "| tile | status | GFLOP/s |" in text


AOT = """\
name: aot-tiny
problem: {m: 256, n: 256, k: 256}
tile: {workgroup: [64, 64, 32], subgroups: [2, 2]}
sweep:
  pipeline.prefetch: [0, 2]
  tile.subgroups: [[2, 2], [64, 1]]
"""


@pytest.mark.ocloc
def test_an_aot_build_shows_its_isa_statistics_against_the_plan(tmp_path):
    cfg = tmp_path / "aot.yaml"
    cfg.write_text(AOT)
    built = build_config(cfg, target="pvc", out_dir=tmp_path / "aot", command="xegemm build aot.yaml --target pvc")
    ok = [v for v in built["variants"] if v["status"] == "ok"]
    assert len(ok) == 2
    page = render([tmp_path / "aot"], "html")
    isa = page.split('id="isa-table"')[1].split("</table>")[0]
    assert isa.count("<tr>") == 1 + len(ok)           # header, then every built variant (rejected ones never built)
    for v in ok:
        assert v["name"] in isa
        assert f'{v["isa"]["dpas"]} ({v["predicted"]["dpas"]})' in isa
        assert f'>{v["isa"]["sends"]}<' in isa
    assert "Built ahead of time: nothing was run or timed" in page and 'id="no-verified"' not in page
    assert 'id="g1-variants"' not in page             # nothing timed, so no GFLOP/s chart
    # the build writes both reports itself; their header says what compiled, when and how it was started
    markdown = (tmp_path / "aot" / "report.md").read_text()
    assert (tmp_path / "aot" / "report.html").is_file()
    for text, fact in ((page, "<th>{}</th><td>{}"), (markdown, "  - {}: {}")):
        assert fact.format("command", "xegemm build aot.yaml --target pvc") in text
        assert fact.format("runtime", "xegemm ") in text and "compiler ocloc " in text
        assert fact.format("date (UTC)", built["started_at"]) in text
    rows = markdown.split("## Machine code against the plan")[1].splitlines()
    for v in ok:
        (row,) = [r for r in rows if f"`{v['name']}`" in r]
        cells = [c.strip() for c in row.strip("|").split("|")]
        prefetches = v["isa"]["prefetch_block2d"] + v["measured_messages"]["prefetch"]
        planned = sum((v["predicted"].get("prefetch_per_kstep") or {}).values())
        assert cells[3:9] == [f'{v["isa"]["dpas"]} ({v["predicted"]["dpas"]})',
                              f'{v["isa"]["load_block2d"]} ({v["predicted"]["load_block2d"]})',
                              f'{v["measured_messages"]["load_block1d"]} ({v["predicted"].get("load_block1d", 0)})',
                              f'{v["isa"]["store_block2d"]} ({v["predicted"]["store_block2d"]})',
                              f'{v["measured_messages"]["store_block1d"]} ({v["predicted"]["store_block1d"]})',
                              f"{prefetches} ({planned})"]
        assert cells[2] == str(v["grf"]) and cells[9] == str(v["isa"]["sends"])
        assert cells[10] == str(v["isa"]["instructions"]) and cells[11] == str(v["isa"]["spill_bytes"])
        differs = [k for k in ("store_block2d", "store_block1d")
                   if v["measured_messages"][k] != v["predicted"][k]]
        for k in differs:        # a difference is said in words, with its reason
            assert f'{k}: machine code {v["measured_messages"][k]}, plan {v["predicted"][k]}' in cells[12]
        if not differs and prefetches == planned:
            assert cells[12].startswith("as planned")


# ---- in a real browser ------------------------------------------------------------------------------------

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,2400")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's chromium through chromium-driver, offline (network emulation), logging console and requests."""
    from selenium import webdriver          # the test extra; conftest skips browser tests without it
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                "downloadThroughput": 0, "uploadThroughput": 0})
    yield driver
    driver.quit()


def _open(driver, page: Path) -> dict:
    """Load a page offline; return what it logged and every URL it asked for."""
    driver.get_log("performance")
    driver.get_log("browser")
    driver.get(page.resolve().as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    requests = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    urls = [m["params"]["request"]["url"] for m in requests if m["method"] == "Network.requestWillBeSent"]
    return {"console": driver.get_log("browser"), "urls": urls}


def _count(driver, selector: str) -> int:
    return driver.execute_script("return document.querySelectorAll(arguments[0]).length", selector)


@pytest.mark.browser
def test_report_opens_offline_with_every_plot_and_point(runs, browser, tmp_path):
    a, _ = runs
    page = a / "report.html"
    seen = _open(browser, page)
    assert [e for e in seen["console"] if e["level"] in ("SEVERE", "WARNING")] == []
    assert seen["urls"] == [page.resolve().as_uri()], seen["urls"]     # nothing but the page itself was asked for
    assert _count(browser, "script") == 0
    # the hostile description is visible as text
    assert HOSTILE in browser.find_element("css selector", "table.facts").text
    group_list = groups([load_source(a)])
    plots = 0
    for n, g in enumerate(group_list, 1):
        timed = g.timed
        untimed = [v for v in g.variants if not v.gflops and v.status != "rejected"]
        assert _count(browser, f"#g{n}-variants [id^='g{n}-variants-bar-']") == len(timed)
        assert _count(browser, f"#g{n}-variants [id^='g{n}-variants-untimed-'] use") == len(untimed)
        assert _count(browser, f"#g{n}-references [id^='g{n}-references-bar-']") == 1 + len(g.references)
        for j, _ in enumerate(g.swept_axes()):
            assert _count(browser, f"#g{n}-effects-points-{j} use") == len(timed)
        plots += 2 + bool(g.swept_axes())
        trials = [v for v in g.variants if v.trial]
        if len(trials) > 1:
            assert _count(browser, f"#g{n}-convergence-points-0 use") == len(trials)
            assert _count(browser, f"#g{n}-convergence-wall-points-0 use") == len(trials)
            plots += 1
    timed_all = sum(len(g.timed) for g in group_list)
    assert _count(browser, "#roofline [id^='roofline-points-'] use") == timed_all
    assert _count(browser, "#roofline [id='roofline-peak-0'] path") == 1      # the measured roofline
    assert _count(browser, "svg.plot") == plots + 1
    sizes = browser.execute_script("return [...document.querySelectorAll('svg.plot')].map("
                                   "s => [s.getBoundingClientRect().width, s.getBoundingClientRect().height])")
    assert all(w > 200 and h > 100 for w, h in sizes), sizes
    assert _count(browser, "#failures-table tr") == 1 + 1          # header, a failed build
    assert _count(browser, "#rejected-table tr") == 1 + 2          # header, two rejected (their own section)
    log_link = browser.find_element("css selector", "#failures-table a")
    assert log_link.get_attribute("href").startswith(a.resolve().as_uri() + "/logs/")
    shot = tmp_path / "report.png"
    browser.save_screenshot(str(shot))
    pixels = image.imread(shot)[..., :3]
    assert pixels.shape[0] > 1000 and pixels.shape[1] > 1000
    ink = (pixels.min(axis=2) < 0.9).mean()           # share of pixels that are not (near) white
    assert 0.03 < ink < 0.6, ink
    assert len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50


@pytest.mark.browser
def test_comparison_page_opens_offline_with_a_bar_per_common_variant(runs, browser, tmp_path):
    a, b = runs
    out = tmp_path / "cmp.html"
    assert main(["report", str(b), "--compare", str(a), "--out", str(out)]) == 0
    seen = _open(browser, out)
    assert [e for e in seen["console"] if e["level"] in ("SEVERE", "WARNING")] == []
    assert seen["urls"] == [out.resolve().as_uri()]
    both = sum(1 for r in json.loads(render([b], "json", baseline=[a]))["compare"] if r["speedup"])   # timed in both
    assert both == 3 and _count(browser, "#compare-speedups [id^='compare-speedups-bar-']") == both
    text = browser.find_element("css selector", "#compare-table").text
    assert "fixed" in text and "still failing" in text


def test_a_single_timed_run_draws_a_bar_without_whiskers_error():
    """One timed launch: min = median = max, so the whiskers have zero (never negative) length."""
    flops = 2 * 32 * 32 * 32
    median = 2.2336657364455212    # a value where gflops * median / median rounds just above gflops
    v = Evaluation("k", "ok", None, {"m": 32, "n": 32, "k": 32, "batch": 1}, source="s",
                   gflops=flops / (median * 1e6), time_ms={"min": median, "median": median, "max": median, "cv": 0.0,
                                                           "runs": 1})
    svg = variant_bars(Group((32, 32, 32, 1, "bf16", "bf16", "f32", "f32", "row/row/row"), [v]), "one")
    assert svg.count('id="one-bar-0"') == 1


def test_rate_axes_start_at_zero_and_leave_room_above_the_best_point():
    """GFLOP/s is a rate: its axes start at 0 (a small difference looks small) and end a tenth above the best
    point, which the frame would otherwise cut in half."""
    from matplotlib.figure import Figure

    from xegemm.reporting.plots import _rate_axis
    ax = Figure().add_subplot()
    ax.scatter([0, 1, 2], [41.2, 55.2, 42.3])
    _rate_axis(ax, [41.2, 55.2, None, 42.3])
    assert ax.get_ylim() == pytest.approx((0.0, 55.2 * 1.1))
    _rate_axis(ax, [None, 0.0])                       # nothing timed: still a valid axis
    assert ax.get_ylim() == (0.0, 1.0)


def test_two_runs_in_one_page_are_told_apart(runs, tmp_path):
    a, b = runs                                       # two directories of the same name
    page = render([a, b], "html", page_dir=tmp_path)
    for run_dir in (a, b):                            # labelled by their paths, not twice by the same name
        assert f"<h3>run <code>{html.escape(str(run_dir.resolve()))}</code>" in page
    group_list = groups([load_source(a), load_source(b)])
    assert [len(g.variants) for g in group_list] == [6, 6]
    failed = next(v for v in _results(a)["variants"] if v["status"] == "failed_build")
    links = [(tmp_path / unquote(href)).resolve() for href in re.findall(r'href="([^"]+\.log)"', page)]
    assert links == [Path(failed["log"]).resolve()]  # the one failed build, linked relative to the page's folder
