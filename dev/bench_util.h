/*
 * bench_util.h - what the dev/ benchmarks share: a thread-CPU-time clock, a seeded generator
 * of floats, and the BENCH_SHAPES parser. Header-only (each tool is one file built by hand,
 * see its header comment); not part of the library.
 */
#ifndef NX_DEV_BENCH_UTIL_H
#define NX_DEV_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* Seconds of this thread's CPU time (on a loaded machine it leaves out time spent waiting for
 * a core, though not the cache a neighbour shares). */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Uniform floats in [-1, 1) from a fixed-seed xorshift, the same sequence in every run. */
static uint64_t g_bench_rng = 88172645463325252ull;
static inline float rnd_f(void) {
    uint64_t s = g_bench_rng;
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    g_bench_rng = s;
    return (float)((s >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

/* BENCH_SHAPES=ROWSxK[,ROWSxK...] (env, may be NULL) into shapes[max][2]: the count, or the
 * default count nd when unset (shapes already hold the defaults); -1 with a message on stderr
 * when malformed. */
static inline int bench_shapes(const char *env, int64_t (*shapes)[2], int max, int nd) {
    if (!env) return nd;
    const char *sh = env;
    long long r, k;
    int used, n;
    for (n = 0; n < max && sscanf(sh, "%lldx%lld%n", &r, &k, &used) == 2; n++) {
        if (r < 1 || k < 1) break;
        shapes[n][0] = r, shapes[n][1] = k;
        sh += used;
        if (*sh == ',') sh++;
    }
    if (n == 0 || *sh) {
        fprintf(stderr, "BENCH_SHAPES: expected ROWSxK[,ROWSxK...] (at most %d), at \"%s\"\n", max,
                sh);
        return -1;
    }
    return n;
}

#endif
