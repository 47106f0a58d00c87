# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint lock bench certs clean dist compiled docs image controlplane e2e

# The venv holds exactly requirements-dev.lock (the image's requirements.lock plus the test
# tools, same pins), installed as the image installs: hashes required, nothing resolved here.
# The project itself goes in editable, built with the locked setuptools. `pip check` fails when
# the locks no longer satisfy pyproject.toml's ranges: run `make lock`.
$(STAMP): pyproject.toml setup.py requirements.lock requirements-dev.lock
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r requirements-dev.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	touch $(STAMP)

# Refreshes both locks from pyproject.toml: pins that still fit are kept, so after adding or
# changing a dependency only what must move moves; `make lock UPGRADE=1` takes the newest
# release every range allows. The runtime lock is compiled from the dev lock's pins, so the two
# agree on every package they share (tests/project/test_packaging.py checks both).
PIP_TOOLS := pip-tools==7.6.2
LOCK_VENV := build/lock-venv
LOCK_FLAGS := --quiet --allow-unsafe --generate-hashes --no-emit-index-url --no-emit-find-links \
	--strip-extras
lock:
	test -x $(LOCK_VENV)/bin/pip-compile || \
		{ $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install --quiet '$(PIP_TOOLS)'; }
	$(LOCK_VENV)/bin/pip-compile $(LOCK_FLAGS) $(if $(UPGRADE),--upgrade) --extra=build \
		--extra=test --output-file=requirements-dev.lock pyproject.toml
	cp requirements-dev.lock requirements.lock
	$(LOCK_VENV)/bin/pip-compile $(LOCK_FLAGS) --extra=build --output-file=requirements.lock \
		pyproject.toml

# The engine's hot path compiled with mypyc, as the image ships it (setup.py): installed into
# its own folder, never beside the sources an editable install runs. Rebuilt when a source
# changes; the old build/lib is removed first so a deleted module cannot linger in it.
COMPILED := build/compiled
$(COMPILED)/.built: $(STAMP) setup.py $(shell find webhook -name '*.py') | test-packages
	rm -rf $(COMPILED) build/lib.* build/temp.* build/bdist.* build/lib
	GPU_ADMISSION_COMPILE=1 $(BIN)/pip install --quiet --no-deps --no-build-isolation \
		--target $(COMPILED) .
	touch $@

compiled: $(COMPILED)/.built

certs/tls.crt: | $(STAMP)
	$(BIN)/gpu-admission certs generate --out certs --if-missing

certs: certs/tls.crt

run: $(STAMP) certs/tls.crt
	$(BIN)/gpu-admission serve --host 127.0.0.1 --port 8443 --rules rules \
		--cluster-snapshot examples/cluster-snapshot.yaml

