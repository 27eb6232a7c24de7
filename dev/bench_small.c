/*
 * bench_small.c - where splitting an operation across threads stops paying: the cost of one
 * thread-pool job + barrier against single-thread kernel times of small operations, and the
 * kern_threads_for decisions for them.
 *
 * Build and run (after `make build/libnexus.a`):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc dev/bench_small.c build/libnexus.a -lm -lpthread -o build/bench_small && ./build/bench_small
 *
 * DESIGN
 * - Sync cost: nx_pool_run of an empty job with one barrier inside, on 2 threads, median of
 *   many (wall clock; on a loaded machine this is dominated by scheduling and varies a lot).
 * - Kernel times: single-thread kern_matmul (decode, nc = 1, and nc = 32) for the matrix shapes
 *   of stories260K (dim 64, ff 172, vocab 512), a MiniLM-shaped encoder (384, 1536) and
 *   Llama-3.2-1B (2048, 8192), median of repetitions (weights hot in cache).
 * - Printed per shape: the time, kern_matmul_cost_ns (the estimate the decision uses) and
 *   kern_threads_for(cost, 2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/threadpool.h"
#include "kern/kern.h"
#include "kern/quant.h"
#include "kern/types.h"

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static struct nx_pool *g_pool;
static void job(void *arg, int ith, int nth) {
    (void)arg, (void)ith, (void)nth;
    nx_pool_barrier(g_pool);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return t[n / 2];
}

static void shape(const char *name, enum nx_type wt, int64_t rows, int64_t k, int64_t nc) {
    size_t ws;
    if (!nx_row_bytes(wt, k, &ws)) return;
    float *tmp = malloc(sizeof(float) * (size_t)k);
    unsigned char *w = malloc(ws * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < k; i++) tmp[i] = (float)((r * 7 + i * 3) % 11) / 11.0f - 0.5f;
        quant_quantize_row_ref(wt, tmp, w + ws * (size_t)r, k);
    }
    size_t xs = kern_act_row_bytes(wt, k);
    unsigned char *xq = malloc(xs * (size_t)nc);
    for (int64_t c = 0; c < nc; c++) kern_quantize_act(wt, tmp, xq + xs * (size_t)c, k);
    float *y = malloc(sizeof(float) * (size_t)(rows * nc));
    double t[41];
    for (int i = 0; i < 41; i++) {
        double t0 = wall();
        kern_matmul(wt, k, w, ws, 0, rows, xq, xs, nc, y, rows);
        t[i] = wall() - t0;
    }
    double ns = median(t, 41) * 1e9, est = kern_matmul_cost_ns(wt, k, rows, nc);
    printf("%-22s %-5s %5lld x %-5lld nc=%-3lld %10.0f ns   estimate %10.0f ns   threads(2) = %d\n", name,
           nx_type_name(wt), (long long)rows, (long long)k, (long long)nc, ns, est, kern_threads_for(est, 2));
    free(tmp), free(w), free(xq), free(y);
}

int main(void) {
    if (nx_pool_init(2, &g_pool) != 0) return 1;
    double t[201];
    for (int i = 0; i < 201; i++) {
        double t0 = wall();
        nx_pool_run(g_pool, job, NULL, 2);
        t[i] = wall() - t0;
    }
    printf("kernels %s; pool job + barrier on 2 threads: median %.1f us\n", kern_name(), median(t, 201) * 1e6);
    shape("stories260K qkvo", NX_TYPE_F32, 64, 64, 1);
    shape("stories260K ffn", NX_TYPE_F32, 172, 64, 1);
    shape("stories260K output", NX_TYPE_F32, 512, 64, 1);
    shape("MiniLM qkvo (32 tok)", NX_TYPE_F32, 384, 384, 32);
    shape("MiniLM ffn (32 tok)", NX_TYPE_F32, 1536, 384, 32);
    shape("MiniLM qkvo (1 tok)", NX_TYPE_F32, 384, 384, 1);
    shape("1B attn (decode)", NX_TYPE_Q4_K, 2048, 2048, 1);
    shape("1B ffn (decode)", NX_TYPE_Q8_0, 8192, 2048, 1);
    nx_pool_free(g_pool);
    return 0;
}
