/*
 * kv_cmd.c - `nexus kv`: compiled KV blocks through include/nexus.h.
 *
 *   nexus kv compile -m MODEL (--text T | --file F) [--m0 N] [--prefix TEXT] [--f32]
 *                    [--no-bos] [-t N] -o FILE
 *     Tokenizes the text (with BOS when the block starts the sequence: m0 = 0 and no prefix,
 *     unless --no-bos; a prefix gets the BOS instead), runs it at positions m0.. after the
 *     prefix (which sits just before m0) and writes the block file atomically.
 *   nexus kv info FILE [-m MODEL]
 *     Verifies the file (and, with -m, that it belongs to MODEL) and prints its description.
 *
 * Errors go to stderr with exit code 1.
 */
#include "kv_cmd.h"
#include "args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "core/readfile.h"
#include "gen/generate.h"
#include "nexus.h"

__attribute__((format(printf, 1, 2))) static int kv_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nexus kv: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

/* Tokenizes with special-token parsing, BOS as the model asks when bos (nx_gen_tokenize);
 * nx_free the result; NULL on failure. */
static nx_token *kv_tokenize(const nx_model *m, const char *text, size_t len, bool bos,
                             int32_t *n_out) {
    nx_token *t;
    struct nx_err err;
    if (nx_gen_tokenize(m, text, len, (bos ? NX_GEN_TOK_ADD_SPECIAL : 0u) | NX_GEN_TOK_PARSE_SPECIAL,
                        &t, n_out, &err))
        return NULL;
    return t;
}

static nx_model *kv_load_model(const char *path) {
    char err[512];
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m, err, sizeof err)) {
        fprintf(stderr, "nexus kv: cannot load '%s': %s\n", path, err);
        return NULL;
    }
    return m;
}

static int kv_compile(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *prefix = NULL, *out = NULL;
    long m0 = -1, threads = 2;
    bool f32 = false, no_bos = false;
    const struct arg tab[] = {
        A_STR("-m", "--model", &model),
        A_STR("--text", NULL, &text),
        A_STR("--file", NULL, &file),
        A_STR("--prefix", NULL, &prefix),
        A_STR("-o", NULL, &out),
        A_LONG("--m0", NULL, &m0, 0, 1 << 24),
        A_LONG("-t", "--threads", &threads, 1, 512),
        A_FLAG("--f32", NULL, &f32),
        A_FLAG("--no-bos", NULL, &no_bos),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    if (args_parse(tabs, argc, argv, 1, "nexus kv compile", false, NULL, 0, NULL) != ARGS_OK) return 1;
    if (!model || !out || !text == !file)
        return kv_fail("compile: usage: nexus kv compile -m MODEL (--text T | --file F) [--m0 N] "
                       "[--prefix TEXT] [--f32] [--no-bos] -o FILE");
    size_t len = 0;
    char *owned = NULL;
    if (file) {
        char rerr[512];
        owned = nx_read_file(file, NX_READ_FILE_MAX, &len, rerr, sizeof rerr);
        if (!owned) return kv_fail("%s", rerr);
        text = owned;
    } else {
        len = strlen(text);
    }
    nx_model *m = kv_load_model(model);
    if (!m) {
        nx_free(owned);
        return 1;
    }
    int rc = 1;
    int32_t n_pre = 0, n = 0;
    nx_token *pre = NULL, *toks = NULL;
    if (prefix) pre = kv_tokenize(m, prefix, strlen(prefix), !no_bos, &n_pre);
    bool bos = !no_bos && !prefix && m0 <= 0;
    toks = kv_tokenize(m, text, len, bos, &n);
    nx_ctx *c = NULL;
    nx_kv_block *b = NULL;
    if ((prefix && !pre) || !toks || n == 0) {
        fprintf(stderr, "nexus kv: tokenizing failed or the text is empty\n");
        goto done;
    }
    if (m0 < 0) m0 = n_pre;
    if (m0 < n_pre) {
        fprintf(stderr, "nexus kv: --m0 %ld is smaller than the prefix (%d tokens)\n", m0, n_pre);
        goto done;
    }
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = (int32_t)m0 + n;
    cp.kv_type = f32 ? NX_TYPE_F32 : NX_TYPE_F16;
    cp.n_threads = cp.n_threads_batch = (int32_t)threads;
    char err[512];
    if (nx_ctx_init(m, &cp, &c, err, sizeof err)) {
        fprintf(stderr, "nexus kv: cannot create a context: %s\n", err);
        goto done;
    }
    double t0 = nx_time_s();
    if (nx_kv_block_compile(c, pre, n_pre, toks, n, (int32_t)m0, &b)) {
        fprintf(stderr, "nexus kv: compile failed: %s\n", nx_ctx_last_error(c));
        goto done;
    }
    double t1 = nx_time_s();
    if (nx_kv_block_save(b, out, err, sizeof err)) {
        fprintf(stderr, "nexus kv: %s\n", err);
        goto done;
    }
    char desc[512];
    nx_kv_block_desc(b, desc, sizeof desc);
    printf("%s\n", desc);
    fprintf(stderr, "compiled %d tokens (after %d prefix tokens) in %.3f s, wrote '%s' in %.3f s\n",
            n, n_pre, t1 - t0, out, nx_time_s() - t1);
    rc = 0;
done:
    nx_kv_block_free(b);
    nx_ctx_free(c);
    nx_free(pre);
    nx_free(toks);
    nx_free(owned);
    nx_model_free(m);
    return rc;
}

static int kv_info(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    const struct arg tab[] = {A_STR("-m", "--model", &model), A_END};
    const struct arg *tabs[] = {tab, NULL};
    if (args_parse(tabs, argc, argv, 1, "nexus kv info", false, &file, 1, NULL) != ARGS_OK) return 1;
    if (!file) return kv_fail("info: usage: nexus kv info FILE [-m MODEL]");
    nx_model *m = model ? kv_load_model(model) : NULL;
    if (model && !m) return 1;
    nx_kv_block *b = NULL;
    char err[600];
    nx_status st = nx_kv_block_load(m, file, &b, err, sizeof err);
    if (st) {
        fprintf(stderr, "nexus kv: %s (%s)\n", err, nx_status_name(st));
        nx_model_free(m);
        return 1;
    }
    char desc[512];
    nx_kv_block_desc(b, desc, sizeof desc);
    printf("%s\n%s\n", desc, m ? "matches the model" : "checksum ok (no model given: not checked "
                                                        "against one)");
    const nx_token *t = nx_kv_block_tokens(b);
    printf("tokens:");
    for (int32_t i = 0; i < nx_kv_block_n_tokens(b) && i < 32; i++) printf(" %d", t[i]);
    printf("%s\n", nx_kv_block_n_tokens(b) > 32 ? " ..." : "");
    nx_kv_block_free(b);
    nx_model_free(m);
    return 0;
}

int kv_main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "compile")) return kv_compile(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "info")) return kv_info(argc - 1, argv + 1);
    fprintf(stderr, "usage: nexus kv compile -m MODEL (--text T | --file F) [--m0 N] "
                    "[--prefix TEXT] [--f32] [--no-bos] -o FILE\n"
                    "       nexus kv info FILE [-m MODEL]\n");
    return 1;
}
