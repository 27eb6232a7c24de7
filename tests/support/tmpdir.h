/*
 * tmpdir.h - one private temporary directory per test process: /tmp/nx_test_<program>_XXXXXX,
 * made on first use and removed, with the files in it, when the process exits.
 */
#ifndef NX_TEST_TMPDIR_H
#define NX_TEST_TMPDIR_H

#include <stddef.h>

/* The directory (aborts when it cannot be made). */
const char *test_tmpdir(void);
/* test_tmpdir() "/" name, written to buf (cap bytes); returns buf. */
const char *test_tmp_path(const char *name, char *buf, size_t cap);

#endif
