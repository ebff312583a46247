# flatserve -- build, test, run.
#
#   make                 build everything (CUDA auto-detected: nvcc on PATH or in $CUDA_HOME)
#   make CUDA=0|1        force the CPU-only or the CUDA build
#   make test            install missing packages, build, run every Criterion suite
#   make SANITIZE=1 test the same under ASan + UBSan (float-cast-overflow too;
#                        CC=clang for clang's, as CI runs both)
#   make run             install missing packages, build (-j, the CPU variant when no GPU
#                        answers), start the server on 127.0.0.1:8000 (RUN_HOST=0.0.0.0: all)
#   make deploy-check    validate deploy/ (schemas, promtool, a live server's metrics)
#   make bench           build and run the benchmarks
#   make loadtest-smoke  build, then 20 s of load with the memory-flatness bounds on
#   make deps            install the Debian/Ubuntu packages the build needs
#   make fuzz            build the libFuzzer targets with clang (build/fuzz/)
#   make fuzz-run        run each for FUZZ_TIME seconds (default 60) over its corpus
#   make fuzz-seeds      rewrite the generated seed inputs (tests/fuzz/README.md)
#
# Objects go under build/<variant>/ (cpu, cuda, cpu-san, cuda-san, and fuzz
# for the libFuzzer build), so the variants never mix. WERROR=1 (default when $CI is set) adds -Werror.

# Whether CUDA was given (command line or environment): `make run` then
# keeps it instead of choosing by the GPU.
CUDA_GIVEN := $(filter command line environment,$(origin CUDA))
CUDA ?= auto
SANITIZE ?= 0
WERROR ?= $(if $(CI),1,0)

# --- CUDA detection -----------------------------------------------------------
# CUDA_HOME wins when it holds nvcc; otherwise the toolkit is found from the
# nvcc on PATH (which may be a wrapper script outside the toolkit, so the
# candidates are checked for cuda_runtime.h), then /usr/local/cuda.
CUDA_HOME_FOUND := $(shell \
  for h in "$(CUDA_HOME)" \
           "$$(dirname "$$(dirname "$$(readlink -f "$$(command -v nvcc 2>/dev/null)" 2>/dev/null)")")" \
           /usr/local/cuda; do \
    [ -n "$$h" ] && [ -x "$$h/bin/nvcc" ] && [ -f "$$h/include/cuda_runtime.h" ] && { echo "$$h"; break; }; \
  done)
ifeq ($(CUDA),auto)
  override CUDA := $(if $(CUDA_HOME_FOUND),1,0)
endif
ifeq ($(CUDA),1)
  ifeq ($(CUDA_HOME_FOUND),)
    $(error CUDA=1 but no CUDA toolkit found: set CUDA_HOME, or put nvcc on PATH)
  endif
  override CUDA_HOME := $(CUDA_HOME_FOUND)
  NVCC := $(CUDA_HOME)/bin/nvcc
endif

# The libFuzzer build (FUZZ=1, which `make fuzz` sets with CC=clang): the
# CPU engine under the sanitizers, every object instrumented for libFuzzer's
# coverage, in a variant of its own.
FUZZ ?= 0
ifeq ($(FUZZ),1)
  override CUDA := 0
  override SANITIZE := 1
endif

# A build with clang (CC=clang) has its own variant, so that it never mixes
# with gcc's objects.
CC_TAG := $(if $(findstring clang,$(shell $(CC) --version 2>/dev/null | head -n 1)),-clang)
VARIANT := $(if $(filter 1,$(FUZZ)),fuzz,$(if $(filter 1,$(CUDA)),cuda,cpu)$(if $(filter 1,$(SANITIZE)),-san)$(CC_TAG))
BUILD := build/$(VARIANT)
BIN := $(BUILD)/bin

# --- flags --------------------------------------------------------------------
CPPFLAGS += -I. -D_GNU_SOURCE -DFS_HAVE_CUDA=$(CUDA) -MMD -MP
CFLAGS ?= -O2
CFLAGS += -std=c11 -g -pthread -Wall -Wextra -Wformat=2 -Wshadow -Wstrict-prototypes \
          -Wmissing-prototypes -Wno-unused-parameter
LDFLAGS += -pthread
# libstdc++: common/numtext.cc, the one C++ file of the library (C++17's
# <charconv> for exact, fast number text); the CUDA variant links it anyway.
LDLIBS += -lm -lstdc++

