/*
 * nx_base.h - tiny base layer every module may include: assertions for programmer errors,
 * overflow-checked size arithmetic, status codes and the internal error-message helper.
 *
 * Assertions are for programmer errors only; data from files, sockets and users never
 * reaches NX_ASSERT, it produces an nx_status with a message instead.
 */
#ifndef NX_BASE_H
#define NX_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

#define NX_UNUSED(x) ((void)(x))
#define NX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define NX_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NX_MAX(a, b) ((a) > (b) ? (a) : (b))
#define nx_likely(x) __builtin_expect(!!(x), 1)
#define nx_unlikely(x) __builtin_expect(!!(x), 0)

void nx_assert_fail(const char *file, int line, const char *expr);
#define NX_ASSERT(x) \
    do { \
        if (nx_unlikely(!(x))) nx_assert_fail(__FILE__, __LINE__, #x); \
    } while (0)

/* a*b into *out; false (and *out untouched) on overflow. */
static inline bool nx_mul_size(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}
static inline bool nx_add_size(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}
static inline size_t nx_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The splitmix64 generator: advances *state and returns the next 64 random bits. */
static inline uint64_t nx_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Seconds on the monotonic clock (for timing; arbitrary origin). */
double nx_time_s(void);

/*
 * Error message buffer: functions that fail on input write a one-line message naming the
 * problem into an nx_err (may be NULL) and return a negative nx_status.
 */
struct nx_err {
    char msg[512];
};
nx_status nx_err_set(struct nx_err *err, nx_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for the (char *err, size_t errlen) convention of the public API: writes the
 * message when err is non-NULL and errlen > 0, returns st. */
nx_status nx_errf(char *err, size_t errlen, nx_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
