/*
 * mcp_proc.c - the MCP server process and its three pipes.
 *
 * DESIGN: one loop (mcp_proc_pump) does all I/O with poll() on non-blocking pipes: it writes
 * what is queued for the server's stdin, reads stderr into a fixed ring (so the server never
 * blocks on a full stderr pipe while we wait for it), and cuts stdout into lines that go to
 * mcp_handle_line. Reading and writing in the same loop means a server that floods us while we
 * are still sending a long request cannot deadlock us. The loop never waits past the caller's
 * deadline; a line longer than max_line is refused as soon as max_line bytes of it have arrived,
 * so memory stays bounded whatever the server writes.
 *
 * The child runs in its own process group (mcp_close kills the group, which catches wrappers
 * such as npx that start the real server as a grandchild). Between fork and exec the child only
 * calls async-signal-safe functions; exec failures come back through a close-on-exec pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"

#include "core/nx_base.h"
#include "mcp/mcp_impl.h"

extern char **environ;

double mcp_now(void) { return nx_time_s(); }

nx_status mcp_seterr(char *err, size_t errlen, nx_status st, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* The stderr ring as one string, its last line(s) only, for messages. */
static const char *stderr_for_msg(mcp_client *c, size_t max) {
    const char *t = mcp_stderr_tail(c);
    size_t n = strlen(t);
    while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' ')) n--;
    ((char *)t)[n] = '\0';
    return n > max ? t + (n - max) : t;
}

nx_status mcp_fail(mcp_client *c, nx_status st, const char *fmt, ...) {
    if (c->broken) return c->broken; /* the first failure is the one to report */
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *tail = stderr_for_msg(c, 100);
    if (*tail)
        snprintf(c->broken_msg, sizeof c->broken_msg, "%s (server stderr: ...%s)", msg, tail);
    else
        snprintf(c->broken_msg, sizeof c->broken_msg, "%s", msg);
    /* one line: stderr may hold newlines */
    for (char *p = c->broken_msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    c->broken = st;
    return st;
}

const char *mcp_stderr_tail(mcp_client *c) {
    size_t n = 0;
    if (c->efull) {
        size_t first = MCP_STDERR_KEEP - c->epos;
        memcpy(c->etail, c->ering + c->epos, first);
        memcpy(c->etail + first, c->ering, c->epos);
        n = MCP_STDERR_KEEP;
    } else {
        memcpy(c->etail, c->ering, c->epos);
        n = c->epos;
    }
    c->etail[n] = '\0';
    /* keep it printable: NULs and control bytes other than newline/tab become '?' */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)c->etail[i];
        if (ch < 0x20 && ch != '\n' && ch != '\t') c->etail[i] = '?';
    }
    return c->etail;
}

static void ering_add(mcp_client *c, const char *p, size_t n) {
    if (n >= MCP_STDERR_KEEP) {
        memcpy(c->ering, p + (n - MCP_STDERR_KEEP), MCP_STDERR_KEEP);
        c->epos = 0;
        c->efull = true;
        return;
    }
    size_t room = MCP_STDERR_KEEP - c->epos;
    size_t a = n < room ? n : room;
    memcpy(c->ering + c->epos, p, a);
    c->epos += a;
    if (c->epos == MCP_STDERR_KEEP) {
        c->epos = 0;
        c->efull = true;
    }
    if (a < n) {
        memcpy(c->ering, p + a, n - a);
        c->epos = n - a;
    }
}

/* ---- spawn ------------------------------------------------------------------------------ */

static bool env_name_eq(const char *a, const char *b) {
    /* names up to '=' equal? */
    while (*a && *a != '=' && *a == *b) a++, b++;
    return (*a == '=' || !*a) && (*b == '=' || !*b);
}

static char *find_in_path(const char *prog, const char *path) {
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    size_t plen = strlen(prog);
    const char *p = path;
    for (;;) {
        const char *e = strchr(p, ':');
        size_t dl = e ? (size_t)(e - p) : strlen(p);
        char *cand = nx_malloc(dl + plen + 3);
        if (!cand) return NULL;
        if (dl == 0)
            snprintf(cand, dl + plen + 3, "./%s", prog);
        else
            snprintf(cand, dl + plen + 3, "%.*s/%s", (int)dl, p, prog);
        struct stat st;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) return cand;
        nx_free(cand);
        if (!e) return NULL;
        p = e + 1;
    }
}

