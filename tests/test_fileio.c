/*
 * test_fileio.c - fault injection in every atomic file writer: the KV block writer
 * (nx_kv_block_save), the GGUF writer (gguf_writer_write) and the evaluation output files
 * (nx_outfile_commit). Through src/core/fileio.h each write, fsync, close, rename, fflush and
 * fclose the writer makes is failed in turn, and write(2) is made to return short counts.
 * Oracle: the bytes of an undisturbed write. Every injected failure must either be reported
 * (non-empty message carrying the injected error's text, the destination still holding its
 * previous content, no temporary file left in the directory) or, for a failure after the file
 * is complete (the directory fsync), leave exactly the undisturbed bytes in place. Failures of
 * the data path (any write, the file's fsync, close and rename) must be reported. Short writes
 * must give the same bytes as an undisturbed write.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/readfile.h"
#include "eval/outfile.h"
#include "gguf/gguf.h"
#include "nexus.h"
#include "support/tmpdir.h"
#include "test.h"

typedef int (*writer_fn)(const char *path, char *err, size_t errlen); /* 0: ok */

static const char OLD[] = "the previous version of the file\n";

static int write_plain(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(s);
    int ok = fwrite(s, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static char *slurp(const char *path, size_t *len) {
    char err[256];
    return nx_read_file(path, (size_t)1 << 30, len, err, sizeof err);
}

/* Number of directory entries other than . .. and keep. */
static int others_in(const char *dir, const char *keep, char *first, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, keep))
            continue;
        if (n++ == 0) snprintf(first, cap, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

static const char *const OP_NAME[NX_IO_N_OPS] = {"write", "fsync", "close", "rename", "fflush",
                                                 "fclose"};

/* Runs the whole fault matrix on one writer; the file is dir/out. Returns 0 or fails. */
static void check_writer(const char *label, writer_fn fn) {
    char dir[1024], path[1100], err[1024], stray[256];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), label);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) FAILF("%s: mkdir: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/out", dir);

    /* the oracle: an undisturbed write, and how many calls of each kind it makes */
    unlink(path);
    nx_io_reset();
    err[0] = 0;
    if (fn(path, err, sizeof err) != 0) FAILF("%s: undisturbed write failed: %s", label, err);
    long calls[NX_IO_N_OPS];
    for (int op = 0; op < NX_IO_N_OPS; op++) calls[op] = nx_io_calls((enum nx_io_op)op);
    size_t want_len;
    char *want = slurp(path, &want_len);
    ASSERT_TRUE(want != NULL);
    ASSERT_TRUE(calls[NX_IO_WRITE] > 0 || calls[NX_IO_FFLUSH] > 0);
    ASSERT_TRUE(calls[NX_IO_FSYNC] > 0);
    ASSERT_TRUE(calls[NX_IO_RENAME] == 1);

    /* short writes: same bytes, more calls */
    unlink(path);
    nx_io_reset();
    nx_io_short_writes(true);
    int rc = fn(path, err, sizeof err);
    long short_calls = nx_io_calls(NX_IO_WRITE);
    nx_io_reset();
    if (rc != 0) FAILF("%s: failed under short writes: %s", label, err);
    size_t got_len;
    char *got = slurp(path, &got_len);
    bool same = got && got_len == want_len && memcmp(got, want, want_len) == 0;
    nx_free(got);
    if (!same) FAILF("%s: short writes changed the file", label);
    if (calls[NX_IO_WRITE] > 0) ASSERT_TRUE(short_calls > calls[NX_IO_WRITE]);

    int cases = 0;
    for (int op = 0; op < NX_IO_N_OPS; op++) {
        for (long k = 1; k <= calls[op]; k++) {
            /* every call up to 40, then a spread, and always the last */
            if (k > 40 && k % 37 != 0 && k != calls[op]) continue;
            int inj = op == NX_IO_WRITE || op == NX_IO_FFLUSH ? ENOSPC : EIO;
            if (write_plain(path, OLD) != 0) FAILF("cannot prepare %s", path);
            nx_io_reset();
            nx_io_fail_nth((enum nx_io_op)op, k, inj);
            err[0] = 0;
            rc = fn(path, err, sizeof err);
            nx_io_reset();
            cases++;
            got = slurp(path, &got_len);
            if (!got) FAILF("%s: %s #%ld: the destination is gone", label, OP_NAME[op], k);
            bool is_old = got_len == strlen(OLD) && memcmp(got, OLD, got_len) == 0;
            bool is_new = got_len == want_len && memcmp(got, want, want_len) == 0;
            nx_free(got);
            int n_stray = others_in(dir, "out", stray, sizeof stray);
            if (n_stray != 0)
                FAILF("%s: %s #%ld failed: %d file(s) left behind, e.g. '%s'", label, OP_NAME[op],
                      k, n_stray, stray);
            /* the data path: everything before the rename, and the rename itself */
            bool data_path = op != NX_IO_FSYNC || k == 1;
            if (rc == 0) {
                if (data_path)
                    FAILF("%s: %s #%ld failed (%s) but the writer reported success", label,
                          OP_NAME[op], k, strerror(inj));
                if (!is_new) FAILF("%s: %s #%ld: success with wrong bytes", label, OP_NAME[op], k);
                continue;
            }
            if (!err[0]) FAILF("%s: %s #%ld: failure without a message", label, OP_NAME[op], k);
            if (!strstr(err, strerror(inj)))
                FAILF("%s: %s #%ld: message \"%s\" does not say \"%s\"", label, OP_NAME[op], k,
                      err, strerror(inj));
            if (!is_old && !(is_new && !data_path && strstr(err, "director")))
                FAILF("%s: %s #%ld: failure left %s at the destination (\"%s\")", label,
                      OP_NAME[op], k, is_new ? "the new file" : "a partial file", err);
        }
    }
    nx_free(want);
    unlink(path);
    rmdir(dir);
    printf("  %s: %d injected failures, %ld writes (%ld when short)\n", label, cases,
           calls[NX_IO_WRITE], short_calls);
}

