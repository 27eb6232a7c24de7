/*
 * fuzz.h - the shape of a Nexus fuzz target: one file under fuzz/targets/, one entry function
 * that takes arbitrary bytes and must never crash, hang or leak on them.
 *
 *   NX_FUZZ_TARGET(gguf_model) { ... use data, size ...; return 0; }
 *
 * defines nx_fuzz_gguf_model(data, size). Built with -DNX_LIBFUZZER (make fuzz, build-fuzz/),
 * the macro also defines libFuzzer's LLVMFuzzerTestOneInput calling it. Built normally (into
 * the test binaries), the macro registers the function by name in a table instead, so
 * tests/test_fuzz_regress.c replays the files in tests/fuzz-regress/<name>/ through the very same entry.
 *
 * Targets initialise what they share across inputs (a vocabulary, a model) lazily, once, in
 * static storage (the libFuzzer build triggers that before the first timed input), and must
 * accept an empty input; files they need come from the shared data (fuzz_shared_path), and a target
 * whose files are missing returns without doing anything (fuzz_skipped() tells the tests).
 */
#ifndef NX_FUZZ_H
#define NX_FUZZ_H

#include <stddef.h>
#include <stdint.h>

typedef int (*nx_fuzz_fn)(const uint8_t *data, size_t size);

struct nx_fuzz_entry {
    const char *name;
    nx_fuzz_fn fn;
};

#define NX_FUZZ_MAX 64
extern struct nx_fuzz_entry nx_fuzz_table[NX_FUZZ_MAX];
extern int nx_fuzz_n;

#ifdef NX_LIBFUZZER
/* LLVMFuzzerInitialize runs the target once on an empty input, so its lazy start-up (loading a
 * vocabulary or a model) happens before libFuzzer's per-input timeout starts counting. */
#define NX_FUZZ_TARGET(name) \
    int nx_fuzz_##name(const uint8_t *data, size_t size); \
    int LLVMFuzzerInitialize(int *argc, char ***argv); \
    int LLVMFuzzerInitialize(int *argc, char ***argv) { \
        (void)argc; \
        (void)argv; \
        nx_fuzz_##name((const uint8_t *)"", 0); \
        return 0; \
    } \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { \
        return nx_fuzz_##name(data, size); \
    } \
    int nx_fuzz_##name(const uint8_t *data, size_t size)
#else
#define NX_FUZZ_TARGET(name) \
    int nx_fuzz_##name(const uint8_t *data, size_t size); \
    __attribute__((constructor)) static void nx_fuzz_reg_##name(void) { \
        if (nx_fuzz_n < NX_FUZZ_MAX) \
            nx_fuzz_table[nx_fuzz_n++] = (struct nx_fuzz_entry){#name, nx_fuzz_##name}; \
    } \
    int nx_fuzz_##name(const uint8_t *data, size_t size)
#endif

/*
 * The bytes in an anonymous in-memory file (memfd), for loaders that take a path: *fd gets the
 * descriptor (close it when done) and path "/proc/self/fd/N". Returns 0, or -1 (no memfd).
 */
int fuzz_memfile(const void *data, size_t size, int *fd, char *path, size_t pathlen);

/*
 * The path of a file under the shared data directory ($NX_SHARED, default "../shared"
 * relative to the working directory, the repository root), or NULL when it does not exist
 * (fuzz_skipped() then returns true).
 */
const char *fuzz_shared_path(const char *rel, char *buf, size_t cap);

/* True once a target returned early because its shared files are missing. */
int fuzz_skipped(void);

/* Quiet the library's log (targets call it once). */
void fuzz_quiet(void);

#endif
