/* alloc.h - the allocator wrapper of src/: byte accounting and a fault-injection hook. */
#ifndef NX_ALLOC_H
#define NX_ALLOC_H

#include <stddef.h>

/* Like malloc/calloc/realloc/free; NULL on failure (callers return NX_STATUS_NOMEM). */
void *nx_malloc(size_t n);
void *nx_calloc(size_t count, size_t size);
void *nx_realloc(void *p, size_t n);
void nx_free(void *p);
/* 64-byte aligned allocation for SIMD buffers; free with nx_free_aligned. */
void *nx_malloc_aligned(size_t n);
void nx_free_aligned(void *p);
char *nx_strdup(const char *s);
/* Ask for transparent huge pages on the 2 MiB-aligned part of [p, p + n): a hint for large,
 * long-lived buffers read in streams (weights, the KV pools), which then take one TLB entry
 * per 2 MiB; nothing happens where the part is empty or the kernel does not offer them. */
void nx_advise_huge(void *p, size_t n);

/* Bytes currently allocated through this wrapper (all threads). */
size_t nx_alloc_bytes(void);
/* Allocations that have returned NULL so far (all threads; injected failures included). A
 * caller of a library that cannot say why it failed (jansson's parser reports an allocation
 * failure as a syntax error) compares this before and after the call to tell "out of memory"
 * from bad input. */
size_t nx_alloc_failures(void);
/* Test hook: make the n-th allocation from now fail (0 disables). */
void nx_alloc_fail_after(long n);

#endif
