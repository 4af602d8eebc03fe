# The two commands a user needs: `make demo` and `make test`.  Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench bench-goals bench-tune kernels clean tools ocloc-current

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# setuptools prints a notice about editable installs of a package-dir layout; nothing to act on
	PYTHONWARNINGS=ignore::UserWarning $(PY) -m pip install --quiet -e '.[test]'
	# xegemm.torch's tests: this exact version only (any other pulls gigabytes of CUDA wheels)
	$(PY) -m pip install --quiet torch==2.13.0
	# the checkpoint tests' reference library, after torch so that pip keeps the CPU build (pyproject.toml)
	PYTHONWARNINGS=ignore::UserWarning $(PY) -m pip install --quiet -e '.[checkpoints]'
	# AutoAWQ's own dequantization for the AWQ reference test: without its dependencies (its package imports
	# transformers and accelerate; the test loads the one torch-only module), built against the torch above
	$(PY) -m pip install --quiet --no-deps --no-build-isolation autoawq==0.2.9 \
		|| echo "note: AutoAWQ did not install: tests/test_quant_awq_reference.py will be skipped"
	touch $(STAMP)

# System tools the tests need: Intel's offline compiler (ocloc) for the ahead-of-time tests, Debian's chromium and
# chromium-driver for the report's browser tests, PostgreSQL's server binaries for the shared-study test, CLBlast
# for the CLBlast reference test, the OpenCL ICD loader's development files (ocl-icd-opencl-dev) and a C compiler for
# the exported example's `make run`.  As root they are installed (quietly, once); otherwise the note says what to
# install and those tests are skipped with the reason.  Only `make test` needs them; `make demo` installs nothing
# but .venv.  (grep without -q below: it reads all of ldconfig's output, so ldconfig never dies of SIGPIPE.)
tools:
	@if [ "$$(id -u)" -eq 0 ]; then bash .ci/install-ocloc.sh && bash .ci/install-ocloc-current.sh && bash .ci/install-chromium.sh \
	    && bash .ci/install-postgresql.sh && bash .ci/install-clblast.sh && bash .ci/install-opencl-dev.sh; \
	else \
	  if ! command -v ocloc >/dev/null 2>&1; then echo "note: ocloc is not installed and this is not root: the ahead-of-time tests will be skipped;" \
	     "install it with: sudo bash .ci/install-ocloc.sh"; fi; \
	  if ! [ -x "$${XEGEMM_TOOLS_DIR:-.tools}/bin/ocloc-current" ]; then echo "note: the current Intel GPU compiler (Debian unstable's ocloc)" \
	     "is not installed and this is not root: its tests will be skipped; install it with: sudo make ocloc-current"; fi; \
	  if ! command -v chromedriver >/dev/null 2>&1; then echo "note: chromium is not installed and this is not root: the browser tests will be skipped;" \
	     "install it with: sudo bash .ci/install-chromium.sh"; fi; \
	  if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	     echo "note: PostgreSQL is not installed and this is not root: the PostgreSQL study test will be skipped;" \
	     "install it with: sudo bash .ci/install-postgresql.sh"; fi; \
	  if ! ldconfig -p | grep 'libclblast\.so\.1 ' >/dev/null; then echo "note: CLBlast is not installed and this is not root: the CLBlast reference test will be skipped;" \
	     "install it with: sudo bash .ci/install-clblast.sh"; fi; \
	  if ! [ -f /usr/include/CL/cl.h ] || ! command -v cc >/dev/null 2>&1; then echo "note: the OpenCL development files" \
	     "or a C compiler are missing and this is not root: the exported example's test will be skipped;" \
	     "install them with: sudo bash .ci/install-opencl-dev.sh"; fi; \
	fi

# Debian unstable's ocloc 26.x / IGC 2.x, unpacked into .tools/ocloc-current (never installed system-wide: it needs
# a newer glibc), run through the wrapper .tools/bin/ocloc-current (docs/compilers.md "The current compiler").
# A failed download leaves the old compiler in use and exits 0.
ocloc-current:
	bash .ci/install-ocloc-current.sh

