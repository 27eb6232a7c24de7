/*
 * bench_depth.c - decode speed at depth D against depth 1, interleaved in one process: the
 * issue-16 depth ratio (tg128 at depth 4096 over tg128 at depth 0) with paired rounds, so the
 * host's drift between separate runs does not enter the ratio.
 *
 * Build and run (after `make build/libnexus.a`):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc dev/bench_depth.c build/libnexus.a -lmicrohttpd -lpcre2-8 -lutf8proc -ljansson -lm -lpthread -o build/bench_depth
 *   ./build/bench_depth MODEL [DEPTH=4096] [STEPS=32] [ROUNDS=8] [THREADS=2]
 *
 * DESIGN
 * - Two contexts on one model (the process's one thread pool): A holds one token, B is filled
 *   to DEPTH tokens once (prompt batches of 512). Each round decodes STEPS tokens (a fixed
 *   token id each step, as llama-bench's tg does) on A and on B, each truncated back afterwards
 *   so every round starts at the same depth; which side goes first alternates between rounds.
 * - Reported per round: t/s at depth 1 and at DEPTH and their ratio; then the median and the
 *   range of the ratios and of each side.
 * - A/B of a code variant at depth (BENCH_AB=1): an experiment defines `int nx_dev_knob;` in
 *   the library and branches on it; each round then runs the depth side with the knob at 0 and
 *   at 1 (alternating which goes first) and reports the paired ratio B/A. Without such a
 *   symbol (the weak reference below stays NULL) BENCH_AB is refused.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nexus.h"

extern int nx_dev_knob __attribute__((weak));

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n, double *lo, double *hi) {
    double *s = malloc(sizeof(double) * (size_t)n);
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_d);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    *lo = s[0], *hi = s[n - 1];
    free(s);
    return m;
}

/* STEPS single-token decodes from the context's current end; tokens per second; the context
 * is truncated back to where it started. */
static double run_steps(nx_ctx *ctx, int steps) {
    int32_t start = nx_ctx_n_past(ctx);
    nx_token tok = 100;
    double t0 = wall_s();
    for (int i = 0; i < steps; i++) {
        if (nx_decode(ctx, &tok, 1, false) != NX_STATUS_OK) {
            fprintf(stderr, "bench_depth: decode failed at step %d\n", i);
            exit(1);
        }
    }
    double dt = wall_s() - t0;
    nx_ctx_truncate(ctx, start);
    return steps / dt;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_depth MODEL [DEPTH] [STEPS] [ROUNDS] [THREADS]\n");
        return 2;
    }
    const int depth = argc > 2 ? atoi(argv[2]) : 4096, steps = argc > 3 ? atoi(argv[3]) : 32;
    const int rounds = argc > 4 ? atoi(argv[4]) : 8, threads = argc > 5 ? atoi(argv[5]) : 2;
    if (depth < 1 || steps < 1 || rounds < 1 || rounds > 1000 || threads < 1) return 2;
    char err[256] = "";
    nx_model *m = NULL;
    struct nx_model_params mp = nx_model_default_params();
    if (nx_model_load(argv[1], &mp, &m, err, sizeof err) != NX_STATUS_OK) {
        fprintf(stderr, "bench_depth: %s\n", err);
        return 1;
    }
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = depth + steps + 1;
    cp.n_batch = 512;
    cp.n_threads = cp.n_threads_batch = threads;
    nx_ctx *a = NULL, *b = NULL;
    if (nx_ctx_init(m, &cp, &a, err, sizeof err) != NX_STATUS_OK || nx_ctx_init(m, &cp, &b, err, sizeof err) != NX_STATUS_OK) {
        fprintf(stderr, "bench_depth: %s\n", err);
        return 1;
    }
    nx_token *fill = malloc(sizeof(nx_token) * (size_t)depth);
    if (!fill) {
        fprintf(stderr, "bench_depth: out of memory\n");
        return 1;
    }
    int32_t nv = nx_model_n_vocab(m);
    for (int i = 0; i < depth; i++) fill[i] = (nx_token)((i * 7919 + 13) % (nv > 1 ? nv - 1 : 1) + 1);
    fprintf(stderr, "filling depth %d ...\n", depth);
    if (nx_decode(a, fill, 1, false) != NX_STATUS_OK || nx_decode(b, fill, depth, false) != NX_STATUS_OK) {
        fprintf(stderr, "bench_depth: prompt decode failed\n");
        return 1;
    }
    double *t0 = malloc(sizeof(double) * (size_t)rounds), *td = malloc(sizeof(double) * (size_t)rounds);
    double *r = malloc(sizeof(double) * (size_t)rounds);
    if (!t0 || !td || !r) {
        fprintf(stderr, "bench_depth: out of memory\n");
        return 1;
    }
    printf("%s, kernels %s, %d threads, %d steps per side per round\n", nx_model_desc(m), nx_kernels_name(),
           threads, steps);
    const bool ab = getenv("BENCH_AB") && atoi(getenv("BENCH_AB"));
    if (ab && !&nx_dev_knob) {
        fprintf(stderr, "bench_depth: BENCH_AB needs a library that defines nx_dev_knob\n");
        return 2;
    }
    const char *la = ab ? "knob 0" : "depth 1", *lb = ab ? "knob 1" : "depth";
    printf("| round | t/s %s | t/s %s %d | ratio |\n|---|---|---|---|\n", la, lb, depth);
    for (int i = 0; i < rounds; i++) {
        for (int side = 0; side < 2; side++) {
            bool is_a = (side == 0) == (i % 2 == 0); /* A goes first in even rounds */
            if (ab) {
                nx_dev_knob = is_a ? 0 : 1;
                (is_a ? t0 : td)[i] = run_steps(b, steps);
            } else {
                (is_a ? t0 : td)[i] = run_steps(is_a ? a : b, steps);
            }
        }
        r[i] = td[i] / t0[i];
        printf("| %d | %.2f | %.2f | %.3f |\n", i + 1, t0[i], td[i], r[i]);
        fflush(stdout);
    }
    double lo, hi, m0 = median(t0, rounds, &lo, &hi);
    printf("%s: median %.2f t/s (%.2f-%.2f)\n", la, m0, lo, hi);
    double md = median(td, rounds, &lo, &hi);
    printf("%s %d: median %.2f t/s (%.2f-%.2f)\n", lb, depth, md, lo, hi);
    double mr = median(r, rounds, &lo, &hi);
    printf("ratio: median %.3f (%.3f-%.3f)\n", mr, lo, hi);
    nx_ctx_free(a), nx_ctx_free(b), nx_model_free(m);
    free(fill), free(t0), free(td), free(r);
    return 0;
}
