/*
 * torch's antialiased bicubic resize (aten's _upsample_bicubic2d_aa, which
 * is PIL's resampling): separable, each output pixel a normalised sum of
 * Keys' cubic with a = -0.5 (not the -0.75 of torch's plain bicubic) over
 * the input pixels its footprint covers, a footprint stretched by the scale
 * when shrinking. Computed in double: torch's float32 result is within
 * 2e-6 of it (tests/test_pretrained.c holds torch's numbers).
 */
#include "train/pos_embed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/status.h"

static double keys_cubic(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1)
        return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2)
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0;
}

/* w[o * in + i]: output o's weight of input i along one axis of in -> out
 * (align_corners False: the scale is in / out, pixel centres at +0.5). */
static double *axis_weights(int in, int out)
{
    double *w = calloc((size_t)in * (size_t)out, sizeof *w);
    CT_ASSERT(w != NULL);
    double scale = (double)in / out, support = scale >= 1 ? 2 * scale : 2, inv = scale >= 1 ? 1 / scale : 1;
    for (int o = 0; o < out; o++) {
        double centre = scale * (o + 0.5), total = 0;
        int lo = (int)(centre - support + 0.5), hi = (int)(centre + support + 0.5);
        lo = lo < 0 ? 0 : lo;
        hi = hi > in ? in : hi;
        for (int i = lo; i < hi; i++)
            total += w[(size_t)o * in + i] = keys_cubic((i - centre + 0.5) * inv);
        for (int i = lo; i < hi && total != 0; i++)
            w[(size_t)o * in + i] /= total;
    }
    return w;
}

void pos_embed_resample(const float *src, int prefix, int old_h, int old_w, int new_h, int new_w, int dim,
                        float *dst)
{
    memcpy(dst, src, sizeof *dst * (size_t)prefix * (size_t)dim);
    const float *grid = src + (size_t)prefix * dim;
    double *wh = axis_weights(old_h, new_h), *ww = axis_weights(old_w, new_w);
    double *rows = calloc((size_t)old_h * new_w * dim, sizeof *rows); /* width resized first */
    CT_ASSERT(rows != NULL);
    for (int y = 0; y < old_h; y++)
        for (int x = 0; x < new_w; x++)
            for (int i = 0; i < old_w; i++) {
                double w = ww[(size_t)x * old_w + i];
                for (int c = 0; w != 0 && c < dim; c++)
                    rows[((size_t)y * new_w + x) * dim + c] += w * grid[((size_t)y * old_w + i) * dim + c];
            }
    float *out = dst + (size_t)prefix * dim;
    for (int y = 0; y < new_h; y++)
        for (int x = 0; x < new_w; x++)
            for (int c = 0; c < dim; c++) {
                double v = 0;
                for (int j = 0; j < old_h; j++)
                    v += wh[(size_t)y * old_h + j] * rows[((size_t)j * new_w + x) * dim + c];
                out[((size_t)y * new_w + x) * dim + c] = (float)v;
            }
    free(rows);
    free(wh);
    free(ww);
}

/* resize_rel_pos_bias_table's _calc: the src offsets -(src/2)..src/2
 * placed on a geometric scale (ratio q found by bisection) that reaches
 * dst/2, in ascending order. */
static void geometric_offsets(int src, int dst, double *p)
{
    int half = src / 2;
    double left = 1.01, right = 1.5, q = 0;
    while (right - left > 1e-6) {
        q = (left + right) / 2;
        double gp = (1 - pow(q, half)) / (1 - q);
        if (gp > dst / 2)
            right = q;
        else
            left = q;
    }
    double cur = 1;
    p[half] = 0;
    for (int i = 0; i < half; i++) {
        p[half + 1 + i] = cur;
        p[half - 1 - i] = -cur;
        cur += pow(q, i + 1);
    }
}

/* RegularGridInterpolator's corners of x among the n ascending p: left and
 * right indices and the distances to them (both 1 where they coincide). */
static void bracket(const double *p, int n, double x, int *l, int *r, double *dl, double *dr)
{
    int right = 0;
    while (right < n && p[right] < x) /* torch.bucketize: the first p >= x */
        right++;
    right = right < n ? right : n - 1;
    *r = right;
    *l = right - 1 < 0 ? 0 : right - 1;
    *dl = fmax(x - p[*l], 0);
    *dr = fmax(p[*r] - x, 0);
    if (*dl == 0 && *dr == 0)
        *dl = *dr = 1;
}

void rel_pos_table_resize(const float *src, int src_h, int src_w, int heads, int flat, int extra, int dst_h, int dst_w,
                          float *dst)
{
    double *py = malloc(sizeof *py * (size_t)(src_h + src_w));
    CT_ASSERT(py != NULL);
    double *px = py + src_h;
    geometric_offsets(src_h, dst_h, py);
    geometric_offsets(src_w, dst_w, px);
    for (int y = 0; y < dst_h; y++) {
        int yl, yr, xl, xr;
        double dyl, dyr, dxl, dxr;
        bracket(py, src_h, (double)(y - dst_h / 2), &yl, &yr, &dyl, &dyr);
        for (int x = 0; x < dst_w; x++) {
            bracket(px, src_w, (double)(x - dst_w / 2), &xl, &xr, &dxl, &dxr);
            for (int h = 0; h < heads; h++) {
#define AT(i, j) (double)src[flat ? ((i) * src_w + (j)) * heads + h : (h * src_h + (i)) * src_w + (j)]
                double v = AT(yl, xl) * dyr * dxr + AT(yl, xr) * dyr * dxl + AT(yr, xl) * dyl * dxr +
                           AT(yr, xr) * dyl * dxl;
#undef AT
                dst[flat ? (y * dst_w + x) * heads + h : (h * dst_h + y) * dst_w + x] =
                    (float)(v / ((dyl + dyr) * (dxl + dxr)));
            }
        }
    }
    if (flat)
        memcpy(dst + (size_t)dst_h * dst_w * heads, src + (size_t)src_h * src_w * heads,
               sizeof *dst * (size_t)extra * heads);
    free(py);
}
