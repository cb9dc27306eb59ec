/*
 * ctimm-plot: pictures of training runs. Reads each run folder's summary.csv
 * (ctimm-train's and timm's columns: epoch,train_loss,eval_loss,eval_top1,
 * eval_top5,lr; a resumed run appends rows, and a later row for an epoch
 * replaces an earlier one) and draws three panels side by side: train and
 * eval loss, top-1 and top-5 accuracy, and the learning rate, each against
 * the epoch. One PNG per run (OUTPUT_DIR/summary.png) and, for several runs,
 * one comparison with the runs overlaid in distinct colours (-o). Every
 * summary.csv is read before any picture is written; a picture appears whole
 * or not at all.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/common.h"
#include "cli/plot_canvas.h"

static const char *const prog = "ctimm-plot";

static const char *const usage =
    "usage: ctimm-plot OUTPUT_DIR [OUTPUT_DIR...] [-o compare.png] [--labels A,B,...] [--width 1200] [--height 400]\n"
    "Draws loss, top-1/top-5 and learning-rate curves from each OUTPUT_DIR/summary.csv (as ctimm-train\n"
    "and timm's train.py write it) into OUTPUT_DIR/summary.png. With several folders (or with -o) it\n"
    "also draws one comparison image with the runs overlaid (default ./compare.png), the legend naming\n"
    "each run by the shortest end of its path that no other run's path shares (a/exp1 and b/exp1 stay\n"
    "whole, x/run and y/other are run and other), or by --labels, one comma-separated label per folder.\n";

enum { COL_TRAIN_LOSS, COL_EVAL_LOSS, COL_TOP1, COL_TOP5, COL_LR, NCOL };
static const char *const col_names[NCOL] = {"train_loss", "eval_loss", "eval_top1", "eval_top5", "lr"};

#define MAX_RUNS 10 /* one palette colour each */

/* One run's summary, one row per epoch in increasing order. A value that is
 * missing (column absent, empty, nan) is NAN. */
typedef struct Run {
    char dir[4096], name[4096];
    int n, cap;
    double *epoch, *v[NCOL];
} Run;

