# Nexus - plain Makefile. `make` installs missing Debian packages (apt-get), then builds
# build/libnexus.a, build/nexus and the test binaries. `make test` runs the suite.
# Variables: DEBUG=1, SAN=address,undefined (sanitizer build in build-san/), NATIVE=1.

CC      ?= cc
CXX     ?= c++
PREFIX  ?= /usr/local
BUILD   ?= build
DEB_PKGS = build-essential libpcre2-dev libjansson-dev libutf8proc-dev python3-jsonschema

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
ifneq ($(SAN),)
BUILD    = build-san
CFLAGS_BASE += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=$(SAN)
endif
CFLAGS  ?=
ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS)
LDLIBS   = -lpcre2-8 -lutf8proc -ljansson -lm -lpthread

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
# tools/cli objects other than main.o are linkable into tests (e.g. the model writer)
CLI_LIBOBJ = $(filter-out $(BUILD)/tools/cli/main.o,$(CLI_OBJ))

MODEL ?= ../shared/models/stories260K/stories260K.gguf

.PHONY: all deps run test test-san bench clean install
all: deps $(BUILD)/nexus $(TEST_BIN)

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
	$(CC) $(ALL_CFLAGS) $(AVX2_FLAGS) -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c | .deps.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) -c $< -o $@

$(BUILD)/libnexus.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/nexus: $(CLI_OBJ) $(BUILD)/libnexus.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TSUP_OBJ) $(CLI_LIBOBJ) $(BUILD)/libnexus.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The main job: greedy generation from BOS on the default model.
run: all
	$(BUILD)/nexus run -m $(MODEL) -n 128

# Real MCP servers for the MCP client's integration tests (tests/test_mcp.c), pinned, from npm
# into build-npm/. node and npm come with the machine; when `npm` is missing, Debian's nodejs
# and npm packages are installed (checked by command, not dpkg: NodeSource's nodejs bundles npm
# and conflicts with Debian's npm package).
NPM_PKGS  = @modelcontextprotocol/server-everything@2026.8.31 \
            @modelcontextprotocol/server-filesystem@2026.8.31 \
            @modelcontextprotocol/server-memory@2026.8.31
NPM_STAMP = build-npm/.stamp-2026.8.31
.PHONY: npm-servers
npm-servers: $(NPM_STAMP)
$(NPM_STAMP):
	@command -v npm >/dev/null 2>&1 || { SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	npm install --no-audit --no-fund --save-exact --prefix build-npm $(NPM_PKGS)
	@touch $@

# The whole suite; ends with "N passed, N failed". The public header must also compile as C++.
test: all $(NPM_STAMP)
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
	rm -rf build build-san

.SECONDARY:

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TSUP_OBJ:.o=.d) $(TEST_BIN:=.d)
