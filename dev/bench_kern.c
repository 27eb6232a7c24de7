/*
 * bench_kern.c - single-thread throughput of kern_matmul per weight type.
 *
 * Build and run (after `make build/libnexus.a`):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc dev/bench_kern.c build/libnexus.a -lm -lpthread -o build/bench_kern && ./build/bench_kern
 * Arguments: optional type names (Q4_K Q6_K ... F16_X4 BF16_X4: the in-memory layout, types.h)
 * to run only those; NX_KERNELS=ref|avx2 to pick the kernel set; BENCH_SET=avx2|avx512|ref
 * calls that set's table directly;
 * BENCH_THREADS=N (default 1) runs the cold decode on N threads splitting the rows, with a
 * barrier per call as in the forward pass (wall-clock time), reported as "cold xN";
 * BENCH_SHAPES=ROWSxK,... replaces the three default shapes.
 *
 * DESIGN
 * - Shapes (rows x k): 2048 x 2048 (attention), 8192 x 2048 (FFN up/gate), 2048 x 8192 (FFN
 *   down). Weights are random, quantized with the reference quantizer.
 * - nc = 1 (decode) is reported as GB/s of weight bytes streamed, from DRAM: enough copies of
 *   the matrix are cycled (>= 256 MiB) that none is cache-resident, as in a real forward pass
 *   whose weights are far larger than L3. "hot" repeats on one copy (L2/L3 resident).
 * - nc = 512 (prefill) is reported as GFLOP/s (2 * rows * k * nc per call), best of 4 calls
 *   (the machine is shared and noisy).
 * - A plain read of a 256 MiB buffer gives the machine's single-thread read bandwidth to
 *   compare the decode numbers with.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kern/kern.h"
#include "kern/kern_impl.h"
#include "kern/quant.h"
#include "kern/types.h"

#include "bench_util.h"

static const struct kern_table *g_set;

static void matmul(enum nx_type wt, int64_t k, const void *w, size_t ws, int64_t rows,
                   const void *xq, size_t xs, int64_t nc, float *y) {
    if (g_set) {
        g_set->matmul(wt, k, w, ws, 0, rows, xq, xs, nc, y, rows);
    } else {
        kern_matmul(wt, k, w, ws, 0, rows, xq, xs, nc, y, rows);
    }
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Multi-threaded cold decode: thread t computes rows [t * rows / n, (t + 1) * rows / n) of
 * every copy, all threads meeting at a spin barrier after each matmul. */
struct mt_job {
    enum nx_type wt;
    int64_t k, rows;
    const uint8_t *wc;
    size_t ws, wbytes, xs;
    const void *xq;
    float *y;
    int ncopy, nth;
    atomic_int arrived;
    atomic_int gen;
};
static void mt_barrier(struct mt_job *j) {
    int g = atomic_load(&j->gen);
    if (atomic_fetch_add(&j->arrived, 1) == j->nth - 1) {
        atomic_store(&j->arrived, 0);
        atomic_fetch_add(&j->gen, 1);
    } else {
        while (atomic_load(&j->gen) == g) {
        }
    }
}
struct mt_arg {
    struct mt_job *j;
    int t;
};
static void *mt_worker(void *p) {
    struct mt_arg *a = p;
    struct mt_job *j = a->j;
    int64_t r0 = a->t * j->rows / j->nth, r1 = (a->t + 1) * j->rows / j->nth;
    for (int i = 0; i < j->ncopy; i++) {
        const uint8_t *w = j->wc + j->wbytes * (size_t)i;
        if (g_set) g_set->matmul(j->wt, j->k, w, j->ws, r0, r1, j->xq, j->xs, 1, j->y, j->rows);
        else kern_matmul(j->wt, j->k, w, j->ws, r0, r1, j->xq, j->xs, 1, j->y, j->rows);
        mt_barrier(j);
    }
    return NULL;
}
static double mt_decode(struct mt_job *j) {
    pthread_t th[16];
    struct mt_arg args[16];
    atomic_store(&j->arrived, 0);
    double t0 = wall_s();
    for (int t = 1; t < j->nth; t++) {
        args[t] = (struct mt_arg){j, t};
        pthread_create(&th[t], NULL, mt_worker, &args[t]);
    }
    args[0] = (struct mt_arg){j, 0};
    mt_worker(&args[0]);
    for (int t = 1; t < j->nth; t++) pthread_join(th[t], NULL);
    return (wall_s() - t0) / j->ncopy;
}

/* Single-thread read bandwidth: sum 64-bit words of a large buffer. */
static double read_bw(void) {
    size_t n = (size_t)256 << 20;
    uint64_t *buf = malloc(n);
    memset(buf, 1, n);
    double best = 0;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i < n / 8; i += 4) s0 += buf[i], s1 += buf[i + 1], s2 += buf[i + 2], s3 += buf[i + 3];
        double dt = now_s() - t0;
        sink += s0 + s1 + s2 + s3;
        if (n / dt > best) best = n / dt;
    }
    free(buf);
    return best / 1e9;
}

