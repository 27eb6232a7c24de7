/*
 * kern_small_batch.c - single-thread time of kern_matmul for Q4_K (in the AVX2 layout) and Q6_K
 * weights of the 1B model's shapes at nc = 1..24 columns: ns per (row, column), best of 25, of
 * thread CPU time (CLOCK_THREAD_CPUTIME_ID: on a loaded machine that leaves out the time the
 * thread waits for a core, though not the cache it shares). A development aid for the small-
 * batch kernels (kern_avx2.c / kern_avx512.c), not part of the build. Weights are arbitrary
 * bytes with sane scales; the figures depend only on shapes.
 *
 *   make build/libnexus.a && cc -O2 -Iinclude -Isrc bench/kern_small_batch.c build/libnexus.a \
 *     -lmicrohttpd -lpcre2-8 -lutf8proc -ljansson -lm -lpthread -o build/kern_small_batch
 *   build/kern_small_batch [shape]            (shape 0..3; NX_KERNELS=avx2 for the AVX2 set)
 *
 * Against an older kernel: link a copy of libnexus.a whose kern_avx2.o / kern_avx512.o are
 * the old ones (ar r), and alternate the two binaries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kern/kern.h"
#include "kern/types.h"
#include "kern/quant.h"
#include "nexus.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    kern_init();
    struct { enum nx_type t; int64_t k, rows; const char *name; } sh[] = {
        {NX_TYPE_Q4_K_IL, 2048, 8192, "Q4K_IL 2048x8192"},
        {NX_TYPE_Q4_K_IL, 8192, 2048, "Q4K_IL 8192x2048"},
        {NX_TYPE_Q6_K, 2048, 16384, "Q6K 2048x16384"},
        {NX_TYPE_Q6_K, 8192, 2048, "Q6K 8192x2048"},
    };
    int ncs[] = {1, 2, 4, 8, 12, 16, 24};
    float *x = malloc(8192 * sizeof(float));
    for (int i = 0; i < 8192; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        if (argc > 1 && (size_t)atoi(argv[1]) != s) continue;
        enum nx_type ft = nx_type_in_file(sh[s].t);
        size_t rb = 0; nx_row_bytes(ft, sh[s].k, &rb);
        uint8_t *w = malloc(rb * sh[s].rows);
        for (size_t i = 0; i < rb * sh[s].rows; i++) w[i] = (uint8_t)(i * 2654435761u >> 13);
        /* sane f16 scales: rewrite d/dmin of each block */
        size_t bs = nx_type_info_get(ft)->type_size; int64_t nb = (int64_t)(rb * sh[s].rows / bs);
        for (int64_t b = 0; b < nb; b++) {
            nx_half h = nx_f32_to_half(0.01f);
            if (ft == NX_TYPE_Q4_K) { memcpy(w + b * bs, &h, 2); memcpy(w + b * bs + 2, &h, 2); }
            else memcpy(w + b * bs + bs - 2, &h, 2);
        }
        if (sh[s].t != ft) { uint8_t *w2 = malloc(rb * sh[s].rows); kern_repack(ft, sh[s].t, w, w2, nb); free(w); w = w2; }
        size_t xr = kern_act_row_bytes(sh[s].t, sh[s].k);
        uint8_t *xq = malloc(xr * 32);
        for (int c = 0; c < 32; c++) kern_quantize_act(sh[s].t, x, xq + c * xr, sh[s].k);
        float *y = malloc(sizeof(float) * 32 * sh[s].rows);
        kern_reserve(8192, 32);
        printf("%-18s", sh[s].name);
        for (size_t n = 0; n < sizeof ncs / sizeof ncs[0]; n++) {
            int nc = ncs[n];
            double best = 1e9;
            for (int rep = 0; rep < 25; rep++) {
                double t0 = now();
                kern_matmul(sh[s].t, sh[s].k, w, rb, 0, sh[s].rows, xq, xr, nc, y, sh[s].rows);
                double dt = now() - t0;
                if (dt < best) best = dt;
            }
            printf("  nc=%-2d %6.2f", nc, best * 1e9 / ((double)sh[s].rows * nc));
        }
        printf("  (ns per row-column)\n");
        free(w), free(xq), free(y);
    }
    return 0;
}
