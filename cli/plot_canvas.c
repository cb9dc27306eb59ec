#include "cli/plot_canvas.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/font_bitmap.h"

int canvas_init(Canvas *c, int w, int h, Rgb bg, CtErr *err)
{
    *c = (Canvas){.w = w, .h = h};
    c->px = malloc((size_t)w * h * 3);
    c->mask = calloc((size_t)w * h, sizeof *c->mask);
    if (!c->px || !c->mask) {
        canvas_free(c);
        return ct_fail(err, "no memory for a %dx%d image", w, h);
    }
    for (size_t i = 0; i < (size_t)w * h; i++)
        memcpy(c->px + 3 * i, &bg, 3);
    return 0;
}

void canvas_free(Canvas *c)
{
    free(c->px);
    free(c->mask);
    *c = (Canvas){0};
}

static Rect clip_rect(const Canvas *c, Rect r)
{
    if (r.x0 < 0)
        r.x0 = 0;
    if (r.y0 < 0)
        r.y0 = 0;
    if (r.x1 > c->w)
        r.x1 = c->w;
    if (r.y1 > c->h)
        r.y1 = c->h;
    return r;
}

static void blend(Canvas *c, int x, int y, Rgb k, double a)
{
    unsigned char *p = c->px + 3 * ((size_t)y * c->w + x);
    p[0] = (unsigned char)lround(p[0] + (k.r - p[0]) * a);
    p[1] = (unsigned char)lround(p[1] + (k.g - p[1]) * a);
    p[2] = (unsigned char)lround(p[2] + (k.b - p[2]) * a);
}

void canvas_fill(Canvas *c, Rect r, Rgb colour, double alpha)
{
    r = clip_rect(c, r);
    for (int y = r.y0; y < r.y1; y++)
        for (int x = r.x0; x < r.x1; x++)
            blend(c, x, y, colour, alpha);
}

void canvas_frame(Canvas *c, Rect r, Rgb colour)
{
    canvas_fill(c, (Rect){r.x0, r.y0, r.x1, r.y0 + 1}, colour, 1);
    canvas_fill(c, (Rect){r.x0, r.y1 - 1, r.x1, r.y1}, colour, 1);
    canvas_fill(c, (Rect){r.x0, r.y0, r.x0 + 1, r.y1}, colour, 1);
    canvas_fill(c, (Rect){r.x1 - 1, r.y0, r.x1, r.y1}, colour, 1);
}

/* Coverage of the capsule (segment a-b, radius rad) over its pixels, kept
 * as the maximum in the mask: a pixel's coverage falls linearly over the
 * one pixel around the edge. */
static void capsule(Canvas *c, double ax, double ay, double bx, double by, double rad, Rect clip)
{
    Rect r = {(int)floor(fmin(ax, bx) - rad - 1), (int)floor(fmin(ay, by) - rad - 1),
              (int)ceil(fmax(ax, bx) + rad + 1), (int)ceil(fmax(ay, by) + rad + 1)};
    if (r.x0 < clip.x0)
        r.x0 = clip.x0;
    if (r.y0 < clip.y0)
        r.y0 = clip.y0;
    if (r.x1 > clip.x1)
        r.x1 = clip.x1;
    if (r.y1 > clip.y1)
        r.y1 = clip.y1;
    double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
    for (int y = r.y0; y < r.y1; y++)
        for (int x = r.x0; x < r.x1; x++) {
            double px = x + 0.5 - ax, py = y + 0.5 - ay;
            double t = len2 > 0 ? (px * dx + py * dy) / len2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double ex = px - t * dx, ey = py - t * dy;
            double cov = rad + 0.5 - sqrt(ex * ex + ey * ey);
            if (cov <= 0)
                continue;
            float *m = c->mask + (size_t)y * c->w + x;
            if (cov > *m)
                *m = (float)(cov > 1 ? 1 : cov);
        }
}

/* Blends colour through the mask over clip and clears the mask. */
static void flush_mask(Canvas *c, Rgb colour, Rect clip)
{
    for (int y = clip.y0; y < clip.y1; y++)
        for (int x = clip.x0; x < clip.x1; x++) {
            float *m = c->mask + (size_t)y * c->w + x;
            if (*m > 0) {
                blend(c, x, y, colour, *m);
                *m = 0;
            }
        }
}

/* Dashes along one segment; *run is the line's length before it, so the
 * dash pattern continues across segments: on over [k period, k period + dash). */
static void dashed_segment(Canvas *c, double ax, double ay, double bx, double by, double rad, double dash,
                           double *run, Rect clip)
{
    double period = dash * 1.7, len = hypot(bx - ax, by - ay), d0 = *run;
    *run += len;
    if (len == 0)
        return;
    for (double k = floor(d0 / period); k * period < d0 + len; k++) {
        double s = fmax(k * period, d0) - d0, e = fmin(k * period + dash, d0 + len) - d0;
        if (e > s)
            capsule(c, ax + (bx - ax) * s / len, ay + (by - ay) * s / len, ax + (bx - ax) * e / len,
                    ay + (by - ay) * e / len, rad, clip);
    }
}

