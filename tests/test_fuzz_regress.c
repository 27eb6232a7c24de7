/*
 * test_fuzz_regress.c - replays, through the same entry functions the libFuzzer targets call
 * (the files of fuzz/targets/, built normally, registered by name by fuzz/fuzz.h), every input kept in
 * tests/fuzz-regress/<target>/ (inputs that once crashed, hung, leaked or broke a contract
 * check, each fixed) and the small seeds kept in fuzz/seeds/<target>/. A regression shows up as
 * a crash or abort of this binary (tests/run.sh counts it), or under `make test-san` as an
 * ASan/UBSan/LSan report. Also checks that every regression directory names a real target.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/readfile.h"
#include "fuzz.h"
#include "test.h"

static nx_fuzz_fn find_target(const char *name) {
    for (int i = 0; i < nx_fuzz_n; i++)
        if (strcmp(nx_fuzz_table[i].name, name) == 0) return nx_fuzz_table[i].fn;
    return NULL;
}

/* Runs fn on every regular file of dir (missing dir: 0 files). Returns the count, -1 on a read
 * error. */
static int replay_dir(nx_fuzz_fn fn, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[1024], err[256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        size_t len;
        char *buf = nx_read_file(path, (size_t)64 << 20, &len, err, sizeof err);
        if (!buf) {
            fprintf(stderr, "  %s\n", err);
            n = -1;
            break;
        }
        fn((const uint8_t *)buf, len);
        nx_free(buf);
        n++;
    }
    closedir(d);
    return n;
}

TEST(targets_registered) {
    /* the targets of the Makefile's FUZZ_TABLE at the time of writing; more may follow */
    static const char *const names[] = {
        "gguf_model", "tok_spm", "tok_llama3", "tok_qwen2", "tok_gpt2", "tok_bert",
        "tok_stories", "hftok_json", "hftok_encode", "safetensors", "model2vec", "kvblock",
        "mcp_client", "mcp_config", "registry", "schema_grammar", "gbnf", "jinja",
        "server_request"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!find_target(names[i])) FAILF("fuzz target %s is not linked in", names[i]);
}

TEST(regression_dirs_name_targets) {
    DIR *d = opendir("tests/fuzz-regress");
    if (!d) return; /* none kept yet */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (!find_target(e->d_name)) {
            closedir(d);
            FAILF("tests/fuzz-regress/%s: no fuzz target of that name", e->d_name);
        }
    }
    closedir(d);
}

TEST(replay_regressions) {
    int total = 0;
    for (int i = 0; i < nx_fuzz_n; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "tests/fuzz-regress/%s", nx_fuzz_table[i].name);
        int n = replay_dir(nx_fuzz_table[i].fn, dir);
        if (n < 0) FAILF("cannot read %s", dir);
        total += n;
    }
    printf("  %d regression inputs replayed over %d targets%s\n", total, nx_fuzz_n,
           fuzz_skipped() ? " (some targets skipped: shared data missing)" : "");
}

TEST(replay_kept_seeds) {
    int total = 0;
    for (int i = 0; i < nx_fuzz_n; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "fuzz/seeds/%s", nx_fuzz_table[i].name);
        int n = replay_dir(nx_fuzz_table[i].fn, dir);
        if (n < 0) FAILF("cannot read %s", dir);
        total += n;
    }
    ASSERT_TRUE(total > 0);
}

TEST_MAIN
