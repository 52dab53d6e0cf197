# The two commands: `make demo` and `make test`. Both create .venv if needed and, when the
# product finds no ffmpeg/ffprobe, fetch the layer's static ones for this machine first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-reverse lint typecheck check install ffmpeg clean

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
	$(BIN)/mediajobs demo --out mediajobs-out

# The tests run on pytest-xdist workers, one more than the cores (a test often waits on the
# embedded AWS or a child process); PYTEST_WORKERS=1 runs one. Each test file passes alone
# and in any order. The long storms are in benchmarks/storms.py.
PYTEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print((os.cpu_count() or 1) + 1)')
PYTEST := $(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal

test: ffmpeg
	$(PYTEST)

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

check: lint typecheck test

clean:
	rm -rf $(VENV) mediajobs-out .pytest_cache .mypy_cache .ruff_cache .aws-sam tests/media/build