/* Moves fd to a number >= 3 (close-on-exec), so the dup2 onto 0/1/2 cannot clobber another. */
static int child_high_fd(int fd) { return fcntl(fd, F_DUPFD_CLOEXEC, 3); }

static void child_report(int fd, char what, int e) {
    char msg[1 + sizeof(int)];
    msg[0] = what;
    memcpy(msg + 1, &e, sizeof e);
    ssize_t w = write(fd, msg, sizeof msg);
    (void)w;
}

nx_status mcp_proc_spawn(mcp_client *c, const struct mcp_server_params *p, char *err, size_t errlen) {
    if (!p->argv || !p->argv[0] || !p->argv[0][0])
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "no server command given");
    const char *prog = p->argv[0];

    /* environment: ours, minus the names the caller sets, plus the caller's entries */
    size_t n_env = 0, n_extra = 0;
    while (environ && environ[n_env]) n_env++;
    while (p->env && p->env[n_extra]) {
        const char *eq = strchr(p->env[n_extra], '=');
        if (!eq || eq == p->env[n_extra])
            return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG,
                              "environment entry '%s' is not NAME=VALUE", p->env[n_extra]);
        n_extra++;
    }
    char **envp = nx_calloc(n_env + n_extra + 1, sizeof *envp);
    if (!envp) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    size_t k = 0;
    const char *path_var = NULL;
    for (size_t i = 0; i < n_env; i++) {
        bool over = false;
        for (size_t j = 0; j < n_extra && !over; j++) over = env_name_eq(environ[i], p->env[j]);
        if (!over) envp[k++] = environ[i];
    }
    for (size_t j = 0; j < n_extra; j++) envp[k++] = (char *)p->env[j];
    envp[k] = NULL;
    for (size_t i = 0; i < k; i++)
        if (!strncmp(envp[i], "PATH=", 5)) path_var = envp[i] + 5;

    char *exe = NULL;
    if (strchr(prog, '/')) {
        exe = nx_strdup(prog);
    } else {
        exe = find_in_path(prog, path_var);
        if (!exe) {
            nx_free(envp);
            return mcp_seterr(err, errlen, NX_STATUS_IO, "cannot start server: '%s' not found in PATH",
                              prog);
        }
    }
    if (!exe) {
        nx_free(envp);
        return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }

    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, pex[2] = {-1, -1};
    if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC) ||
        pipe2(pex, O_CLOEXEC)) {
        int e = errno;
        int fds[8] = {pin[0], pin[1], pout[0], pout[1], perr[0], perr[1], pex[0], pex[1]};
        for (int i = 0; i < 8; i++)
            if (fds[i] >= 0) close(fds[i]);
        nx_free(exe);
        nx_free(envp);
        return mcp_seterr(err, errlen, NX_STATUS_IO, "cannot create pipes: %s", strerror(e));
    }

    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pin[0]), close(pin[1]), close(pout[0]), close(pout[1]);
        close(perr[0]), close(perr[1]), close(pex[0]), close(pex[1]);
        nx_free(exe);
        nx_free(envp);
        return mcp_seterr(err, errlen, NX_STATUS_IO, "cannot fork: %s", strerror(e));
    }
    if (pid == 0) {
        /* child: async-signal-safe calls only */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGPIPE, &dfl, NULL);
        setpgid(0, 0);
        int a = child_high_fd(pin[0]), b = child_high_fd(pout[1]), d = child_high_fd(perr[1]);
        if (a < 0 || b < 0 || d < 0 || dup2(a, 0) < 0 || dup2(b, 1) < 0 || dup2(d, 2) < 0) {
            child_report(pex[1], 'D', errno);
            _exit(127);
        }
        if (p->cwd && chdir(p->cwd) != 0) {
            child_report(pex[1], 'C', errno);
            _exit(127);
        }
        execve(exe, (char *const *)p->argv, envp);
        child_report(pex[1], 'E', errno);
        _exit(127);
    }

    /* parent */
    setpgid(pid, pid); /* also here, so the group exists before we might signal it */
    close(pin[0]), close(pout[1]), close(perr[1]), close(pex[1]);
    nx_free(envp);
    char rep[1 + sizeof(int)];
    size_t got = 0;
    for (;;) { /* returns at exec (close-on-exec) or at the child's report */
        ssize_t r = read(pex[0], rep + got, sizeof rep - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
        if (got == sizeof rep) break;
    }
    close(pex[0]);
    if (got > 0) {
        int e = 0;
        if (got == sizeof rep) memcpy(&e, rep + 1, sizeof e);
        waitpid(pid, NULL, 0);
        close(pin[1]), close(pout[0]), close(perr[0]);
        int st;
        if (rep[0] == 'C')
            st = mcp_seterr(err, errlen, NX_STATUS_IO, "cannot start server '%s': cannot enter "
                            "directory '%s': %s", prog, p->cwd, strerror(e));
        else
            st = mcp_seterr(err, errlen, NX_STATUS_IO, "cannot start server '%s' (%s): %s", prog,
                            exe, strerror(e));
        nx_free(exe);
        return st;
    }
    nx_free(exe);
    fcntl(pin[1], F_SETFL, fcntl(pin[1], F_GETFL) | O_NONBLOCK);
    fcntl(pout[0], F_SETFL, fcntl(pout[0], F_GETFL) | O_NONBLOCK);
    fcntl(perr[0], F_SETFL, fcntl(perr[0], F_GETFL) | O_NONBLOCK);
    c->pid = pid;
    c->fd_in = pin[1];
    c->fd_out = pout[0];
    c->fd_err = perr[0];
    return NX_STATUS_OK;
}

