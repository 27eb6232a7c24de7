/*
 * embed_cmd.c - `nexus embed` and `nexus rerank`: run a BERT-family encoder GGUF (bert,
 * nomic-bert) through include/nexus.h.
 *
 *   nexus embed -m MODEL [--pooling mean|cls|last] [--no-normalize] [-t N] [--all] TEXT...
 *     one line per text: dim, pooling, L2 norm, the first 8 values (--all: every value)
 *   nexus rerank -m MODEL --query Q [-t N] DOC...
 *     one line per document, in input order: score (the classifier logit) and the document
 *
 * Results go to stdout, errors to stderr with a non-zero exit code.
 */
#include "embed_cmd.h"
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nexus.h"

static int ec_fail(const char *cmd, const char *msg) {
    fprintf(stderr, "nexus %s: %s\n", cmd, msg);
    return 1;
}

static bool ec_threads(const char *v, int *out) {
    long long x;
    if (!args_long(v, 1, 512, &x)) return false;
    *out = (int)x;
    return true;
}

static nx_model *ec_load(const char *cmd, const char *path) {
    char err[512];
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m, err, sizeof err) != NX_STATUS_OK) {
        fprintf(stderr, "nexus %s: %s: %s\n", cmd, path, err);
        return NULL;
    }
    if (!nx_model_is_encoder(m)) {
        fprintf(stderr, "nexus %s: %s is a '%s' model, not an encoder (bert, nomic-bert)\n", cmd,
                path, nx_model_arch(m));
        nx_model_free(m);
        return NULL;
    }
    return m;
}

static const char *ec_pool_name(int p) {
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    return p >= 0 && p <= 4 ? names[p] : "?";
}

int embed_main(int argc, char **argv) {
    const char *model = NULL;
    struct nx_embed_params ep = nx_embed_default_params();
    bool all = false;
    int first_text = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v) return ec_fail("embed", "-m needs a value");
            model = v;
            i++;
        } else if (!strcmp(a, "--pooling")) {
            if (!v) return ec_fail("embed", "--pooling needs a value");
            if (!strcmp(v, "mean")) ep.pooling = NX_POOLING_MEAN;
            else if (!strcmp(v, "cls")) ep.pooling = NX_POOLING_CLS;
            else if (!strcmp(v, "last")) ep.pooling = NX_POOLING_LAST;
            else return ec_fail("embed", "--pooling: expected mean, cls or last");
            i++;
        } else if (!strcmp(a, "--no-normalize")) {
            ep.normalize = false;
        } else if (!strcmp(a, "--all")) {
            all = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!v || !ec_threads(v, &ep.n_threads))
                return ec_fail("embed", "-t: expected an integer in [1, 512]");
            i++;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "nexus embed: unknown option '%s'\n", a);
            return 2;
        } else {
            first_text = i;
            break;
        }
    }
    if (!model || first_text < 0) {
        fprintf(stderr, "usage: nexus embed -m MODEL [--pooling mean|cls|last] [--no-normalize] "
                        "[-t N] [--all] TEXT...\n");
        return 2;
    }
    nx_model *m = ec_load("embed", model);
    if (!m) return 1;
    int rc = 0;
    int dim = nx_model_n_embd(m);
    float *v = malloc((size_t)dim * sizeof *v);
    if (!v) {
        nx_model_free(m);
        return ec_fail("embed", "out of memory");
    }
    int pooling = ep.pooling == NX_POOLING_UNSPECIFIED ? nx_model_pooling(m) : ep.pooling;
    if (pooling == NX_POOLING_RANK && ep.pooling == NX_POOLING_UNSPECIFIED) {
        fprintf(stderr, "nexus embed: %s is a reranker (rank pooling); embedding with CLS "
                        "pooling (use nexus rerank for scores)\n", model);
        ep.pooling = pooling = NX_POOLING_CLS;
    }
    fprintf(stderr, "model: %s\n", nx_model_desc(m));
    for (int i = first_text; i < argc; i++) {
        char err[512];
        if (nx_embed(m, argv[i], &ep, v, dim, err, sizeof err) != NX_STATUS_OK) {
            fprintf(stderr, "nexus embed: \"%s\": %s\n", argv[i], err);
            rc = 1;
            continue;
        }
        double s = 0;
        for (int k = 0; k < dim; k++) s += (double)v[k] * v[k];
        printf("dim=%d pooling=%s norm=%.6f values=[", dim, ec_pool_name(pooling), sqrt(s));
        int show = all ? dim : (dim < 8 ? dim : 8);
        for (int k = 0; k < show; k++) printf("%s%.6f", k ? ", " : "", v[k]);
        printf("%s] text=\"%s\"\n", show < dim ? ", ..." : "", argv[i]);
    }
    free(v);
    nx_model_free(m);
    return rc;
}

int rerank_main(int argc, char **argv) {
    const char *model = NULL, *query = NULL;
    struct nx_embed_params ep = nx_embed_default_params();
    int first_doc = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v) return ec_fail("rerank", "-m needs a value");
            model = v;
            i++;
        } else if (!strcmp(a, "--query") || !strcmp(a, "-q")) {
            if (!v) return ec_fail("rerank", "--query needs a value");
            query = v;
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!v || !ec_threads(v, &ep.n_threads))
                return ec_fail("rerank", "-t: expected an integer in [1, 512]");
            i++;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "nexus rerank: unknown option '%s'\n", a);
            return 2;
        } else {
            first_doc = i;
            break;
        }
    }
    if (!model || !query || first_doc < 0) {
        fprintf(stderr, "usage: nexus rerank -m MODEL --query Q [-t N] DOC...\n");
        return 2;
    }
    nx_model *m = ec_load("rerank", model);
    if (!m) return 1;
    if (nx_model_n_cls_out(m) < 1) {
        fprintf(stderr, "nexus rerank: %s has no classification head (cls.output.weight): not a "
                        "reranker\n", model);
        nx_model_free(m);
        return 1;
    }
    fprintf(stderr, "model: %s\n", nx_model_desc(m));
    int rc = 0, best = -1;
    float best_score = 0;
    for (int i = first_doc; i < argc; i++) {
        char err[512];
        float score;
        if (nx_rerank_score(m, query, argv[i], &ep, &score, err, sizeof err) != NX_STATUS_OK) {
            fprintf(stderr, "nexus rerank: \"%s\": %s\n", argv[i], err);
            rc = 1;
            continue;
        }
        printf("%d\t%.6f\t%s\n", i - first_doc, score, argv[i]);
        if (best < 0 || score > best_score) {
            best = i - first_doc;
            best_score = score;
        }
    }
    if (best >= 0) printf("best: %d (%.6f)\n", best, best_score);
    nx_model_free(m);
    return rc;
}
