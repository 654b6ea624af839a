# poolkit: `make demo` and `make test` set everything up from scratch on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TORCH_PIN := torch==2.13.0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# Bytecode is written when a module is first imported (an empty value turns the variable off), so the installs below
# skip compiling every file of every package (--no-compile): pip's one-thread compile of torch, scipy, ... was about
# half of the install time, and a run imports a fraction of those files.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: install dev system-data browser timm st-openvino demo zoo docs test test-fast test-deep bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The CPU torch wheel first: an unpinned torch would pull a multi-GB CUDA build. Then poolkit, then its paper
# benchmarks, a distribution of their own (`poolkit bench NAME` finds them through an entry point).
$(VENV)/.installed: $(PY) pyproject.toml benchmarks/papers/pyproject.toml
	$(PIP) install --quiet --no-compile $(TORCH_PIN)
	$(PIP) install --quiet --no-compile -e ".[all,model]" -e "benchmarks/papers[sets]"
	touch $@

# The same and the dev tools in one resolution (what `make test` installs on a fresh machine).
$(VENV)/.dev-installed: $(PY) pyproject.toml benchmarks/papers/pyproject.toml
	$(PIP) install --quiet --no-compile $(TORCH_PIN)
	$(PIP) install --quiet --no-compile -e ".[all,model,dev]" -e "benchmarks/papers[sets]"
	touch $(VENV)/.installed $@

install: $(VENV)/.installed

dev: $(VENV)/.dev-installed

# Real data for the built-in datasets and `poolkit bench vision` (Debian packages); best effort: what needs them
# says so.
system-data:
	@if [ ! -d /usr/share/wordnet ] || [ ! -d /usr/share/games/fortunes ] || [ ! -d /usr/share/datasets/fashion-mnist ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base fortunes \
	      dataset-fashion-mnist >/dev/null) \
	      || echo "note: could not install wordnet-base/fortunes/dataset-fashion-mnist; builtin:wordnet-*, builtin:fortunes and bench vision need them"; \
	  else echo "note: run 'sudo apt-get install wordnet-base fortunes dataset-fashion-mnist' for builtin:wordnet-*, builtin:fortunes and bench vision"; fi; \
	fi

# Headless Chromium for the report tests (tests/explain/test_reports_browser.py, driven by Playwright); best effort. Run
# directly, those tests fail naming the fix while it is missing; `make test` skips them there, loudly (below).
browser:
	@if ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	      || echo "note: could not install chromium; the browser tests need it (POOLKIT_ALLOW_NO_BROWSER=1 skips them)"; \
	  else echo "note: run 'sudo apt-get install chromium chromium-driver' for the browser tests"; fi; \
	fi

# The main job on the packaged encoder and the embedded WordNet subset: a leaderboard of poolers.
demo: install
	$(VENV)/bin/poolkit compare --out runs/demo --force

# Render every docs page from its committed result files (scripts/docs.py --write; `make test` checks them).
docs: install
	$(PY) scripts/docs.py --write

# Every pooler on the packaged MiniLM's hidden states: output dims, parameters, time per call.
zoo: install
	$(VENV)/bin/poolkit zoo

# The suite, which also checks every rendered docs page against its committed result files (scripts/docs.py --check,
# in scripts/tests/test_docs.py). Where chromium could not be installed, the browser tests are skipped with a banner
# here and in pytest's summary. --dist worksteal: a worker that runs out of tests takes some of the other's (the
# few long tests no longer decide when the run ends).
test: dev system-data browser timm
	@command -v chromium >/dev/null || echo "!!! chromium is missing: the browser tests (tests/explain/test_reports_browser.py) are SKIPPED !!!"
	POOLKIT_ALLOW_NO_BROWSER=$$(command -v chromium >/dev/null && echo 0 || echo 1) $(PY) -m pytest -q -n 2 --dist worksteal

test-fast: dev
	$(PY) -m pytest -q -n 2 --dist worksteal -m "not slow"

# The property tests with fresh random examples (200 each): rerun a failure with the seed it prints,
# make test-deep SEED=<seed>.
test-deep: dev
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; echo "hypothesis seed $$seed (make test-deep SEED=$$seed)"; \
	POOLKIT_HYPOTHESIS=deep $(PY) -m pytest -q -n 2 --dist worksteal --hypothesis-seed=$$seed $$(grep -rl --include="*.py" "@given" tests benchmarks scripts)

# timm for perf_spatial's comparison and its peer suite (tests/peers/test_timm_suite.py; optional, never a poolkit
# dependency): its wheel unpacked beside the venv, not installed, since an installed timm without torchvision breaks
# the accelerate command (and torchvision would pull another torch). Best effort: what needs it says so.
timm: dev
	@[ -d $(VENV)/timm/timm ] || { $(PIP) download --quiet --no-deps --dest $(VENV)/timm timm==1.0.31 \
	  && $(PY) -m zipfile -e $(VENV)/timm/timm-1.0.31-py3-none-any.whl $(VENV)/timm; } \
	  || echo "note: timm not unpacked; perf_spatial and the timm peer suite run without it"

# sentence-transformers' own OpenVINO backend, a peer of perf_onnx's throughput table (benchmarks/st_peer_worker.py runs
# it): an environment of its own, since its extra's pins (optimum-intel: transformers<5.6) conflict with the dev
# environment's. Its torchvision, a CUDA build, fails to load beside the CPU torch and is not needed: removed. Best
# effort: perf_onnx says when it is missing.
ST_OPENVINO := $(VENV)/st-openvino
st-openvino: dev
	@[ -f $(ST_OPENVINO)/.installed ] || { $(PYTHON) -m venv $(ST_OPENVINO) \
	  && $(ST_OPENVINO)/bin/pip install --quiet --no-compile $(TORCH_PIN) "sentence-transformers[openvino]==6.3.0" \
	  && $(ST_OPENVINO)/bin/pip uninstall --quiet --yes torchvision && touch $(ST_OPENVINO)/.installed; } \
	  || echo "note: $(ST_OPENVINO) not built; perf_onnx runs without sentence-transformers' OpenVINO backend"

bench: dev timm st-openvino
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .hypothesis