/* ---- output ----------------------------------------------------------------------------- */

nx_status mcp_proc_queue(mcp_client *c, const char *line, size_t len) {
    if (c->broken) return c->broken;
    if (c->fd_in < 0) return mcp_fail(c, NX_STATUS_CLOSED, "server closed its stdin");
    if (c->opos > 0 && c->opos == c->olen) c->opos = c->olen = 0;
    size_t need = c->olen + len + 1;
    if (need - c->opos > MCP_OUT_MAX)
        return mcp_fail(c, NX_STATUS_PROTOCOL, "server is not reading its input (%zu bytes queued)",
                        c->olen - c->opos);
    if (need > c->ocap) {
        if (c->opos > 0) { /* compact first */
            memmove(c->obuf, c->obuf + c->opos, c->olen - c->opos);
            c->olen -= c->opos;
            c->opos = 0;
            need = c->olen + len + 1;
        }
        if (need > c->ocap) {
            size_t cap = c->ocap ? c->ocap : 4096;
            while (cap < need) cap *= 2;
            char *nb = nx_realloc(c->obuf, cap);
            if (!nb) return mcp_fail(c, NX_STATUS_NOMEM, "out of memory");
            c->obuf = nb;
            c->ocap = cap;
        }
    }
    memcpy(c->obuf + c->olen, line, len);
    c->obuf[c->olen + len] = '\n';
    c->olen += len + 1;
    return NX_STATUS_OK;
}

/* write() with SIGPIPE blocked in this thread; a SIGPIPE it raised is consumed, so a closed pipe
 * is only ever an EPIPE. */
static ssize_t write_nosigpipe(int fd, const void *buf, size_t n) {
    sigset_t pipe_set, old, pend;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pend);
    bool was_pending = sigismember(&pend, SIGPIPE);
    ssize_t w = write(fd, buf, n);
    int e = errno;
    if (w < 0 && e == EPIPE && !was_pending) {
        struct timespec zero = {0, 0};
        sigpending(&pend);
        if (sigismember(&pend, SIGPIPE)) sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return w;
}

/* ---- the loop --------------------------------------------------------------------------- */

