# qfuse build. Targets: all gen demo test check check-asan check-valgrind bench fuzz examples
# install clean distclean help.
# Out-of-tree objects and generated sources in $(BUILD_DIR); results in out/. `make V=1` shows
# commands.

# The release: libqfuse.so.$(VERSION) with the soname libqfuse.so.<major>, and qfuse.pc.
VERSION := 0.1.0
SOVERSION := $(firstword $(subst ., ,$(VERSION)))
# qfuse-gen --version prints its own copy (gen/gen_cli.h); say so when the two differ.
GEN_VERSION := $(shell sed -n 's/^\#define QF_GEN_VERSION "\(.*\)"/\1/p' gen/gen_cli.h)
ifneq ($(GEN_VERSION),$(VERSION))
$(warning VERSION $(VERSION) differs from QF_GEN_VERSION $(GEN_VERSION) in gen/gen_cli.h)
endif

CUDA_HOME ?= /usr/local/cuda
BUILD_DIR ?= build
PREFIX ?= /usr/local
CC ?= gcc
# A folder with the Debian -dev packages unpacked by `dpkg -x` (machines without apt access).
QFUSE_DEPS_PREFIX ?=

B := $(BUILD_DIR)
# Generated sources (qfuse-gen's output for recipes/): a build product, in the build directory,
# so that a qfuse-gen run of one's own (its default output is ./out) never touches the tree's
# build. `make GEN_DIR=dir` on the command line puts them elsewhere.
GEN_DIR := $(if $(filter command line,$(origin GEN_DIR)),$(GEN_DIR),$(B)/generated)
# Results: out/bench (make bench) and out/data (the downloaded checkpoint); `make OUT=dir` on the
# command line (an OUT variable in the environment is ignored: it is a common shell name).
OUT := $(if $(filter command line,$(origin OUT)),$(OUT),out)

ifeq ($(V),1)
Q :=
else
Q := @
endif

WARN := -Wall -Wextra -Wshadow -Wundef -Wwrite-strings -Wstrict-prototypes -Wmissing-prototypes
OPT ?= -O2 -g
CFLAGS_ALL := -std=c11 $(OPT) -fPIC -ffp-contract=off -pthread $(WARN) $(CFLAGS)
# PREFIX reaches no object of the build: only the installed qfuse-gen (INSTALL_GEN) has it.
CPPFLAGS_ALL := -D_GNU_SOURCE -Iruntime -Iruntime/jit -Iruntime/ref -Iruntime/tools -Igen -I$(GEN_DIR) \
                -isystem $(CUDA_HOME)/include \
                -I/usr/include/lua5.4 -I/usr/include/cjson $(CPPFLAGS)
