/*
 * fileio.h - the system calls of the atomic file writers (kv/kvblock.c, gguf/gguf_write.c,
 * eval/outfile.c): write, fsync, close, rename and stdio's fflush/fclose, each behind one
 * wrapper, so tests can make any of them fail, and write(2) return short counts, and check
 * that every writer then reports a clear error and leaves neither a partial file at the
 * destination nor its temporary file behind.
 */
#ifndef NX_FILEIO_H
#define NX_FILEIO_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

/* Like the system calls they wrap (errno set on failure). */
ssize_t nx_io_write(int fd, const void *p, size_t n);
int nx_io_fsync(int fd);
int nx_io_close(int fd); /* an injected failure still closes fd, as Linux does on EIO */
int nx_io_rename(const char *from, const char *to);
int nx_io_fflush(FILE *f);
int nx_io_fclose(FILE *f); /* an injected failure still closes f */

/* ---- test hooks (process-wide; for single-threaded tests) ---- */
enum nx_io_op { NX_IO_WRITE, NX_IO_FSYNC, NX_IO_CLOSE, NX_IO_RENAME, NX_IO_FFLUSH, NX_IO_FCLOSE,
                NX_IO_N_OPS };
/* The nth call of op from now (1 = the next one) fails with errno err; 0 disables. A failed
 * write writes nothing; a failed rename renames nothing. */
void nx_io_fail_nth(enum nx_io_op op, long nth, int err);
/* When on, every nx_io_write writes at most half of what it is given (at least one byte). */
void nx_io_short_writes(bool on);
/* Calls of op since the last nx_io_reset. */
long nx_io_calls(enum nx_io_op op);
/* Clears every injected failure, the short-write mode and the call counts. */
void nx_io_reset(void);

#endif
