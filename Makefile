# kspec: one Makefile.  Targets: all check depcheck docscheck promcheck test
# run bench bench-instructions asan tsan oom fuzz fuzz-corpus install
# uninstall deb test-deb clean.
#
# Modules and their dependencies (no cycles, docs/architecture.md):
#   base <- proto, specialize <- jit <- exec ; base <- store ; all <- server
#   client <- proto, base ; specialize <- ref (header-only: the plain-C
#   references, used by exec's canaries, the tests and the benchmarks)
# Each module's objects come from its folder.

CC       ?= cc
BUILD    ?= build
PKGS     := libuv libcjson sqlite3 libsodium libxxhash hiredis
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Werror -Wno-unused-parameter
OPT      ?= -O2 -g
CFLAGS   += $(CSTD) $(WARN) $(OPT) -MMD -MP -fPIC -fno-strict-aliasing \
	    $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lgccjit -lOpenCL -ldl -lpthread -lm
TEST_LIBS := $(shell pkg-config --libs criterion 2>/dev/null)
# The client library and CLI need only these (no compiler, loop or sqlite).
CLIENT_LDLIBS := $(shell pkg-config --libs libcjson libsodium 2>/dev/null) -ldl -lpthread -lm

src_of    = $(sort $(wildcard $(1)/*.c))
obj_of    = $(patsubst %.c,$(BUILD)/obj/%.o,$(call src_of,$(1)))

BASE_OBJ       := $(call obj_of,base)
PROTO_OBJ      := $(call obj_of,proto)
SPECIALIZE_OBJ := $(call obj_of,specialize)
JIT_OBJ        := $(call obj_of,jit)
EXEC_OBJ       := $(call obj_of,exec)
STORE_OBJ      := $(call obj_of,store)
SERVER_OBJ     := $(filter-out $(BUILD)/obj/server/main.o,$(call obj_of,server))
CLIENT_LIB_OBJ := $(call obj_of,client)
# The kspec command line, in a folder of its own: nothing of it is in
# libkspec.
CLI_OBJ        := $(call obj_of,client/cli)

# Everything the daemon is made of, without its main(): tests link this.
DAEMON_OBJ := $(BASE_OBJ) $(PROTO_OBJ) $(SPECIALIZE_OBJ) $(JIT_OBJ) \
	      $(EXEC_OBJ) $(STORE_OBJ) $(SERVER_OBJ)
LIB_OBJ    := $(BASE_OBJ) $(PROTO_OBJ) $(CLIENT_LIB_OBJ)

PROGRAMS := $(BUILD)/kspecd $(BUILD)/kspec $(BUILD)/libkspec.so \
	    $(BUILD)/libkspec.a $(BUILD)/kspec.pc
# The reference engine on libkspec (README, "A model on kspec"), and the
# client of bench/gpu/run.sh's first-kernel timing, which links libkspec as
# the engine does (the GPU machine has none of the build's packages).
EXAMPLES := $(BUILD)/examples/llama $(BUILD)/bench/gpu-first
PREFIX   ?= /usr/local
# Where install puts libkspec and kspec.pc (the Debian packages: the
# multiarch folder, /usr/lib/x86_64-linux-gnu and the like).
LIBDIR   ?= $(PREFIX)/lib
VERSION  := $(shell sed -n 's/^#define KSPEC_VERSION "\(.*\)"/\1/p' include/kspec.h)
# libkspec's ABI major version: its SONAME is libkspec.so.$(SOVERSION).
SOVERSION := 0

TEST_SRC  := $(sort $(wildcard tests/test_*.c))
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCH_SRC := $(sort $(wildcard bench/*/main.c))
BENCH_BINS := $(patsubst bench/%/main.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all examples check depcheck docscheck promcheck test run bench \
	bench-instructions asan tsan oom fuzz \
	fuzz-targets fuzz-corpus clean deps golden golden-quant install \
	uninstall deb test-deb FORCE

all: $(PROGRAMS) $(EXAMPLES)

examples: $(EXAMPLES)

deps:
	@./deploy/deps.sh

# The dependency file names the object both ways, so that a build with
# BUILD relative and one with BUILD absolute (the install test's) each see
# what the other's object depends on.
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MT $@ -MT $(abspath $@) \
	    -MT $(patsubst $(CURDIR)/%,%,$(abspath $@)) -c $< -o $@

# jit/cpu_target.c asks for CPU features by names that only gcc knows,
# and the cpu backend's files include libgccjit.h from gcc's own headers:
# the fuzz build (clang, make fuzz) builds them with gcc, uninstrumented;
# no fuzz target goes further into them than a backend's format check.
ifeq ($(FUZZ_BUILD),1)
CPU_JIT_OBJ := $(addprefix $(BUILD)/obj/jit/,cpu.o cpu_vec.o cpu_qdot.o \
	cpu_target.o)
$(CPU_JIT_OBJ): override CC = gcc
$(CPU_JIT_OBJ): override OPT = -g -O1
endif

# The quantizer repeats llama.cpp's f32 operations one rounding at a time:
# an fma contracted from a*b+c would pick other codes (client/quant.c).
$(BUILD)/obj/client/quant.o: CFLAGS += -ffp-contract=off

# The dashboard page is assembled into the daemon (.incbin).
$(BUILD)/obj/server/dashboard.o: server/dashboard.html

$(BUILD)/kspecd: $(BUILD)/obj/server/main.o $(DAEMON_OBJ)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS)

