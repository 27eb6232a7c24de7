/* parmap.c - independent evaluation items in forked worker processes (see parmap.h). */
#include "eval/parmap.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "core/alloc.h"

enum { MAX_PROCS = 64 };

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w, n -= (size_t)w;
    }
    return 0;
}

static void worker(int w, int n_procs, int n_items, size_t rec_bytes,
                   int (*fn)(int, void *, void *), void *arg, void *rec, int fd) {
    for (int i = w; i < n_items; i += n_procs) {
        int32_t id = i;
        if (fn(i, rec, arg) || write_all(fd, &id, sizeof id) || write_all(fd, rec, rec_bytes))
            _exit(1);
    }
    _exit(0);
}

int eval_parmap(int n_items, int n_procs, size_t rec_bytes, int (*fn)(int, void *, void *),
                void *arg, void *out, void (*done)(int, void *), void *done_arg) {
    char *o = out;
    if (n_procs > n_items) n_procs = n_items;
    if (n_procs > MAX_PROCS) n_procs = MAX_PROCS;
    if (n_procs <= 1) {
        for (int i = 0; i < n_items; i++) {
            if (fn(i, o + (size_t)i * rec_bytes, arg)) return -1;
            if (done) done(i, done_arg);
        }
        return 0;
    }
    void *rec = nx_malloc(rec_bytes ? rec_bytes : 1);
    if (!rec) return -1;
    fflush(NULL);
    pid_t pid[MAX_PROCS];
    struct pollfd pf[MAX_PROCS];
    size_t got[MAX_PROCS]; /* bytes of the record in progress, per worker */
    int started = 0, rc = 0;
    for (int w = 0; w < n_procs; w++) {
        int fds[2];
        if (pipe(fds)) {
            rc = -1;
            break;
        }
        pid_t parent = getpid();
        pid_t p = fork();
        if (p == 0) {
#ifdef __linux__
            /* a worker ends with its parent (killed mid-run) instead of finishing its stream */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) _exit(1);
#endif
            close(fds[0]);
            for (int k = 0; k < started; k++) close(pf[k].fd);
            worker(w, n_procs, n_items, rec_bytes, fn, arg, rec, fds[1]);
        }
        close(fds[1]);
        if (p < 0) {
            close(fds[0]);
            rc = -1;
            break;
        }
        pid[started] = p;
        pf[started] = (struct pollfd){.fd = fds[0], .events = POLLIN};
        got[started] = 0;
        started++;
    }
    /* each worker's stream: (int32 id, record) repeated; read them as they come */
    size_t frame = sizeof(int32_t) + rec_bytes;
    char *buf = nx_malloc((size_t)started * frame + 1);
    int open_fds = started, received = 0;
    if (!buf) rc = -1;
    while (rc == 0 && open_fds > 0) {
        if (poll(pf, (nfds_t)started, -1) < 0) {
            if (errno == EINTR) continue;
            rc = -1;
            break;
        }
        for (int w = 0; w < started; w++) {
            if (pf[w].fd < 0 || !(pf[w].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char *b = buf + (size_t)w * frame;
            ssize_t r = read(pf[w].fd, b + got[w], frame - got[w]);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                if (got[w] != 0) rc = -1;
                close(pf[w].fd);
                pf[w].fd = -1;
                open_fds--;
                continue;
            }
            got[w] += (size_t)r;
            if (got[w] < frame) continue;
            int32_t id;
            memcpy(&id, b, sizeof id);
            if (id < 0 || id >= n_items) {
                rc = -1;
                break;
            }
            memcpy(o + (size_t)id * rec_bytes, b + sizeof id, rec_bytes);
            got[w] = 0;
            received++;
            if (done) done(id, done_arg);
        }
    }
    for (int w = 0; w < started; w++) {
        if (pf[w].fd >= 0) close(pf[w].fd);
        if (rc) kill(pid[w], SIGTERM);
        int st = 0;
        while (waitpid(pid[w], &st, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = -1;
    }
    if (received != n_items) rc = -1;
    nx_free(buf);
    nx_free(rec);
    return rc;
}
