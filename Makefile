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
	rm -f kernels/*.cl kernels/manifest.json
	$(VENV)/bin/xegemm generate configs/*.yaml --out kernels

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m pytest bench -q

clean:
	rm -rf $(VENV) runs .pytest_cache
