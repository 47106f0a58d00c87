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
test: lint test-packages
	$(BIN)/python -m pytest -q -n 2

.PHONY: test-packages report-screenshot

# Debian packages the tests use: headless Chromium and chromedriver for the HTML report, zsh for
# completion. Where they cannot be installed those tests skip, except in CI (CI set), where
# this fails first.
test-packages:
	bash scripts/install-test-packages.sh || test -z "$$CI"

# docs/audit-report.png, the README's picture of `audit -o html`: the example manifests against
# the example cluster facts (exit 1: they include denials on purpose).
report-screenshot: $(STAMP) test-packages
	mkdir -p build
	$(BIN)/gpu-admission audit examples/audit-example.yaml \
		--cluster-snapshot examples/cluster-snapshot.yaml -o html > build/audit-report.html; \
		test $$? -le 1
	chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1480 \
		--screenshot=docs/audit-report.png file://$(CURDIR)/build/audit-report.html

# dist/install.yaml: the self-signed overlay rendered as one file (needs kubectl); a test keeps
# it equal to the render.
dist:
	{ sed -n '/^#/!q;p' dist/install.yaml; kubectl kustomize manifests/overlays/self-signed; } \
		> dist/install.yaml.new && mv dist/install.yaml.new dist/install.yaml

bench: $(STAMP)
	$(BIN)/python bench/load.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