static void run_free(Run *r)
{
    free(r->epoch);
    for (int k = 0; k < NCOL; k++)
        free(r->v[k]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Splits line at commas in place; returns the field count (at most cap). */
static int split_fields(char *line, char **fields, int cap)
{
    int n = 0;
    for (char *p = line;; p++) {
        if (n < cap)
            fields[n] = p;
        n++;
        p += strcspn(p, ",");
        if (!*p)
            break;
        *p = 0;
    }
    return n;
}

/* The row for epoch e: an existing one (a resumed run's later row replaces
 * it) or a new one of NANs. */
static int row_for(Run *r, double e)
{
    for (int i = r->n && r->epoch[r->n - 1] < e ? r->n : 0; i < r->n; i++) /* a new epoch: no search */
        if (r->epoch[i] == e)
            return i;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->epoch = realloc(r->epoch, sizeof *r->epoch * (size_t)r->cap);
        CT_ASSERT(r->epoch != NULL);
        for (int k = 0; k < NCOL; k++) {
            r->v[k] = realloc(r->v[k], sizeof *r->v[k] * (size_t)r->cap);
            CT_ASSERT(r->v[k] != NULL);
        }
    }
    r->epoch[r->n] = e;
    for (int k = 0; k < NCOL; k++)
        r->v[k][r->n] = NAN;
    return r->n++;
}

/* Puts the rows in epoch order. */
static void sort_rows(Run *r)
{
    double *rows = malloc(sizeof *rows * (size_t)(NCOL + 1) * (size_t)(r->n ? r->n : 1));
    CT_ASSERT(rows != NULL);
    for (int i = 0; i < r->n; i++) {
        rows[i * (NCOL + 1)] = r->epoch[i];
        for (int k = 0; k < NCOL; k++)
            rows[i * (NCOL + 1) + 1 + k] = r->v[k][i];
    }
    qsort(rows, (size_t)r->n, sizeof *rows * (NCOL + 1), cmp_double); /* compares the epoch, the row's first */
    for (int i = 0; i < r->n; i++) {
        r->epoch[i] = rows[i * (NCOL + 1)];
        for (int k = 0; k < NCOL; k++)
            r->v[k][i] = rows[i * (NCOL + 1) + 1 + k];
    }
    free(rows);
}

#define MAX_FIELDS 64

/* Reads path (a summary.csv) into r. Every failure names the file and,
 * for a bad line, its number. */
static int read_summary(const char *path, Run *r, CtErr *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ct_fail(err, "cannot read %s: %s", path, strerror(errno));
    char *line = NULL, *fields[MAX_FIELDS];
    size_t cap = 0;
    int lineno = 0, ncols = 0, epoch_col = -1, col_of[NCOL], rc = -1;
    for (int k = 0; k < NCOL; k++)
        col_of[k] = -1;
    while (getline(&line, &cap, f) != -1) {
        lineno++;
        line[strcspn(line, "\r\n")] = 0;
        if (lineno == 1) {
            ncols = split_fields(line, fields, MAX_FIELDS);
            if (ncols > MAX_FIELDS) {
                ct_fail(err, "%s:1: %d columns in the header; at most %d are read", path, ncols, MAX_FIELDS);
                goto close_file;
            }
            for (int j = 0; j < ncols; j++) {
                if (!strcmp(fields[j], "epoch"))
                    epoch_col = j;
                for (int k = 0; k < NCOL; k++)
                    if (!strcmp(fields[j], col_names[k]))
                        col_of[k] = j;
            }
            int known = 0;
            for (int k = 0; k < NCOL; k++)
                known += col_of[k] >= 0;
            if (epoch_col < 0 || !known) {
                ct_fail(err, "%s:1: not a summary.csv header (expected epoch,train_loss,eval_loss,eval_top1,"
                        "eval_top5,lr)", path);
                goto close_file;
            }
            continue;
        }
        if (!line[0])
            continue;
        int n = split_fields(line, fields, MAX_FIELDS);
        if (n != ncols) {
            ct_fail(err, "%s:%d: %d fields, but the header has %d columns", path, lineno, n, ncols);
            goto close_file;
        }
        char *end;
        errno = 0;
        long e = strtol(fields[epoch_col], &end, 10);
        if (errno || end == fields[epoch_col] || *end || e < 0 || e > 100000000) {
            ct_fail(err, "%s:%d: epoch '%s' is not a whole number >= 0", path, lineno, fields[epoch_col]);
            goto close_file;
        }
        double vals[NCOL];
        for (int k = 0; k < NCOL; k++) {
            vals[k] = NAN;
            if (col_of[k] < 0 || !fields[col_of[k]][0])
                continue;
            vals[k] = strtod(fields[col_of[k]], &end);
            if (end == fields[col_of[k]] || *end) {
                ct_fail(err, "%s:%d: %s '%s' is not a number", path, lineno, col_names[k], fields[col_of[k]]);
                goto close_file;
            }
            if (!isfinite(vals[k])) /* nan or inf: a gap in the curve */
                vals[k] = NAN;
        }
        int i = row_for(r, (double)e);
        for (int k = 0; k < NCOL; k++)
            r->v[k][i] = vals[k];
    }
    if (ferror(f))
        ct_fail(err, "cannot read %s: %s", path, strerror(errno));
    else if (!lineno)
        ct_fail(err, "%s: empty (no header line)", path);
    else if (!r->n)
        ct_fail(err, "%s: no epochs in it, only the header", path);
    else
        rc = 0;
    sort_rows(r);
close_file:
    free(line);
    fclose(f);
    return rc;
}

/* path without empty and "." components, so that spellings of one folder
 * (a trailing slash, ./) give one label. A path that is only "." or that
 * climbs with ".." is resolved instead: its components would not name the
 * folders its label shows (".", "../exp1" beside "b/exp1"). */
static void clean_path(char *buf, size_t n, const char *path)
{
    size_t len = path[0] == '/' ? (size_t)snprintf(buf, n, "/") : (buf[0] = 0, 0);
    int components = 0, climbs = 0;
    for (const char *p = path + strspn(path, "/"); *p; p += strspn(p, "/")) {
        size_t k = strcspn(p, "/");
        if (!(k == 1 && p[0] == '.')) {
            if (len < n)
                len += (size_t)snprintf(buf + len, n - len, "%s%.*s", len && buf[len - 1] != '/' ? "/" : "",
                                        (int)k, p);
            components++;
            climbs |= k == 2 && !strncmp(p, "..", 2);
        }
        p += k;
    }
    char *real = components && !climbs ? NULL : realpath(path, NULL);
    if (real)
        snprintf(buf, n, "%s", real);
    free(real);
}

/* The end of a clean path made of its last k components; the whole path
 * when it has no more. */
static const char *path_tail(const char *path, int k)
{
    for (const char *s = path + strlen(path); s > path; s--)
        if (s[-1] == '/' && --k == 0)
            return s;
    return path;
}

/* Labels each run by the shortest tail of its path, in whole components,
 * that no other run's path has as its tail of that many components: one
 * rule for every run, so that two runs ending in one name both keep the
 * parents that set them apart. A folder given twice is labelled whole. */
static void label_by_path(Run *runs, int nrun)
{
    for (int i = 0; i < nrun; i++)
        clean_path(runs[i].name, sizeof runs[i].name, runs[i].dir);
    size_t start[MAX_RUNS];
    for (int i = 0; i < nrun; i++) {
        const char *tail;
        for (int k = 1; (tail = path_tail(runs[i].name, k)) != runs[i].name; k++) {
            int shared = 0;
            for (int j = 0; j < nrun; j++)
                shared |= j != i && !strcmp(path_tail(runs[j].name, k), tail);
            if (!shared)
                break;
        }
        start[i] = (size_t)(tail - runs[i].name);
    }
    for (int i = 0; i < nrun; i++)
        memmove(runs[i].name, runs[i].name + start[i], strlen(runs[i].name + start[i]) + 1);
}

/* Labels the runs by --labels: as many comma-separated labels as runs. */
static void label_as_given(Run *runs, int nrun, const char *labels)
{
    for (int i = 0; i < nrun; i++) {
        size_t k = strcspn(labels, ",");
        snprintf(runs[i].name, sizeof runs[i].name, "%.*s", (int)k, labels);
        labels += k + (labels[k] == ',');
    }
}

/* ---- drawing ---- */

static const Rgb palette[10] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},   {214, 39, 40},  {148, 103, 189},
                                {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};