ifeq ($(WERROR),1)
  CFLAGS += -Werror
endif
ifneq ($(CC_TAG),)
  # clang reports a vectorisation hint it could not honour (the kernels' simd
  # loops, under the sanitizers' -O1) as a warning: a hint, not a defect.
  CFLAGS += -Wno-pass-failed
endif
ifeq ($(SANITIZE),1)
  SAN := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow \
         -fno-omit-frame-pointer
  CFLAGS += $(SAN) -O1
  LDFLAGS += $(SAN)
  # alloc/ walks its invariants at every unlock of a cache (alloc/cache_check.c).
  CPPFLAGS += -DALLOC_CHECK_INVARIANTS
  # The test framework's own leaks only (tests/lsan.supp says which).
  export LSAN_OPTIONS := suppressions=$(CURDIR)/tests/lsan.supp
endif
ifeq ($(FUZZ),1)
  CFLAGS += -fsanitize=fuzzer-no-link
endif
# C++ sources take the C flags less the C-only ones; clang's builds take
# clang++.
CXX := $(if $(CC_TAG),$(subst clang,clang++,$(CC)),$(if $(filter cc gcc,$(CC)),g++,$(CXX)))
CXXFLAGS := $(filter-out -std=c11 -Wstrict-prototypes -Wmissing-prototypes,$(CFLAGS)) \
            -std=c++17 -fno-exceptions -fno-rtti
ifeq ($(CUDA),1)
  CPPFLAGS += -I$(CUDA_HOME)/include
  # Static cudart: the binary needs no libcudart.so, and with no driver or no
  # GPU it still starts (the provider then reports FS_ENODEV).
  # The .cu objects are C++ (libstdc++). cuBLAS and cuBLASLt are linked as shared libraries (the
  # toolkit ships no static ones everywhere), found through the rpath; they load without a driver too.
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart_static -lstdc++ -ldl -lrt
  # Machine code for each CUDA_ARCH (A100, H100/H200) plus PTX of the newest
  # for GPUs after it.
  CUDA_ARCH ?= 80 90
  NVCC_GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
                  -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
  NVCCFLAGS ?= -O3 -std=c++17 $(NVCC_GENCODE) -Xcompiler -Wall,-Wextra,-fPIC \
               $(if $(filter 1,$(WERROR)),-Werror all-warnings -Xcompiler -Werror)
endif

# --- libraries ------------------------------------------------------------------
# The ONNX schema (libonnx-dev) and OpenBLAS's headers, from the system or from
# the unpacked Debian bundle ($DEPS_ROOT, see ../shared/tools/unpack-debs.sh).
# OpenBLAS is gemm_bench's baseline and nothing else's: only that bench's
# objects see its headers and only that binary links it (see its rule).
ONNX_PROTO ?= $(firstword $(wildcard /usr/include/onnx/onnx.proto $(DEPS_ROOT)/usr/include/onnx/onnx.proto))
OPENBLAS_INC := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread \
                  /usr/include/openblas $(DEPS_ROOT)/usr/include/x86_64-linux-gnu/openblas-pthread))
PROTOC_C ?= protoc-c
GEN := $(BUILD)/gen
PROTO_H := $(GEN)/onnx/onnx.pb-c.h
PROTO_C := $(GEN)/onnx/onnx.pb-c.c
# Triton's ModelConfig subset (config/model_config.proto) for config.pbtxt,
# read by protobuf's own C++ text-format parser (config/pbtxt.cc):
# libprotobuf-dev and protobuf-compiler.
PROTOC ?= protoc
MC_PROTO := config/model_config.proto
MC_PB_H := $(GEN)/config/model_config.pb.h
MC_PB_CC := $(GEN)/config/model_config.pb.cc
CPPFLAGS += -I$(GEN)
LDLIBS := -lmicrohttpd -lcjson -lprotobuf-c -lprotobuf -lz $(LDLIBS)

