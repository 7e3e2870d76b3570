# qfuse build. Targets: all gen demo test check check-gpu bench install clean distclean help.
# Out-of-tree objects in $(BUILD_DIR); generated sources in out/. `make V=1` shows commands.

CUDA_HOME ?= /usr/local/cuda
BUILD_DIR ?= build
PREFIX ?= /usr/local
CC ?= gcc
# A folder with the Debian -dev packages unpacked by `dpkg -x` (machines without apt access).
QFUSE_DEPS_PREFIX ?=

OUT := out
B := $(BUILD_DIR)

ifeq ($(V),1)
Q :=
else
Q := @
endif

WARN := -Wall -Wextra -Wshadow -Wundef -Wwrite-strings -Wstrict-prototypes -Wmissing-prototypes
OPT ?= -O2 -g
CFLAGS_ALL := -std=c11 $(OPT) -fPIC -ffp-contract=off -pthread $(WARN) $(CFLAGS)
CPPFLAGS_ALL := -D_GNU_SOURCE -Iruntime -Igen -I$(OUT) -isystem $(CUDA_HOME)/include \
                -I/usr/include/lua5.4 -I/usr/include/cjson $(CPPFLAGS)
LDLIBS_CUDA := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnvrtc -lcublasLt -lcudart
LDLIBS_ALL := -llua5.4 -lcjson -lxxhash $(LDLIBS_CUDA) -ldl -lpthread -lm $(LDLIBS)
ifneq ($(QFUSE_DEPS_PREFIX),)
DEPLIB := $(QFUSE_DEPS_PREFIX)/usr/lib/x86_64-linux-gnu
CPPFLAGS_ALL += -I$(QFUSE_DEPS_PREFIX)/usr/include -I$(QFUSE_DEPS_PREFIX)/usr/include/lua5.4 \
                -I$(QFUSE_DEPS_PREFIX)/usr/include/x86_64-linux-gnu \
                -I$(QFUSE_DEPS_PREFIX)/usr/include/cjson
LDLIBS_ALL := -L$(DEPLIB) -Wl,-rpath,$(DEPLIB) $(LDLIBS_ALL)
endif

# ---- sources
TOOL_SRCS := runtime/qfuse_demo.c
CORE_SRCS := $(filter-out $(TOOL_SRCS),$(wildcard runtime/*.c))
GEN_MAIN := gen/main.c
GEN_SRCS := $(filter-out $(GEN_MAIN),$(wildcard gen/*.c))
TEST_SRCS := $(wildcard tests/test_*.c)
RECIPES := $(wildcard recipes/*.lua)
TEMPLATES := $(wildcard templates/*.cu)
OUT_SRCS := $(OUT)/registry.c $(OUT)/shapes.c

CORE_OBJS := $(CORE_SRCS:%.c=$(B)/%.o)
GEN_OBJS := $(GEN_SRCS:%.c=$(B)/%.o)
OUT_OBJS := $(OUT_SRCS:%.c=$(B)/%.o)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(B)/tests/%)

QFUSE_GEN := $(B)/qfuse-gen
QFUSE_DEMO := $(B)/qfuse-demo
LIB_CORE := $(B)/libqfuse_core.a
LIB_GEN := $(B)/libqfuse_gen.a
LIB := $(B)/libqfuse.a
SOLIB := $(B)/libqfuse.so
DEPS_OK := $(B)/.deps-ok
FLAGS_FILE := $(B)/.flags

.PHONY: all gen demo test check check-gpu bench install clean distclean help FORCE
all: $(QFUSE_GEN) $(LIB) $(SOLIB) $(QFUSE_DEMO) $(TEST_BINS)

help:
	@echo "make            build qfuse-gen, generate out/, build libqfuse, qfuse-demo and tests"
	@echo "make demo       build and run the demo (GPU part skipped without a GPU)"
	@echo "make test       build and run every test (GPU tests skip without a GPU)"
	@echo "make check      same as test, with -Werror"
	@echo "make install    install to PREFIX=$(PREFIX)"
	@echo "variables: CUDA_HOME BUILD_DIR PREFIX QFUSE_DEPS_PREFIX V=1"

# ---- dependencies and flag tracking
$(DEPS_OK): scripts/install-deps | $(B)/
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

$(LIB_CORE): $(CORE_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIB_GEN): $(GEN_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

$(QFUSE_GEN): $(B)/$(GEN_MAIN:.c=.o) $(LIB_GEN) $(LIB_CORE)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL)

# ---- generated sources: one generator run produces all of out/
$(OUT)/.stamp: $(QFUSE_GEN) $(RECIPES) $(TEMPLATES)
	@$(if $(Q),echo "  GEN     $(OUT)/ from $(RECIPES)")
	$(Q)$(QFUSE_GEN) -o $(OUT) $(RECIPES)
	$(Q)touch $@
$(OUT_SRCS) $(OUT)/shapes.h: $(OUT)/.stamp
gen: $(OUT)/.stamp

$(OUT_OBJS): $(OUT)/.stamp

$(LIB): $(CORE_OBJS) $(OUT_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(SOLIB): $(CORE_OBJS) $(OUT_OBJS)
	$(Q)$(CC) -shared -o $@ $^ $(LDLIBS_ALL)

$(QFUSE_DEMO): $(B)/runtime/qfuse_demo.o $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS_ALL) -fopenmp -o $@ $^ $(LDLIBS_ALL)
$(B)/runtime/qfuse_demo.o: $(OUT)/.stamp
$(B)/runtime/qfuse_demo.o: CFLAGS_ALL += -fopenmp

# ---- tests
$(B)/tests/%: tests/%.c tests/test_util.h $(LIB) $(LIB_GEN) $(QFUSE_GEN) $(FLAGS_FILE) | $(DEPS_OK)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS_ALL) -Itests $(CFLAGS_ALL) -fopenmp -o $@ $< $(LIB_GEN) $(LIB) -lcmocka $(LDLIBS_ALL)

test: $(TEST_BINS) $(QFUSE_GEN) $(QFUSE_DEMO)
	$(Q)scripts/run-tests $(TEST_BINS)

check:
	$(Q)$(MAKE) --no-print-directory test CFLAGS="$(CFLAGS) -Werror"

# ---- demo
demo: all
	$(Q)scripts/get-real-weights --if-possible $(OUT)/data
	$(Q)$(QFUSE_DEMO) $(if $(wildcard $(OUT)/data/block.safetensors),--weights $(OUT)/data/block.safetensors)

# ---- install
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/qfuse
	install -m 755 $(QFUSE_GEN) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SOLIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 runtime/qfuse.h runtime/qf_formats.h runtime/registry.h $(OUT)/shapes.h \
	        $(DESTDIR)$(PREFIX)/include/qfuse/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@CUDA_HOME@|$(CUDA_HOME)|g' scripts/qfuse.pc.in \
	        > $(DESTDIR)$(PREFIX)/lib/pkgconfig/qfuse.pc

clean:
	rm -rf $(B)
distclean: clean
	rm -rf $(OUT)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
