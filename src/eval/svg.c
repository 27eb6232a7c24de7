/*
 * svg.c - SVG line plots (see svg.h).
 *
 * DESIGN: fixed geometry (each panel 360 x 270 px, plot area inset for the axis labels), a
 * legend below the panels in rows of four. x ticks sit at the distinct x values of the data when
 * there are at most 10 of them (densities, context lengths), otherwise at nice steps; y ticks at
 * nice steps over the data range (padded by 5%). Coordinates are printed with one decimal.
 */
#include "eval/svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/outfile.h"

enum { PANEL_W = 360, PANEL_H = 270, ML = 62, MR = 14, MT = 34, MB = 46, LEG_ROW = 18,
       LEG_COLS = 4, LEG_W = 170 };

static const char *const COLORS[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                     "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                     "#000000", "#aec7e8"};
#define N_COLORS ((int)(sizeof COLORS / sizeof COLORS[0]))

static void put_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

double svg_nice_step(double lo, double hi, int want) {
    double range = hi - lo;
    if (!isfinite(range) || range <= 0 || want < 1) return 0;
    double raw = range / want, mag = pow(10, floor(log10(raw))), r = raw / mag;
    double m = r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10;
    return m * mag;
}

struct axis {
    double lo, hi;
    bool log;
};

static double ax_t(const struct axis *a, double v) {
    if (a->log) return (log(v) - log(a->lo)) / (log(a->hi) - log(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

static bool usable(const struct svg_panel *p, double x, double y) {
    return isfinite(x) && isfinite(y) && (!p->log_x || x > 0);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fmt_num(char *buf, size_t n, double v) {
    if (fabs(v) < 1e-12) v = 0;
    if (fabs(v) >= 1000 && fabs(v) < 1e9 && v == floor(v))
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%.4g", v);
}

static void draw_panel(FILE *f, const struct svg_panel *p, double ox, double oy) {
    double pw = PANEL_W - ML - MR, ph = PANEL_H - MT - MB;
    double x0 = ox + ML, y0 = oy + MT; /* top-left of the plot area */
    /* data ranges */
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int nx_distinct = 0;
    double xs[11];
    bool many_x = false;
    for (int s = 0; s < p->n_series; s++) {
        const struct svg_series *se = &p->series[s];
        for (int i = 0; i < se->n; i++) {
            double x = se->x[i], y = se->y[i];
            if (!usable(p, x, y)) continue;
            double e = se->err && isfinite(se->err[i]) ? fabs(se->err[i]) : 0;
            if (x < xmin) xmin = x;
            if (x > xmax) xmax = x;
            if (y - e < ymin) ymin = y - e;
            if (y + e > ymax) ymax = y + e;
            bool seen = false;
            for (int k = 0; k < nx_distinct; k++) seen |= xs[k] == x;
            if (!seen) {
                if (nx_distinct < 10)
                    xs[nx_distinct++] = x;
                else
                    many_x = true;
            }
        }
    }
    bool empty = !(xmin <= xmax);
    if (empty) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (p->y_from_zero) {
        if (ymin > 0) ymin = 0;
        if (ymax < 0) ymax = 0;
    }
    if (ymax - ymin <= 0) {
        double pad = fabs(ymax) > 0 ? fabs(ymax) * 0.1 : 1;
        ymin -= pad, ymax += pad;
    } else {
        double pad = (ymax - ymin) * 0.05;
        if (!(p->y_from_zero && ymin == 0)) ymin -= pad;
        ymax += pad;
    }
    struct axis ax = {xmin, xmax, p->log_x}, ay = {ymin, ymax, false};
    if (xmax - xmin <= 0) {
        if (p->log_x)
            ax.lo = xmin / 2, ax.hi = xmax * 2;
        else
            ax.lo = xmin - 1, ax.hi = xmax + 1;
    } else if (p->log_x) {
        ax.lo = xmin / 1.15, ax.hi = xmax * 1.15;
    } else {
        double pad = (xmax - xmin) * 0.05;
        ax.lo = xmin - pad, ax.hi = xmax + pad;
    }
    /* frame, title, labels */
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
               "stroke=\"#333\"/>\n", x0, y0, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">", x0 + pw / 2,
            oy + 20);
    put_text(f, p->title);
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">",
            x0 + pw / 2, oy + PANEL_H - 8);
    put_text(f, p->xlabel);
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\" "
               "transform=\"rotate(-90 %.1f %.1f)\">", ox + 14, y0 + ph / 2, ox + 14, y0 + ph / 2);
    put_text(f, p->ylabel);
    fprintf(f, "</text>\n");
    /* ticks */
    char buf[64];
    if (!empty && !many_x) {
        qsort(xs, (size_t)nx_distinct, sizeof xs[0], cmp_d);
        for (int k = 0; k < nx_distinct; k++) {
            double px = x0 + ax_t(&ax, xs[k]) * pw;
            fmt_num(buf, sizeof buf, xs[k]);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%s"
                       "</text>\n", px, y0, px, y0 + ph, px, y0 + ph + 14, buf);
        }
    } else {
        double st = svg_nice_step(ax.lo, ax.hi, 5);
        if (p->log_x) st = 0; /* log axis with many points: ticks at the ends only */
        if (st > 0) {
            for (double v = ceil(ax.lo / st) * st; v <= ax.hi + st * 1e-9; v += st) {
                double px = x0 + ax_t(&ax, v) * pw;
                fmt_num(buf, sizeof buf, v);
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                           "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%s"
                           "</text>\n", px, y0, px, y0 + ph, px, y0 + ph + 14, buf);
            }
        } else {
            double ends[2] = {ax.lo, ax.hi};
            for (int k = 0; k < 2; k++) {
                fmt_num(buf, sizeof buf, ends[k]);
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%s"
                           "</text>\n", x0 + k * pw, y0 + ph + 14, buf);
            }
        }
    }
    double st = svg_nice_step(ay.lo, ay.hi, 5);
    if (st > 0)
        for (double v = ceil(ay.lo / st) * st; v <= ay.hi + st * 1e-9; v += st) {
            double py = y0 + ph - ax_t(&ay, v) * ph;
            fmt_num(buf, sizeof buf, v);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"10\">%s</text>\n",
                    x0, py, x0 + pw, py, x0 - 4, py + 3, buf);
        }
    if (empty) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\" "
                   "fill=\"#888\">no data</text>\n", x0 + pw / 2, y0 + ph / 2);
        return;
    }
    /* series */
    for (int s = 0; s < p->n_series; s++) {
        const struct svg_series *se = &p->series[s];
        const char *col = COLORS[s % N_COLORS];
        bool open = false;
        for (int i = 0; i < se->n; i++) {
            if (!usable(p, se->x[i], se->y[i])) {
                if (open) fprintf(f, "\"/>\n");
                open = false;
                continue;
            }
            double px = x0 + ax_t(&ax, se->x[i]) * pw, py = y0 + ph - ax_t(&ay, se->y[i]) * ph;
            if (!open)
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                        col);
            fprintf(f, "%s%.1f,%.1f", open ? " " : "", px, py);
            open = true;
        }
        if (open) fprintf(f, "\"/>\n");
        for (int i = 0; i < se->n; i++) {
            if (!usable(p, se->x[i], se->y[i])) continue;
            double px = x0 + ax_t(&ax, se->x[i]) * pw, py = y0 + ph - ax_t(&ay, se->y[i]) * ph;
            if (se->err && isfinite(se->err[i]) && se->err[i] != 0) {
                double e = fabs(se->err[i]);
                double a = y0 + ph - ax_t(&ay, se->y[i] + e) * ph;
                double b = y0 + ph - ax_t(&ay, se->y[i] - e) * ph;
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                           "stroke-opacity=\"0.5\"/>\n", px, a, px, b, col);
            }
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", px, py, col);
        }
    }
}

