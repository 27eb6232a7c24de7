/*
 * svg.h - hand-written SVG line plots for evaluation results: a figure of one or more panels
 * side by side, each with axes, ticks, a title and one line (with point markers and optional
 * error bars) per series; one legend for the figure, taken from the first panel's series (series
 * with the same index share a colour in every panel).
 *
 * NaN points are skipped (the line breaks there). A panel with no finite point is drawn empty
 * with its axes. Text is XML-escaped. No global state; thread-safe.
 */
#ifndef NX_EVAL_SVG_H
#define NX_EVAL_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "nexus.h"

struct svg_series {
    const char *name;
    const double *x, *y;
    const double *err; /* half-width of an error bar per point, or NULL */
    int n;
};

struct svg_panel {
    const char *title, *xlabel, *ylabel;
    bool log_x;       /* logarithmic x axis (x <= 0 points are skipped) */
    bool y_from_zero; /* the y range includes 0 */
    const struct svg_series *series;
    int n_series;
};

/* Writes the figure to f; 0 on success, -1 on a bad argument or a write error. */
int svg_write(FILE *f, const char *title, const struct svg_panel *panels, int n_panels);
/* The same, atomically into path: NX_STATUS_OK, or with err naming the problem the file's
 * status (IO, INVALID_ARG) or NX_STATUS_INVALID_ARG for bad plot data. */
nx_status svg_save(const char *path, const char *title, const struct svg_panel *panels, int n_panels,
                   char *err, size_t errlen);

/* Axis helper (exposed for tests): a "nice" tick step (1, 2 or 5 x 10^k) giving about `want`
   intervals over [lo, hi]; 0 when the range is empty or not finite. */
double svg_nice_step(double lo, double hi, int want);

#endif
