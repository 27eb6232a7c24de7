# Nexus - plain Makefile. `make` installs missing Debian packages (apt-get), then builds
# build/libnexus.a, build/nexus and the test binaries. `make test` runs the suite.
# Variables: DEBUG=1, SAN=address,undefined (sanitizer build in build-san/), NATIVE=1.

CC      ?= cc
FUZZ_CC ?= clang
CXX     ?= c++
PREFIX  ?= /usr/local
BUILD   ?= build
DEB_PKGS = build-essential libpcre2-dev libjansson-dev libutf8proc-dev libmicrohttpd-dev \
           python3-jsonschema

OPT      = -O2
ifeq ($(DEBUG),1)
OPT      = -O0
endif
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Wshadow -Wstrict-prototypes \
              -Werror=implicit-function-declaration -Wno-unused-parameter -MMD -MP \
              -fvisibility=hidden -Iinclude -Isrc -pthread
ifeq ($(NATIVE),1)
CFLAGS_BASE += -march=native
endif
ifeq ($(FUZZ),1)
# the fuzz build (make fuzz): clang, coverage for libFuzzer, ASan + UBSan, into build-fuzz/
BUILD    = build-fuzz
override CC := $(FUZZ_CC)
OPT      = -O1
CFLAGS_BASE += -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
               -fno-omit-frame-pointer -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -DNX_LIBFUZZER \
               -Wno-missing-field-initializers
# The SIMD kernel files (pure arithmetic, checked against their scalar references in
# test_kern / test_attn and under the gcc sanitizer build) are compiled without the fuzzer's
# instrumentation: clang takes minutes per file on their unrolled intrinsics with it.
SIMD_FLAGS = -fno-sanitize=fuzzer-no-link,address,undefined
else ifneq ($(SAN),)
BUILD    = build-san
CFLAGS_BASE += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=$(SAN)
endif
CFLAGS  ?=
ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS)
LDLIBS   = -lmicrohttpd -lpcre2-8 -lutf8proc -ljansson -lm -lpthread

# SIMD flags per file: only kernel files named *_avx2.c / *_avx512.c get them.
AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c

