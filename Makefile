# The README's two commands. Both install what is missing (scripts/debian-packages.txt),
# configure (CMakePresets.json, Release) and build; then
#   make demo   checks the default scenario, prints its summary, then simulates one iteration,
#   make test   runs the whole test suite with ctest (its summary is the last lines).
PRESET        ?= release
BUILD_DIR     := build/$(PRESET)
JOBS          ?= $(shell nproc 2>/dev/null || echo 2)
DEMO_SCENARIO ?= scenarios/examples/explicit-plan.yaml
HGSIM         := $(BUILD_DIR)/apps/hgsim

MAKEFLAGS += --no-print-directory

.PHONY: all deps configure build demo test bench format clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

demo: build
	@$(HGSIM) check $(DEMO_SCENARIO) --summary
	@echo
	@$(HGSIM) run $(DEMO_SCENARIO)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

bench: build
	@$(BUILD_DIR)/bench/hgsim_bench

format:
	@git ls-files '*.cpp' '*.hpp' '*.cu' | xargs clang-format -i

clean:
	@rm -rf build