LDLIBS_CUDA := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnvrtc -lcublasLt -lcudart
LDLIBS_ALL := -llua5.4 -lcjson -lxxhash $(LDLIBS_CUDA) -ldl -lpthread -lm $(LDLIBS)
ifneq ($(QFUSE_DEPS_PREFIX),)
ifeq ($(wildcard $(QFUSE_DEPS_PREFIX)/usr/include),)
$(warning QFUSE_DEPS_PREFIX=$(QFUSE_DEPS_PREFIX) has no usr/include (unpack the packages there with dpkg -x; scripts/install-deps); building against the system's headers)
endif
DEPLIB := $(QFUSE_DEPS_PREFIX)/usr/lib/x86_64-linux-gnu
CPPFLAGS_ALL += -I$(QFUSE_DEPS_PREFIX)/usr/include -I$(QFUSE_DEPS_PREFIX)/usr/include/lua5.4 \
                -I$(QFUSE_DEPS_PREFIX)/usr/include/x86_64-linux-gnu \
                -I$(QFUSE_DEPS_PREFIX)/usr/include/cjson
LDLIBS_ALL := -L$(DEPLIB) -Wl,-rpath,$(DEPLIB) $(LDLIBS_ALL)
endif

# ---- sources
# libqfuse: the library (runtime/), its JIT (runtime/jit/) and scalar references (runtime/ref/);
# the tools (runtime/tools/) link it, with their own helpers (TOOL_LIB_SRCS).
TOOL_SRCS := runtime/tools/qfuse_demo.c runtime/tools/qfuse_bench.c runtime/tools/qfuse_cache.c
# qfuse-bench's parts besides its main (one file per job: inputs/timing/rows, each section).
BENCH_SRCS := $(wildcard runtime/tools/bench_*.c)
TOOL_LIB_SRCS := $(filter-out $(TOOL_SRCS) $(BENCH_SRCS),$(wildcard runtime/tools/*.c))
CORE_SRCS := $(wildcard runtime/*.c runtime/jit/*.c runtime/ref/*.c)
GEN_MAIN := gen/main.c
# The generator's recipe core (Lua loader, variants, template values and preludes) is part of
# libqfuse too: the runtime loads .lua recipe files with the same code (docs/recipes.md).
GEN_CORE_SRCS := gen/gen_buf.c gen/gen_keys.c gen/gen_recipe.c gen/gen_variant.c gen/gen_render.c
CORE_SRCS += $(GEN_CORE_SRCS)
GEN_SRCS := $(filter-out $(GEN_MAIN) $(GEN_CORE_SRCS),$(wildcard gen/*.c))
TEST_SRCS := $(wildcard tests/test_*.c)
# What the tests share; every test binary depends on all of them.
TEST_HEADERS := $(wildcard tests/test_*.h)
RECIPES := $(wildcard recipes/*.lua)
TEMPLATES := $(wildcard templates/*.cu)
# Shared device headers of the templates: in-memory NVRTC headers, embedded in the registry.
DEV_HEADERS := $(wildcard templates/qf_dev_*.cuh)
OUT_SRCS := $(GEN_DIR)/registry.c $(GEN_DIR)/shapes.c
# The headers `make install` installs: the public API, and the generated fake-shape functions.
PUBLIC_HEADERS := runtime/qfuse.h runtime/qf_formats.h runtime/family.h runtime/registry.h \
                  $(GEN_DIR)/shapes.h
EXAMPLE_SRCS := $(wildcard examples/*.c)
EXAMPLE_RECIPES := $(wildcard examples/*.lua)

CORE_OBJS := $(CORE_SRCS:%.c=$(B)/%.o)
TOOL_LIB_OBJS := $(TOOL_LIB_SRCS:%.c=$(B)/%.o)
BENCH_OBJS := $(B)/runtime/tools/qfuse_bench.o $(BENCH_SRCS:%.c=$(B)/%.o)
GEN_OBJS := $(GEN_SRCS:%.c=$(B)/%.o)
OUT_OBJS := $(B)/generated/registry.o $(B)/generated/shapes.o
TEST_BINS := $(TEST_SRCS:tests/%.c=$(B)/tests/%)
EXAMPLE_BINS := $(EXAMPLE_SRCS:examples/%.c=$(B)/examples/%)

QFUSE_GEN := $(B)/qfuse-gen
QFUSE_DEMO := $(B)/qfuse-demo
QFUSE_BENCH := $(B)/qfuse-bench
QFUSE_CACHE := $(B)/qfuse-cache
LIB_CORE := $(B)/libqfuse_core.a
LIB_GEN := $(B)/libqfuse_gen.a
LIB_TOOLS := $(B)/libqfuse_tools.a
LIB := $(B)/libqfuse.a
SOLIB := $(B)/libqfuse.so
SONAME := libqfuse.so.$(SOVERSION)
SOLIB_REAL := $(B)/libqfuse.so.$(VERSION)
DEPS_OK := $(B)/.deps-ok
FLAGS_FILE := $(B)/.flags

.PHONY: all lib gen demo test check bench install clean distclean help FORCE fuzz fuzz-merge \
        fuzz-cc examples gpu-test-units
all: $(QFUSE_GEN) $(LIB) $(SOLIB) $(QFUSE_DEMO) $(QFUSE_BENCH) $(QFUSE_CACHE) $(TEST_BINS)
# libqfuse.so alone (what `pip install .` packages: setup.py)
lib: $(SOLIB)

help:
	@echo "make            qfuse-gen, build/generated/ (kernels), libqfuse, qfuse-demo and tests"
	@echo "make demo       build and run the demo (GPU part skipped without a GPU)"
	@echo "make test       build and run every test (GPU tests skip without a GPU)"
	@echo "                TEST_JOBS=N: N binaries at a time (a GPU host: its core count)"
	@echo "make gpu-test-units  the GPU test units of such a run (scripts/gpu-check --parallel)"
	@echo "make check      same as test, with -Werror (objects in CHECK_DIR=$(CHECK_DIR))"
	@echo "make examples   build examples/ against the library ($(B)/examples/)"
	@echo "make lib        only libqfuse.so (what pip install . packages with the Python package)"
	@echo "make install    install to PREFIX=$(PREFIX)"
	@echo "make check-asan tests under AddressSanitizer + UBSan (objects in ASAN_DIR=$(ASAN_DIR))"
	@echo "make check-valgrind  tests under valgrind memcheck (VALGRIND=$(VALGRIND))"
	@echo "qfuse-cache     $(B)/qfuse-cache list|clear|prune|warm: the disk kernel cache (--help)"
	@echo "make bench      benchmarks + PyTorch peers + plot + docs/bench.md tables (GPU); QUICK=1 smoke,"
	@echo "                SECTION=\"gemm step\" some sections (tables in out/bench/tables.md), ITERS=N,"
	@echo "                GEMM_DATA=bytes block-scaled GEMM operands as random bytes (default quantized)"
	@echo "make fuzz       fuzz the recipe loader and generator (clang + libFuzzer), FUZZ_SECONDS"
	@echo "make fuzz-merge minimize build-fuzz's new inputs into tests/fuzz/corpus"
	@echo "make gen        only regenerate build/generated/ from recipes/ and templates/"
	@echo "make clean      remove the build directories; distclean also out/ but out/data"
	@echo "variables: CUDA_HOME BUILD_DIR PREFIX QFUSE_DEPS_PREFIX V=1"

# ---- dependencies and flag tracking (install-deps runs again when the flags change: CUDA_HOME)
$(DEPS_OK): scripts/install-deps scripts/folder_arg.sh $(FLAGS_FILE) | $(B)/
	$(Q)CUDA_HOME=$(CUDA_HOME) QFUSE_DEPS_PREFIX=$(QFUSE_DEPS_PREFIX) scripts/install-deps
	$(Q)touch $@

$(FLAGS_FILE): FORCE | $(B)/
	$(Q)echo '$(CC) $(CFLAGS_ALL) $(CPPFLAGS_ALL) $(LDLIBS_ALL)' > $@.new
	$(Q)cmp -s $@.new $@ && rm -f $@.new || mv -f $@.new $@

%/:
	$(Q)mkdir -p $@

# ---- compile
$(B)/%.o: %.c $(FLAGS_FILE) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -MMD -MP -c $< -o $@
$(B)/generated/%.o: $(GEN_DIR)/%.c $(FLAGS_FILE) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(LIB_CORE): $(CORE_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIB_GEN): $(GEN_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIB_TOOLS): $(TOOL_LIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

$(QFUSE_GEN): $(B)/$(GEN_MAIN:.c=.o) $(LIB_GEN) $(LIB_CORE)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL)

# ---- generated sources: one generator run produces all of $(GEN_DIR)
# The list of its inputs, so that removing a recipe or a template regenerates them too.
GEN_INPUTS := $(B)/.gen-inputs
$(GEN_INPUTS): FORCE | $(B)/
	$(Q)echo '$(RECIPES) $(TEMPLATES) $(DEV_HEADERS)' > $@.new
	$(Q)cmp -s $@.new $@ && rm -f $@.new || mv -f $@.new $@
$(GEN_DIR)/.stamp: $(QFUSE_GEN) $(RECIPES) $(TEMPLATES) $(DEV_HEADERS) runtime/qf_formats.h $(GEN_INPUTS)
	@$(if $(Q),echo "  GEN     $(GEN_DIR)/ from $(RECIPES)")
	$(Q)$(QFUSE_GEN) -o $(GEN_DIR) $(RECIPES)
	$(Q)touch $@
# The generator rewrites only the files whose bytes change, so the objects depend on the files
# and only order-only on the stamp: a run that changes nothing (another build directory's
# qfuse-gen, the same sources) rebuilds nothing. The empty recipe (;) makes make read the files'
# times again after a run.
$(OUT_SRCS) $(GEN_DIR)/shapes.h: $(GEN_DIR)/.stamp ;
gen: $(GEN_DIR)/.stamp

$(OUT_OBJS): | $(GEN_DIR)/.stamp

$(LIB): $(CORE_OBJS) $(OUT_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
# libqfuse.so.$(VERSION), its soname link libqfuse.so.$(SOVERSION), the link-time libqfuse.so.
$(SOLIB_REAL): $(CORE_OBJS) $(OUT_OBJS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,$(SONAME) -o $@ $^ $(LDLIBS_ALL)
$(B)/$(SONAME): $(SOLIB_REAL)
	$(Q)ln -sf $(notdir $<) $@
$(SOLIB): $(B)/$(SONAME)
	$(Q)ln -sf $(SONAME) $@

$(QFUSE_DEMO): $(B)/runtime/tools/qfuse_demo.o $(LIB_TOOLS) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS_ALL) -fopenmp -o $@ $^ $(LDLIBS_ALL)
$(B)/runtime/tools/qfuse_demo.o: | $(GEN_DIR)/.stamp

$(QFUSE_BENCH): $(BENCH_OBJS) $(LIB_TOOLS) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS_ALL) -fopenmp -o $@ $^ $(LDLIBS_ALL)
$(BENCH_OBJS): | $(GEN_DIR)/.stamp
# The two tools and the fp64 MLP model use OpenMP for host-side references; compiled by their
# own rule so that -fopenmp never reaches the flags record that every other object depends on.
OMP_OBJS := $(B)/runtime/tools/qfuse_demo.o $(B)/runtime/tools/mlp_model.o $(BENCH_OBJS)
$(OMP_OBJS): $(B)/%.o: %.c $(FLAGS_FILE) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -fopenmp -MMD -MP -c $< -o $@

$(QFUSE_CACHE): $(B)/runtime/tools/qfuse_cache.o $(LIB_TOOLS) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL)

# ---- tests
$(B)/tests/%: tests/%.c $(TEST_HEADERS) $(LIB) $(LIB_GEN) $(LIB_TOOLS) $(QFUSE_GEN) $(FLAGS_FILE) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS_ALL) -Itests $(CFLAGS_ALL) -fopenmp -o $@ $< $(TEST_EXTRA_SRCS) $(LIB_GEN) $(LIB_TOOLS) $(LIB) -lcmocka $(LDLIBS_ALL)

# The examples run first (each exits 0 without a GPU), so that the tests' summary stays last.
# qfuse-bench is built too, so that every tool the docs name exists after `make test`.
# TEST_JOBS=N (default 1) runs N test binaries at a time (scripts/run-tests --jobs), with
# test_gpu_quantize split into one unit per shipped recipe: on a GPU host its full shapes run
# for many minutes serially (docs/testing.md).
TEST_JOBS ?= 1
# checked when make reads this file, before anything is built: 1 to 999, plain digits (each
# digit becomes a mark x, so an x of its own is refused first)
ifneq ($(filter test,$(MAKECMDGOALS)),)
tj_marks := $(subst 0,x ,$(subst 1,x ,$(subst 2,x ,$(subst 3,x ,$(subst 4,x ,$(subst 5,x ,\
    $(subst 6,x ,$(subst 7,x ,$(subst 8,x ,$(subst 9,x ,$(TEST_JOBS)))))))))))
ifneq ($(words $(TEST_JOBS))$(findstring x,$(TEST_JOBS))$(filter-out x,$(tj_marks))$(filter \
    0%,$(TEST_JOBS))$(filter-out 1 2 3,$(words $(tj_marks))),1)
$(error make test: TEST_JOBS='$(TEST_JOBS)': expected a count from 1 to 999)
endif
endif
split_units = $(foreach t,$(1),$(if $(filter %/test_gpu_quantize,$(t)),\
    $(RECIPES:recipes/%.lua=$(t)@%),$(t)))
TEST_UNITS = $(if $(filter-out 1,$(TEST_JOBS)),$(call split_units,$(TEST_BINS)),$(TEST_BINS))
# The GPU test binaries as the units of a parallel run (scripts/gpu-check --parallel).
gpu-test-units:
	@echo $(call split_units,$(filter $(B)/tests/test_gpu_%,$(TEST_BINS)))
test: $(TEST_BINS) $(QFUSE_GEN) $(QFUSE_DEMO) $(QFUSE_BENCH) $(QFUSE_CACHE) $(EXAMPLE_BINS) $(SOLIB)
	$(Q)$(if $(EXAMPLE_RECIPES),$(QFUSE_GEN) --check $(EXAMPLE_RECIPES))
	$(Q)failed=; for e in $(EXAMPLE_BINS); do echo "== $$e"; $$e || failed="$$failed $$e"; done; \
	    { PYTHON=$(PYTHON) BUILD_DIR=$(B) scripts/run-pytest; echo $$? > $(B)/pytest.rc; } | \
	        tee $(B)/pytest.log; py=$$(cat $(B)/pytest.rc); \
	    scripts/run-tests --jobs $(TEST_JOBS) $(TEST_UNITS); rc=$$?; \
	    echo "python tests: $$(grep -E '(passed|failed|error|skipped)' $(B)/pytest.log | tail -1)"; \
	    grep '^SKIPPED' $(B)/pytest.log | sed 's/^SKIPPED \[[0-9]*\] /  skipped: /'; \
	    if [ $$py -ne 0 ]; then echo "python tests failed (scripts/run-pytest: rc $$py)"; fi; \
	    if [ -n "$$failed" ]; then echo "examples failed:$$failed"; exit 1; fi; \
	    [ $$py -eq 0 ] && exit $$rc; exit 1

# ---- examples (examples/*.c): built as a user builds against an installed qfuse: only the
# headers `make install` installs (staged in $(STAGE_INC)), linked with the shared library (an
# rpath to $(B) finds it at run time) and cudart. Without a GPU they check their arguments on a
# device-less context and exit 0.
STAGE_INC := $(B)/include/qfuse
STAGED_HEADERS := $(addprefix $(STAGE_INC)/,$(notdir $(PUBLIC_HEADERS)))
EXAMPLE_LDLIBS := -L$(B) -Wl,-rpath,$(abspath $(B)) -lqfuse -L$(CUDA_HOME)/lib64 \
                  -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lm
$(STAGE_INC)/shapes.h: $(GEN_DIR)/shapes.h | $(STAGE_INC)/
	$(Q)cp $< $@
$(filter-out %/shapes.h,$(STAGED_HEADERS)): $(STAGE_INC)/%.h: runtime/%.h | $(STAGE_INC)/
	$(Q)cp $< $@
$(B)/examples/%: examples/%.c $(wildcard examples/*.h) $(STAGED_HEADERS) $(SOLIB) $(FLAGS_FILE) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) -I$(STAGE_INC) -isystem $(CUDA_HOME)/include $(CPPFLAGS) $(CFLAGS_ALL) -MMD -MP \
	    -o $@ $< $(EXAMPLE_LDLIBS) $(LDLIBS)
examples: $(EXAMPLE_BINS)

# -Werror in a build directory of its own (CHECK_DIR): sharing one with `make` would make each
# rebuild everything the other built (the flags record differs).
CHECK_DIR ?= build-check
check:
	$(Q)$(MAKE) --no-print-directory BUILD_DIR=$(CHECK_DIR) CFLAGS="$(CFLAGS) -Werror" test

# ---- sanitizers (docs/testing.md): the CPU tests (GPU tests skip without a GPU) under
# ASan + UBSan in their own build, or under valgrind memcheck. Child processes the tests exec are
# instrumented under ASan; valgrind does not follow them (no --trace-children), so they run
# natively there. protect_shadow_gap=0 lets the CUDA driver map memory where ASan keeps its gap.
ASAN_DIR ?= build-asan
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# verify_asan_link_order=0: scripts/run-tests runs each binary under stdbuf (line-buffered output),
# whose LD_PRELOAD library would otherwise come before the ASan runtime and stop the run.
SAN_ENV := ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:verify_asan_link_order=0 \
           LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 QFUSE_TEST_QUICK=1
VALGRIND ?= valgrind
VALGRIND_FLAGS := -q --error-exitcode=1 --leak-check=full --num-callers=40 \
                  --suppressions=$(CURDIR)/tests/valgrind.supp
.PHONY: check-asan check-valgrind
check-asan:
	$(Q)$(MAKE) --no-print-directory BUILD_DIR=$(ASAN_DIR) CFLAGS="$(CFLAGS) $(SAN_FLAGS)" all
	$(Q)$(SAN_ENV) scripts/run-tests $(TEST_SRCS:tests/%.c=$(ASAN_DIR)/tests/%)
# NOTES: OMP_NUM_THREADS=1: valgrind runs threads one at a time anyway, and libgomp's pool threads
# still alive at exit would show as "possibly lost" thread stacks.
check-valgrind: $(TEST_BINS) $(QFUSE_GEN) $(QFUSE_CACHE)
	$(Q)command -v $(VALGRIND) >/dev/null || scripts/install-deps --tool valgrind
	$(Q)QFUSE_TEST_QUICK=1 OMP_NUM_THREADS=1 QFUSE_TEST_WRAPPER="$(VALGRIND) $(VALGRIND_FLAGS)" \
	    scripts/run-tests $(TEST_BINS)

# ---- benchmarks (docs/bench.md): qfuse, then the PyTorch peers, then the merged report.
PYTHON ?= python3
BENCH_DIR := $(OUT)/bench
BENCH_QUICK := $(if $(filter 1,$(QUICK)),--quick)
# SECTION="gemm step" runs those sections only (quant, gemm, jit, step), ITERS=N sets the timed
# batches; a run of some sections writes its tables to $(BENCH_DIR)/tables.md, not docs/bench.md.
# GEMM_DATA=bytes draws the block-scaled GEMMs' operands as random bytes with unit scales (default:
# the recipes' quantization of N(0, 1) data), in qfuse-bench and the peers alike.
BENCH_ARGS := $(BENCH_QUICK) $(if $(ITERS),--iters $(ITERS)) $(if $(GEMM_DATA),--gemm-data $(GEMM_DATA))
BENCH_PEER_SECTIONS := $(filter-out jit,$(SECTION))
bench: $(QFUSE_BENCH)
	$(Q)mkdir -p $(BENCH_DIR)
	$(Q)rm -f $(BENCH_DIR)/qfuse.csv $(BENCH_DIR)/peers.csv
	$(Q)$(QFUSE_BENCH) $(BENCH_ARGS) $(foreach s,$(SECTION),--section $(s)) \
	    --csv $(BENCH_DIR)/qfuse.csv
	$(Q)if [ -z "$(SECTION)" ] || [ -n "$(BENCH_PEER_SECTIONS)" ]; then \
	    $(PYTHON) scripts/bench_peers.py $(BENCH_ARGS) \
	        $(foreach s,$(BENCH_PEER_SECTIONS),--section $(s)) --csv $(BENCH_DIR)/peers.csv; fi
	$(Q)$(PYTHON) scripts/bench_report.py $(BENCH_QUICK) $(if $(SECTION),--no-doc) \
	    --dir $(BENCH_DIR) --doc docs/bench.md

# ---- demo
# The checkpoint is looked for when the recipe runs, after get-real-weights may have fetched it.
# It builds qfuse-cache and qfuse-bench as well: the README's example and docs/tools.md use them next.
demo: $(QFUSE_DEMO) $(QFUSE_CACHE) $(QFUSE_BENCH)
	$(Q)scripts/get-real-weights --if-possible $(OUT)/data
	$(Q)w=$(OUT)/data/block.safetensors; rm -f $(OUT)/loss.csv; \
	if [ -f "$$w" ]; then $(QFUSE_DEMO) --weights "$$w" --loss-csv $(OUT)/loss.csv; \
	else $(QFUSE_DEMO); fi
	$(Q)if [ -f $(OUT)/loss.csv ]; then scripts/install-deps --tool plot || true; \
	scripts/plot-loss $(OUT)/loss.csv $(OUT)/loss.png; fi

# ---- fuzzing (docs/testing.md): clang + libFuzzer with ASan and UBSan, in $(FUZZ_DIR).
# New inputs go to $(FUZZ_DIR)/corpus; `make fuzz-merge` minimizes them into tests/fuzz/corpus.
FUZZ_CC ?= clang
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_JOBS ?= 1
FUZZ_CFLAGS := -std=c11 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
               -fno-sanitize-recover=undefined $(WARN) $(CFLAGS)
# The runtime files the generator links (fusion keys; the NVFP4 RHT mask of an rht_seed from
# ref_nvfp4.c and what it calls); the rest of the runtime stays out.
FUZZ_RUNTIME_SRCS := $(addprefix runtime/,jit/kernel_key.c jit/jit_key.c jit/jit_compile.c status.c \
                       tensor.c names.c family.c family_shapes.c ref/ref_nvfp4.c ref/ref.c \
                       ref/ref_mx.c)
FUZZ_OBJS := $(patsubst %.c,$(FUZZ_DIR)/fuzz-obj/%.o,$(GEN_SRCS) $(GEN_CORE_SRCS) \
               $(FUZZ_RUNTIME_SRCS))
FUZZ_BIN := $(FUZZ_DIR)/fuzz_recipe
# The shipped recipes are seeds too, read from recipes/ (libFuzzer writes to the first corpus only).
FUZZ_CORPORA := tests/fuzz/corpus tests/fuzz/seeds tests/fuzz/regressions recipes

fuzz-cc:
	@command -v $(FUZZ_CC) >/dev/null || scripts/install-deps --tool fuzz
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs clang with libFuzzer:" \
	    "apt-get install clang libclang-rt-dev (or FUZZ_CC=...)"; exit 1; }
$(FUZZ_DIR)/fuzz-obj/%.o: %.c | $(DEPS_OK) fuzz-cc
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) $(CPPFLAGS_ALL) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
$(FUZZ_DIR)/libqfuse_fuzz.a: $(FUZZ_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(FUZZ_BIN): tests/fuzz/fuzz_recipe.c $(FUZZ_DIR)/libqfuse_fuzz.a | fuzz-cc
	@$(if $(Q),echo "  FUZZLD  $@")
	$(Q)$(FUZZ_CC) $(CPPFLAGS_ALL) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS_ALL)

fuzz: $(FUZZ_BIN)
	$(Q)mkdir -p $(FUZZ_DIR)/corpus
	$(Q)$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -timeout=5 -print_final_stats=1 \
	    -dict=tests/fuzz/recipe.dict -artifact_prefix=$(FUZZ_DIR)/ \
	    $(if $(filter-out 1,$(FUZZ_JOBS)),-fork=$(FUZZ_JOBS)) $(FUZZ_DIR)/corpus $(FUZZ_CORPORA)

fuzz-merge: $(FUZZ_BIN)
	$(Q)rm -rf $(FUZZ_DIR)/merged && mkdir -p $(FUZZ_DIR)/merged
	$(Q)$(FUZZ_BIN) -merge=1 $(FUZZ_DIR)/merged tests/fuzz/corpus $(FUZZ_DIR)/corpus
	$(Q)rm -rf tests/fuzz/corpus && mv $(FUZZ_DIR)/merged tests/fuzz/corpus

# ---- install
# The installed qfuse-gen falls back on PREFIX/share/qfuse for its templates and qf_formats.h
# (QF_GEN_DATADIR of gen/gen_cli.c): that one file is compiled again for it, in $(PREFIX_DIR),
# whenever PREFIX changes, and nothing else of the build depends on PREFIX.
PREFIX_DIR := $(B)/prefix
PREFIX_FILE := $(PREFIX_DIR)/.prefix
INSTALL_GEN := $(PREFIX_DIR)/qfuse-gen
$(PREFIX_FILE): FORCE | $(PREFIX_DIR)/
	$(Q)echo '$(PREFIX)' > $@.new
	$(Q)cmp -s $@.new $@ && rm -f $@.new || mv -f $@.new $@
$(PREFIX_DIR)/gen_cli.o: gen/gen_cli.c $(PREFIX_FILE) $(FLAGS_FILE) | $(DEPS_OK)
	@$(if $(Q),echo "  CC      $< (PREFIX=$(PREFIX))")
	$(Q)$(CC) $(CPPFLAGS_ALL) -DQF_GEN_DATADIR='"$(PREFIX)/share/qfuse"' $(CFLAGS_ALL) -MMD -MP \
	    -c $< -o $@
$(INSTALL_GEN): $(B)/$(GEN_MAIN:.c=.o) $(PREFIX_DIR)/gen_cli.o \
                $(filter-out $(B)/gen/gen_cli.o,$(GEN_OBJS)) $(LIB_CORE)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL)

INSTALL_LIB := $(DESTDIR)$(PREFIX)/lib
install: all $(INSTALL_GEN)
	install -d $(DESTDIR)$(PREFIX)/bin $(INSTALL_LIB)/pkgconfig $(DESTDIR)$(PREFIX)/include/qfuse
	install -m 755 $(INSTALL_GEN) $(QFUSE_CACHE) $(QFUSE_DEMO) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIB) $(INSTALL_LIB)/
	install -m 755 $(SOLIB_REAL) $(INSTALL_LIB)/
	ln -sf $(notdir $(SOLIB_REAL)) $(INSTALL_LIB)/$(SONAME)
	ln -sf $(SONAME) $(INSTALL_LIB)/libqfuse.so
	install -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(PREFIX)/include/qfuse/
	install -d $(DESTDIR)$(PREFIX)/share/qfuse/templates $(DESTDIR)$(PREFIX)/share/qfuse/include \
	        $(DESTDIR)$(PREFIX)/share/qfuse/recipes
	install -m 644 $(TEMPLATES) $(DEV_HEADERS) $(DESTDIR)$(PREFIX)/share/qfuse/templates/
	install -m 644 $(RECIPES) $(DESTDIR)$(PREFIX)/share/qfuse/recipes/
	install -m 644 runtime/qf_formats.h $(DESTDIR)$(PREFIX)/share/qfuse/include/
	install -m 644 LICENSE $(DESTDIR)$(PREFIX)/share/qfuse/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@CUDA_HOME@|$(CUDA_HOME)|g' -e 's|@VERSION@|$(VERSION)|g' \
	        scripts/qfuse.pc.in > $(INSTALL_LIB)/pkgconfig/qfuse.pc

clean:
	rm -rf $(B) $(FUZZ_DIR) $(ASAN_DIR) $(CHECK_DIR)
# distclean also removes make bench's results, what a qfuse-gen run left in out/ and the
# metadata `pip install .` leaves in python/; the downloaded checkpoint (out/data) stays: it
# cannot be made again without the network.
distclean: clean
	rm -rf $(OUT)/bench $(OUT)/kernels $(OUT)/registry.c $(OUT)/shapes.c $(OUT)/shapes.h \
	       $(OUT)/manifest.json python/qfuse.egg-info

-include $(shell find $(B) $(FUZZ_DIR)/fuzz-obj -name '*.d' 2>/dev/null)
