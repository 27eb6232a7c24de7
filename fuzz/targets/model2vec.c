/*
 * model2vec.c - fuzz target: the model2vec loader and pooling (src/route/embed_model2vec.c)
 * with the input as model.safetensors ("embeddings", optional "weights" and "mapping") next to
 * a fixed 8-token Unigram tokenizer.json; a model that loads embeds a few texts, and each
 * output must be finite with norm at most 1 (1 unless the mean is tiny: model2vec divides by
 * norm + 1e-32).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "route/embed.h"

static const char TOKENIZER[] =
    "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], "
    "[\"\\u2581a\", -1], [\"b\", -2], [\"\\u2581ab\", -1.5], [\"c\", -3], [\"\\u2581\", -4], "
    "[\"d\", -2.5], [\"\\u2581cd\", -1]]}, \"pre_tokenizer\": {\"type\": \"Metaspace\", "
    "\"replacement\": \"\\u2581\", \"prepend_scheme\": \"always\", \"split\": true}}";

static char dir[256];

static void remove_dir(void) {
    char path[300];
    static const char *const names[] = {"tokenizer.json", "config.json", "model.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static int write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

NX_FUZZ_TARGET(model2vec) {
    char path[300], err[400];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/nx_fuzz_m2v_%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                                                      : base && *base ? base : "/tmp", (int)getpid());
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) abort();
        atexit(remove_dir);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        if (write_all(path, TOKENIZER, sizeof TOKENIZER - 1)) abort();
        snprintf(path, sizeof path, "%s/config.json", dir);
        if (write_all(path, "{\"normalize\": true}", 19)) abort();
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (write_all(path, data, size)) abort();
    err[0] = 0;
    rt_embedder *e = NULL;
    rt_embedder_open(dir, &e, err, sizeof err);
    if (!e) {
        if (!err[0]) __builtin_trap();
        return 0;
    }
    static const char *const texts[] = {"ab cd", "a b c d abcd", "", "zzz \xc3\xa9"};
    float *out = malloc(sizeof(float) * (size_t)(e->dim > 0 ? e->dim : 1));
    for (size_t i = 0; out && i < sizeof texts / sizeof texts[0]; i++) {
        if (e->embed(e, texts[i], RT_QUERY, out, err, sizeof err) != 0) continue;
        double ss = 0;
        for (int k = 0; k < e->dim; k++) {
            if (!isfinite(out[k])) __builtin_trap();
            ss += (double)out[k] * out[k];
        }
        if (ss > 1 + 1e-3) __builtin_trap();
    }
    free(out);
    rt_embedder_free(e);
    return 0;
}
