/* test_eval_output.c - the evaluation output modules: SVG plots (structure, escaping, NaN gaps,
 * coordinates), the progress display (terminal and log modes, ETA) and atomic files. */
#include <unistd.h>

#include "eval/outfile.h"
#include "eval/progress.h"
#include "eval/svg.h"
#include "test.h"

static char *render(const struct svg_panel *p, int n, const char *title) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int rc = svg_write(f, title, p, n);
    fclose(f);
    if (rc) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

TEST(svg_nice_step) {
    ASSERT_NEAR(svg_nice_step(0, 1, 5), 0.2, 1e-12);
    ASSERT_NEAR(svg_nice_step(0, 10, 5), 2, 1e-12);
    ASSERT_NEAR(svg_nice_step(0, 0.07, 5), 0.01, 1e-12);
    ASSERT_NEAR(svg_nice_step(100, 1100, 4), 200, 1e-9);
    ASSERT_NEAR(svg_nice_step(1, 1, 5), 0, 0);
    ASSERT_NEAR(svg_nice_step(0, INFINITY, 5), 0, 0);
}

TEST(svg_lines_legend_and_escaping) {
    double x[3] = {0.1, 0.2, 0.4}, a[3] = {0.3, 0.2, 0.1}, b[3] = {0.5, NAN, 0.2};
    double e[3] = {0.01, 0.02, 0.03};
    struct svg_series s[2] = {{"nexus <b&a>", x, a, e, 3}, {"h2o", x, b, NULL, 3}};
    struct svg_panel p[2] = {{"KL", "density", "nats", false, true, s, 2},
                             {"top-1", "density", "fraction", false, false, s, 1}};
    char *svg = render(p, 2, "title \"q\"");
    ASSERT_TRUE(svg != NULL);
    ASSERT_TRUE(strncmp(svg, "<?xml", 5) == 0);
    ASSERT_EQ(count(svg, "<svg "), 1);
    ASSERT_EQ(count(svg, "</svg>"), 1);
    ASSERT_EQ(count(svg, "<g>"), 2);
    ASSERT_EQ(count(svg, "</g>"), 2);
    /* panel 1: series 0 one polyline, series 1 broken by the NaN into two pieces; panel 2: one */
    ASSERT_EQ(count(svg, "<polyline"), 4);
    /* points: 3 + 2 in panel 1, 3 in panel 2; error bars only for series 0 */
    ASSERT_EQ(count(svg, "<circle"), 8);
    ASSERT_EQ(count(svg, "stroke-opacity"), 6);
    ASSERT_TRUE(strstr(svg, "nexus &lt;b&amp;a&gt;") != NULL);
    ASSERT_TRUE(strstr(svg, "title &quot;q&quot;") != NULL);
    ASSERT_TRUE(strstr(svg, "<b&a>") == NULL);
    /* x ticks at the data values */
    ASSERT_TRUE(strstr(svg, ">0.1</text>") && strstr(svg, ">0.2</text>") &&
                strstr(svg, ">0.4</text>"));
    free(svg);
}

TEST(svg_coordinates_map_the_range) {
    /* one series from (0,0) to (1,1) on a y-from-zero panel: the first point is left of the
       last and lower on the page (larger y) */
    double x[2] = {0, 1}, y[2] = {0, 1};
    struct svg_series s = {"a", x, y, NULL, 2};
    struct svg_panel p = {"t", "x", "y", false, true, &s, 1};
    char *svg = render(&p, 1, NULL);
    ASSERT_TRUE(svg != NULL);
    const char *pts = strstr(svg, "points=\"");
    ASSERT_TRUE(pts != NULL);
    double x0, y0, x1, y1;
    ASSERT_EQ(sscanf(pts + 8, "%lf,%lf %lf,%lf", &x0, &y0, &x1, &y1), 4);
    ASSERT_TRUE(x0 < x1);
    ASSERT_TRUE(y0 > y1);
    /* the plot area spans 360 - 62 - 14 = 284 px with 5% padding on each side */
    ASSERT_NEAR(x1 - x0, 284 / 1.1, 0.2);
    free(svg);
}