LIB_SRC   = $(sort $(wildcard src/*.c src/*/*.c))
LIB_OBJ   = $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_SRC   = $(sort $(wildcard tools/cli/*.c))
CLI_OBJ   = $(CLI_SRC:%.c=$(BUILD)/%.o)
# test support code (reference forward pass, helpers) shared by the test binaries
TSUP_SRC  = $(sort $(wildcard tests/support/*.c))
TSUP_OBJ  = $(TSUP_SRC:%.c=$(BUILD)/%.o)
TEST_SRC  = $(sort $(wildcard tests/test_*.c))
TEST_BIN  = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# fuzz targets (fuzz/targets/<name>.c) and their support code; see "Fuzzing" below
FUZZ_SUP_SRC = $(sort $(wildcard fuzz/*.c))
FUZZ_SUP_OBJ = $(FUZZ_SUP_SRC:%.c=$(BUILD)/%.o)
FUZZ_TGT_SRC = $(sort $(wildcard fuzz/targets/*.c))
FUZZ_TGT_OBJ = $(FUZZ_TGT_SRC:%.c=$(BUILD)/%.o)

MODEL ?= ../shared/models/stories260K/stories260K.gguf
# test_kern and test_attn again, with the AVX-512 kernels built on the plain-C emulation (below)
EMU_BIN = $(BUILD)/tests/test_kern_avx512emu $(BUILD)/tests/test_attn_avx512emu

.PHONY: all deps run test test-san bench clean install
all: deps $(BUILD)/nexus $(TEST_BIN) $(EMU_BIN)

# Install the Debian packages the build needs, once (stamp), only when one is missing.
deps: .deps.stamp
.deps.stamp: Makefile
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing || exit 1; \
	fi; touch $@

$(BUILD)/%.o: %.c | .deps.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/%_avx2.o: %_avx2.c | .deps.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX2_FLAGS) $(SIMD_FLAGS) -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c | .deps.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) $(SIMD_FLAGS) -c $< -o $@

$(BUILD)/libnexus.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/nexus: $(CLI_OBJ) $(BUILD)/libnexus.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Test binaries link the library and the test support code, never tools/cli objects; the CLI
# tests run the nexus binary as a process (tests/support/cli.c), hence the order-only prerequisite.
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TSUP_OBJ) $(BUILD)/libnexus.a | $(BUILD)/nexus
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS)

# The regression replay links every fuzz target, built normally (fuzz.h registers them by name).
$(BUILD)/tests/test_fuzz_regress: $(FUZZ_TGT_OBJ) $(FUZZ_SUP_OBJ)
$(BUILD)/fuzz/%.o $(BUILD)/tests/test_fuzz_regress.o: ALL_CFLAGS += -Ifuzz

# test_kern / test_attn with kern_avx512.c / attn_avx512.c compiled on src/kern/avx512_emu.h
# (plain C over AVX2): they run wherever AVX2 does, so a CPU without AVX-512 still checks that
# set's kernels against the scalar references and the AVX2 set bit for bit (issue 16). The
# emulated object comes before the library on the link line, so the archive's native object
# is never pulled in. -O1 -g0: gcc's variable tracking over the unrolled emulation took
# minutes at -O2 -g (over 10 with the sanitizers), 15-20 s so.
$(BUILD)/emu512/%_avx512.o: src/kern/%_avx512.c | .deps.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O1 -g0 $(AVX2_FLAGS) $(SIMD_FLAGS) -DNX_AVX512_EMULATE -c $< -o $@
$(BUILD)/emu512/test_%.o: tests/test_%.c | .deps.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DNX_TEST_AVX512_EMULATED -c $< -o $@
$(BUILD)/tests/test_%_avx512emu: $(BUILD)/emu512/test_%.o $(BUILD)/emu512/%_avx512.o $(TSUP_OBJ) $(BUILD)/libnexus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The main job: greedy generation from BOS on the default model.
run: all
	$(BUILD)/nexus run -m $(MODEL) -n 128

# Real MCP servers for the MCP client's integration tests (tests/test_mcp.c) and the official
# openai client for the server's (tests/test_server_openai.c), pinned, from npm into build-npm/. node and npm come with the machine; when `npm` is missing, Debian's nodejs
# and npm packages are installed (checked by command, not dpkg: NodeSource's nodejs bundles npm
# and conflicts with Debian's npm package).
NPM_PKGS  = @modelcontextprotocol/server-everything@2026.8.31 \
            @modelcontextprotocol/server-filesystem@2026.8.31 \
            @modelcontextprotocol/server-memory@2026.8.31 \
            openai@6.30.1
NPM_STAMP = build-npm/.stamp-2026.8.31-openai-6.30.1
.PHONY: npm-servers
npm-servers: $(NPM_STAMP)
$(NPM_STAMP):
	@command -v npm >/dev/null 2>&1 || { SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	npm install --no-audit --no-fund --save-exact --prefix build-npm $(NPM_PKGS)
	@touch $@

# The whole suite; ends with "N passed, N failed". The public header must also compile as C++.
# (plus, in the plain build, a short smoke of every fuzz target: build/tests/test_fuzz_smoke)
ifeq ($(SAN)$(FUZZ),)
FUZZ_SMOKE = $(BUILD)/tests/test_fuzz_smoke
endif
test: all $(NPM_STAMP) $(FUZZ_SMOKE)
	@if command -v $(CXX) >/dev/null 2>&1; then $(CXX) -std=c++11 -Wall -Werror -fsyntax-only -x c++ include/nexus.h || exit 1; fi
	@BUILD=$(BUILD) sh tests/run.sh

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer.
test-san:
	$(MAKE) SAN=address,undefined test

bench: all
	$(BUILD)/nexus bench -m ../shared/models/stories260K/stories260K.gguf

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/nexus $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(BUILD)/libnexus.a $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/nexus.h $(DESTDIR)$(PREFIX)/include/

clean:
	rm -rf build build-san build-fuzz

# ---- Fuzzing (README "Fuzzing") -----------------------------------------------------------
# One file per target: fuzz/targets/<name>.c with NX_FUZZ_TARGET(<name>) (fuzz/fuzz.h), one
# row here: name:dictionary (fuzz/dict/<d>.dict, "-" for none):max input length in bytes.
# Seeds: fuzz/seeds.sh <name> <dir> (from the test fixtures and ../shared). Regression inputs
# in tests/fuzz-regress/<name>/ are replayed by build/tests/test_fuzz_regress (make test).
FUZZ_TABLE = gguf_model:gguf:400000 \
             tok_spm:text:4096 \
             tok_llama3:text:4096 \
             tok_qwen2:text:4096 \
             tok_gpt2:text:4096 \
             tok_bert:text:4096 \
             tok_stories:text:4096 \
             hftok_json:json:65536 \
             hftok_encode:text:4096 \
             safetensors:safetensors:65536 \
             model2vec:safetensors:400000 \
             kvblock:-:65536 \
             mcp_client:jsonrpc:65536 \
             mcp_config:json:16384 \
             registry:json:65536 \
             schema_grammar:schema:16384 \
             gbnf:gbnf:16384 \
             jinja:jinja:65536 \
             server_request:openai:65536
FUZZ_NAMES  = $(foreach t,$(FUZZ_TABLE),$(word 1,$(subst :, ,$(t))))
FUZZ_BIN    = $(FUZZ_NAMES:%=build-fuzz/bin/fuzz_%)
FUZZ_DEB_PKGS = clang libclang-rt-dev
FUZZ_TIME  ?= 3600
FUZZ_RUNS  ?= 10000000

.PHONY: fuzz fuzz-deps fuzz-build fuzz-run fuzz-smoke
# Installs clang when missing, builds every target into build-fuzz/bin/ and its seeds into
# build-fuzz/seeds/<name>/ (again when fuzz/seeds.sh or fuzz/seeds/<name>/ changed).
fuzz: fuzz-build $(BUILD)/nexus
	@for n in $(FUZZ_NAMES); do d=build-fuzz/seeds/$$n; \
	  if [ ! -d $$d ] || [ fuzz/seeds.sh -nt $$d ] || { [ -d fuzz/seeds/$$n ] && [ fuzz/seeds/$$n -nt $$d ]; }; then \
	    rm -rf $$d; BUILD=$(BUILD) sh fuzz/seeds.sh $$n $$d || exit 1; fi; done
fuzz-deps: .deps-fuzz.stamp
.deps-fuzz.stamp: Makefile
	@missing=""; for p in $(FUZZ_DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing || exit 1; \
	fi; touch $@
fuzz-build: .deps-fuzz.stamp .deps.stamp
	@$(MAKE) --no-print-directory -j2 FUZZ=1 fuzz-bins
.PHONY: fuzz-bins
fuzz-bins: $(FUZZ_BIN)
build-fuzz/bin/fuzz_%: $(BUILD)/fuzz/targets/%.o $(FUZZ_SUP_OBJ) $(BUILD)/libnexus.a
	@mkdir -p $(dir $@)
	$(CC) -fsanitize=fuzzer,address,undefined -o $@ $^ $(LDLIBS)
# Every target in turn (one process at a time, nice 19) for FUZZ_RUNS executions or FUZZ_TIME
# seconds each, whichever first; logs in build-fuzz/logs/, corpora in build-fuzz/corpus/.
fuzz-run: fuzz
	@for t in $(FUZZ_TABLE); do sh fuzz/run.sh $$(echo $$t | tr : ' ') $(FUZZ_TIME) $(FUZZ_RUNS) || exit 1; done
# About 2 s of every target; `make test` runs it as build/tests/test_fuzz_smoke (a wrapper
# that tests/run.sh picks up like any test binary).
fuzz-smoke: fuzz
	@FUZZ_TABLE="$(FUZZ_TABLE)" sh tests/fuzz_smoke.sh
# When clang with libFuzzer is missing and cannot be installed, the wrapper only says so.
# ($(BUILD)/nexus first: the seed builder uses it, and the inner make must not build it too.)
.PHONY: FORCE
$(BUILD)/tests/test_fuzz_smoke: tests/fuzz_smoke.sh $(BUILD)/nexus FORCE
	@mkdir -p $(dir $@)
	@$(MAKE) --no-print-directory fuzz-deps || echo "warning: could not install $(FUZZ_DEB_PKGS)"
	@if printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' | \
	    $(FUZZ_CC) -fsanitize=fuzzer -x c - -o $(BUILD)/.fuzz-probe 2>/dev/null; then \
	  rm -f $(BUILD)/.fuzz-probe; $(MAKE) --no-print-directory fuzz || exit 1; \
	  printf '#!/bin/sh\n# generated by make: the fuzz smoke with the Makefile'"'"'s target table\nFUZZ_TABLE="%s" exec sh tests/fuzz_smoke.sh\n' "$(FUZZ_TABLE)" > $@; \
	else \
	  printf '#!/bin/sh\necho "fuzz smoke skipped: $(FUZZ_CC) with libFuzzer is not available"\necho "RESULT passed=0 failed=0"\n' > $@; \
	fi
	@chmod +x $@

.SECONDARY:

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TSUP_OBJ:.o=.d) $(TEST_BIN:=.d) $(BUILD)/emu512/*.d \
         $(FUZZ_SUP_OBJ:.o=.d) $(FUZZ_TGT_OBJ:.o=.d)
