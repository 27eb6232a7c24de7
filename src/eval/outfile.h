/*
 * outfile.h - atomic text output for evaluation results (JSON, SVG): everything is written to
 * PATH.tmp.PID, flushed and fsync'ed, then renamed over PATH, so a reader never sees a partial
 * file and a failed run leaves the previous file in place. (Text formats carry no magic or
 * checksum; the JSON records carry the parameters that produced them.)
 */
#ifndef NX_EVAL_OUTFILE_H
#define NX_EVAL_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

#include "nexus.h"

struct nx_outfile {
    FILE *f;
    char path[1024];
    char tmp[1100];
};

/* Opens the temporary file; NX_STATUS_OK, else NX_STATUS_INVALID_ARG (empty or too long a path)
 * or NX_STATUS_IO with a message naming the path in err. */
nx_status nx_outfile_open(struct nx_outfile *o, const char *path, char *err, size_t errlen);
/* Flushes, syncs, closes and renames over the target; NX_STATUS_OK, else NX_STATUS_IO (temp
 * removed) or NX_STATUS_INVALID_ARG (not open), with a message. */
nx_status nx_outfile_commit(struct nx_outfile *o, char *err, size_t errlen);
/* Closes and removes the temporary file (the target is untouched). NULL-safe, idempotent. */
void nx_outfile_abort(struct nx_outfile *o);
/* root (a jansson json_t *) written compactly, keys in insertion order, plus a newline, through
 * the steps above; statuses as nx_outfile_open / nx_outfile_commit. */
nx_status nx_outfile_write_json(const char *path, const void *root, char *err, size_t errlen);

#endif
