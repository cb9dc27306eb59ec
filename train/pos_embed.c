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
