/* cli.c - runs the nexus binary for the CLI tests (see cli.h). */
#include "cli.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tmpdir.h"

static const char *nexus_bin(void) {
    static char path[PATH_MAX + 16];
    if (path[0]) return path;
    const char *e = getenv("NX_NEXUS_BIN");
    if (e && *e) {
        snprintf(path, sizeof path, "%s", e);
        return path;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = '\0'; /* .../build/tests */
    slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = '\0'; /* .../build */
    snprintf(path, sizeof path, "%s/nexus", exe);
    return path;
}

int test_cli(const char *const *args, bool with_stderr, char **out) {
    const char *bin = nexus_bin();
    if (out) *out = NULL;
    if (!bin || access(bin, X_OK) != 0) {
        fprintf(stderr, "test_cli: no nexus binary at %s (build it first, or set NX_NEXUS_BIN)\n",
                bin ? bin : "(unknown)");
        return -1;
    }
    int n = 0;
    while (args[n]) n++;
    char **argv = calloc((size_t)n + 2, sizeof *argv);
    if (!argv) return -1;
    argv[0] = (char *)bin;
    for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
    static int seq;
    char name[64], path[512];
    snprintf(name, sizeof name, "cli_out_%d.txt", seq++);
    test_tmp_path(name, path, sizeof path);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0) {
        free(argv);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        if (with_stderr) dup2(fd, 2);
        close(fd);
        execv(bin, argv);
        _exit(127);
    }
    free(argv);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        close(fd);
        return -1;
    }
    if (out) {
        off_t len = lseek(fd, 0, SEEK_END);
        char *buf = malloc(len > 0 ? (size_t)len + 1 : 1);
        size_t got = 0;
        if (buf && len > 0) {
            lseek(fd, 0, SEEK_SET);
            ssize_t r;
            while (got < (size_t)len && (r = read(fd, buf + got, (size_t)len - got)) > 0) got += (size_t)r;
        }
        if (buf) buf[got] = '\0';
        *out = buf;
    }
    close(fd);
    unlink(path);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}