demo: $(STAMP)
	$(VENV)/bin/xegemm devices
	$(VENV)/bin/xegemm run configs/default.yaml --out runs/demo-$$(date +%Y%m%d-%H%M%S) --strict

# regenerate the kernels of the shipped configs (a test checks kernels/ is current)
kernels: $(STAMP)
	rm -f kernels/*.cl kernels/manifest.json kernels/native/*.cl kernels/native/manifest.json
	rm -f kernels/coopmat/*.spvasm kernels/coopmat/manifest.json
	$(VENV)/bin/xegemm generate configs/*.yaml --out kernels
	$(VENV)/bin/xegemm generate configs/*.yaml --out kernels/native --lowering native \
		--capabilities cl_intel_subgroup_2d_block_io
	$(VENV)/bin/xegemm generate configs/*.yaml --out kernels/coopmat --lowering coopmat

# The suite runs in TEST_JOBS processes (pytest-xdist; default: the machine's cores plus one, at most 5), one test
# file per process at a time, so a file's module fixtures are set up once.  Most of its time is single-threaded
# kernel builds; the rest is waiting (child processes, a database restart, timeouts), which the extra process
# fills: on 2 cores, 3 processes took 914 s where 2 took 1120 s (that without one test file, which failed at
# once). With the short timing pace of tests/conftest.py (XEGEMM_PACE, docs/running.md) 3 processes took 694 s
# and 713 s on a 2-core AMD EPYC without AMX (2026-12-04; its coopmat CPU tests skipped), 4 took 833 s before it.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); n=$$((n + 1)); [ $$n -gt 5 ] && n=5; echo $$n)
test: $(STAMP) tools
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile

# pytest-benchmark suite (not part of `make test`): each kernel against references measured in the same run, and
# build times.  CONFIG="a.yaml b.yaml" (default configs/default.yaml) and SHAPES=1024x1024x1024,2048x2048x2048
# (default: each config's own problem) choose what is measured.
CONFIG ?=
SHAPES ?=
bench: $(STAMP)
	$(PY) -m pytest bench -q -p no:cacheprovider --benchmark-columns=median,min,max,iqr,rounds \
		$(foreach c,$(CONFIG),--bench-config $(c)) $(if $(SHAPES),--bench-shapes $(SHAPES)) \
		--benchmark-json=runs/bench-$$(date +%Y%m%d-%H%M%S).json

# the performance goals in one run (docs/benchmarks.md; not part of `make test`): on each CPU code path,
# `xegemm tune` finds the best bf16 and f16 variant at 1024^3, 2048^3 and 4096x4096x1024, and each winner is timed
# interleaved with numpy, the plain sub-group SGEMM, CLBlast (installed as root, tuned per code path) and oneMKL
# through dpnp; writes runs/bench-goals-<timestamp>/goals.{md,json}.  DPNP=1 installs dpnp for the oneMKL
# reference (pip install -e '.[mkl]', about 1.2 GB); BUDGET=N tunes N points per type and shape instead of all;
# CLBLAST=retune runs CLBlast's tuner even when its parameters are cached (tune, retune, cached, untuned).
DPNP ?=
BUDGET ?=
CLBLAST ?=
bench-goals: $(STAMP)
	$(PY) -m bench.goals $(if $(DPNP),--install-dpnp) $(if $(BUDGET),--budget $(BUDGET)) $(if $(CLBLAST),--clblast $(CLBLAST))

# tuning throughput and convergence on bench/tune_demo.yaml (about half an hour on 2 cores; figures printed)
bench-tune: $(STAMP)
	$(PY) -m pytest bench/tune_bench.py -q -s -p no:cacheprovider --benchmark-columns=median,rounds \
		--benchmark-json=runs/bench-tune-$$(date +%Y%m%d-%H%M%S).json

clean:
	rm -rf $(VENV) runs .pytest_cache