$(BUILD)/kspec: $(CLI_OBJ) $(BUILD)/libkspec.a
	$(CC) $(LDFLAGS) -o $@ $^ $(CLIENT_LDLIBS)

$(BUILD)/libkspec.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# Rewritten on every make, so it always names the PREFIX and LIBDIR of
# this run.
$(BUILD)/kspec.pc: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' 'prefix=$(PREFIX)' \
	    'libdir=$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))' \
	    'includedir=$${prefix}/include' '' 'Name: kspec' \
	    'Description: client library of the kspec kernel server' \
	    'Version: $(VERSION)' 'Requires.private: libcjson libsodium' \
	    'Libs: -L$${libdir} -lkspec' 'Libs.private: -ldl -lm' \
	    'Cflags: -I$${includedir}' > $@

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig \
	    $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/kspecd $(BUILD)/kspec $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(BUILD)/libkspec.a $(DESTDIR)$(LIBDIR)
	install -m 755 $(BUILD)/libkspec.so.$(VERSION) $(DESTDIR)$(LIBDIR)
	ln -sf libkspec.so.$(VERSION) \
	    $(DESTDIR)$(LIBDIR)/libkspec.so.$(SOVERSION)
	ln -sf libkspec.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libkspec.so
	install -m 644 include/kspec.h $(DESTDIR)$(PREFIX)/include
	install -m 644 $(BUILD)/kspec.pc $(DESTDIR)$(LIBDIR)/pkgconfig
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system \
	    $(DESTDIR)$(PREFIX)/lib/sysusers.d
	sed 's|@BINDIR@|$(PREFIX)/bin|g' deploy/kspecd.service.in \
	    >$(DESTDIR)$(PREFIX)/lib/systemd/system/kspecd.service
	chmod 644 $(DESTDIR)$(PREFIX)/lib/systemd/system/kspecd.service
	install -m 644 deploy/kspecd.socket \
	    $(DESTDIR)$(PREFIX)/lib/systemd/system
	install -m 644 deploy/kspec.sysusers \
	    $(DESTDIR)$(PREFIX)/lib/sysusers.d/kspec.conf
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/man/man8 \
	    $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 644 deploy/man/kspec.1 $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 deploy/man/kspecd.8 $(DESTDIR)$(PREFIX)/share/man/man8
	install -m 644 deploy/kspec.bash-completion \
	    $(DESTDIR)$(PREFIX)/share/bash-completion/completions/kspec
	ln -sf kspec $(DESTDIR)$(PREFIX)/share/bash-completion/completions/kspecd
	@# Into the live system as root: the loader learns the new library.
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && \
	    command -v ldconfig >/dev/null; then ldconfig; fi

# What install put there, and nothing else (directories stay).
INSTALLED := bin/kspecd bin/kspec include/kspec.h \
	lib/systemd/system/kspecd.service lib/systemd/system/kspecd.socket \
	lib/sysusers.d/kspec.conf share/man/man1/kspec.1 \
	share/man/man8/kspecd.8 share/bash-completion/completions/kspec \
	share/bash-completion/completions/kspecd
INSTALLED_LIB := libkspec.a libkspec.so libkspec.so.$(SOVERSION) \
	libkspec.so.$(VERSION) pkgconfig/kspec.pc
uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED)) \
	    $(addprefix $(DESTDIR)$(LIBDIR)/,$(INSTALLED_LIB))
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && \
	    command -v ldconfig >/dev/null; then ldconfig; fi

# The shared library: libkspec.so.VERSION with the SONAME
# libkspec.so.SOVERSION, and the two links a linker and a loader look for.
$(BUILD)/libkspec.so: $(LIB_OBJ)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libkspec.so.$(SOVERSION) \
	    -o $(BUILD)/libkspec.so.$(VERSION) $^ $(CLIENT_LDLIBS)
	ln -sf libkspec.so.$(VERSION) $(BUILD)/libkspec.so.$(SOVERSION)
	ln -sf libkspec.so.$(SOVERSION) $@

# An example links the client library only, as an application would.
$(BUILD)/examples/%: examples/%/*.c $(wildcard examples/*/*.h) \
	    $(BUILD)/libkspec.a include/kspec.h ref/ref.h examples/cu_driver.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.c,$^) $(BUILD)/libkspec.a \
	    $(CLIENT_LDLIBS) -lOpenCL -lm

$(BUILD)/bench/gpu-first: bench/gpu/first.c $(BUILD)/libkspec.a \
	    include/kspec.h examples/cu_driver.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkspec.a $(CLIENT_LDLIBS)

# A test binary links the modules it tests and those they depend on, no
# more: each module is an archive (of which the linker takes the objects
# that are used) with the system libraries it needs, and a unit test
# builds without the daemon.  MODULES is the link order, a module before
# those it uses (the include graph, docs/architecture.md).
MODULES := server exec client jit store proto specialize base
MOD_OBJ_base := $(BASE_OBJ)
MOD_OBJ_proto := $(PROTO_OBJ)
MOD_OBJ_specialize := $(SPECIALIZE_OBJ)
MOD_OBJ_store := $(STORE_OBJ)
MOD_OBJ_client := $(CLIENT_LIB_OBJ)
MOD_OBJ_jit := $(JIT_OBJ)
MOD_OBJ_exec := $(EXEC_OBJ)
MOD_OBJ_server := $(SERVER_OBJ)
MOD_DEPS_proto := base
MOD_DEPS_specialize := base
MOD_DEPS_store := base
MOD_DEPS_client := proto base
MOD_DEPS_jit := specialize base
MOD_DEPS_exec := jit proto specialize base
MOD_DEPS_server := exec jit store proto specialize base
MOD_LIBS_base := $(shell pkg-config --libs libsodium 2>/dev/null) -ldl
MOD_LIBS_proto := $(shell pkg-config --libs libcjson libsodium 2>/dev/null)
MOD_LIBS_specialize := -lpthread -lm
MOD_LIBS_store := $(shell pkg-config --libs sqlite3 libxxhash libcjson \
	2>/dev/null) -lpthread
MOD_LIBS_client := $(CLIENT_LDLIBS)
MOD_LIBS_jit := -lgccjit -lOpenCL -ldl -lpthread -lm
MOD_LIBS_exec := $(shell pkg-config --libs libcjson 2>/dev/null) -lm
MOD_LIBS_server := $(shell pkg-config --libs libuv hiredis libcjson \
	libsodium libxxhash 2>/dev/null)
mod_lib = $(BUILD)/lib/libks_$(1).a
define mod_archive
$(call mod_lib,$(1)): $(MOD_OBJ_$(1))
	@mkdir -p $$(dir $$@)
	@rm -f $$@
	ar rcs $$@ $$^
endef
$(foreach m,$(MODULES),$(eval $(call mod_archive,$(m))))

# The modules each test binary tests; one not named here links them all.
TEST_USES_test_entry := proto
TEST_USES_test_bundle := proto
TEST_USES_test_remote := proto
TEST_USES_test_proto := client
TEST_USES_test_client := client
TEST_USES_test_loop := client
TEST_USES_test_launch := client specialize
TEST_USES_test_store := store
TEST_USES_test_store_schema := store
TEST_USES_test_cli := store
TEST_USES_test_specialize := specialize
TEST_USES_test_ir_order := specialize
TEST_USES_test_parse := specialize
$(foreach t,jit cpu_vec gemm cuda opencl library mixed e2e k_attn k_glue \
	k_norm k_packed k_prefill k_rope,$(eval TEST_USES_test_$(t) := jit))
