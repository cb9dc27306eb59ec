/*
 * timm's RandomErasing (random_erasing.py) on a normalised float batch
 * x [N, C, H, W]: per image, with probability prob, `count` boxes (count
 * uniform in min_count..max_count), each of area U(0.02, 1/3) * H * W / count
 * and log-uniform aspect in (0.3, 1/0.3), placed uniformly after up to 10
 * attempts to fit strictly inside; filled with zeros ('const'), one normal
 * value per channel ('rand') or a normal value per element ('pixel').
 */
#include <math.h>
#include <string.h>

#include "runtime/data/transforms.h"

#define ERASE_MIN_AREA 0.02
#define ERASE_MAX_AREA (1.0 / 3.0)
#define ERASE_MIN_ASPECT 0.3

static void erase_image(const RandomErasing *re, float *img, int c, int h, int w, CtRng *rng)
{
    if (rng_uniform(rng) > re->prob)
        return;
    int lo = re->min_count, hi = re->max_count ? re->max_count : re->min_count;
    int count = lo >= hi ? lo : lo + (int)rng_below(rng, (uint64_t)(hi - lo + 1));
    double area = (double)h * w, log_lo = log(ERASE_MIN_ASPECT), log_hi = log(1.0 / ERASE_MIN_ASPECT);
    for (int k = 0; k < count; k++) {
        for (int attempt = 0; attempt < 10; attempt++) {
            double target = rng_range(rng, ERASE_MIN_AREA, ERASE_MAX_AREA) * area / count;
            double aspect = exp(rng_range(rng, log_lo, log_hi));
            int eh = (int)nearbyint(sqrt(target * aspect)), ew = (int)nearbyint(sqrt(target / aspect));
            if (!(ew < w && eh < h))
                continue;
            int top = (int)rng_below(rng, (uint64_t)(h - eh + 1));
            int left = (int)rng_below(rng, (uint64_t)(w - ew + 1));
            for (int ch = 0; ch < c; ch++) {
                float v = re->mode == CT_ERASE_RAND ? (float)rng_normal(rng) : 0.0f;
                for (int y = top; y < top + eh; y++) {
                    float *row = img + ((size_t)ch * h + y) * w + left;
                    if (re->mode == CT_ERASE_PIXEL) {
                        for (int x = 0; x < ew; x++)
                            row[x] = (float)rng_normal(rng);
                    } else {
                        for (int x = 0; x < ew; x++)
                            row[x] = v;
                    }
                }
            }
            break;
        }
    }
}

void random_erasing_apply(const RandomErasing *re, float *x, int n, int c, int h, int w, CtRng *rng)
{
    if (!(re->prob > 0) || c < 1 || h < 1 || w < 1)
        return;
    for (int i = 0; i < n; i++)
        erase_image(re, x + (size_t)i * c * h * w, c, h, w, rng);
}
