/*
 * membw.c - DESIGN: a STREAM-style read test. The buffer is written once (so pages are real),
 * then each thread sums its own contiguous slice with wide loads (AVX2 when the CPU has it,
 * chosen at run time; a plain 64-bit loop otherwise). The best of `reps` timed passes is the
 * machine's sustainable read bandwidth, which the benchmark compares decode speed against.
 */
#include "core/membw.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "core/alloc.h"
#include "core/threadpool.h"

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const unsigned char *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, a);
    return out[0] ^ out[1] ^ out[2] ^ out[3];
}
#endif

static uint64_t sum_generic(const unsigned char *p, size_t n) {
    const uint64_t *q = (const uint64_t *)p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) {
        a ^= q[i];
        b ^= q[i + 1];
        c ^= q[i + 2];
        d ^= q[i + 3];
    }
    return a ^ b ^ c ^ d;
}

struct job {
    const unsigned char *buf;
    size_t bytes;
    volatile uint64_t sink[64];
};

static void read_part(void *arg, int ith, int nth) {
    struct job *j = arg;
    size_t per = (j->bytes / (size_t)nth) & ~(size_t)127;
    const unsigned char *p = j->buf + per * (size_t)ith;
    uint64_t s;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        s = sum_avx2(p, per);
    else
#endif
        s = sum_generic(p, per);
    j->sink[ith % 64] = s;
}

double nx_measure_read_bandwidth(size_t bytes, int n_threads, int reps) {
    unsigned char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 0;
    nx_advise_huge(buf, bytes);
    memset(buf, 1, bytes);
    struct nx_pool *pool;
    if (nx_pool_init(n_threads, &pool) != NX_STATUS_OK) {
        munmap(buf, bytes);
        return 0;
    }
    struct job j = {.buf = buf, .bytes = bytes};
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = nx_time_s();
        nx_pool_run(pool, read_part, &j, n_threads);
        double dt = nx_time_s() - t0;
        size_t per = (bytes / (size_t)n_threads) & ~(size_t)127;
        double bw = (double)(per * (size_t)n_threads) / dt;
        if (bw > best) best = bw;
    }
    nx_pool_free(pool);
    munmap(buf, bytes);
    return best;
}
