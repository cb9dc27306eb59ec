/*
 * A small RGB raster for ctimm-plot: filled rectangles, antialiased thick
 * polylines (solid or dashed) and round markers clipped to a rectangle, text
 * in the embedded DejaVu Sans Mono bitmap font (cli/font_bitmap.h), "nice"
 * axis ticks (1, 2, 5 x 10^k) and PNG output through libpng, written under a
 * temporary name and renamed into place. Coordinates are pixels, origin top
 * left, x right, y down; a pixel's centre is at (x + 0.5, y + 0.5).
 */
#ifndef CTIMM_CLI_PLOT_CANVAS_H
#define CTIMM_CLI_PLOT_CANVAS_H

#include "ir/status.h"

typedef struct Rgb {
    unsigned char r, g, b;
} Rgb;

/* A clip rectangle: x0 <= x < x1, y0 <= y < y1. */
typedef struct Rect {
    int x0, y0, x1, y1;
} Rect;

typedef struct Canvas {
    int w, h;
    unsigned char *px; /* [h][w][3] */
    float *mask;       /* [h][w] coverage scratch for one polyline */
} Canvas;

int canvas_init(Canvas *c, int w, int h, Rgb bg, CtErr *err);
void canvas_free(Canvas *c);

/* Fills r (clipped to the canvas), blending colour at opacity alpha in [0, 1]. */
void canvas_fill(Canvas *c, Rect r, Rgb colour, double alpha);
/* A one-pixel rectangle outline. */
void canvas_frame(Canvas *c, Rect r, Rgb colour);

/* The polyline through the n points (x[i], y[i]), `width` pixels wide with
 * round joins, clipped to clip. A non-finite point breaks the line. dash > 0
 * draws dashes of that length with gaps of 0.7 dash along the line. Overlaps
 * within the line do not darken it. */
void canvas_polyline(Canvas *c, const double *x, const double *y, int n, double width, double dash, Rgb colour,
                     Rect clip);
/* A filled disc of radius r at (x, y), clipped. */
void canvas_disc(Canvas *c, double x, double y, double r, Rgb colour, Rect clip);

/* Text width in pixels (one cell a character). */
int canvas_text_width(const char *s);
/* Draws s with its top-left corner at (x, y) and returns the width drawn;
 * characters outside 32..126 draw as '?'. */
int canvas_text(Canvas *c, int x, int y, const char *s, Rgb colour);
/* Copies s into buf, shortened with a trailing "..." to at most max_px wide. */
void canvas_fit_text(char *buf, int n, const char *s, int max_px);
/* The text cell height. */
int canvas_text_height(void);

/* Ticks for the range [lo, hi]: multiples of step = {1, 2, 5} x 10^k, the
 * smallest such step giving at most max_ticks ticks in the range (at least
 * min_step). Writes up to `cap` values and returns their count and *step. */
int nice_ticks(double lo, double hi, int max_ticks, double min_step, double *ticks, int cap, double *step);
/* A tick label: as many decimals as the step needs, or exponent form for
 * very small or large values. */
void tick_label(char *buf, int n, double v, double step);

/* Writes the canvas as an 8-bit RGB PNG to path, via a temporary file in the
 * same folder renamed into place: on failure no file is left behind. */
int canvas_write_png(const Canvas *c, const char *path, CtErr *err);

#endif
