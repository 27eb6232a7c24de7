/* readfile.c - whole-file reads (readfile.h): a doubling buffer of at most max_bytes + 1. */
#include "core/readfile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"

char *nx_read_file(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    /* one byte more than the limit tells "too large" from "exactly the limit" */
    size_t cap = NX_MIN((size_t)1 << 16, max_bytes + 1), n = 0;
    char *buf = nx_malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || n > max_bytes) break; /* end of file, an error, or too large */
        cap = NX_MIN(cap * 2, max_bytes + 1);
        char *nb = nx_realloc(buf, cap + 1);
        if (!nb) nx_free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad || n > max_bytes) {
        if (!buf) snprintf(err, errlen, "out of memory reading '%s'", path);
        else if (bad) snprintf(err, errlen, "error reading '%s'", path);
        else if (max_bytes >= (1 << 20))
            snprintf(err, errlen, "'%s' is larger than %zu MiB", path, max_bytes >> 20);
        else snprintf(err, errlen, "'%s' is larger than %zu bytes", path, max_bytes);
        nx_free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}