$(foreach t,exec canary start,$(eval TEST_USES_test_$(t) := exec))
$(foreach t,key sched fastpath audit states,\
	$(eval TEST_USES_test_$(t) := server))
# End to end only (e2e.h's helpers): base and the kernel library.
$(foreach t,llama metrics service storefile users workers,\
	$(eval TEST_USES_test_$(t) := specialize))
# What a test calls itself, beside its modules and criterion.
TEST_LDLIBS := $(TEST_LIBS) $(shell pkg-config --libs libcjson 2>/dev/null) \
	-lpthread -ldl -lm
TEST_LDLIBS_test_remote := $(shell pkg-config --libs hiredis 2>/dev/null)
$(foreach t,e2e store store_schema storefile workers,\
	$(eval TEST_LDLIBS_test_$(t) := \
	$(shell pkg-config --libs sqlite3 2>/dev/null)))
TEST_LDLIBS_test_llama := -lOpenCL
test_mods = $(filter $(foreach m,$(or $(TEST_USES_$(1)),server client),\
	$(m) $(MOD_DEPS_$(m))),$(MODULES))
test_libs = $(foreach m,$(call test_mods,$(1)),$(call mod_lib,$(m)))

.SECONDEXPANSION:
$(BUILD)/tests/%: tests/%.c $$(call test_libs,$$*) \
	    $(wildcard tests/*.h ref/*.h bench/*.h bench/gpu/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(call test_libs,$*) \
	    $(foreach m,$(call test_mods,$*),$(MOD_LIBS_$(m))) \
	    $(TEST_LDLIBS_$*) $(TEST_LDLIBS)

# examples/llama's GGUF reader and writer, tested alone.
$(BUILD)/tests/test_gguf: tests/test_gguf.c examples/llama/gguf.c \
	    examples/llama/gguf.h tests/ggml.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ tests/test_gguf.c examples/llama/gguf.c \
	    $(TEST_LDLIBS)

# The test build of the daemon: kspecd with the test plants compiled in
# (-DKS_TEST_PLANT in the files of PLANT_SRC), defects that only a test
# switches on, to show that a checker of the daemon catches them.  Only
# tests run it; it is never installed.
PLANT_SRC := exec/job.c exec/probe.c exec/canary.c exec/worker.c \
	     server/daemon.c server/fastpath.c server/lease.c \
	     server/op_import.c store/writer.c
PLANT_OBJ := $(patsubst %.c,$(BUILD)/plant/%.o,$(PLANT_SRC))
$(BUILD)/plant/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DKS_TEST_PLANT -MT $@ -c $< -o $@

$(BUILD)/tests/kspecd-plant: $(BUILD)/obj/server/main.o $(PLANT_OBJ) \
	    $(filter-out $(patsubst %.c,$(BUILD)/obj/%.o,$(PLANT_SRC)),$(DAEMON_OBJ))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS)

# The fuzz targets (fuzz/fuzz.h), each a file of fuzz/ but for the seed
# writer.  The test suite replays their corpora (tests/test_fuzz.c) with
# them as plain functions, and with the fast path built with its test
# plant, which only the replay's self-check switches on.
FUZZ_TARGETS := request fastpath http entry redis gguf irtext
FUZZ_OBJ := $(patsubst %,$(BUILD)/obj/fuzz/%.o,common $(FUZZ_TARGETS)) \
	$(BUILD)/obj/examples/llama/gguf.o
$(BUILD)/tests/test_fuzz: tests/test_fuzz.c $(FUZZ_OBJ) \
	    $(BUILD)/plant/server/fastpath.o \
	    $(filter-out $(BUILD)/obj/server/fastpath.o,$(DAEMON_OBJ))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.c %.o,$^) $(LDLIBS) $(TEST_LIBS)

# Under libFuzzer (make fuzz): each target its own program, everything
# built by clang with coverage, ASan and UBSan in BUILD=build-fuzz.
$(BUILD)/fuzz/%: fuzz/%.c $(BUILD)/obj/fuzz/common.o \
	    $(BUILD)/obj/examples/llama/gguf.o $(DAEMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DKS_FUZZ_LIBFUZZER -fsanitize=fuzzer -o $@ $< \
	    $(BUILD)/obj/fuzz/common.o $(BUILD)/obj/examples/llama/gguf.o \
	    $(DAEMON_OBJ) $(LDLIBS)
fuzz-targets: $(addprefix $(BUILD)/fuzz/,$(FUZZ_TARGETS))

# The seed corpus's writer (fuzz/seeds.c).
$(BUILD)/fuzz-seeds: $(BUILD)/obj/fuzz/seeds.o $(BUILD)/obj/fuzz/common.o \
	    $(BUILD)/obj/examples/llama/gguf.o $(DAEMON_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Benchmarks run where they are built: -march=native gives the reference
# loops the machine's full vector width.
$(BUILD)/bench/%: bench/%/main.c $(DAEMON_OBJ) $(BUILD)/libkspec.a \
	    $(wildcard bench/*.h tests/*.h ref/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O3 -march=native -o $@ $< $(DAEMON_OBJ) $(CLIENT_LIB_OBJ) $(LDLIBS) -lopenblas

# make check and make test build a job per CPU unless make was given -j.
JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 2))

# The quick tier, for every edit: the unit tests, and the end-to-end suite
# and the fast path's against real daemons; make test runs everything.
CHECK_BINS := $(addprefix $(BUILD)/tests/,test_proto test_entry test_key \
	test_sched test_store test_store_schema test_specialize test_ir_order \
	test_parse \
	test_jit test_cpu_vec test_exec test_fuzz test_fastpath test_e2e \
	test_quant test_gguf test_states)
check: deps depcheck
	@$(MAKE) --no-print-directory $(JOBS) $(PROGRAMS) $(CHECK_BINS) \
	    $(BUILD)/tests/kspecd-plant
	@$(DOCSCHECK) --self-test $(BUILD) && $(DOCSCHECK) $(BUILD)
	@$(PROMCHECK) --self-test $(BUILD) && $(PROMCHECK) $(BUILD)
	@KSPEC_BUILD=$(abspath $(BUILD)) KSPEC_TEST_TIER=check \
	    ./tests/run.sh $(CHECK_BINS)

# Tests run one binary per module, as many at once as there are CPUs
# (tests/run.sh); KSPEC_BUILD tells end-to-end tests where kspecd and kspec
# are.
test: deps depcheck
	@$(MAKE) --no-print-directory $(JOBS) all $(TEST_BINS) \
	    $(BUILD)/tests/kspecd-plant
	@$(DOCSCHECK) --self-test $(BUILD) && $(DOCSCHECK) $(BUILD)
	@$(PROMCHECK) --self-test $(BUILD) && $(PROMCHECK) $(BUILD)
	@KSPEC_BUILD=$(abspath $(BUILD)) ./tests/run.sh $(TEST_BINS)

# The Debian packages (debian/: kspecd, libkspec0, libkspec-dev,
# python3-kspec), built by dpkg-buildpackage in a copy of the tree
# (deploy/deb.sh) into $(BUILD)/deb, then checked by lintian, which must
# report nothing but what debian/*.lintian-overrides explain.
DEB_DIR := $(BUILD)/deb
deb:
	@./deploy/deps.sh --deb
	@v=$$(dpkg-parsechangelog -l debian/changelog -SVersion); \
	    [ "$$v" = "$(VERSION)" ] || { echo "debian/changelog is at $$v," \
	    "include/kspec.h at $(VERSION)" >&2; exit 1; }
	./deploy/deb.sh $(DEB_DIR)
	lintian --fail-on error,warning,info,pedantic --display-info \
	    --pedantic $(DEB_DIR)/kspec_$(VERSION)_*.changes

# The packages of make deb installed, upgraded (to a build of the tree
# with a higher version) and purged in a throwaway Debian root
# (tests/deb/run.sh, which says what it checks); not part of make test.
test-deb: deb
	@./deploy/deps.sh --deb
	@./tests/deb/run.sh $(DEB_DIR)

# The include graph: no cycle between files, the modules in their order,
# the loop and the database in their modules (tests/depcheck.sh, which
# first shows each rule catching a planted breach).
depcheck:
	@./tests/depcheck.sh --self-test
	@./tests/depcheck.sh

# The docs against the code (tests/docscheck.py, which first shows each
# check catching a drift planted in a scratch copy): the error codes of
# docs/protocol.md, the options of docs/cli.md against the programs'
# --help, the store's schema version, the Python client's version and
# socket, the installed paths.  make check and make test run it once the
# programs are built.
DOCSCHECK := /usr/bin/python3 tests/docscheck.py
docscheck: deps
	@$(MAKE) --no-print-directory $(BUILD)/kspecd $(BUILD)/kspec
	@$(DOCSCHECK) --self-test $(BUILD) && $(DOCSCHECK) $(BUILD)

# The alert rules and the Grafana board of deploy/ (tests/promcheck.py,
# which first shows each check catching a bug planted in a scratch copy):
# promtool check rules and test rules (each alert fires and stays silent
# in a case of its own), every board panel's PromQL parsed by promtool,
# every metric name the rules and the board use served by a kspecd it
# starts.  Skips, saying so, without promtool.
PROMCHECK := /usr/bin/python3 tests/promcheck.py
promcheck: deps
	@$(MAKE) --no-print-directory $(BUILD)/kspecd $(BUILD)/kspec
	@$(PROMCHECK) --self-test $(BUILD) && $(PROMCHECK) $(BUILD)

run: deps
	@$(MAKE) --no-print-directory all
	./$(BUILD)/kspecd

bench: deps
	@./deploy/deps.sh --bench
	@$(MAKE) --no-print-directory all $(BENCH_BINS) $(BUILD)/bench/ggml-golden
	@KSPEC_BUILD=$(abspath $(BUILD)) ./bench/run.sh $(BENCH_BINS)

# The golden vectors of the quantized formats (tests/golden/quant) from
# llama.cpp's ggml, which deploy/deps.sh --bench installs; tests/ggml.h
# loads it at run time, so the writer links nothing of ggml or kspec.
$(BUILD)/bench/ggml-golden: bench/ggml/golden.c tests/ggml.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lm

golden-quant: deps
	@./deploy/deps.sh --bench
	@$(MAKE) --no-print-directory $(BUILD)/bench/ggml-golden
	@mkdir -p tests/golden/quant
	./$(BUILD)/bench/ggml-golden tests/golden/quant

# Only the instruction counts of the hit path (callgrind, kspecd beside
# redis-server), the figures that noise does not move.
bench-instructions: deps
	@./deploy/deps.sh --bench
	@$(MAKE) --no-print-directory all $(BUILD)/bench/instr
	@KSPEC_BUILD=$(abspath $(BUILD)) ./bench/run.sh $(BUILD)/bench/instr

# The suite under AddressSanitizer and UndefinedBehaviorSanitizer, in its
# own build folder; the Python client's tests are left out (python cannot
# load an instrumented libkspec: the sanitizer's runtime must come first).
asan: deps
	@KSPEC_TEST_NO_PYTHON="python cannot load an instrumented libkspec" \
	    LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    $(MAKE) --no-print-directory BUILD=build-asan \
	    OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined" test

# ThreadSanitizer over the programs whose code runs on several threads,
# built in their own folder: kspecd (the loop beside the store's writer
# thread and its reader connection, the signal thread, libuv's pool for
# the fingerprints and imports), its test build, and libkspec's thread
# pool under the command line and the reference engine.  The suites that
# start them (TSAN_TESTS) run from the plain build: Criterion cannot
# start under the sanitizer (its sandbox maps its arena where the
# sanitizer keeps its shadow memory, Criterion issue 274), so the
# in-process threads of test_store and test_launch are not covered.
# Every instrumented process writes its reports to build-tsan/tsan/ (a
# daemon's stderr is /dev/null); any report fails the run.  The Python
# client is left out (python cannot load an instrumented libkspec).
# tests/tsan.supp holds the suppressions, each with its reason.  The
# suites run one at a time and one test at a time (KSPEC_TEST_JOBS=1
# unless given): an instrumented daemon and its compile workers run
# several times slower, and two suites of two tests each at once on 2
# cores, beside other work, ran past the suites' 60 s start deadline.
# TSAN_TESTS=... on the command line runs fewer.
TSAN_TESTS := test_e2e test_storefile test_workers test_remote test_llama \
	test_quant test_cli
TSAN_PROGRAMS := kspecd kspec libkspec.a examples/llama tests/kspecd-plant
tsan: deps
	@$(MAKE) --no-print-directory $(JOBS) BUILD=build-tsan \
	    OPT="-O1 -g -fsanitize=thread -fno-omit-frame-pointer" \
	    LDFLAGS="-fsanitize=thread" \
	    $(addprefix build-tsan/,$(TSAN_PROGRAMS))
	@$(MAKE) --no-print-directory $(JOBS) \
	    $(addprefix $(BUILD)/tests/,$(TSAN_TESTS))
	@rm -rf build-tsan/tsan && mkdir -p build-tsan/tsan
	@TSAN_OPTIONS="suppressions=$(abspath tests/tsan.supp) \
	    log_path=$(abspath build-tsan)/tsan/report" \
	    KSPEC_BUILD=$(abspath build-tsan) KSPEC_TEST_TIER=check \
	    KSPEC_TEST_JOBS=$${KSPEC_TEST_JOBS:-1} \
	    ./tests/run.sh $(addprefix $(BUILD)/tests/,$(TSAN_TESTS)); \
	    rc=$$?; if ls build-tsan/tsan/report.* >/dev/null 2>&1; then \
	    cat build-tsan/tsan/report.*; echo "FAILED: ThreadSanitizer" \
	    "reported (above; build-tsan/tsan/)"; exit 1; fi; exit $$rc

# Allocation-failure injection (tests/oom.h): the oom tests of proto/,
# store/ and specialize/ (tests/oom_*.c) fail every allocation of an
# operation in turn and check that it answers an error or a whole result,
# never crashes, and leaks nothing (LeakSanitizer after every try).  They
# are linked with the injector (tests/oom.c) wrapping the C allocators
# (--wrap); SQLite and cJSON allocate through it by their hooks.  Built
# in build-oom under AddressSanitizer and UndefinedBehaviorSanitizer;
# not part of make test.
OOM_TESTS := oom_proto oom_store oom_ir
OOM_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup \
	-Wl,--wrap=strndup
TEST_USES_oom_proto := proto
TEST_USES_oom_store := store
TEST_USES_oom_ir := specialize
TEST_LDLIBS_oom_store := $(shell pkg-config --libs sqlite3 2>/dev/null)
$(BUILD)/tests/oom_%: tests/oom_%.c tests/oom.c $$(call test_libs,oom_$$*) \
	    $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(OOM_WRAP) -o $@ $< tests/oom.c \
	    $(call test_libs,oom_$*) \
	    $(foreach m,$(call test_mods,oom_$*),$(MOD_LIBS_$(m))) \
	    $(TEST_LDLIBS_oom_$*) $(TEST_LDLIBS)
oom: deps
	@$(MAKE) --no-print-directory $(JOBS) BUILD=build-oom \
	    OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    $(addprefix build-oom/tests/,$(OOM_TESTS))
	@LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    KSPEC_BUILD=$(abspath build-oom) KSPEC_TEST_TIER=check \
	    ./tests/run.sh $(addprefix build-oom/tests/,$(OOM_TESTS))

# Each fuzz target under libFuzzer for FUZZ_SECONDS (FUZZ_JOBS at once);
# new inputs and crashes go to FUZZ_WORK, never into fuzz/ (fuzz/run.sh
# says where).  Not part of make test, which replays the corpora.
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_WORK ?= /tmp/kspec-fuzz
FUZZ_OPT := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link
fuzz: deps
	@./deploy/deps.sh --fuzz
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang-14 \
	    FUZZ_BUILD=1 OPT="$(FUZZ_OPT)" \
	    LDFLAGS="-fsanitize=address,undefined" fuzz-targets
	@FUZZ_JOBS=$(FUZZ_JOBS) FUZZ_WORK=$(FUZZ_WORK) ./fuzz/run.sh \
	    build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Writes the seed corpus, fuzz/corpus/ (committed), anew.
fuzz-corpus: $(BUILD)/fuzz-seeds
	./$(BUILD)/fuzz-seeds fuzz/corpus

# Regenerates the golden files of tests/golden/ from the current code.
golden: all $(TEST_BINS)
	KSPEC_GOLDEN_UPDATE=1 ./$(BUILD)/tests/test_specialize && for s in cuda opencl; do KSPEC_GOLDEN_UPDATE=1 ./$(BUILD)/tests/test_$$s --filter "$$s/emitted_source_matches_golden_files" || exit 1; done

clean:
	rm -rf build build-asan build-tsan build-oom build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
