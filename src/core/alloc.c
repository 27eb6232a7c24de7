/*
 * alloc.c - DESIGN: every allocation in src/ goes through here so that the bytes in use can be
 * reported and tests can inject an allocation failure at the N-th call. Each block carries a
 * 16-byte header with its size; aligned blocks store the offset to the raw pointer instead.
 * Thread-safe (atomics only).
 * jansson allocates through here too (json_set_alloc_funcs, from a constructor: this file is in
 * every program that links the library, and at the first constructor priority, before main and
 * before any unprioritized constructor (e.g. a test's fake server), so no JSON value
 * ever mixes allocators). Strings from json_dumps are therefore freed with nx_free. Its blocks
 * are counted but exempt from injected failures: jansson is not safe against them (its lexer
 * asserts, its encoder and json_copy drop members), so only real failures reach it, and
 * core/json.h's wrappers turn those into "out of memory".
 */
#include "alloc.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HDR 16

static atomic_size_t g_bytes;
static atomic_long g_fail_after;
static atomic_size_t g_failures;

static int should_fail(void) {
    long n = atomic_load_explicit(&g_fail_after, memory_order_relaxed);
    if (n <= 0) return 0;
    long prev = atomic_fetch_sub(&g_fail_after, 1);
    if (prev == 1) atomic_fetch_add(&g_failures, 1);
    return prev == 1;
}

size_t nx_alloc_failures(void) { return atomic_load(&g_failures); }

static void *alloc_bytes(size_t n, bool inject) {
    if ((inject && should_fail()) || n > SIZE_MAX - HDR) return NULL;
    unsigned char *p = malloc(n + HDR);
    if (!p) {
        atomic_fetch_add(&g_failures, 1);
        return NULL;
    }
    memcpy(p, &n, sizeof n);
    atomic_fetch_add(&g_bytes, n);
    return p + HDR;
}

void *nx_malloc(size_t n) { return alloc_bytes(n, true); }

/* jansson's allocator: accounted and freed like any other block, but never an injected
 * failure (jansson 2.14's lexer asserts when an allocation fails mid-string). */
static void *json_alloc(size_t n) { return alloc_bytes(n, false); }

void *nx_calloc(size_t count, size_t size) {
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) return NULL;
    void *p = nx_malloc(n);
    if (p) memset(p, 0, n);
    return p;
}

void *nx_realloc(void *p, size_t n) {
    if (!p) return nx_malloc(n);
    if (should_fail() || n > SIZE_MAX - HDR) return NULL;
    unsigned char *raw = (unsigned char *)p - HDR;
    size_t old;
    memcpy(&old, raw, sizeof old);
    unsigned char *q = realloc(raw, n + HDR);
    if (!q) {
        atomic_fetch_add(&g_failures, 1);
        return NULL;
    }
    memcpy(q, &n, sizeof n);
    atomic_fetch_sub(&g_bytes, old);
    atomic_fetch_add(&g_bytes, n);
    return q + HDR;
}

void nx_free(void *p) {
    if (!p) return;
    unsigned char *raw = (unsigned char *)p - HDR;
    size_t n;
    memcpy(&n, raw, sizeof n);
    atomic_fetch_sub(&g_bytes, n);
    free(raw);
}

void *nx_malloc_aligned(size_t n) {
    if (n > SIZE_MAX - 128) return NULL;
    unsigned char *raw = nx_malloc(n + 64 + sizeof(uintptr_t));
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(uintptr_t) + 63) & ~(uintptr_t)63;
    ((uintptr_t *)a)[-1] = (uintptr_t)raw;
    return (void *)a;
}

void nx_free_aligned(void *p) {
    if (!p) return;
    nx_free((void *)((uintptr_t *)p)[-1]);
}

void nx_advise_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)1 << 21;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n) & ~(huge - 1);
    if (p && e > a) madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p, (void)n;
#endif
}

char *nx_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = nx_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

size_t nx_alloc_bytes(void) { return atomic_load(&g_bytes); }
void nx_alloc_fail_after(long n) { atomic_store(&g_fail_after, n); }

__attribute__((constructor(101))) static void nx_alloc_route_jansson(void) { json_set_alloc_funcs(json_alloc, nx_free); }
