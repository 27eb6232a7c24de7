/*
 * slb_emu512.h - test-only plain-C emulation of the few AVX-512 intrinsics slb_avx512.c uses,
 * lane by lane after the instruction definitions in Intel's SDM, so its kernel can be checked
 * against the reference on any CPU. Never part of the library build (only with
 * -DNX_SLB_AVX512_EMULATE, which tests/test_route.c sets before including slb_avx512.c).
 */
#ifndef NX_SLB_EMU512_H
#define NX_SLB_EMU512_H

#include <stdint.h>
#include <string.h>

typedef struct {
    union {
        int8_t b[64];
        uint8_t ub[64];
        int32_t d[16];
    };
} slb_emu512;

#define __m512i slb_emu512
#define SLB_EMU static inline __attribute__((unused))

SLB_EMU slb_emu512 slb_emu_set1_epi8(char c) {
    slb_emu512 r;
    memset(r.b, (unsigned char)c, 64);
    return r;
}
SLB_EMU slb_emu512 slb_emu_setzero(void) {
    slb_emu512 r;
    memset(&r, 0, sizeof r);
    return r;
}
SLB_EMU slb_emu512 slb_emu_loadu(const void *p) {
    slb_emu512 r;
    memcpy(r.b, p, 64);
    return r;
}
SLB_EMU slb_emu512 slb_emu_xor(slb_emu512 a, slb_emu512 b) {
    slb_emu512 r;
    for (int i = 0; i < 64; i++) r.ub[i] = a.ub[i] ^ b.ub[i];
    return r;
}
/* VPDPBUSD: per dword lane, src + sum of 4 products (unsigned a byte) x (signed b byte),
 * wrapping (no saturation). */
SLB_EMU slb_emu512 slb_emu_dpbusd(slb_emu512 src, slb_emu512 a, slb_emu512 b) {
    slb_emu512 r;
    for (int i = 0; i < 16; i++) {
        int32_t s = 0;
        for (int k = 0; k < 4; k++) s += (int32_t)a.ub[4 * i + k] * (int32_t)b.b[4 * i + k];
        r.d[i] = (int32_t)((uint32_t)src.d[i] + (uint32_t)s);
    }
    return r;
}
SLB_EMU int32_t slb_emu_reduce_add(slb_emu512 a) {
    uint32_t s = 0;
    for (int i = 0; i < 16; i++) s += (uint32_t)a.d[i];
    return (int32_t)s;
}

#define _mm512_set1_epi8 slb_emu_set1_epi8
#define _mm512_setzero_si512 slb_emu_setzero
#define _mm512_loadu_si512 slb_emu_loadu
#define _mm512_xor_si512 slb_emu_xor
#define _mm512_dpbusd_epi32 slb_emu_dpbusd
#define _mm512_reduce_add_epi32 slb_emu_reduce_add

#endif
