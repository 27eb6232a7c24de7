/*
 * progress.h - a progress display for long evaluation runs, on a FILE (stderr): units done /
 * total, elapsed time and the estimated time left (elapsed / done x remaining). On a terminal
 * one line is rewritten in place with '\r' (at most 10 times a second); otherwise (a log file, a pipe) one line is printed
 * at most every `period` seconds and when the run finishes, so logs stay short.
 */
#ifndef NX_EVAL_PROGRESS_H
#define NX_EVAL_PROGRESS_H

#include <stdbool.h>
#include <stdio.h>

struct nx_progress {
    FILE *f;
    bool tty;
    const char *what; /* "configs", "samples", ... */
    int total, done;
    double t0, last;
    double period; /* seconds between lines when not a terminal (default 10) */
    int lines;     /* lines (or rewrites) printed so far */
};

/* f may be NULL (silent). tty is detected with isatty(). */
void nx_progress_start(struct nx_progress *p, FILE *f, const char *what, int total);
/* Records `done` units; label describes the current unit (may be NULL). */
void nx_progress_update(struct nx_progress *p, int done, const char *label);
/* The same with an explicit clock (seconds, same origin as start_at); for tests. */
void nx_progress_start_at(struct nx_progress *p, FILE *f, const char *what, int total, bool tty,
                          double now);
void nx_progress_update_at(struct nx_progress *p, int done, const char *label, double now);
/* Final line (ends the '\r' line with a newline on a terminal). */
void nx_progress_finish(struct nx_progress *p);
void nx_progress_finish_at(struct nx_progress *p, double now);
/* "1:02:03" / "2:03" into buf. */
void nx_progress_fmt_time(char *buf, size_t n, double seconds);

#endif