TEST(svg_empty_and_bad_input) {
    double x[1] = {NAN}, y[1] = {1};
    struct svg_series s = {"a", x, y, NULL, 1};
    struct svg_panel p = {"t", "x", "y", false, false, &s, 1};
    char *svg = render(&p, 1, "");
    ASSERT_TRUE(svg != NULL);
    ASSERT_TRUE(strstr(svg, "no data") != NULL);
    ASSERT_EQ(count(svg, "<polyline"), 0);
    free(svg);
    struct svg_series bad = {"a", NULL, y, NULL, 1};
    struct svg_panel pb = {"t", "x", "y", false, false, &bad, 1};
    ASSERT_TRUE(render(&pb, 1, "") == NULL);
    ASSERT_TRUE(render(&p, 0, "") == NULL);
    /* log axis skips x <= 0 */
    double lx[3] = {0, 1024, 4096}, ly[3] = {1, 2, 3};
    struct svg_series ls = {"a", lx, ly, NULL, 3};
    struct svg_panel lp = {"t", "x", "y", true, false, &ls, 1};
    svg = render(&lp, 1, "");
    ASSERT_TRUE(svg != NULL);
    ASSERT_EQ(count(svg, "<circle"), 2);
    free(svg);
}

TEST(svg_save_is_atomic) {
    char dir[] = "/tmp/nx_test_svg_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/a.svg", dir);
    double x[2] = {1, 2}, y[2] = {3, 4};
    struct svg_series s = {"a", x, y, NULL, 2};
    struct svg_panel p = {"t", "x", "y", false, false, &s, 1};
    ASSERT_OK(svg_save(path, "t", &p, 1, err, sizeof err));
    ASSERT_EQ(access(path, R_OK), 0);
    /* a failing draw leaves the earlier file and no temporary behind */
    struct svg_series bad = {"a", NULL, y, NULL, 2};
    struct svg_panel pb = {"t", "x", "y", false, false, &bad, 1};
    ASSERT_EQ(svg_save(path, "t", &pb, 1, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "a.svg") != NULL);
    ASSERT_EQ(access(path, R_OK), 0);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    ASSERT_TRUE(access(tmp, F_OK) != 0);
    /* a directory that does not exist: an error naming it */
    char nopath[300];
    snprintf(nopath, sizeof nopath, "%s/missing/b.svg", dir);
    ASSERT_EQ(svg_save(nopath, "t", &p, 1, err, sizeof err), NX_STATUS_IO);
    ASSERT_TRUE(strstr(err, "missing") != NULL);
    unlink(path);
    rmdir(dir);
}

TEST(progress_log_mode_prints_periodically) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    struct nx_progress p;
    nx_progress_start_at(&p, f, "configs", 100, false, 0.0);
    for (int i = 1; i <= 100; i++) nx_progress_update_at(&p, i, "x", i * 0.5); /* 50 s in all */
    nx_progress_finish_at(&p, 50.0);
    fclose(f);
    /* one line per 10 s (at 10, 20, 30, 40, 50 s) plus the final line, no carriage returns */
    ASSERT_EQ(count(buf, "\n"), 6);
    ASSERT_EQ(count(buf, "\r"), 0);
    /* at 10 s, 20 of 100 done: 40 s left */
    ASSERT_TRUE(strstr(buf, "20/100 configs, 0:10 elapsed, ETA 0:40 (x)") != NULL);
    ASSERT_TRUE(strstr(buf, "100/100 configs, 0:50 elapsed, ETA 0:00 (done)") != NULL);
    free(buf);
}

TEST(progress_tty_mode_rewrites_one_line) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    struct nx_progress p;
    nx_progress_start_at(&p, f, "runs", 4, true, 0.0);
    for (int i = 1; i <= 4; i++) nx_progress_update_at(&p, i, NULL, i * 1.0);
    nx_progress_finish_at(&p, 4.0);
    fclose(f);
    ASSERT_EQ(count(buf, "\r"), 5);
    ASSERT_EQ(count(buf, "\n"), 1);
    ASSERT_TRUE(strstr(buf, "\r2/4 runs, 0:02 elapsed, ETA 0:02") != NULL);
    free(buf);
    char t[32];
    nx_progress_fmt_time(t, sizeof t, 3725);
    ASSERT_STR_EQ(t, "1:02:05");
    nx_progress_fmt_time(t, sizeof t, NAN);
    ASSERT_STR_EQ(t, "?");
    /* silent with no stream */
    nx_progress_start_at(&p, NULL, "runs", 4, false, 0.0);
    nx_progress_update_at(&p, 1, NULL, 100.0);
    nx_progress_finish_at(&p, 100.0);
    ASSERT_EQ(p.lines, 0);
}

TEST_MAIN