static const Rgb black = {0, 0, 0}, ink = {40, 40, 40}, grid = {228, 228, 228}, frame_grey = {110, 110, 110},
                 white = {255, 255, 255}, legend_grey = {90, 90, 90};

#define LINE_W 2.0
#define DASH 7.0
#define MARKER_R 3.0
#define MARKER_MAX_POINTS 40 /* every point gets a marker up to this many epochs */
#define MAX_SERIES 64
#define MAX_TICKS 32

typedef struct Series {
    const double *x, *y;
    int n;
    Rgb colour;
    double dash; /* 0: solid */
} Series;

typedef struct LegendItem {
    const char *label;
    Rgb colour;
    double dash;
} LegendItem;

typedef struct Panel {
    const char *title;
    Series s[MAX_SERIES];
    int ns;
    LegendItem leg[MAX_SERIES];
    int nleg;
} Panel;

typedef struct Axis {
    double lo, hi, ticks[MAX_TICKS], step;
    int nticks;
} Axis;

/* The axis range around the data [lo, hi] with a margin, and its ticks.
 * integer: ticks at whole numbers only (epochs). The top fraction `free_top`
 * of the axis is kept clear of data (room for the legend). */
static void make_axis(Axis *a, double lo, double hi, int max_ticks, int integer, double free_top)
{
    double top = hi;
    if (hi > lo) {
        double pad = (hi - lo) * 0.05;
        lo -= pad, hi += pad;
    } else if (integer) {
        lo -= 0.5, hi += 0.5;
    } else {
        double pad = lo != 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad, hi += pad;
    }
    if (free_top > 0 && lo + (top - lo) / (1 - free_top) > hi)
        hi = lo + (top - lo) / (1 - free_top);
    a->lo = lo, a->hi = hi;
    if (max_ticks < 2)
        max_ticks = 2;
    a->nticks = nice_ticks(lo, hi, max_ticks, integer ? 1 : 0, a->ticks, MAX_TICKS, &a->step);
}

static double map(const Axis *a, double v, double p0, double p1)
{
    return p0 + (v - a->lo) / (a->hi - a->lo) * (p1 - p0);
}