static void describe_exit(mcp_client *c, char *buf, size_t n) {
    /* give a process that closed stdout a moment to finish exiting, for a better message */
    for (int i = 0; i < 40 && !c->reaped; i++) {
        pid_t r = waitpid(c->pid, &c->wstatus, WNOHANG);
        if (r == c->pid) {
            c->reaped = true;
            break;
        }
        if (r < 0) break;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (!c->reaped)
        snprintf(buf, n, "still running");
    else if (WIFEXITED(c->wstatus))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(c->wstatus));
    else if (WIFSIGNALED(c->wstatus))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(c->wstatus),
                 strsignal(WTERMSIG(c->wstatus)));
    else
        snprintf(buf, n, "status 0x%x", c->wstatus);
}

static void drain_stderr(mcp_client *c) {
    for (;;) {
        char tmp[MCP_STDERR_KEEP];
        ssize_t r = read(c->fd_err, tmp, sizeof tmp);
        if (r > 0) {
            ering_add(c, tmp, (size_t)r);
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r == 0 || (r < 0 && errno != EAGAIN)) {
            close(c->fd_err);
            c->fd_err = -1;
        }
        return;
    }
}

/* Splits a chunk from stdout into lines. */
static void take_stdout(mcp_client *c, const char *p, size_t n) {
    const char *end = p + n;
    while (p < end && !c->broken) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t seg = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (c->llen + seg > c->max_line) {
            mcp_fail(c, NX_STATUS_PROTOCOL, "server sent a line longer than the limit of %zu bytes",
                     c->max_line);
            return;
        }
        if (nl && c->llen == 0) {
            mcp_handle_line(c, p, seg);
        } else {
            if (c->llen + seg > c->lcap) {
                size_t cap = c->lcap ? c->lcap : 4096;
                while (cap < c->llen + seg) cap *= 2;
                if (cap > c->max_line) cap = c->max_line;
                char *nb = nx_realloc(c->lbuf, cap);
                if (!nb) {
                    mcp_fail(c, NX_STATUS_NOMEM, "out of memory");
                    return;
                }
                c->lbuf = nb;
                c->lcap = cap;
            }
            if (seg) memcpy(c->lbuf + c->llen, p, seg);
            c->llen += seg;
            if (nl) {
                size_t total = c->llen;
                c->llen = 0;
                mcp_handle_line(c, c->lbuf, total);
            }
        }
        p += seg + (nl ? 1 : 0);
    }
}