# --- sources ------------------------------------------------------------------
LIB_DIRS := common alloc engine engine/ops engine/cpu config server
LIB_SRC := $(filter-out server/main.c,$(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)))
LIB_CXX_SRC := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.cc))
CU_SRC := $(if $(filter 1,$(CUDA)),$(wildcard engine/cuda/*.cu))
TEST_SRC := $(wildcard tests/*/test_*.c)
# The fuzz targets' functions (tests/fuzz/README.md): linked into the test
# binary, whose replay suite runs every committed input through them, and
# into one libFuzzer binary per target with the entry point fuzz_main.c.
# make_seeds.c writes the generated seeds.
FUZZ_TARGETS := codec onnx run config model_config pbtxt
FUZZ_SRC := $(filter-out tests/fuzz/test_%.c tests/fuzz/fuzz_main.c tests/fuzz/make_seeds.c, \
              $(wildcard tests/fuzz/*.c))
FUZZ_OBJ := $(FUZZ_SRC:%.c=$(BUILD)/%.o)
FUZZ_MAIN_OBJ := $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/fuzz_main-%.o)
FUZZ_BINS := $(FUZZ_TARGETS:%=$(BIN)/fuzz-%)
FUZZ_SEEDS := $(BIN)/make_fuzz_seeds
BENCH_SRC := $(wildcard bench/*_bench.c)

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(LIB_CXX_SRC:%.cc=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.cu.o) $(PROTO_C:%.c=%.o) \
           $(MC_PB_CC:%.cc=%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
LIB := $(BUILD)/libflatserve.a

# The conformance runner and the tools: one program per file. The runner's
# comparison and case code is also linked into the test binary, whose
# tests/conformance/test_*.c check the comparison rules.
CONF_SRC := $(filter-out tests/conformance/test_%.c,$(wildcard tests/conformance/*.c))
CONF_OBJ := $(CONF_SRC:%.c=$(BUILD)/%.o)
CONF_LIB_OBJ := $(BUILD)/tests/conformance/compare.o $(BUILD)/tests/conformance/case.o
CONFORMANCE := $(if $(CONF_SRC),$(BIN)/conformance)
TOOLS_SRC := $(wildcard tools/*.c)
TOOLS_OBJ := $(TOOLS_SRC:%.c=$(BUILD)/%.o)
TOOLS := $(TOOLS_SRC:tools/%.c=$(BIN)/%)
# ONNX's conformance data: $FLATSERVE_ONNX_TESTS, else ../shared/onnx-tests.
ONNX_TESTS ?= $(or $(FLATSERVE_ONNX_TESTS),$(wildcard ../shared/onnx-tests))
# The model zoo in the tree (tools/export_zoo.py writes it; README in
# tests/conformance/), its expected-pass list, and extra runner arguments
# for both data sets (CONF_ARGS="--device cuda").
ZOO_DIR ?= tests/zoo
ZOO_EXPECT := $(ZOO_DIR)/expected_pass.txt
CONF_ARGS ?=

SERVER := $(BIN)/flatserve
# The load generator: every loadtest/*.c but its main is also linked into
# the test binary, which tests the pure parts (options, stats, metrics).
LOADGEN_SRC := $(filter-out loadtest/loadgen_main.c,$(wildcard loadtest/*.c))
LOADGEN_OBJ := $(LOADGEN_SRC:%.c=$(BUILD)/%.o)
LOADGEN := $(BIN)/loadgen
TESTS := $(BIN)/flatserve-tests
BENCHES := $(BENCH_SRC:bench/%.c=$(BIN)/%)
# The bare libmicrohttpd server that bench/http_bench.sh compares flatserve
# with: MHD alone, none of flatserve's code.
HTTP_HELLO := $(BIN)/http_hello

.PHONY: all test run run-built deploy-check bench deps clean info conformance zoo loadtest-smoke \
        fuzz fuzz-build fuzz-run fuzz-seeds
# The demo model repository (the server's embedded default), written by the
# project's own generator: never in git, byte-identical on every build.
MODELS := models/mlp/1/model.onnx models/cnn/1/model.onnx models/transformer/1/model.onnx \
          models/encoder/1/model.onnx

all: $(SERVER) $(TESTS) $(BENCHES) $(HTTP_HELLO) $(CONFORMANCE) $(TOOLS) $(LOADGEN) $(MODELS) \
     $(FUZZ_SEEDS)

$(MODELS) &: $(BIN)/make_models
	$(BIN)/make_models models

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cc
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

# CPU kernels: no code here reads or traps on floating-point exception
# flags, so GCC may if-convert NaN-exact selects (x > c ? c : x) and
# vectorise the loops holding them (erf, tanh, clamps). Results are the
# same IEEE results: only spurious or lost exception flags are allowed.
$(BUILD)/engine/cpu/%.o: CFLAGS += -fno-trapping-math

# Generated at build time from the system's onnx.proto; never in git.
$(PROTO_C) $(PROTO_H) &: $(ONNX_PROTO)
	@test -n "$(ONNX_PROTO)" || { echo "onnx.proto not found: install libonnx-dev (make deps)"; exit 1; }
	@mkdir -p $(GEN)
	$(PROTOC_C) --c_out=$(GEN) -I$(patsubst %/onnx/onnx.proto,%,$(ONNX_PROTO)) $(ONNX_PROTO)

# Generated code is compiled without the project's stricter warnings.
$(PROTO_C:%.c=%.o): $(PROTO_C)
	$(CC) $(CPPFLAGS) -O2 -g -w $(if $(filter 1,$(SANITIZE)),$(SAN)) -c $< -o $@

$(MC_PB_CC) $(MC_PB_H) &: $(MC_PROTO)
	@command -v $(PROTOC) >/dev/null 2>&1 || { echo "protoc not found: install protobuf-compiler and libprotobuf-dev (make deps)"; exit 1; }
	@mkdir -p $(GEN)
	$(PROTOC) --cpp_out=$(GEN) -I. $(MC_PROTO)

# The generated code keeps RTTI (protobuf's reflection uses it); UBSan's
# vptr check (and clang's function-type check) is left off it, since their
# runtime is C++'s and the binaries are linked by the C driver.
$(MC_PB_CC:%.cc=%.o): $(MC_PB_CC)
	$(CXX) $(CPPFLAGS) -std=c++17 -O2 -g -w \
	  $(if $(filter 1,$(SANITIZE)),$(SAN) -fno-sanitize=vptr $(if $(CC_TAG),-fno-sanitize=function)) \
	  $(if $(filter 1,$(FUZZ)),-fsanitize=fuzzer-no-link) -c $< -o $@

$(BUILD)/config/pbtxt.o: | $(MC_PB_H)
# protobuf's own headers shadow members; where they are not under a system
# include directory (the GPU host's unpacked .deps), -Wshadow fires in them.
$(BUILD)/config/pbtxt.o: CXXFLAGS += -Wno-shadow

# Every object may include the generated header.
$(filter-out $(PROTO_C:%.c=%.o),$(LIB_OBJ)) $(TEST_OBJ) $(BUILD)/server/main.o \
  $(BENCH_SRC:%.c=$(BUILD)/%.o) $(CONF_OBJ) $(TOOLS_OBJ) $(FUZZ_OBJ) $(FUZZ_MAIN_OBJ) \
  $(BUILD)/tests/fuzz/make_seeds.o: | $(PROTO_H)

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(filter-out -MMD -MP,$(CPPFLAGS)) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

# ar keeps one member per file name, so two sources with one basename
# (engine/ops/x.c, engine/cpu/x.c) would silently lose one: refuse that.
$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	@dups=$$(printf '%s\n' $(notdir $^) | sort | uniq -d); \
	  [ -z "$$dups" ] || { echo "Makefile: object names must be unique in $@: $$dups"; exit 1; }
	rm -f $@ && $(AR) rcs $@ $^

# -rdynamic: a crash's stack (server/main.c) names the functions.
$(SERVER): $(BUILD)/server/main.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -rdynamic $^ $(LDLIBS) -o $@

$(TESTS): $(TEST_OBJ) $(FUZZ_OBJ) $(LOADGEN_OBJ) $(CONF_LIB_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -lcurl -lcriterion -o $@

$(LOADGEN): $(BUILD)/loadtest/loadgen_main.o $(LOADGEN_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -lcurl -o $@

$(BIN)/%_bench: $(BUILD)/bench/%_bench.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# gemm_bench measures flatserve's SGEMM against OpenBLAS, so it alone links
# OpenBLAS (and bench/blas.c, its kernel check); the server, the tests and the
# other tools do not.
GEMM_BENCH_OBJ := $(BUILD)/bench/gemm_bench.o $(BUILD)/bench/blas.o
$(GEMM_BENCH_OBJ): CPPFLAGS += $(if $(OPENBLAS_INC),-I$(OPENBLAS_INC))
$(BIN)/gemm_bench: $(GEMM_BENCH_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -lopenblas -o $@

$(HTTP_HELLO): $(BUILD)/bench/http_hello.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ -lmicrohttpd -o $@

$(BIN)/conformance: $(CONF_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(TOOLS): $(BIN)/%: $(BUILD)/tools/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# --- fuzzing (tests/fuzz/README.md) ---------------------------------------------
# One libFuzzer binary per target: fuzz_main.c compiled for that target's
# function, linked with -fsanitize=fuzzer (only in the FUZZ=1 variant).
$(FUZZ_MAIN_OBJ): $(BUILD)/tests/fuzz/fuzz_main-%.o: tests/fuzz/fuzz_main.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DFUZZ_ONE=fuzz_$*_one -c $< -o $@

$(FUZZ_BINS): $(BIN)/fuzz-%: $(BUILD)/tests/fuzz/fuzz_main-%.o $(FUZZ_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer $^ $(LDLIBS) -o $@

$(FUZZ_SEEDS): $(BUILD)/tests/fuzz/make_seeds.o $(BUILD)/tests/fuzz/fuzz_model.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

FUZZ_CC ?= clang
FUZZ_TIME ?= 60
ifeq ($(FUZZ),1)
fuzz-build: $(FUZZ_BINS)
else
# Checks for clang and its libFuzzer runtime first, so that a machine
# without them fails here, saying what to install, not in a link line.
fuzz:
	@command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "make fuzz: $(FUZZ_CC) not found: the fuzz" \
	  "targets need clang and its libFuzzer runtime (Debian: clang libclang-rt-dev; make deps)"; exit 1; }
	@mkdir -p build/fuzz
	@printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n ? 0 : 0; }\n' \
	  > build/fuzz/probe.c
	@$(FUZZ_CC) -fsanitize=fuzzer,address,undefined build/fuzz/probe.c -o build/fuzz/probe 2>build/fuzz/probe.log || \
	  { cat build/fuzz/probe.log; echo "make fuzz: $(FUZZ_CC) cannot link -fsanitize=fuzzer: libFuzzer's" \
	    "runtime is missing (Debian: libclang-rt-dev, or libclang-rt-<version>-dev; make deps)"; exit 1; }
	@$(MAKE) --no-print-directory FUZZ=1 CC=$(FUZZ_CC) fuzz-build

# Each target for FUZZ_TIME seconds over its corpus and regressions; fails
# on the first crash (tests/fuzz/run.sh). FUZZ_RUN=... picks targets.
FUZZ_RUN ?= $(FUZZ_TARGETS)
fuzz-run: fuzz
	FUZZ_TIME=$(FUZZ_TIME) tests/fuzz/run.sh $(FUZZ_RUN)

# Rewrites the generated seeds (ONNX models, binary requests) in
# tests/fuzz/corpus/; the hand-written ones are left alone.
fuzz-seeds: $(FUZZ_SEEDS)
	$(FUZZ_SEEDS) tests/fuzz/corpus
endif

deps:
	@sh tools/deps.sh

# Criterion prints its synthesis line last; extra arguments via TEST_ARGS.
# The server suites spawn $(SERVER) from beside the test binary: it is
# built with them, or they would run an old one (or skip).
test: deps
	@$(MAKE) --no-print-directory $(TESTS) $(SERVER) $(CONFORMANCE) $(MODELS)
	$(TESTS) $(TEST_ARGS)
	@$(MAKE) --no-print-directory conformance
	@$(MAKE) --no-print-directory zoo

# Runs the ONNX conformance data and fails if a case listed in
# tests/conformance/expected_pass.txt does not pass. Skips, saying so, when
# the data is absent.
conformance: $(CONFORMANCE)
	@if [ -z "$(CONFORMANCE)" ]; then echo "conformance: no runner built yet"; \
	elif [ -z "$(ONNX_TESTS)" ] || [ ! -d "$(ONNX_TESTS)" ]; then \
	  echo "conformance: skipped: no ONNX test data (set FLATSERVE_ONNX_TESTS or provide ../shared/onnx-tests)"; \
	else $(CONFORMANCE) --expect tests/conformance/expected_pass.txt $(CONF_ARGS) $(ONNX_TESTS); fi

# Runs the model zoo committed under $(ZOO_DIR) (model cases: judged against
# each output's scale) and fails if a case listed in $(ZOO_EXPECT) does not
# pass; with no list yet, every case is reported and none is required. The
# worst error of every case goes to $(BUILD)/zoo-report.csv. Skips, saying
# so, while the directory holds no case.
zoo: $(CONFORMANCE)
	@if [ -z "$(CONFORMANCE)" ]; then echo "zoo: no runner built yet"; \
	elif [ -z "$$(find $(ZOO_DIR) -name model.onnx 2>/dev/null | head -n 1)" ]; then \
	  echo "zoo: skipped: no model cases in $(ZOO_DIR) yet (tools/export_zoo.py writes them; tests/conformance/README.md)"; \
	else \
	  if [ -f "$(ZOO_EXPECT)" ]; then expect="$(ZOO_EXPECT)"; else \
	    echo "zoo: no $(ZOO_EXPECT): reporting every case, requiring none"; expect=/dev/null; fi; \
	  $(CONFORMANCE) --expect "$$expect" --report $(BUILD)/zoo-report.csv $(CONF_ARGS) $(ZOO_DIR); fi

# The load generator's CI smoke: 20 s of the rebuild-storm scenario on the
# CPU with the flatness bounds on (loadtest/README.md).
loadtest-smoke: $(SERVER) $(LOADGEN) $(MODELS)
	BIN=$(BIN) loadtest/smoke.sh

# make run: the CUDA build only where a GPU answers (nvidia-smi -L lists
# one) -- elsewhere the CPU build, which is what would serve there anyway
# and builds in a fraction of the time; CUDA=0|1 given wins. Built with one
# job per core. Listens on RUN_HOST (loopback by default: the admin routes
# are open without server.admin_token) port 8000; RUN_ARGS adds flags.
RUN_HOST ?= 127.0.0.1
RUN_CUDA = $(if $(CUDA_GIVEN),$(CUDA),$(if $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && echo y),$(CUDA),0))
run: deps
	@[ -n "$(CUDA_GIVEN)" ] || [ "$(RUN_CUDA)" = "$(CUDA)" ] || \
	  echo "make run: no GPU answers (nvidia-smi -L): building and serving the CPU variant (CUDA=1 to build CUDA anyway)"
	@$(MAKE) --no-print-directory -j$(shell nproc 2>/dev/null || echo 2) CUDA=$(RUN_CUDA) run-built

run-built: $(SERVER) $(MODELS)
	$(SERVER) --host $(RUN_HOST) $(RUN_ARGS)

# deploy/ validated without a cluster (deploy/README.md): the manifests
# against the Kubernetes, prometheus-operator and KServe shapes, the
# alerts with promtool, and every metric the dashboard, alerts and adapter
# rules name against a live server's /metrics. Node.js and npm are the
# machine's (deploy/check/deps.sh installs Debian's where missing); the
# validator's packages are pinned in deploy/check/package-lock.json.
deploy-check: deps $(SERVER) $(MODELS) deploy/check/node_modules/.package-lock.json
	node deploy/check/check.mjs --server $(SERVER) --models models

deploy/check/node_modules/.package-lock.json: deploy/check/package.json deploy/check/package-lock.json
	@sh deploy/check/deps.sh
	npm --prefix deploy/check ci --no-audit --no-fund

bench: $(BENCHES)
	@for b in $(BENCHES); do echo "== $$b"; $$b $(BENCH_ARGS) || exit 1; done

info:
	@echo "variant=$(VARIANT) CUDA=$(CUDA) CUDA_HOME=$(CUDA_HOME) SANITIZE=$(SANITIZE) WERROR=$(WERROR)"

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/server/main.d $(BENCH_SRC:%.c=$(BUILD)/%.d) \
  $(CONF_OBJ:.o=.d) $(TOOLS_OBJ:.o=.d) $(BUILD)/bench/http_hello.d $(BUILD)/bench/blas.d \
  $(LOADGEN_OBJ:.o=.d) $(BUILD)/loadtest/loadgen_main.d $(FUZZ_OBJ:.o=.d) $(FUZZ_MAIN_OBJ:.o=.d) \
  $(BUILD)/tests/fuzz/make_seeds.d