static void bench(enum nx_type wt, int64_t rows, int64_t k) {
    size_t ws = 0;
    if (!nx_row_bytes(wt, k, &ws) || (nx_type_is_x4(wt) && (rows % 4 || k % 16))) return;
    size_t wbytes = ws * (size_t)rows;
    /* weights: quantize one random row set, then copy it for the cold decode run */
    float *tmp = malloc(sizeof(float) * (size_t)k);
    uint8_t *w = malloc(wbytes);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < k; i++) tmp[i] = rnd_f();
        quant_quantize_row_ref(nx_type_in_file(wt), tmp, w + (size_t)r * ws, k);
    }
    if (wt != nx_type_in_file(wt)) { /* an in-memory layout (types.h) */
        uint8_t *wx = malloc(wbytes);
        kern_relayout(nx_type_in_file(wt), wt, w, wx, k, rows);
        free(w);
        w = wx;
    }
    const int64_t nc_max = 512;
    size_t xs = kern_act_row_bytes(wt, k);
    uint8_t *xq = malloc(xs * nc_max);
    for (int64_t c = 0; c < nc_max; c++) {
        for (int64_t i = 0; i < k; i++) tmp[i] = rnd_f();
        kern_quantize_act(wt, tmp, xq + (size_t)c * xs, k);
    }
    float *y = malloc(sizeof(float) * (size_t)rows * nc_max);

    /* decode, cold: cycle through copies */
    int ncopy = (int)(((size_t)256 << 20) / wbytes) + 1;
    uint8_t *wc = malloc(wbytes * (size_t)ncopy);
    for (int i = 0; i < ncopy; i++) memcpy(wc + wbytes * (size_t)i, w, wbytes);
    double best_cold = 1e30;
    const char *thr = getenv("BENCH_THREADS");
    int nth = thr ? atoi(thr) : 1;
    if (nth < 1 || nth > 16) nth = 1;
    for (int rep = 0; rep < 3; rep++) {
        double dt;
        if (nth > 1) {
            struct mt_job j = {.wt = wt, .k = k, .rows = rows, .wc = wc, .ws = ws, .wbytes = wbytes,
                               .xs = xs, .xq = xq, .y = y, .ncopy = ncopy, .nth = nth};
            dt = mt_decode(&j);
        } else {
            double t0 = now_s();
            for (int i = 0; i < ncopy; i++) matmul(wt, k, wc + wbytes * (size_t)i, ws, rows, xq, xs, 1, y);
            dt = (now_s() - t0) / ncopy;
        }
        if (dt < best_cold) best_cold = dt;
    }
    free(wc);
    /* decode, hot */
    double best_hot = 1e30;
    for (int rep = 0; rep < 20; rep++) {
        double t0 = now_s();
        matmul(wt, k, w, ws, rows, xq, xs, 1, y);
        double dt = now_s() - t0;
        if (dt < best_hot) best_hot = dt;
    }
    /* prefill */
    double best_pre = 1e30;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = now_s();
        matmul(wt, k, w, ws, rows, xq, xs, nc_max, y);
        double dt = now_s() - t0;
        if (dt < best_pre) best_pre = dt;
    }
    double flop1 = 2.0 * rows * k;
    printf("%-5s %5lld x %-5lld  nc=1: %6.2f GB/s cold x%d (%6.1f GFLOP/s), %6.2f GB/s hot   "
           "nc=512: %7.1f GFLOP/s\n",
           nx_type_name(wt), (long long)rows, (long long)k, wbytes / best_cold / 1e9, nth,
           flop1 / best_cold / 1e9, wbytes / best_hot / 1e9, flop1 * nc_max / best_pre / 1e9);
    fflush(stdout);
    free(tmp), free(w), free(xq), free(y);
}

int main(int argc, char **argv) {
    const char *set = getenv("BENCH_SET");
    if (set) {
        g_set = kern_table_by_name(set);
        if (!g_set || !kern_cpu_supports(set)) {
            fprintf(stderr, "set %s not available on this CPU\n", set);
            return 1;
        }
    }
    printf("kernels: %s; single-thread read bandwidth %.2f GB/s\n", g_set ? g_set->name : kern_name(),
           read_bw());
    static const enum nx_type types[] = {NX_TYPE_Q4_K, NX_TYPE_Q6_K, NX_TYPE_Q5_K, NX_TYPE_Q4_0,
                                         NX_TYPE_Q8_0, NX_TYPE_F16,  NX_TYPE_BF16, NX_TYPE_F32,
                                         NX_TYPE_F16_X4, NX_TYPE_BF16_X4, NX_TYPE_Q4_K_IL};
    int64_t shapes[16][2] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};
    int nshapes = 3;
    nshapes = bench_shapes(getenv("BENCH_SHAPES"), shapes, 16, nshapes);
    if (nshapes < 0) return 1;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        if (argc > 1) {
            int want = 0;
            for (int i = 1; i < argc; i++) want |= strcmp(argv[i], nx_type_name(types[t])) == 0;
            if (!want) continue;
        }
        for (int s = 0; s < nshapes; s++) bench(types[t], shapes[s][0], shapes[s][1]);
    }
    return 0;
}