/* How many of the panel's curve pixels (sampled along each segment) fall in r. */
static int covered(const double *px, const double *py, int n, Rect r)
{
    int hits = 0;
    for (int i = 0; i < n; i++) {
        int j = i + 1 < n && isfinite(px[i + 1]) && isfinite(py[i + 1]) ? i + 1 : i;
        if (!isfinite(px[i]) || !isfinite(py[i]))
            continue;
        double len = hypot(px[j] - px[i], py[j] - py[i]);
        int steps = (int)(len / 2) + 1;
        for (int s = 0; s <= steps; s++) {
            double x = px[i] + (px[j] - px[i]) * s / steps, y = py[i] + (py[j] - py[i]) * s / steps;
            hits += x >= r.x0 - 3 && x < r.x1 + 3 && y >= r.y0 - 3 && y < r.y1 + 3;
        }
    }
    return hits;
}

static void legend_sample(Canvas *c, int x, int y, const LegendItem *it, Rect clip)
{
    double xs[2] = {x, x + 22}, ys[2] = {y + 0.5, y + 0.5};
    canvas_polyline(c, xs, ys, 2, LINE_W, it->dash > 0 ? 5 : 0, it->colour, clip);
}

/* Where the legend goes: the corner of the plot where it hides the least
 * curve (upper right first, as matplotlib's 'best' on ties); *rows is its
 * entry count, 0 when it would take more than half the plot's width or
 * height (a small picture). Returns the curve samples it hides. */
static int place_legend(const Panel *p, Rect plot, double **px, double **py, Rect *box, int *rows)
{
    int th = canvas_text_height(), row = th + 3, wmax = 0, m = 6;
    for (int i = 0; i < p->nleg; i++) {
        int w = canvas_text_width(p->leg[i].label);
        wmax = w > wmax ? w : wmax;
    }
    int bw = 6 + 22 + 6 + wmax + 6, bh = 5 + row * p->nleg + 2;
    *rows = 0;
    if (!p->nleg || bw * 2 > plot.x1 - plot.x0 || bh * 2 > plot.y1 - plot.y0)
        return 0;
    *rows = p->nleg;
    Rect corners[4] = {{plot.x1 - m - bw, plot.y0 + m, plot.x1 - m, plot.y0 + m + bh},
                       {plot.x0 + m, plot.y0 + m, plot.x0 + m + bw, plot.y0 + m + bh},
                       {plot.x0 + m, plot.y1 - m - bh, plot.x0 + m + bw, plot.y1 - m},
                       {plot.x1 - m - bw, plot.y1 - m - bh, plot.x1 - m, plot.y1 - m}};
    int best_hits = -1;
    for (int k = 0; k < 4; k++) {
        int hits = 0;
        for (int s = 0; s < p->ns; s++)
            hits += covered(px[s], py[s], p->s[s].n, corners[k]);
        if (best_hits < 0 || hits < best_hits)
            *box = corners[k], best_hits = hits;
    }
    return best_hits;
}

static void draw_legend(Canvas *c, const Panel *p, Rect box, int rows)
{
    int th = canvas_text_height(), row = th + 3;
    char label[256];
    if (!rows)
        return;
    canvas_fill(c, box, white, 0.85);
    canvas_frame(c, box, (Rgb){190, 190, 190});
    for (int i = 0; i < rows; i++) {
        int y = box.y0 + 5 + i * row;
        legend_sample(c, box.x0 + 6, y + th / 2, &p->leg[i], box);
        canvas_fit_text(label, sizeof label, p->leg[i].label, box.x1 - box.x0 - 6 - 22 - 6 - 4);
        canvas_text(c, box.x0 + 6 + 22 + 6, y, label, ink);
    }
}

static int max_label_width(const Axis *a)
{
    int w = 0;
    char buf[64];
    for (int i = 0; i < a->nticks; i++) {
        tick_label(buf, sizeof buf, a->ticks[i], a->step);
        int lw = canvas_text_width(buf);
        w = lw > w ? lw : w;
    }
    return w;
}

/* The plot rectangle in a panel's area and its axes for the data ranges;
 * free_top as in make_axis. The left margin fits the y tick labels. */
static void layout(Rect area, double xlo, double xhi, double ylo, double yhi, double free_top, Rect *plot, Axis *ax,
                   Axis *ay)
{
    int th = canvas_text_height();
    *plot = (Rect){0, area.y0 + th + 12, area.x1 - 16, area.y1 - (5 + 4 + th + 6 + th + 8)};
    make_axis(ay, ylo, yhi, (plot->y1 - plot->y0) / 45 + 1, 0, free_top);
    plot->x0 = area.x0 + 14 + max_label_width(ay) + 9;
    /* epoch labels are short: room for one every ~50 px, more for wide labels */
    make_axis(ax, xlo, xhi, (plot->x1 - plot->x0) / 50 + 1, 1, 0);
    if (max_label_width(ax) + 12 > (plot->x1 - plot->x0) / (ax->nticks > 1 ? ax->nticks : 1))
        make_axis(ax, xlo, xhi, (plot->x1 - plot->x0) / (max_label_width(ax) + 16) + 1, 1, 0);
}