int svg_write(FILE *f, const char *title, const struct svg_panel *panels, int n_panels) {
    if (!f || !panels || n_panels < 1) return -1;
    for (int k = 0; k < n_panels; k++) {
        if (panels[k].n_series < 0 || (panels[k].n_series > 0 && !panels[k].series)) return -1;
        for (int s = 0; s < panels[k].n_series; s++) {
            const struct svg_series *se = &panels[k].series[s];
            if (se->n < 0 || (se->n > 0 && (!se->x || !se->y))) return -1;
        }
    }
    int n_leg = panels[0].n_series;
    int leg_rows = (n_leg + LEG_COLS - 1) / LEG_COLS;
    int top = title && *title ? 26 : 0;
    int w = PANEL_W * n_panels, h = top + PANEL_H + leg_rows * LEG_ROW + 8;
    if (w < LEG_COLS * LEG_W) w = LEG_COLS * LEG_W;
    if (top && w < (int)strlen(title) * 8 + 40) w = (int)strlen(title) * 8 + 40; /* ~8 px/char */
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", w, h, w, h);
    if (top) {
        fprintf(f, "<text x=\"%d\" y=\"18\" text-anchor=\"middle\" font-size=\"14\" "
                   "font-weight=\"bold\">", w / 2);
        put_text(f, title);
        fprintf(f, "</text>\n");
    }
    for (int k = 0; k < n_panels; k++) {
        fprintf(f, "<g>\n");
        draw_panel(f, &panels[k], (double)k * PANEL_W, top);
        fprintf(f, "</g>\n");
    }
    for (int s = 0; s < n_leg; s++) {
        double lx = 20 + (s % LEG_COLS) * LEG_W, ly = top + PANEL_H + (s / LEG_COLS) * LEG_ROW + 6;
        const char *col = COLORS[s % N_COLORS];
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">",
                lx, ly, lx + 22, ly, col, lx + 28, ly + 4);
        put_text(f, panels[0].series[s].name);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}

nx_status svg_save(const char *path, const char *title, const struct svg_panel *panels, int n_panels,
                   char *err, size_t errlen) {
    struct nx_outfile o;
    nx_status st = nx_outfile_open(&o, path, err, errlen);
    if (st) return st;
    if (svg_write(o.f, title, panels, n_panels)) {
        nx_outfile_abort(&o);
        if (err && errlen) snprintf(err, errlen, "cannot draw '%s': bad plot data", path);
        return NX_STATUS_INVALID_ARG;
    }
    return nx_outfile_commit(&o, err, errlen);
}