# ruff, the import contract (pyproject.toml [tool.importlinter]), mypy and actionlint (the
# workflows in .github/workflows), all clean.
lint: $(STAMP)
	$(BIN)/ruff check webhook tests bench scripts setup.py docs/hooks
	$(BIN)/ruff format --check webhook tests bench scripts setup.py docs/hooks
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/actionlint .github/workflows/*.yml

# Two workers: CI has two cores, and the end-to-end tests wait on servers half the time.
# The suite twice: against the sources, then against the compiled build the image ships (the
# same tests; tests/project/test_compiled_build.py checks the second run really is compiled).
# Each run is its own target, so when one fails make's last line names it (test-sources or
# test-compiled).
test: lint docs test-sources test-compiled e2e

test-sources: lint test-packages
	$(BIN)/python -m pytest -q -n 2

test-compiled: lint test-packages $(COMPILED)/.built
	GPU_ADMISSION_EXPECT_COMPILED=1 PYTHONSAFEPATH=1 PYTHONPATH=$(CURDIR)/$(COMPILED) \
		$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider

.PHONY: test-sources test-compiled test-packages report-screenshot

# The real control plane under the end-to-end tests (tests/e2e/): kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, etcd and kwok built from the pinned Go modules
# in tests/e2e/go/ into ~/.cache/gpu-admission/controlplane/<version>/ (a no-op when warm). Without
# Go this says so and `make e2e` skips, unless GPU_ADMISSION_E2E=required (CI), where it fails.
controlplane: $(STAMP)
	@if command -v go >/dev/null 2>&1; then $(BIN)/python tests/e2e/binaries.py build; \
	elif [ "$$GPU_ADMISSION_E2E" = required ]; then \
		echo "make controlplane: GPU_ADMISSION_E2E=required and no Go toolchain" >&2; exit 1; \
	else echo "end-to-end tests skipped: they run on a control plane built with Go; install Go" \
		"and run make e2e"; fi

# The end-to-end suite on each pinned release in turn (one pytest summary per version), against
# the compiled build the image ships, serially: each run owns a whole control plane. Each
# summary lists its slowest steps, where the time of a run goes.
E2E_VERSIONS ?= $(shell $(PYTHON) tests/e2e/binaries.py versions)
e2e: controlplane $(COMPILED)/.built
	@if ! command -v go >/dev/null 2>&1 && [ "$$GPU_ADMISSION_E2E" != required ]; then exit 0; fi; \
	for v in $(E2E_VERSIONS); do \
		echo "== end-to-end on Kubernetes $$v"; \
		GPU_ADMISSION_E2E_VERSION=$$v GPU_ADMISSION_EXPECT_COMPILED=1 PYTHONSAFEPATH=1 \
		PYTHONPATH=$(CURDIR)/$(COMPILED) \
			$(BIN)/python -m pytest -q -p no:cacheprovider -m e2e tests/e2e --durations=8 $(E2E_ARGS) \
			|| exit 1; \
	done

# Debian packages the tests use: headless Chromium and chromedriver for the HTML report, zsh for
# completion, gcc for the compiled engine; and kubectl for the manifest renderings, built from
# the newest pinned control plane's Go modules (tests/e2e/binaries.py) unless one is on PATH.
# Where they cannot be installed those tests skip (without gcc, the compiled build fails),
# except in CI (CI set), where this fails first.
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

# The docs site, offline (no fonts or plugins that fetch), into build/site. --strict: a broken
# link or a page missing from the nav fails the build. The rules reference is generated by
# docs/hooks/rules_reference.py from schema/rules.schema.json while it builds.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

# The image, tagged with the package version, by the first OCI builder that works here: docker
# (when its daemon answers), podman, buildah. `IMAGE=registry.example.com/x make image` builds
# for your registry; the manifests' image is the default.
IMAGE   ?= ghcr.io/gpu-admission/gpu-admission
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image:
	@if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then \
		builder="docker build"; \
	elif command -v podman >/dev/null 2>&1; then builder="podman build"; \
	elif command -v buildah >/dev/null 2>&1; then builder="buildah bud"; \
	else echo "make image: no OCI builder here: install docker (with its daemon running), podman or buildah" >&2; \
		exit 1; fi; \
	echo "$$builder -t $(IMAGE):$(VERSION) ."; \
	$$builder -t $(IMAGE):$(VERSION) .

# dist/install.yaml: the self-signed overlay rendered as one file (needs kubectl); a test keeps
# it equal to the render.
dist:
	{ sed -n '/^#/!q;p' dist/install.yaml; kubectl kustomize manifests/overlays/self-signed; } \
		> dist/install.yaml.new && mv dist/install.yaml.new dist/install.yaml

# What ships is benchmarked: the compiled engine. `make bench BENCH_ARGS="--settle 20 --profile"`
# is the README's table.
BENCH_ARGS ?=
bench: $(COMPILED)/.built
	bash scripts/install-bench-packages.sh || echo "make bench: no wrk; bench/load.py uses its own client"
	PYTHONSAFEPATH=1 PYTHONPATH=$(CURDIR)/$(COMPILED) $(BIN)/python bench/load.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
