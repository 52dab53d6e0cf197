# The two commands: `make demo` and `make test`. Both create .venv if needed and, when the
# product finds no ffmpeg/ffprobe, fetch the layer's static ones for this machine first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-reverse browser lint typecheck checkov check install ffmpeg clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[local,demo,dev]'
	touch $(STAMP)

install: $(STAMP)

# ffmpeg and ffprobe as the product looks for them (MEDIAJOBS_FFMPEG_DIR when set, /opt/bin,
# layers/ffmpeg/build/<arch>/bin, PATH); when none is found, the ffmpeg layer's pinned,
# checksummed static binaries are built for this machine into layers/ffmpeg/build/<arch>/bin.
# A MEDIAJOBS_FFMPEG_DIR that holds none is an error: the product looks nowhere else.
FIND_FFMPEG := $(BIN)/python -m mediajobs.adapters.ffmpeg

ffmpeg: $(STAMP)
ifeq ($(MEDIAJOBS_FFMPEG_DIR),)
	@$(FIND_FFMPEG) >/dev/null 2>&1 || $(MAKE) --no-print-directory -C layers/ffmpeg local
endif
	@$(FIND_FFMPEG)

demo: ffmpeg
	$(BIN)/mediajobs demo --segment-seconds 2 --out mediajobs-out

# The tests run on pytest-xdist workers, one more than the cores (a test often waits on the
# embedded AWS or a child process); PYTEST_WORKERS=1 runs one. Each test file passes alone
# and in any order. The long storms are in benchmarks/storms.py.
PYTEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print((os.cpu_count() or 1) + 1)')
PYTEST := $(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal

test: ffmpeg browser
	$(PYTEST)

# The app page's browser test drives Debian's chromium through its chromedriver: installed
# with apt-get when missing (as root; otherwise the test says what to install).
browser:
	@command -v chromedriver >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ]; then \
	  apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; }; \
	else echo "make test: the app page's test needs chromium and chromium-driver (apt-get install, as root)"; fi

# The fast subset: unit and functional tests that start no child process (no render child,
# ffmpeg, CLI run, storm or layer build; markers in pyproject.toml).
test-fast: ffmpeg
	$(PYTEST) -m "(unit or functional) and not subprocess" tests/unit tests/functional

# The functional tier file by file in reverse order (CI runs it): no file may depend on
# what an earlier one left behind.
test-reverse: ffmpeg
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile -q $$(ls tests/functional/test_*.py | sort -r)

lint: $(STAMP)
	$(BIN)/ruff check layers functions tests benchmarks
	$(BIN)/cfn-lint template.yaml

typecheck: $(STAMP)
	$(BIN)/mypy

# The security scan: checkov over template.yaml (the cloudformation framework reads SAM's
# AWS::Serverless::* resources too), in a virtual environment of its own: checkov pins
# boto3 exactly, older than the project's. Fails on any failed check, on a template it could
# not parse, and on a skip without a reason: a check that does not apply is skipped in
# template.yaml (Metadata: checkov: skip:) with its reason beside it (docs/deploy.md,
# "Security scan"). --skip-download: no calls to the vendor's platform.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(CHECKOV_VERSION)

$(CHECKOV_STAMP):
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/pip install --quiet checkov==$(CHECKOV_VERSION)
	touch $@

checkov: $(CHECKOV_STAMP)
	$(CHECKOV_VENV)/bin/checkov --file template.yaml --framework cloudformation --skip-download \
		--output json > $(CHECKOV_VENV)/report.json || true
	$(CHECKOV_VENV)/bin/python layers/checkov_gate.py $(CHECKOV_VENV)/report.json

check: lint typecheck checkov test

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) mediajobs-out .pytest_cache .mypy_cache .ruff_cache .aws-sam tests/media/build
