/* readfile.h - whole-file reads with a size limit and an error message that names the file. */
#ifndef NX_READFILE_H
#define NX_READFILE_H

#include <stddef.h>

#define NX_READ_FILE_MAX ((size_t)1 << 30) /* the usual limit: 1 GiB */

/*
 * Reads the file at path into a NUL-terminated buffer (free with nx_free); *len gets its size
 * without the NUL. NULL when it cannot be opened, is larger than max_bytes, cannot be read or
 * does not fit in memory, with a message naming the file in err.
 */
char *nx_read_file(const char *path, size_t max_bytes, size_t *len, char *err, size_t errlen);

#endif
