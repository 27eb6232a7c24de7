/* base.c - status names/messages, the error-message helper, the assertion handler, logging,
 * the monotonic clock. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "nx_base.h"

double nx_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void nx_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "nexus: assertion failed at %s:%d: %s\n", file, line, expr);
    abort();
}

const char *nx_status_name(nx_status st) {
    switch (st) {
#define X(name, val, msg) \
    case NX_STATUS_##name: return "NX_STATUS_" #name;
        NX_STATUS_MAP(X)
#undef X
    }
    return "NX_STATUS_UNKNOWN";
}

const char *nx_status_str(nx_status st) {
    switch (st) {
#define X(name, val, msg) \
    case NX_STATUS_##name: return msg;
        NX_STATUS_MAP(X)
#undef X
    }
    return "unknown status";
}

nx_status nx_err_set(struct nx_err *err, nx_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

nx_status nx_errf(char *err, size_t errlen, nx_status st, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* ---- logging ---- */
static nx_log_fn g_log_fn;
static void *g_log_ud;
static int g_log_level = NX_LOG_INFO;

void nx_log_set(nx_log_fn fn, void *user_data) {
    g_log_fn = fn;
    g_log_ud = user_data;
}
void nx_log_set_level(int level) { g_log_level = level; }

void nx_log(int level, const char *fmt, ...) {
    if (level > g_log_level) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (g_log_fn)
        g_log_fn(level, buf, g_log_ud);
    else
        fprintf(stderr, "%s\n", buf);
}
