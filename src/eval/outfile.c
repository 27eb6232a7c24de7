/* outfile.c - atomic text output (see outfile.h). */
#include "eval/outfile.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/nx_base.h"

nx_status nx_outfile_open(struct nx_outfile *o, const char *path, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    if (!path || !*path || strlen(path) >= sizeof o->path) {
        if (err && errlen) snprintf(err, errlen, "output path is empty or too long");
        return NX_STATUS_INVALID_ARG;
    }
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
    o->f = fopen(o->tmp, "w");
    if (!o->f) {
        if (err && errlen) snprintf(err, errlen, "cannot write '%s': %s", o->tmp, strerror(errno));
        return NX_STATUS_IO;
    }
    return NX_STATUS_OK;
}

nx_status nx_outfile_commit(struct nx_outfile *o, char *err, size_t errlen) {
    if (!o->f) {
        if (err && errlen) snprintf(err, errlen, "'%s' is not open", o->path);
        return NX_STATUS_INVALID_ARG;
    }
    /* the first failing step names the error; the temporary file never survives one */
    const char *step = NULL;
    int e = 0;
    if (ferror(o->f))
        step = "write", e = EIO;
    else if (nx_io_fflush(o->f) != 0)
        step = "write", e = errno;
    else if (nx_io_fsync(fileno(o->f)) != 0)
        step = "fsync", e = errno;
    if (nx_io_fclose(o->f) != 0 && !step) step = "close", e = errno;
    o->f = NULL;
    if (!step && nx_io_rename(o->tmp, o->path) != 0) step = "rename", e = errno;
    if (step) {
        if (err && errlen)
            snprintf(err, errlen, "cannot write '%s' (%s of '%s'): %s", o->path, step, o->tmp,
                     strerror(e));
        unlink(o->tmp);
        return NX_STATUS_IO;
    }
    return NX_STATUS_OK;
}

void nx_outfile_abort(struct nx_outfile *o) {
    if (!o || !o->f) return;
    fclose(o->f);
    o->f = NULL;
    unlink(o->tmp);
}

nx_status nx_outfile_write_json(const char *path, const void *root, char *err, size_t errlen) {
    struct nx_outfile o;
    nx_status st = nx_outfile_open(&o, path, err, errlen);
    if (st != NX_STATUS_OK) return st;
    if (json_dumpf((const json_t *)root, o.f, JSON_COMPACT | JSON_PRESERVE_ORDER) != 0) {
        nx_outfile_abort(&o);
        return nx_errf(err, errlen, NX_STATUS_IO, "cannot write '%s'", path);
    }
    fputc('\n', o.f);
    return nx_outfile_commit(&o, err, errlen);
}