/* The series' points in pixels; a missing value stays NAN. */
static void map_points(const Panel *p, const Rect *plot, const Axis *ax, const Axis *ay, double **px, double **py)
{
    for (int s = 0; s < p->ns; s++)
        for (int i = 0; i < p->s[s].n; i++) {
            px[s][i] = map(ax, p->s[s].x[i], plot->x0, plot->x1);
            py[s][i] = isfinite(p->s[s].y[i]) ? map(ay, p->s[s].y[i], plot->y1, plot->y0) : NAN;
        }
}

/* One panel in area: title, axes with ticks and grid, the curves (with
 * markers when there are few points, and always on an isolated point), and
 * the legend. */
static void draw_panel(Canvas *c, Rect area, const Panel *p)
{
    int th = canvas_text_height();
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int s = 0; s < p->ns; s++)
        for (int i = 0; i < p->s[s].n; i++)
            if (isfinite(p->s[s].y[i])) {
                xlo = fmin(xlo, p->s[s].x[i]), xhi = fmax(xhi, p->s[s].x[i]);
                ylo = fmin(ylo, p->s[s].y[i]), yhi = fmax(yhi, p->s[s].y[i]);
            }
    int has_data = isfinite(xlo);
    if (!has_data)
        xlo = xhi = 0, ylo = yhi = 0;

    Rect plot;
    Axis ax, ay;
    layout(area, xlo, xhi, ylo, yhi, 0, &plot, &ax, &ay);
    double *px[MAX_SERIES], *py[MAX_SERIES];
    for (int s = 0; s < p->ns; s++) {
        px[s] = malloc(sizeof(double) * (size_t)(p->s[s].n ? p->s[s].n : 1));
        py[s] = malloc(sizeof(double) * (size_t)(p->s[s].n ? p->s[s].n : 1));
        CT_ASSERT(px[s] && py[s]);
    }
    map_points(p, &plot, &ax, &ay, px, py);
    Rect box = {0};
    int rows = 0;
    /* the legend would hide a curve: raise the y axis to make room above the data */
    if (has_data && place_legend(p, plot, px, py, &box, &rows) > 0 && rows) {
        double need = (double)(box.y1 - box.y0 + 6 + 4) / (plot.y1 - plot.y0);
        if (need < 0.45) {
            layout(area, xlo, xhi, ylo, yhi, need, &plot, &ax, &ay);
            map_points(p, &plot, &ax, &ay, px, py);
        }
    }
    if (has_data)
        place_legend(p, plot, px, py, &box, &rows);

    char buf[512];
    canvas_fit_text(buf, sizeof buf, p->title, area.x1 - area.x0 - 8);
    int tw = canvas_text_width(buf), tx = (plot.x0 + plot.x1 - tw) / 2;
    if (tx + tw > area.x1 - 4)
        tx = area.x1 - 4 - tw;
    if (tx < area.x0 + 4)
        tx = area.x0 + 4;
    canvas_text(c, tx, area.y0 + 6, buf, black);

    canvas_fill(c, plot, white, 1);
    for (int i = 0; i < ay.nticks; i++) {
        int y = (int)floor(map(&ay, ay.ticks[i], plot.y1, plot.y0));
        canvas_fill(c, (Rect){plot.x0, y, plot.x1, y + 1}, grid, 1);
        canvas_fill(c, (Rect){plot.x0 - 5, y, plot.x0, y + 1}, frame_grey, 1);
        tick_label(buf, sizeof buf, ay.ticks[i], ay.step);
        canvas_text(c, plot.x0 - 9 - canvas_text_width(buf), y - th / 2, buf, ink);
    }
    for (int i = 0; i < ax.nticks; i++) {
        int x = (int)floor(map(&ax, ax.ticks[i], plot.x0, plot.x1));
        canvas_fill(c, (Rect){x, plot.y0, x + 1, plot.y1}, grid, 1);
        canvas_fill(c, (Rect){x, plot.y1, x + 1, plot.y1 + 5}, frame_grey, 1);
        tick_label(buf, sizeof buf, ax.ticks[i], ax.step);
        canvas_text(c, x + 1 - canvas_text_width(buf) / 2, plot.y1 + 5 + 4, buf, ink);
    }
    canvas_frame(c, (Rect){plot.x0 - 1, plot.y0 - 1, plot.x1 + 1, plot.y1 + 1}, frame_grey);
    const char *xl = "epoch";
    canvas_text(c, (plot.x0 + plot.x1 - canvas_text_width(xl)) / 2, plot.y1 + 5 + 4 + th + 6, xl, ink);
    if (!has_data) {
        const char *none = "no data";
        canvas_text(c, (plot.x0 + plot.x1 - canvas_text_width(none)) / 2, (plot.y0 + plot.y1 - th) / 2, none,
                    frame_grey);
    }
    for (int s = 0; s < p->ns && has_data; s++) {
        const Series *se = &p->s[s];
        int finite = 0;
        for (int i = 0; i < se->n; i++)
            finite += isfinite(py[s][i]);
        canvas_polyline(c, px[s], py[s], se->n, LINE_W, se->dash, se->colour, plot);
        for (int i = 0; i < se->n; i++) {
            int alone = (i == 0 || !isfinite(py[s][i - 1])) && (i + 1 == se->n || !isfinite(py[s][i + 1]));
            if (finite <= MARKER_MAX_POINTS || alone)
                canvas_disc(c, px[s][i], py[s][i], MARKER_R, se->colour, plot);
        }
    }
    if (has_data)
        draw_legend(c, p, box, rows);
    for (int s = 0; s < p->ns; s++) {
        free(px[s]);
        free(py[s]);
    }
}

