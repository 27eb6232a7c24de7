/*
 * bench_attn_blocks.c - decode attention over a paged F16 KV cache, one thread: one
 * kern_attn_block call per block (the forward pass before kern_attn_blocks) against
 * kern_attn_blocks (the next block prefetched while one is reduced), both followed by the
 * merge, alternated in one process.
 *
 * Build and run (after `make build/libnexus.a`):
 *   cc -O2 -mavx2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc dev/bench_attn_blocks.c build/libnexus.a -lm -lpthread -o build/bench_attn_blocks && ./build/bench_attn_blocks
 * Optional argument: query heads per KV head (default 4). NX_KERNELS=ref|avx2 picks the set.
 *
 * DESIGN
 * - The Llama-3.2-1B shape at depth 4096: hd 64, 128 blocks of 32 positions per (layer, KV
 *   head), 16 layers x 8 KV heads = 128 such tables (128 MiB of K and V), blocks at scrambled
 *   places of one pool (as a paged cache hands them out), 16 blocks per kern_attn_blocks call.
 * - "hot": one table again and again (1 MiB: L2/L3); "cold": all 128 tables cycled (more than
 *   the L3), as a decode step reads each layer's cache once. Reported: ns per (position x
 *   query head), the minimum over rounds of thread CPU time; and a plain read of the same blocks
 *   (AVX2 loads, no compute) for the bandwidth the thread gets. Also checks that both paths
 *   give the same bits.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kern/kern.h"

#include "bench_util.h"

static volatile int g_sink;

int main(int argc, char **argv) {
    const int64_t hd = 64, B = 32, nb = 128, units = 16 * 8, run = 16;
    const int64_t ng = argc > 1 ? atoi(argv[1]) : 4;
    if (ng < 1 || ng > 32) return 1;
    const size_t row = (size_t)hd * 2, blk = (size_t)B * row, total = (size_t)units * nb * blk;
    char *K = aligned_alloc(64, total), *V = aligned_alloc(64, total);
    for (size_t i = 0; i < total / 2; i++) {
        ((uint16_t *)K)[i] = (uint16_t)(0x3000 ^ ((i * 2654435761u >> 7) & 0x87ff));
        ((uint16_t *)V)[i] = (uint16_t)(0x3400 ^ ((i * 2246822519u >> 9) & 0x87ff));
    }
    int64_t nslots = units * nb;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)nslots);
    for (int64_t i = 0; i < nslots; i++) perm[i] = (int32_t)i;
    for (int64_t i = nslots - 1; i > 0; i--) {
        int64_t j = (int64_t)(((uint64_t)i * 2654435761u) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    float *q = malloc(sizeof(float) * (size_t)(ng * hd)), *out = malloc(sizeof(float) * (size_t)(ng * hd));
    for (int64_t i = 0; i < ng * hd; i++) q[i] = (float)((i * 37) % 200 - 100) / 100.0f;
    const int64_t rec = ng * (hd + 2);
    float *pa = malloc(sizeof(float) * (size_t)(nb * rec)), *pb = malloc(sizeof(float) * (size_t)(nb * rec));
    const void *kp[128], *vp[128];
    printf("set %s, F16 KV, hd %lld, %lld query heads per KV head, %lld blocks of %lld positions per table\n",
           kern_name(), (long long)hd, (long long)ng, (long long)nb, (long long)B);
    for (int mode = 0; mode < 2; mode++) {
        double best[2] = {1e9, 1e9};
        int64_t nu = mode == 0 ? 1 : units;
        for (int rep = 0; rep < (mode == 0 ? 300 : 10); rep++) {
            for (int w = 0; w < 2; w++) {
                double t0 = now_s();
                for (int64_t u = 0; u < nu; u++) {
                    for (int64_t b = 0; b < nb; b++) {
                        int64_t s = perm[u * nb + b];
                        kp[b] = K + (size_t)s * blk, vp[b] = V + (size_t)s * blk;
                    }
                    if (w == 0) {
                        for (int64_t b = 0; b < nb; b++)
                            kern_attn_block(NX_TYPE_F16, hd, kp[b], row, vp[b], row, B, q, ng, 0.125f, pa + b * rec);
                    } else {
                        for (int64_t b = 0; b < nb; b += run)
                            kern_attn_blocks(NX_TYPE_F16, hd, kp + b, vp + b, row, run, B, (nb - b) * B, q, ng,
                                             0.125f, pb + b * rec);
                    }
                    kern_attn_merge(hd, ng, nb, w ? pb : pa, out);
                }
                double dt = now_s() - t0;
                if (dt < best[w]) best[w] = dt;
            }
        }
        double per = 1e9 / (double)(nu * nb * B * ng);
        printf("%s: per-block calls %.3f, kern_attn_blocks %.3f ns per (position x head) (x%.2f), same bits: %s\n",
               mode ? "cold" : "hot ", best[0] * per, best[1] * per, best[0] / best[1],
               memcmp(pa, pb, sizeof(float) * (size_t)(nb * rec)) ? "NO" : "yes");
        if (mode == 1) {
            double bs = 1e9;
            for (int rep = 0; rep < 5; rep++) {
                double t0 = now_s();
                __m256i acc = _mm256_setzero_si256();
                for (int64_t u = 0; u < nu; u++)
                    for (int64_t b = 0; b < nb; b++) {
                        int64_t s = perm[u * nb + b];
                        const __m256i *a = (const __m256i *)(K + (size_t)s * blk), *c = (const __m256i *)(V + (size_t)s * blk);
                        for (size_t i = 0; i < blk / 32; i++)
                            acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_load_si256(a + i), _mm256_load_si256(c + i)));
                    }
                double dt = now_s() - t0;
                if (dt < bs) bs = dt;
                g_sink += _mm256_extract_epi32(acc, 0);
            }
            printf("plain read of the same blocks: %.3f ns per (position x head), %.2f GB/s\n", bs * per,
                   2.0 * (double)(nu * nb) * (double)blk / bs / 1e9);
        }
    }
    free(K), free(V), free(perm), free(q), free(out), free(pa), free(pb);
    return 0;
}
