/*
 * fileio.c - DESIGN: thin wrappers over the write-side system calls of the file writers, with
 * fault injection for tests (fileio.h). The injection state is a handful of atomics, so the
 * wrappers stay safe to call from any thread; arming it is meant for single-threaded tests.
 * Nothing here allocates, buffers or retries: the callers keep their own EINTR and
 * short-write loops, which is what the injection exercises.
 */
#include "core/fileio.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

static atomic_long g_calls[NX_IO_N_OPS];
static atomic_long g_fail_at[NX_IO_N_OPS]; /* call number that fails; 0: none */
static atomic_int g_fail_errno[NX_IO_N_OPS];
static atomic_bool g_short;

/* Counts a call of op; true (errno set) when this call is the one to fail. */
static bool injected(enum nx_io_op op) {
    long n = atomic_fetch_add(&g_calls[op], 1) + 1;
    long at = atomic_load(&g_fail_at[op]);
    if (at > 0 && n == at) {
        errno = atomic_load(&g_fail_errno[op]);
        return true;
    }
    return false;
}

ssize_t nx_io_write(int fd, const void *p, size_t n) {
    if (injected(NX_IO_WRITE)) return -1;
    if (atomic_load(&g_short) && n > 1) n /= 2;
    return write(fd, p, n);
}

int nx_io_fsync(int fd) {
    if (injected(NX_IO_FSYNC)) return -1;
    return fsync(fd);
}

int nx_io_close(int fd) {
    if (injected(NX_IO_CLOSE)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return close(fd);
}

int nx_io_rename(const char *from, const char *to) {
    if (injected(NX_IO_RENAME)) return -1;
    return rename(from, to);
}

int nx_io_fflush(FILE *f) {
    if (injected(NX_IO_FFLUSH)) return EOF;
    return fflush(f);
}

int nx_io_fclose(FILE *f) {
    if (injected(NX_IO_FCLOSE)) {
        int e = errno;
        fclose(f);
        errno = e;
        return EOF;
    }
    return fclose(f);
}

void nx_io_fail_nth(enum nx_io_op op, long nth, int err) {
    if ((int)op < 0 || op >= NX_IO_N_OPS) return;
    atomic_store(&g_fail_errno[op], err);
    atomic_store(&g_fail_at[op], nth > 0 ? atomic_load(&g_calls[op]) + nth : 0);
}

void nx_io_short_writes(bool on) { atomic_store(&g_short, on); }

long nx_io_calls(enum nx_io_op op) {
    return (int)op >= 0 && op < NX_IO_N_OPS ? atomic_load(&g_calls[op]) : 0;
}

void nx_io_reset(void) {
    for (int i = 0; i < NX_IO_N_OPS; i++) {
        atomic_store(&g_calls[i], 0);
        atomic_store(&g_fail_at[i], 0);
        atomic_store(&g_fail_errno[i], 0);
    }
    atomic_store(&g_short, false);
}