/* The figure: a title line and the three panels side by side. */
static int draw_figure(Canvas *c, const char *title, const Panel panels[3], const char *path, CtErr *err)
{
    int th = canvas_text_height(), top = th + 12;
    char buf[512];
    canvas_fit_text(buf, sizeof buf, title, c->w - 16);
    canvas_text(c, (c->w - canvas_text_width(buf)) / 2, 6, buf, black);
    for (int k = 0; k < 3; k++)
        draw_panel(c, (Rect){c->w * k / 3, top, c->w * (k + 1) / 3, c->h}, &panels[k]);
    return canvas_write_png(c, path, err);
}

static void add_series(Panel *p, const Run *r, int col, Rgb colour, double dash)
{
    CT_ASSERT(p->ns < MAX_SERIES);
    p->s[p->ns++] = (Series){.x = r->epoch, .y = r->v[col], .n = r->n, .colour = colour, .dash = dash};
}

static void add_legend(Panel *p, const char *label, Rgb colour, double dash)
{
    CT_ASSERT(p->nleg < MAX_SERIES);
    p->leg[p->nleg++] = (LegendItem){.label = label, .colour = colour, .dash = dash};
}

/* A run's own picture, OUTPUT_DIR/summary.png. */
static int plot_run(const Run *r, int w, int h, CtErr *err)
{
    Panel *panels = calloc(3, sizeof *panels);
    CT_ASSERT(panels != NULL);
    panels[0].title = "loss";
    panels[1].title = "accuracy (%)";
    panels[2].title = "learning rate";
    static const struct {
        int panel, col, colour;
    } map_cols[NCOL] = {{0, COL_TRAIN_LOSS, 0}, {0, COL_EVAL_LOSS, 1}, {1, COL_TOP1, 0}, {1, COL_TOP5, 1},
                        {2, COL_LR, 2}};
    for (int k = 0; k < NCOL; k++) {
        Panel *p = &panels[map_cols[k].panel];
        add_series(p, r, map_cols[k].col, palette[map_cols[k].colour], 0);
        add_legend(p, col_names[map_cols[k].col], palette[map_cols[k].colour], 0);
    }
    char title[4400], path[4200];
    snprintf(title, sizeof title, "%s: %d epoch%s (%g to %g)", r->name, r->n, r->n == 1 ? "" : "s", r->epoch[0],
             r->epoch[r->n - 1]);
    snprintf(path, sizeof path, "%s/summary.png", r->dir);
    Canvas c;
    int rc = canvas_init(&c, w, h, white, err);
    if (!rc)
        rc = draw_figure(&c, title, panels, path, err);
    canvas_free(&c);
    free(panels);
    return rc;
}