nx_status mcp_proc_pump(mcp_client *c, double deadline, bool stop_on_changed) {
    for (;;) {
        if (c->wait_id >= 0 && c->wait_resp) return NX_STATUS_OK;
        if (c->broken) return c->broken;
        if (stop_on_changed && c->tools_changed) return NX_STATUS_OK;
        double left = deadline - mcp_now();
        if (left <= 0) return NX_STATUS_TIMEOUT;
        if (c->fd_out < 0) {
            char how[96];
            describe_exit(c, how, sizeof how);
            return mcp_fail(c, NX_STATUS_CLOSED, "server closed its stdout (%s)", how);
        }

        struct pollfd pf[3];
        int n = 0, i_out = -1, i_err = -1, i_in = -1;
        pf[n] = (struct pollfd){c->fd_out, POLLIN, 0}, i_out = n++;
        if (c->fd_err >= 0) pf[n] = (struct pollfd){c->fd_err, POLLIN, 0}, i_err = n++;
        if (c->fd_in >= 0 && c->olen > c->opos) pf[n] = (struct pollfd){c->fd_in, POLLOUT, 0}, i_in = n++;
        int ms = (int)(left * 1000.0) + 1;
        int r = poll(pf, (nfds_t)n, ms);
        if (r < 0) {
            if (errno == EINTR) continue;
            return mcp_fail(c, NX_STATUS_IO, "poll: %s", strerror(errno));
        }
        if (r == 0) continue; /* the deadline check above ends it */

        if (i_err >= 0 && pf[i_err].revents) drain_stderr(c);

        if (i_in >= 0 && pf[i_in].revents) {
            /* The server stopped reading (it exited, or closed its stdin). Drop what is queued
             * and keep reading: a reply already written still arrives, and an exit shows up as
             * EOF on stdout with its status. A later request fails at once (mcp_proc_queue). */
            bool gone = (pf[i_in].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
            if (!gone) {
                ssize_t w = write_nosigpipe(c->fd_in, c->obuf + c->opos, c->olen - c->opos);
                if (w > 0)
                    c->opos += (size_t)w;
                else if (w < 0 && errno != EAGAIN && errno != EINTR)
                    gone = true; /* EPIPE: never a SIGPIPE */
            }
            if (gone) {
                close(c->fd_in);
                c->fd_in = -1;
                c->opos = c->olen = 0;
            }
        }

        if (pf[i_out].revents) {
            /* a bounded number of reads per turn, so the deadline and stderr stay serviced */
            for (int rounds = 0; rounds < 16 && c->fd_out >= 0 && !c->broken; rounds++) {
                ssize_t got = read(c->fd_out, c->rbuf, sizeof c->rbuf);
                if (got > 0) {
                    take_stdout(c, c->rbuf, (size_t)got);
                    if (c->wait_id >= 0 && c->wait_resp) break;
                    if (stop_on_changed && c->tools_changed) break;
                    continue;
                }
                if (got < 0 && errno == EINTR) continue;
                if (got < 0 && errno == EAGAIN) break;
                /* EOF or error */
                bool mid = c->llen > 0;
                close(c->fd_out);
                c->fd_out = -1;
                if (c->fd_err >= 0) drain_stderr(c);
                if (c->wait_id >= 0 && c->wait_resp) return NX_STATUS_OK;
                char how[96];
                describe_exit(c, how, sizeof how);
                return mcp_fail(c, NX_STATUS_CLOSED, "server closed its stdout%s (%s)",
                                mid ? " in the middle of a message" : "", how);
            }
        }
    }
}

/* ---- close ------------------------------------------------------------------------------ */

/* Waits up to ms for the child to exit, reading (and dropping) its output meanwhile. */
static bool wait_exit(mcp_client *c, int ms) {
    double end = mcp_now() + ms / 1000.0;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int w = waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (w == 0 && si.si_pid == c->pid) return true;
        if (w < 0 && errno == ECHILD) return true; /* reaped elsewhere (SIGCHLD ignored) */
        double left = end - mcp_now();
        if (left <= 0) return false;
        struct pollfd pf[2];
        int n = 0;
        if (c->fd_out >= 0) pf[n++] = (struct pollfd){c->fd_out, POLLIN, 0};
        if (c->fd_err >= 0) pf[n++] = (struct pollfd){c->fd_err, POLLIN, 0};
        int t = (int)(left * 1000.0);
        if (t > 10) t = 10; /* the exit itself is not pollable: look again every 10 ms */
        if (n == 0) {
            struct timespec ts = {0, (long)t * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (poll(pf, (nfds_t)n, t) > 0) {
            if (c->fd_err >= 0) drain_stderr(c);
            if (c->fd_out >= 0) {
                ssize_t r = read(c->fd_out, c->rbuf, sizeof c->rbuf);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                    close(c->fd_out);
                    c->fd_out = -1;
                }
            }
        }
    }
}

void mcp_proc_eof(mcp_client *c) {
    if (c->fd_in >= 0) close(c->fd_in);
    c->fd_in = -1;
}

void mcp_proc_close(mcp_client *c) {
    if (c->fd_in >= 0) close(c->fd_in);
    c->fd_in = -1;
    if (c->pid > 0 && !c->reaped) {
        /* a server that broke the protocol gets little time to exit on its own */
        if (!wait_exit(c, c->broken ? 100 : 1000)) {
            kill(-c->pid, SIGTERM);
            kill(c->pid, SIGTERM);
            if (!wait_exit(c, 1000)) kill(c->pid, SIGKILL);
        }
        /* whatever is left of its process group (the leader is not reaped yet, so the group id
         * cannot have been reused) */
        kill(-c->pid, SIGKILL);
        while (waitpid(c->pid, &c->wstatus, 0) < 0 && errno == EINTR) {
        }
        c->reaped = true;
    } else if (c->pid > 0) {
        kill(-c->pid, SIGKILL); /* leftovers only; ESRCH when none */
    }
    if (c->fd_out >= 0) close(c->fd_out);
    if (c->fd_err >= 0) close(c->fd_err);
    c->fd_out = c->fd_err = -1;
}
