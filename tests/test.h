/*
 * test.h - a tiny test framework: TEST(name) defines a case; ASSERT_* print file:line and both
 * operands and fail the case; main runs every case (or those named on the command line) and
 * prints "RESULT passed=N failed=M" for tests/run.sh to add up.
 */
#ifndef NX_TEST_H
#define NX_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
struct test_case {
    const char *name;
    test_fn fn;
};
#define TEST_MAX 512
extern struct test_case g_tests[TEST_MAX];
extern int g_n_tests;
extern int g_test_failed;

#define TEST(name) \
    static void test_##name(void); \
    __attribute__((constructor)) static void reg_##name(void) { \
        if (g_n_tests < TEST_MAX) g_tests[g_n_tests++] = (struct test_case){#name, test_##name}; \
    } \
    static void test_##name(void)

#define FAILF(...) \
    do { \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__); \
        fprintf(stderr, "\n"); \
        g_test_failed = 1; \
        return; \
    } while (0)

#define ASSERT_TRUE(c) \
    do { \
        if (!(c)) FAILF("expected true: %s", #c); \
    } while (0)
#define ASSERT_EQ(a, b) \
    do { \
        long long a_ = (long long)(a), b_ = (long long)(b); \
        if (a_ != b_) FAILF("%s == %s: %lld != %lld", #a, #b, a_, b_); \
    } while (0)
#define ASSERT_NE(a, b) \
    do { \
        long long a_ = (long long)(a), b_ = (long long)(b); \
        if (a_ == b_) FAILF("%s != %s: both %lld", #a, #b, a_); \
    } while (0)
#define ASSERT_NEAR(a, b, tol) \
    do { \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol); \
        if (!(fabs(a_ - b_) <= t_)) \
            FAILF("%s ~ %s: %.9g vs %.9g (diff %.3g > tol %.3g)", #a, #b, a_, b_, fabs(a_ - b_), t_); \
    } while (0)
#define ASSERT_STR_EQ(a, b) \
    do { \
        const char *a_ = (a), *b_ = (b); \
        if (strcmp(a_, b_) != 0) FAILF("%s == %s: \"%s\" != \"%s\"", #a, #b, a_, b_); \
    } while (0)
#define ASSERT_CONTAINS(hay, needle) \
    do { \
        const char *h_ = (hay), *n_ = (needle); \
        if (!h_ || !strstr(h_, n_)) FAILF("expected \"%s\" to contain \"%s\"", h_ ? h_ : "(null)", n_); \
    } while (0)
#define ASSERT_OK(st) \
    do { \
        int st_ = (int)(st); \
        if (st_ != 0) FAILF("%s returned %d", #st, st_); \
    } while (0)

/* Path of shared/ models and data, relative to the project root (overridable: NX_SHARED). */
static inline const char *test_shared(void) {
    const char *s = getenv("NX_SHARED");
    return s ? s : "../shared";
}

#define TEST_MAIN \
    struct test_case g_tests[TEST_MAX]; \
    int g_n_tests; \
    int g_test_failed; \
    int main(int argc, char **argv) { \
        int passed = 0, failed = 0; \
        for (int i = 0; i < g_n_tests; i++) { \
            if (argc > 1) { \
                int want = 0; \
                for (int j = 1; j < argc; j++) want |= strcmp(argv[j], g_tests[i].name) == 0; \
                if (!want) continue; \
            } \
            g_test_failed = 0; \
            g_tests[i].fn(); \
            printf("%s %s\n", g_test_failed ? "FAIL" : "ok  ", g_tests[i].name); \
            fflush(stdout); \
            if (g_test_failed) failed++; else passed++; \
        } \
        printf("RESULT passed=%d failed=%d\n", passed, failed); \
        return failed ? 1 : 0; \
    }

#endif
