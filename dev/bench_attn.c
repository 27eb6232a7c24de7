/*
 * bench_attn.c - single-thread cost of decode attention for one KV head: the per-call path
 * (kern_dot_kv / kern_axpy_kv once per position and query head) vs the grouped kernels
 * (kern_attn_scores / kern_attn_values once per KV head).
 *
 * Build and run (after `make build/libnexus.a`):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc dev/bench_attn.c build/libnexus.a -lm -lpthread -o build/bench_attn && ./build/bench_attn
 * Optional arguments: hd ng npos (default 64 4 4096). NX_KERNELS=ref|avx2 picks the set.
 *
 * DESIGN
 * - Layout as in the forward pass: an F16 cache of 8 KV heads (rows of 8*hd elements), the
 *   measured head's slice in the middle of each row; ng query heads share it.
 * - Reported: ns per (position x query head), for scores, values, and both, as the minimum
 *   over repetitions of thread CPU time. Softmax is not included (the same in both paths).
 *   Then the whole attention of the head group: grouped scores + softmax + values against the
 *   fused kernel (kern_attn_block per 32-position block, as the KV cache pages, + merge), with
 *   K and V in separate buffers. BENCH_ROW=head: rows of one head (the paged cache's layout).
 * - "hot": the same layer's K/V again and again (the touched slices, 2 * npos * hd * 2 bytes,
 *   stay in L2/L3). "cold": 128 layers' caches are cycled (512 MiB, 64 MiB of touched slices
 *   for the defaults: more than the L3), as in a forward pass, where each layer's cache is read
 *   once per token. K and V are the same buffer here (they are read in separate passes).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kern/kern.h"
#include "kern/quant.h"

#include "bench_util.h"

enum { N_KV_HEADS = 8, KV_HEAD = 3, LAYERS = 128 };

struct shape {
    int64_t hd, ng, npos;
    size_t row; /* bytes per position */
};

static float g_sink;

/* Old path: one dot / axpy per (position, head). */
static void old_scores(const struct shape *s, const char *k, const float *q, float *sc) {
    for (int64_t g = 0; g < s->ng; g++)
        for (int64_t j = 0; j < s->npos; j++)
            sc[g * s->npos + j] =
                kern_dot_kv(NX_TYPE_F16, s->hd, k + (size_t)j * s->row, q + g * s->hd) * 0.125f;
}

static void old_values(const struct shape *s, const char *v, const float *p, float *out) {
    for (int64_t g = 0; g < s->ng; g++) {
        float *o = out + g * s->hd;
        memset(o, 0, (size_t)s->hd * sizeof(float));
        for (int64_t j = 0; j < s->npos; j++)
            kern_axpy_kv(NX_TYPE_F16, s->hd, p[g * s->npos + j], v + (size_t)j * s->row, o);
    }
}

static void new_scores(const struct shape *s, const char *k, const float *q, float *sc) {
    kern_attn_scores(NX_TYPE_F16, s->hd, k, s->row, s->npos, q, s->ng, 0.125f, sc, s->npos);
}

static void new_values(const struct shape *s, const char *v, const float *p, float *out) {
    kern_attn_values(NX_TYPE_F16, s->hd, v, s->row, s->npos, p, s->npos, s->ng, out);
}

/* Unfused: scores, softmax per head, values (p = scores, overwritten). */
static float *g_sc;
static void unfused(const struct shape *s, const char *kv, const float *q, float *out) {
    const char *v = kv + (size_t)s->npos * s->row;
    kern_attn_scores(NX_TYPE_F16, s->hd, kv, s->row, s->npos, q, s->ng, 0.125f, g_sc, s->npos);
    for (int64_t g = 0; g < s->ng; g++) kern_softmax(g_sc + g * s->npos, s->npos);
    kern_attn_values(NX_TYPE_F16, s->hd, v, s->row, s->npos, g_sc, s->npos, s->ng, out);
}

/* Fused: one part per 32-position block, then the merge. */
enum { FUSED_BLOCK = 32 };
static float *g_parts;
static void fused(const struct shape *s, const char *kv, const float *q, float *out) {
    int64_t nparts = (s->npos + FUSED_BLOCK - 1) / FUSED_BLOCK, rec = s->ng * (s->hd + 2);
    for (int64_t b = 0; b < nparts; b++) {
        int64_t j0 = b * FUSED_BLOCK, n = s->npos - j0 < FUSED_BLOCK ? s->npos - j0 : FUSED_BLOCK;
        const char *r = kv + (size_t)j0 * s->row, *v = r + (size_t)s->npos * s->row;
        kern_attn_block(NX_TYPE_F16, s->hd, r, s->row, v, s->row, n, q, s->ng, 0.125f, g_parts + b * rec);
    }
    kern_attn_merge(s->hd, s->ng, nparts, g_parts, out);
}

