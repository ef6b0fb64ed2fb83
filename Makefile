# The README's two commands. Both install what is missing (scripts/debian-packages.txt, the
# groups each target needs), configure (CMakePresets.json, Release) and build; then
#   make demo   (the demo group: what building and running the simulator needs; builds hgsim
#               alone) checks the default scenario, prints its summary, then simulates one
#               iteration,
#   make test   (every group) runs the sanitizer pass (make sanitize), then the whole test
#               suite with ctest (its summary is the last lines).
# make live and make notebooks install their own groups on top of the demo's.
PRESET        ?= release
BUILD_DIR     := build/$(PRESET)
JOBS          ?= $(shell nproc 2>/dev/null || echo 2)
DEMO_SCENARIO ?= scenarios/examples/explicit-plan.yaml
HGSIM         := $(BUILD_DIR)/apps/hgsim

MAKEFLAGS += --no-print-directory
FUZZ_SECONDS ?= 60
FUZZ_CODECS  := none fp16 bf16 fp8_e4m3 fp8_e5m2 int8 int4 topk randomk powersgd
FUZZ_INPUTS  := scenario plan trace chakra

LIVE_SCENARIO ?= scenarios/live/wan-bound-1f1b.yaml

.PHONY: all deps configure build demo live test sanitize bench notebooks fuzz format clean

all: build

# DEPS_GROUPS: the package list's groups to install (empty: every group).
deps:
	@scripts/install-deps.sh $(DEPS_GROUPS)

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

# The simulator alone: the demo group of packages, the hgsim target (and no tests, Python
# module or benchmarks, which make test builds).
demo: DEPS_GROUPS = demo
demo: configure
	@cmake --build --preset $(PRESET) -j $(JOBS) --target hgsim
	@$(HGSIM) check $(DEMO_SCENARIO) --summary
	@echo
	@$(HGSIM) run $(DEMO_SCENARIO)

# The sanitizer pass first (its own instrumented build, build/debug), then the whole suite
# in the release build: the last lines are the whole suite's summary.
# Five steps of one plan trained for real (CPU workers, emulated WAN links when root): the
# Python module and PyTorch on top of the demo's packages.
live: DEPS_GROUPS = demo python live
live: build
	@$(HGSIM) live $(LIVE_SCENARIO) --steps 5

test: build sanitize
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The sanitizer pass (a step of make test): the debug preset (AddressSanitizer + UBSan)
# without CUDA, at -O0 with line tables only (-g1: stack traces keep file:line), over the
# tests of hostile input, files, processes, units, scenario errors and codecs (their own
# binary, hgsim_sanitize_tests: tests/CMakeLists.txt), the replayed fuzz corpora and a smoke
# run of every command (scripts/smoke.sh). Any report fails it (halt_on_error). Compiling is
# what it costs: at -O1 -g the instrumented build took 22 min on 2 idle cores (2026-12-02);
# -O0 -g0 compiles the heaviest files 2.7-6.2x faster (plan_command.cpp 40 -> 15 s,
# workload.cpp 42 -> 7 s, test_sim.cpp 80 -> 21 s), and four test files instead of every
# one. The simulator and planner tests are left to the release build (docs/testing.md).
SANITIZE_TESTS ?= ^sanitize\.|fuzz_replay|smoke
SANITIZE_TARGETS := hgsim hgsim_sanitize_tests $(addsuffix _replay,$(addprefix fuzz_,$(FUZZ_CODECS) $(FUZZ_INPUTS)))
sanitize: deps
	@cmake --preset debug -DHGSIM_CUDA=OFF -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" >/dev/null
	@cmake --build --preset debug -j $(JOBS) --target $(SANITIZE_TARGETS)
	@cd build/debug && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -R '$(SANITIZE_TESTS)'

bench: DEPS_GROUPS = demo test
bench: build
	@$(BUILD_DIR)/bench/hgsim_bench

# Executes every notebook in notebooks/ against the build (hgsim from PYTHONPATH); the
# executed copies, with their figures, land in build/<preset>/notebooks/.
notebooks: DEPS_GROUPS = demo python notebooks
notebooks: build
	@PYTHONPATH=$(CURDIR)/$(BUILD_DIR)/python /usr/bin/python3 notebooks/run_notebooks.py \
	  --out $(BUILD_DIR)/notebooks notebooks/*.ipynb

# Fuzzers of the codecs and of the scenario, plan and trace readers (libFuzzer; needs clang
# and libclang-rt-14-dev, not in the package list because nothing else needs them). Each target runs FUZZ_SECONDS on its own corpus,
# seeded from fuzz/corpus/<codec>/; crashes land in build/fuzz/crashes/.
fuzz:
	@cmake -S . -B build/fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DHGSIM_FUZZ=ON -DHGSIM_CUDA=OFF -DBUILD_TESTING=OFF >/dev/null
	@cmake --build build/fuzz -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_CODECS) $(FUZZ_INPUTS))
	@mkdir -p build/fuzz/crashes
	@for c in $(FUZZ_CODECS) $(FUZZ_INPUTS); do \
	  mkdir -p build/fuzz/corpus/$$c; \
	  build/fuzz/fuzz/fuzz_$$c -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=build/fuzz/crashes/$$c- build/fuzz/corpus/$$c fuzz/corpus/$$c \
	    2>&1 | grep -E '^stat::number_of_executed_units|^==.*ERROR|^SUMMARY|^artifact' \
	    | sed "s/^/$$c: /" || exit 1; \
	done

format:
	@git ls-files '*.cpp' '*.hpp' '*.cu' | xargs clang-format -i

clean:
	@rm -rf build