/* ---- the writers ---- */

static nx_kv_block *g_block;

static int save_block(const char *path, char *err, size_t errlen) {
    return nx_kv_block_save(g_block, path, err, errlen) == NX_STATUS_OK ? 0 : -1;
}

static int write_gguf(const char *path, char *err, size_t errlen) {
    struct gguf_writer *w = gguf_writer_init();
    if (!w) return -1;
    static float data[20000];
    for (size_t i = 0; i < sizeof data / sizeof data[0]; i++) data[i] = (float)i * 0.5f;
    struct nx_err e = {{0}};
    int64_t ne[2] = {100, 200};
    nx_status st = gguf_writer_add_str(w, "general.architecture", "llama");
    if (!st) st = gguf_writer_add_u32(w, "llama.block_count", 1);
    if (!st) st = gguf_writer_add_tensor(w, "a", NX_TYPE_F32, 2, ne, data, sizeof data);
    if (!st) st = gguf_writer_add_tensor(w, "b", NX_TYPE_F32, 1, ne, data, 400);
    if (!st) st = gguf_writer_write(w, path, &e);
    gguf_writer_free(w);
    snprintf(err, errlen, "%s", e.msg);
    return st == NX_STATUS_OK ? 0 : -1;
}

static int write_outfile(const char *path, char *err, size_t errlen) {
    struct nx_outfile o;
    if (nx_outfile_open(&o, path, err, errlen) != 0) return -1;
    for (int i = 0; i < 50; i++) fprintf(o.f, "{\"row\": %d, \"text\": \"%s\"}\n", i, "some result");
    return nx_outfile_commit(&o, err, errlen);
}

TEST(kv_block_save_faults) {
    char mp[1024], err[512];
    snprintf(mp, sizeof mp, "%s/models/stories260K/stories260K.gguf", test_shared());
    struct stat st;
    if (stat(mp, &st) != 0) {
        printf("  skipped: %s missing\n", mp);
        return;
    }
    struct nx_model_params p = nx_model_default_params();
    nx_model *m = NULL;
    ASSERT_OK(nx_model_load(mp, &p, &m, err, sizeof err));
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = cp.n_threads_batch = 1;
    nx_ctx *c = NULL;
    if (nx_ctx_init(m, &cp, &c, err, sizeof err) != NX_STATUS_OK) {
        nx_model_free(m);
        FAILF("nx_ctx_init: %s", err);
    }
    nx_token toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 5 + 7 * i;
    nx_status s = nx_kv_block_compile(c, NULL, 0, toks, 12, 0, &g_block);
    if (s == NX_STATUS_OK) check_writer("kvblock", save_block);
    else g_test_failed = 1;
    nx_kv_block_free(g_block);
    g_block = NULL;
    nx_ctx_free(c);
    nx_model_free(m);
}

TEST(gguf_write_faults) { check_writer("gguf", write_gguf); }

TEST(outfile_faults) { check_writer("outfile", write_outfile); }

TEST(injection_counts_and_resets) {
    /* the hook itself: the nth call fails once, then calls pass again */
    char path[1100];
    test_tmp_path("hook", path, sizeof path);
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    int fd = fileno(f);
    nx_io_reset();
    nx_io_fail_nth(NX_IO_WRITE, 2, ENOSPC);
    ASSERT_EQ(nx_io_write(fd, "ab", 2), 2);
    errno = 0;
    ASSERT_EQ(nx_io_write(fd, "cd", 2), -1);
    ASSERT_EQ(errno, ENOSPC);
    ASSERT_EQ(nx_io_write(fd, "ef", 2), 2);
    ASSERT_EQ(nx_io_calls(NX_IO_WRITE), 3);
    nx_io_short_writes(true);
    ASSERT_EQ(nx_io_write(fd, "ghij", 4), 2);
    ASSERT_EQ(nx_io_write(fd, "k", 1), 1);
    nx_io_reset();
    ASSERT_EQ(nx_io_calls(NX_IO_WRITE), 0);
    ASSERT_EQ(nx_io_write(fd, "lm", 2), 2);
    fclose(f);
    size_t n;
    char *s = slurp(path, &n);
    ASSERT_TRUE(s != NULL);
    ASSERT_EQ(n, 9);
    ASSERT_TRUE(memcmp(s, "abefghklm", 9) == 0);
    nx_free(s);
}

TEST_MAIN
