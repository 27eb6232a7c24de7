/*
 * fuzz_util.c - DESIGN: helpers shared by the fuzz targets (fuzz.h): the target table for the
 * normal build, in-memory files for path-taking loaders, shared-data lookup. No state besides
 * the table and the skip flag; single-threaded like libFuzzer's driver.
 */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nexus.h"

struct nx_fuzz_entry nx_fuzz_table[NX_FUZZ_MAX];
int nx_fuzz_n;
static int g_skipped;

int fuzz_memfile(const void *data, size_t size, int *fd, char *path, size_t pathlen) {
    *fd = memfd_create("nx_fuzz", MFD_CLOEXEC);
    if (*fd < 0) return -1;
    const char *p = data;
    size_t left = size;
    while (left > 0) {
        ssize_t w = write(*fd, p, left);
        if (w <= 0) {
            close(*fd);
            *fd = -1;
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    snprintf(path, pathlen, "/proc/self/fd/%d", *fd);
    return 0;
}

const char *fuzz_shared_path(const char *rel, char *buf, size_t cap) {
    const char *dir = getenv("NX_SHARED");
    snprintf(buf, cap, "%s/%s", dir && *dir ? dir : "../shared", rel);
    struct stat st;
    if (stat(buf, &st) != 0) {
        g_skipped = 1;
        return NULL;
    }
    return buf;
}

int fuzz_skipped(void) { return g_skipped; }

static void quiet_log(int level, const char *msg, void *user) {
    (void)level;
    (void)msg;
    (void)user;
}

void fuzz_quiet(void) { nx_log_set(quiet_log, NULL); }
