/*
 * The two Gaussian blurs timm's train transform can apply:
 *
 * PIL 9.4's ImageFilter.GaussianBlur(radius) (the '3a' policies'
 * GaussianBlur ops): three passes of an extended box blur along rows, then
 * three along columns, each pass in 8.24 fixed point rounded to bytes, the
 * box radius from Gwosdek et al.'s formula evaluated in float as PIL does.
 *
 * torchvision 0.14's transforms.GaussianBlur on a PIL image
 * (--gaussian-blur-prob): the image as float32, reflect-padded, convolved
 * with a k x k float32 kernel (outer product of the 1-D one) and rounded
 * half to even. torch's convolution sums in an order of its own, so a
 * result within a rounding step of .5 can land one byte away.
 */
#include "runtime/data/augment.h"

#include <math.h>
#include <string.h>

/* One box-blur pass over n values at `stride` apart, read from in (a copy)
 * and written to out: the window [x - r, x + r] at weight ww, the two
 * values just outside it at fw (the fraction), edges clamped. */
static void box_line(const uint8_t *in, uint8_t *out, int n, size_t stride, int r, uint32_t ww, uint32_t fw)
{
#define AT(i) ((uint32_t)in[(size_t)((i) < 0 ? 0 : (i) >= n ? n - 1 : (i)) * stride])
    uint32_t acc = 0;
    for (int i = -r - 1; i < r; i++)
        acc += AT(i);
    for (int x = 0; x < n; x++) {
        acc += AT(x + r) - AT(x - r - 1);
        uint32_t bulk = acc * ww + (AT(x - r - 1) + AT(x + r + 1)) * fw;
        out[(size_t)x * stride] = (uint8_t)((bulk + (1u << 23)) >> 24);
    }
#undef AT
}

/* ImagingHorizontalBoxBlur on each channel of each row (rows) or column. */
static void box_pass(CtImage *img, CtImage *tmp, float radius, int rows)
{
    int r = (int)radius;
    uint32_t ww = (uint32_t)((float)(1 << 24) / (radius * 2 + 1));
    uint32_t fw = ((1u << 24) - (uint32_t)(r * 2 + 1) * ww) / 2;
    size_t bytes = (size_t)img->w * img->h * 3;
    memcpy(tmp->px, img->px, bytes);
    int lines = rows ? img->h : img->w, n = rows ? img->w : img->h;
    size_t stride = rows ? 3 : (size_t)img->w * 3, step = rows ? (size_t)img->w * 3 : 3;
    for (int l = 0; l < lines; l++)
        for (int c = 0; c < 3; c++)
            box_line(tmp->px + l * step + c, img->px + l * step + c, n, stride, r, ww, fw);
}

void pil_gaussian_blur(CtImage *img, CtImage *tmp, float radius)
{
    /* ImagingGaussianBlur(radius, passes 3): float arithmetic as PIL's */
    float sigma2 = radius * radius / 3;
    float L = (float)sqrt(12.0 * sigma2 + 1.0);
    float l = (float)floor((L - 1.0) / 2.0);
    float a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);
    a /= 6 * (sigma2 - (l + 1) * (l + 1));
    float box = l + a;
    for (int p = 0; p < 3; p++)
        box_pass(img, tmp, box, 1);
    for (int p = 0; p < 3; p++)
        box_pass(img, tmp, box, 0);
}

/* torch's 'reflect' padding: -1 -> 1, n -> n - 2. */
static int reflect(int i, int n) { return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i; }

/* One channel of a w x h image of bpp-byte pixels, src into dst, by the
 * separable kernel k1 of k taps taken as the 2-D product, in double. */
static void blur_channel(uint8_t *dst, const uint8_t *src, int w, int h, int bpp, const float *k1, int k)
{
    int half = k / 2;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double acc = 0;
            for (int dy = 0; dy < k; dy++) {
                const uint8_t *row = src + (size_t)reflect(y + dy - half, h) * w * bpp;
                for (int dx = 0; dx < k; dx++)
                    acc += (double)(k1[dy] * k1[dx]) * row[(size_t)reflect(x + dx - half, w) * bpp];
            }
            float v = nearbyintf((float)acc);
            dst[((size_t)y * w + x) * bpp] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
}

void tv_gaussian_blur(CtImage *img, CtImage *tmp, int k, double sigma)
{
    /* _get_gaussian_kernel1d in float32 */
    enum { KMAX = 63 };
    float k1[KMAX], sum = 0, s = (float)sigma;
    int half = k / 2;
    CT_ASSERT(k % 2 == 1 && k <= KMAX && half < img->w && half < img->h);
    for (int i = 0; i < k; i++) {
        float x = (float)(i - half) / s;
        k1[i] = expf(-0.5f * (x * x));
        sum += k1[i];
    }
    for (int i = 0; i < k; i++)
        k1[i] /= sum;
    int w = img->w, h = img->h;
    memcpy(tmp->px, img->px, (size_t)w * h * 3);
    for (int c = 0; c < 3; c++)
        blur_channel(img->px + c, tmp->px + c, w, h, 3, k1, k);
    if (img->alpha) { /* torchvision blurs an 'RGBA' image's four channels alike */
        memcpy(tmp->px, img->alpha, (size_t)w * h);
        blur_channel(img->alpha, tmp->px, w, h, 1, k1, k);
    }
}
