# kvferry front door. `make` builds, `make test` installs what is missing, builds and tests,
# `make demo` runs the main job on the built-in model. See README.md.
BUILD      ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc)
CMAKE_GEN  := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CTEST_ARGS ?=

.PHONY: all build deps configure test test-long format format-check tsa asan tsan fuzz bench demo clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_EXPORT_COMPILE_COMMANDS=ON

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Unit, integration and e2e tests (label `long` excluded), after the format check.
test: deps format-check build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE long $(CTEST_ARGS)

# Longer suites: fuzzing for a bounded time, load, sanitizer runs. .ci/run runs it after `test`.
test-long: deps build tsa fuzz
	cd $(BUILD) && ctest --output-on-failure -L long $(CTEST_ARGS)

# libFuzzer targets (clang, ASan+UBSan) in build-fuzz, each run FUZZ_SECONDS (tests/fuzz/run.sh).
FUZZ_SECONDS ?= 60
fuzz: deps
	cmake -S . -B build-fuzz $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_C_COMPILER=clang -DKVFERRY_FUZZ=ON -DKVFERRY_SANITIZE=address,undefined -DKVFERRY_BENCH=OFF
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# Second build with clang and -Wthread-safety (errors), libraries and tests only, no run.
tsa: deps
	cmake -S . -B build-tsa $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_C_COMPILER=clang -DKVFERRY_THREAD_SAFETY=ON -DKVFERRY_BENCH=OFF
	cmake --build build-tsa -j $(JOBS)

asan: deps
	cmake -S . -B build-asan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DKVFERRY_SANITIZE=address,undefined -DKVFERRY_BENCH=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -LE "long|e2e|nosan"

tsan: deps
	cmake -S . -B build-tsan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DKVFERRY_SANITIZE=thread -DKVFERRY_BENCH=OFF
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && ctest --output-on-failure -j $(JOBS) -L "transfer|connector" -LE "long|nosan"

FORMAT_FILES = $(shell git ls-files '*.h' '*.cc' '*.cpp' 2>/dev/null)
format:
	@clang-format -i $(FORMAT_FILES)

format-check:
	@echo "format-check: $(words $(FORMAT_FILES)) files"
	@clang-format --dry-run --Werror $(FORMAT_FILES)

bench: build
	$(BUILD)/bin/kvferry bench engine
	$(BUILD)/bin/kvferry bench xfer

demo: deps build
	scripts/demo.sh $(BUILD)/bin/kvferry

clean:
	rm -rf $(BUILD) build-tsa build-asan build-tsan build-fuzz
