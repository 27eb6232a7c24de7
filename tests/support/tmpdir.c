/* tmpdir.c - the per-process temporary directory of the tests (tmpdir.h). */
#include "tmpdir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char g_dir[128];
static pid_t g_owner; /* a forked child that exits normally must not remove it */

static void remove_dir(void) {
    if (getpid() != g_owner) return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[sizeof g_dir + 256];
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
                continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    if (rmdir(g_dir) != 0) fprintf(stderr, "warning: cannot remove %s\n", g_dir);
}

const char *test_tmpdir(void) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/nx_test_%.40s_XXXXXX", program_invocation_short_name);
        if (!mkdtemp(g_dir)) {
            perror("mkdtemp");
            abort();
        }
        g_owner = getpid();
        atexit(remove_dir);
    }
    return g_dir;
}

const char *test_tmp_path(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", test_tmpdir(), name);
    return buf;
}