typedef void (*kfn)(const struct shape *, const char *, const float *, float *);

/* Best ns per (position x head) of fn over reps, cycling over nl layers of caches. */
static double run(const struct shape *s, kfn fn, char **kv, int nl, const float *in, float *out,
                  int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (int l = 0; l < nl; l++) fn(s, kv[l], in, out);
        double t = (now_s() - t0) / nl;
        if (t < best) best = t;
        g_sink += out[0];
    }
    return best * 1e9 / (double)(s->npos * s->ng);
}

int main(int argc, char **argv) {
    struct shape s = {64, 4, 4096, 0};
    if (argc > 3) {
        s.hd = atoll(argv[1]);
        s.ng = atoll(argv[2]);
        s.npos = atoll(argv[3]);
    }
    /* BENCH_ROW=head: rows of one head only (the paged cache's layout: a block's rows are
     * contiguous), else 8 interleaved heads */
    const char *rowenv = getenv("BENCH_ROW");
    bool one_head = rowenv && strcmp(rowenv, "head") == 0;
    s.row = (size_t)((one_head ? 1 : N_KV_HEADS) * s.hd) * sizeof(nx_half);
    size_t cache = (size_t)s.npos * s.row;
    char *kv[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        /* K, then V (2 * npos rows; the per-path benchmarks above use the K half for both) */
        kv[l] = (char *)malloc(2 * cache + (size_t)(KV_HEAD * s.hd) * sizeof(nx_half)) +
                (one_head ? 0 : (size_t)(KV_HEAD * s.hd) * sizeof(nx_half));
        for (int64_t j = 0; j < 2 * s.npos; j++) {
            nx_half *h = (nx_half *)(kv[l] + (size_t)j * s.row);
            for (int64_t i = 0; i < s.hd; i++)
                h[i] = nx_f32_to_half((float)((j * 31 + i * 7 + l) % 2001) / 1000.0f - 1.0f);
        }
    }
    float *q = malloc((size_t)(s.ng * s.hd) * sizeof(float));
    float *p = malloc((size_t)(s.ng * s.npos) * sizeof(float));
    float *sc = malloc((size_t)(s.ng * s.npos) * sizeof(float));
    float *out = malloc((size_t)(s.ng * s.hd) * sizeof(float));
    for (int64_t i = 0; i < s.ng * s.hd; i++) q[i] = (float)(i % 17) / 17.0f - 0.5f;
    for (int64_t i = 0; i < s.ng * s.npos; i++) p[i] = 1.0f / (float)s.npos;

    printf("set %s, F16 KV, hd %lld, ng %lld, npos %lld, row %zu bytes (%d KV heads)\n",
           kern_name(), (long long)s.hd, (long long)s.ng, (long long)s.npos, s.row, N_KV_HEADS);
    printf("ns per (position x head)   scores   values    total\n");
    for (int cold = 0; cold < 2; cold++) {
        int nl = cold ? LAYERS : 1, reps = cold ? 3 : 50;
        double os = run(&s, old_scores, kv, nl, q, sc, reps);
        double ov = run(&s, old_values, kv, nl, p, out, reps);
        double ns = run(&s, new_scores, kv, nl, q, sc, reps);
        double nv = run(&s, new_values, kv, nl, p, out, reps);
        const char *tag = cold ? "cold" : "hot ";
        printf("%s per-call (dot/axpy)   %7.3f  %7.3f  %7.3f\n", tag, os, ov, os + ov);
        printf("%s grouped (attn_*)      %7.3f  %7.3f  %7.3f   (x%.2f)\n", tag, ns, nv, ns + nv,
               (os + ov) / (ns + nv));
    }
    g_sc = sc;
    g_parts = malloc(sizeof(float) * (size_t)(((s.npos + FUSED_BLOCK - 1) / FUSED_BLOCK) * s.ng * (s.hd + 2)));
    printf("whole attention, ns per (position x head)   unfused (scores+softmax+values)   fused\n");
    for (int cold = 0; cold < 2; cold++) {
        int nl = cold ? LAYERS : 1, reps = cold ? 3 : 50;
        double u = run(&s, unfused, kv, nl, q, out, reps);
        double f = run(&s, fused, kv, nl, q, out, reps);
        printf("%s                                        %7.3f                    %7.3f   (x%.2f)\n",
               cold ? "cold" : "hot ", u, f, u / f);
    }
    if (g_sink == 12345.0f) printf(" ");
    return 0;
}