void canvas_polyline(Canvas *c, const double *x, const double *y, int n, double width, double dash, Rgb colour,
                     Rect clip)
{
    clip = clip_rect(c, clip);
    double run = 0;
    for (int i = 0; i + 1 < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i]) || !isfinite(x[i + 1]) || !isfinite(y[i + 1])) {
            run = 0;
            continue;
        }
        if (dash > 0)
            dashed_segment(c, x[i], y[i], x[i + 1], y[i + 1], width / 2, dash, &run, clip);
        else
            capsule(c, x[i], y[i], x[i + 1], y[i + 1], width / 2, clip);
    }
    flush_mask(c, colour, clip);
}

void canvas_disc(Canvas *c, double x, double y, double r, Rgb colour, Rect clip)
{
    if (!isfinite(x) || !isfinite(y))
        return;
    clip = clip_rect(c, clip);
    capsule(c, x, y, x, y, r, clip);
    flush_mask(c, colour, clip);
}

int canvas_text_height(void)
{
    return FONT_CELL_H;
}

int canvas_text_width(const char *s)
{
    return (int)strlen(s) * FONT_CELL_W;
}

int canvas_text(Canvas *c, int x, int y, const char *s, Rgb colour)
{
    int x0 = x;
    for (; *s; s++, x += FONT_CELL_W) {
        int ch = (unsigned char)*s;
        if (ch < FONT_FIRST || ch > FONT_LAST)
            ch = '?';
        const unsigned char *g = font_bitmap[ch - FONT_FIRST];
        for (int row = 0; row < FONT_CELL_H; row++)
            for (int col = 0; col < 8; col++)
                if (g[row] & (0x80 >> col) && x + col >= 0 && x + col < c->w && y + row >= 0 && y + row < c->h)
                    blend(c, x + col, y + row, colour, 1);
    }
    return x - x0;
}

void canvas_fit_text(char *buf, int n, const char *s, int max_px)
{
    int max_chars = max_px / FONT_CELL_W;
    if (max_chars >= n)
        max_chars = n - 1;
    if (max_chars < 0)
        max_chars = 0;
    if ((int)strlen(s) <= max_chars) {
        snprintf(buf, (size_t)n, "%s", s);
        return;
    }
    if (max_chars < 4) {
        snprintf(buf, (size_t)n, "%.*s", max_chars, s);
        return;
    }
    snprintf(buf, (size_t)n, "%.*s...", max_chars - 3, s);
}

/* How many multiples of s lie in [lo, hi]. */
static double tick_count(double lo, double hi, double s)
{
    return floor(hi / s + 1e-9) - ceil(lo / s - 1e-9) + 1;
}

int nice_ticks(double lo, double hi, int max_ticks, double min_step, double *ticks, int cap, double *step)
{
    CT_ASSERT(hi > lo && max_ticks >= 2);
    static const double mult[] = {1, 2, 5};
    /* from a step surely too small, up the 1, 2, 5 ladder to the first that fits */
    double mag = pow(10, floor(log10((hi - lo) / max_ticks)) - 1), s = mag;
    for (int k = 0; s < min_step || tick_count(lo, hi, s) > max_ticks; k++) {
        if (k == 3)
            k = 0, mag *= 10;
        s = mult[k] * mag;
    }
    *step = s;
    int n = 0;
    for (double k = ceil(lo / s - 1e-9); k <= floor(hi / s + 1e-9) && n < cap; k++)
        ticks[n++] = fabs(k * s) < s * 1e-9 ? 0 : k * s;
    return n;
}

void tick_label(char *buf, int n, double v, double step)
{
    int dec = (int)ceil(-log10(step) - 1e-9);
    if (dec < 0)
        dec = 0;
    double big = fabs(v);
    if (dec > 4 || big >= 1e6) {
        /* significant digits: from the value's magnitude down to the step's */
        int digits = big > 0 ? (int)floor(log10(big) + 1e-9) - (int)floor(log10(step) + 1e-9) + 1 : 1;
        if (digits < 1)
            digits = 1;
        snprintf(buf, (size_t)n, "%.*g", digits, v);
        return;
    }
    snprintf(buf, (size_t)n, "%.*f", dec, v);
}

/* Writes the rows through libpng; its errors come back by longjmp. */
static int write_rows(const Canvas *c, FILE *f, const char *path, CtErr *err)
{
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return ct_fail(err, "cannot write %s: libpng could not start", path);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return ct_fail(err, "cannot write %s: libpng failed", path);
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)c->w, (png_uint_32)c->h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < c->h; y++)
        png_write_row(png, c->px + (size_t)y * c->w * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return 0;
}

int canvas_write_png(const Canvas *c, const char *path, CtErr *err)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path) >= (int)sizeof tmp)
        return ct_fail(err, "%s: path too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return ct_fail(err, "cannot write %s: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return ct_fail(err, "cannot write %s: %s", path, strerror(e));
    }
    /* mkstemp makes the file 0600; an image is for everyone to read */
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um);
    int rc = write_rows(c, f, path, err);
    if (fflush(f) || ferror(f)) {
        if (!rc)
            rc = ct_fail(err, "cannot write %s: %s", tmp, strerror(errno));
    }
    if (fclose(f) && !rc)
        rc = ct_fail(err, "cannot write %s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path))
        rc = ct_fail(err, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc) {
        unlink(tmp);
        return rc;
    }
    return 0;
}
