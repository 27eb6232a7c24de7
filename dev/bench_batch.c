/*
 * bench_batch.c - single-thread time of kern_matmul for a file weight type (in the
 * layout the kernels take them in memory: kern_weight_layout) at small batches, the weights
 * coming from DRAM as in a batched decode step of a model far larger than L3.
 *
 * Build and run (after `make build/libnexus.a`):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc dev/bench_batch.c build/libnexus.a \
 *     -lmicrohttpd -lpcre2-8 -lutf8proc -ljansson -lm -lpthread -o build/bench_batch
 *   ./build/bench_batch [TYPE] [nc ...]   (TYPE: a file type name, F16 BF16 Q8_0 Q4_K Q6_K ...;
 *                                          default F16, nc 1 2 4 6 8 12 16)
 * BENCH_SET=avx2|avx512|ref calls that set's table directly; BENCH_SHAPES=ROWSxK,... replaces
 * the three default shapes (2048 x 2048, 8192 x 2048, 2048 x 8192).
 *
 * Each figure: the median over 3 passes of the time per call, a pass calling the kernel on
 * each of enough copies of the matrix (>= 256 MiB in all) that none is cache-resident, in
 * thread CPU time. Printed as ms per call, GFLOP/s (2 * rows * k * nc) and GB/s of weight
 * bytes; the lower bound of a call is max(bytes / bandwidth, flops / peak), so a batch of nc
 * columns costing the same as nc = 1 is a memory-bound call.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern/kern.h"
#include "kern/kern_impl.h"
#include "kern/quant.h"
#include "kern/types.h"

#include "bench_util.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    kern_init();
    enum nx_type ft = NX_TYPE_F16;
    int ncs[32], nn = 0;
    for (int i = 1; i < argc; i++) {
        int named = -1;
        for (int t = 0; t < NX_TYPE_COUNT && named < 0; t++) {
            const struct nx_type_info *ti = nx_type_info_get(t);
            if (ti && ti->name && !strcmp(argv[i], ti->name)) named = t;
        }
        if (named >= 0) ft = (enum nx_type)named;
        else if (atoi(argv[i]) > 0 && atoi(argv[i]) <= 4096 && nn < 32) ncs[nn++] = atoi(argv[i]);
        else return fprintf(stderr, "bench_batch: bad argument %s\n", argv[i]), 2;
    }
    if (!nn) {
        static const int def[] = {1, 2, 4, 6, 8, 12, 16};
        for (size_t i = 0; i < sizeof def / sizeof def[0]; i++) ncs[nn++] = def[i];
    }
    const struct kern_table *set = NULL;
    const char *sn = getenv("BENCH_SET");
    if (sn && (!(set = kern_table_by_name(sn)) || !kern_cpu_supports(sn)))
        return fprintf(stderr, "bench_batch: set %s not available on this CPU\n", sn), 1;
    int64_t shapes[8][2] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};
    int ns = bench_shapes(getenv("BENCH_SHAPES"), shapes, 8, 3);
    if (ns < 0) return 2;
    printf("bench_batch: %s, kernels %s, one thread, weights from DRAM; ms per call / GFLOP/s / "
           "GB/s of weights\n",
           nx_type_info_get(ft)->name, set ? set->name : kern_name());
    for (int s = 0; s < ns; s++) {
        int64_t rows = shapes[s][0], k = shapes[s][1];
        enum nx_type mt = set && set->weight_layout ? set->weight_layout(ft, k, rows)
                                                   : kern_weight_layout(ft, k, rows);
        size_t rb = 0;
        nx_row_bytes(ft, k, &rb);
        size_t bytes = rb * (size_t)rows;
        int copies = (int)((256u << 20) / bytes) + 2;
        uint8_t *file = malloc(bytes), **w = calloc((size_t)copies, sizeof *w);
        if (!file || !w) return fprintf(stderr, "bench_batch: out of memory\n"), 1;
        float *row = malloc(sizeof(float) * (size_t)k);
        if (!row) return fprintf(stderr, "bench_batch: out of memory\n"), 1;
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < k; i++) row[i] = rnd_f() * 0.05f;
            quant_quantize_row_ref(ft, row, file + (size_t)r * rb, k);
        }
        free(row);
        for (int c = 0; c < copies; c++) {
            if (!(w[c] = malloc(bytes))) return fprintf(stderr, "bench_batch: out of memory\n"), 1;
            if (mt != ft) kern_relayout(ft, mt, file, w[c], k, rows);
            else memcpy(w[c], file, bytes);
        }
        int ncmax = 0;
        for (int i = 0; i < nn; i++) ncmax = ncs[i] > ncmax ? ncs[i] : ncmax;
        size_t xr = kern_act_row_bytes(mt, k);
        uint8_t *xq = malloc(xr * (size_t)ncmax);
        float *x = malloc(sizeof(float) * (size_t)k);
        float *y = malloc(sizeof(float) * (size_t)(rows * ncmax));
        if (!xq || !x || !y || !kern_reserve(k, ncmax))
            return fprintf(stderr, "bench_batch: out of memory\n"), 1;
        for (int c = 0; c < ncmax; c++) {
            for (int64_t i = 0; i < k; i++) x[i] = rnd_f();
            kern_quantize_act(mt, x, xq + (size_t)c * xr, k);
        }
        printf("%s %lld x %lld (%s, %d copies):\n", nx_type_info_get(mt)->name, (long long)rows,
               (long long)k, set ? set->name : kern_matmul_name(mt), copies);
        for (int i = 0; i < nn; i++) {
            int nc = ncs[i];
            double t[3];
            for (int pass = 0; pass < 3; pass++) {
                double t0 = now_s();
                for (int c = 0; c < copies; c++) {
                    if (set) set->matmul(mt, k, w[c], rb, 0, rows, xq, xr, nc, y, rows);
                    else kern_matmul(mt, k, w[c], rb, 0, rows, xq, xr, nc, y, rows);
                }
                t[pass] = (now_s() - t0) / copies;
            }
            qsort(t, 3, sizeof t[0], cmp_d);
            double flops = 2.0 * (double)rows * (double)k * nc;
            printf("  nc %2d  %7.3f ms  %6.1f GFLOP/s  %5.1f GB/s\n", nc, t[1] * 1e3,
                   flops / t[1] * 1e-9, (double)bytes / t[1] * 1e-9);
            fflush(stdout);
        }
        for (int c = 0; c < copies; c++) free(w[c]);
        free(w), free(file), free(xq), free(x), free(y);
    }
    return 0;
}
