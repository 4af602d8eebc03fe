# The two commands a user needs: `make demo` and `make test`.  Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench kernels clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/xegemm devices
	$(VENV)/bin/xegemm run configs/default.yaml --out runs/demo-$$(date +%Y%m%d-%H%M%S) --strict

# regenerate the kernels of the shipped configs (a test checks kernels/ is current)
kernels: $(STAMP)
	rm -f kernels/*.cl kernels/manifest.json kernels/native/*.cl kernels/native/manifest.json
	$(VENV)/bin/xegemm generate configs/*.yaml --out kernels
	$(VENV)/bin/xegemm generate configs/*.yaml --out kernels/native --lowering native \
		--capabilities cl_intel_subgroup_2d_block_io

test: $(STAMP)
	$(PY) -m pytest -q

# pytest-benchmark suite (not part of `make test`): each kernel against references measured in the same run
bench: $(STAMP)
	$(PY) -m pytest bench -q -p no:cacheprovider --benchmark-columns=median,min,max,iqr,rounds \
		--benchmark-json=runs/bench-$$(date +%Y%m%d-%H%M%S).json

clean:
	rm -rf $(VENV) runs .pytest_cache
