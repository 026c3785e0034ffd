# accelerate-cpp: `make demo` runs the main job, `make test` runs every test. Both set everything up first.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)

# Compiler cache outside the clone that hits from any folder (see docs/development.md).
export CCACHE_DIR ?= $(HOME)/.cache/accelerate-cpp/ccache
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_MAXSIZE ?= 8G

VENV = $(shell scripts/bootstrap.sh --print-venv)
MLFLOW_VENV = $(shell scripts/bootstrap.sh --print-mlflow-venv)

.PHONY: all bootstrap configure build test demo clean format

all: build

bootstrap:
	@scripts/bootstrap.sh

$(BUILD_DIR)/build.ninja:
	@$(MAKE) --no-print-directory bootstrap
	@mkdir -p $(BUILD_DIR)
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DACCEL_PYTHON=$(VENV)/bin/python \
	  -DACCEL_MLFLOW_PYTHON=$(MLFLOW_VENV)/bin/python -Wno-dev > $(BUILD_DIR)/configure.log 2>&1 \
	  || { cat $(BUILD_DIR)/configure.log; rm -f $(BUILD_DIR)/build.ninja; exit 1; }

configure: bootstrap $(BUILD_DIR)/build.ninja

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

demo: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target accel mlp
	@scripts/demo.sh $(BUILD_DIR)

format:
	@scripts/format.sh

clean:
	@rm -rf $(BUILD_DIR)
