# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench certs clean dist

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

certs/tls.crt: | $(STAMP)
	$(BIN)/gpu-admission certs generate --out certs --if-missing

certs: certs/tls.crt

run: $(STAMP) certs/tls.crt
	$(BIN)/gpu-admission serve --host 127.0.0.1 --port 8443 --rules rules \
		--cluster-snapshot examples/cluster-snapshot.yaml

# ruff, the import contract (pyproject.toml [tool.importlinter]) and mypy, all clean.
lint: $(STAMP)
	$(BIN)/ruff check webhook tests bench
	$(BIN)/ruff format --check webhook tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

# Two workers: CI has two cores, and the end-to-end tests wait on servers half the time.
test: lint
	$(BIN)/python -m pytest -q -n 2

# dist/install.yaml: the self-signed overlay rendered as one file (needs kubectl); a test keeps
# it equal to the render.
dist:
	{ sed -n '/^#/!q;p' dist/install.yaml; kubectl kustomize manifests/overlays/self-signed; } \
		> dist/install.yaml.new && mv dist/install.yaml.new dist/install.yaml

bench: $(STAMP)
	$(BIN)/python bench/load.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
