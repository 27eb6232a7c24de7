/* progress.c - progress display (see progress.h). */
#include "eval/progress.h"

#include <math.h>
#include <unistd.h>

#include "core/nx_base.h"

void nx_progress_fmt_time(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, n, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void nx_progress_start_at(struct nx_progress *p, FILE *f, const char *what, int total, bool tty,
                          double now) {
    p->f = f;
    p->tty = tty;
    p->what = what ? what : "units";
    p->total = total;
    p->done = 0;
    p->t0 = p->last = now;
    p->period = 10.0;
    p->lines = 0;
}

void nx_progress_start(struct nx_progress *p, FILE *f, const char *what, int total) {
    nx_progress_start_at(p, f, what, total, f && isatty(fileno(f)), nx_time_s());
}

static void print_line(struct nx_progress *p, const char *label, double now, bool final) {
    double el = now - p->t0;
    char e[32], r[32];
    nx_progress_fmt_time(e, sizeof e, el);
    if (p->done > 0 && p->done <= p->total)
        nx_progress_fmt_time(r, sizeof r, el / p->done * (p->total - p->done));
    else
        snprintf(r, sizeof r, "?");
    fprintf(p->f, "%s%d/%d %s, %s elapsed, ETA %s%s%s%s", p->tty ? "\r" : "", p->done, p->total,
            p->what, e, r, label ? " (" : "", label ? label : "", label ? ")" : "");
    if (p->tty)
        fprintf(p->f, "\033[K%s", final ? "\n" : "");
    else
        fputc('\n', p->f);
    fflush(p->f);
    p->lines++;
    p->last = now;
}

void nx_progress_update_at(struct nx_progress *p, int done, const char *label, double now) {
    p->done = done;
    if (!p->f) return;
    /* a terminal line is rewritten at most 10 times a second, a log line every period */
    if (now - p->last >= (p->tty ? 0.1 : p->period)) print_line(p, label, now, false);
}

void nx_progress_update(struct nx_progress *p, int done, const char *label) {
    nx_progress_update_at(p, done, label, nx_time_s());
}

void nx_progress_finish_at(struct nx_progress *p, double now) {
    if (!p->f) return;
    print_line(p, "done", now, true);
}

void nx_progress_finish(struct nx_progress *p) { nx_progress_finish_at(p, nx_time_s()); }