/* All runs overlaid: a colour per run; eval loss and top-5 dashed. */
static int plot_compare(const Run *runs, int nrun, const char *path, int w, int h, CtErr *err)
{
    Panel *panels = calloc(3, sizeof *panels);
    CT_ASSERT(panels != NULL);
    panels[0].title = "loss";
    panels[1].title = "accuracy (%)";
    panels[2].title = "learning rate";
    for (int i = 0; i < nrun; i++) {
        Rgb k = palette[i % 10];
        add_series(&panels[0], &runs[i], COL_TRAIN_LOSS, k, 0);
        add_series(&panels[0], &runs[i], COL_EVAL_LOSS, k, DASH);
        add_series(&panels[1], &runs[i], COL_TOP1, k, 0);
        add_series(&panels[1], &runs[i], COL_TOP5, k, DASH);
        add_series(&panels[2], &runs[i], COL_LR, k, 0);
        for (int p = 0; p < 3; p++)
            add_legend(&panels[p], runs[i].name, k, 0);
    }
    add_legend(&panels[0], "train_loss", legend_grey, 0);
    add_legend(&panels[0], "eval_loss", legend_grey, DASH);
    add_legend(&panels[1], "eval_top1", legend_grey, 0);
    add_legend(&panels[1], "eval_top5", legend_grey, DASH);
    char title[512];
    snprintf(title, sizeof title, "%d runs compared", nrun);
    Canvas c;
    int rc = canvas_init(&c, w, h, white, err);
    if (!rc)
        rc = draw_figure(&c, title, panels, path, err);
    canvas_free(&c);
    free(panels);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {{"output", 1, 0, 'o'}, {"width", 1, 0, 'W'}, {"height", 1, 0, 'H'},
                                          {"labels", 1, 0, 'L'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *output = NULL, *labels = NULL;
    int width = 1200, height = 400, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:h", longs, NULL)) != -1) {
        switch (c) {
        case 'o': output = optarg; break;
        case 'L': labels = optarg; break;
        case 'W':
            if (cli_int(prog, "--width", optarg, 450, 16384, &width))
                return 2;
            break;
        case 'H':
            if (cli_int(prog, "--height", optarg, 200, 16384, &height))
                return 2;
            break;
        case 'h': fputs(usage, stdout); return 0;
        case ':': fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[optind - 1]); return 2;
        default: fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind - 1]); return 2;
        }
    }
    int nrun = argc - optind;
    if (nrun < 1) {
        fprintf(stderr, "%s: give at least one OUTPUT_DIR (a folder with summary.csv; see --help)\n", prog);
        return 2;
    }
    if (nrun > MAX_RUNS) {
        fprintf(stderr, "%s: %d folders; at most %d fit in one comparison (one colour each)\n", prog, nrun, MAX_RUNS);
        return 2;
    }
    if (labels) {
        int nlabel = 1;
        for (const char *p = labels; *p; p++)
            nlabel += *p == ',';
        if (nlabel != nrun) {
            fprintf(stderr, "%s: --labels gives %d label%s for %d run%s\n", prog, nlabel, nlabel == 1 ? "" : "s",
                    nrun, nrun == 1 ? "" : "s");
            return 2;
        }
    }
    Run *runs = calloc((size_t)nrun, sizeof *runs);
    CT_ASSERT(runs != NULL);
    CtErr err;
    int rc = 1;
    for (int i = 0; i < nrun; i++) {
        Run *r = &runs[i];
        snprintf(r->dir, sizeof r->dir, "%s", argv[optind + i]);
        char path[4200];
        snprintf(path, sizeof path, "%s/summary.csv", r->dir);
        if (read_summary(path, r, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            goto free_runs;
        }
    }
    if (labels)
        label_as_given(runs, nrun, labels);
    else
        label_by_path(runs, nrun);
    for (int i = 0; i < nrun; i++) {
        if (plot_run(&runs[i], width, height, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            goto free_runs;
        }
        printf("%s/summary.png: %d epochs\n", runs[i].dir, runs[i].n);
    }
    if (nrun > 1 || output) {
        if (!output)
            output = "compare.png";
        if (plot_compare(runs, nrun, output, width, height, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            goto free_runs;
        }
        printf("%s: %d runs:", output, nrun);
        for (int i = 0; i < nrun; i++)
            printf("%s %s", i ? "," : "", runs[i].name);
        printf("\n");
    }
    rc = 0;
free_runs:
    for (int i = 0; i < nrun; i++)
        run_free(&runs[i]);
    free(runs);
    return rc;
}
