/*
 * timm's RandomErasing (random_erasing.py) as the numbers the graph's
 * random_erase node reads (ir/ops/image.c, which fills the boxes): per
 * image, with probability prob, `count` boxes (count uniform in
 * min_count..max_count), each of area U(0.02, 1/3) * H * W / count and
 * log-uniform aspect in (0.3, 1/0.3), placed uniformly after up to 10
 * attempts to fit strictly inside; filled with zeros ('const'), one normal
 * value per channel ('rand') or a normal value per element ('pixel').
 */
#include <math.h>
#include <string.h>

#include "runtime/data/transforms.h"

#define ERASE_MIN_AREA 0.02
#define ERASE_MAX_AREA (1.0 / 3.0)
#define ERASE_MIN_ASPECT 0.3

int random_erasing_boxes(const RandomErasing *re)
{
    int k = re->max_count > re->min_count ? re->max_count : re->min_count;
    return re->prob > 0 && k > 0 ? k : 0;
}

/* Image i's boxes: the numbers timm draws for one image, each box's fill
 * left to the graph's stream `seed`. */
static void draw_image(const RandomErasing *re, int h, int w, int K, int64_t *boxes, CtRng *rng)
{
    memset(boxes, 0, sizeof *boxes * (size_t)K * 5);
    if (rng_uniform(rng) > re->prob)
        return;
    int lo = re->min_count, hi = re->max_count ? re->max_count : re->min_count;
    int count = lo >= hi ? lo : lo + (int)rng_below(rng, (uint64_t)(hi - lo + 1));
    double area = (double)h * w, log_lo = log(ERASE_MIN_ASPECT), log_hi = log(1.0 / ERASE_MIN_ASPECT);
    for (int k = 0; k < count && k < K; k++) {
        for (int attempt = 0; attempt < 10; attempt++) {
            double target = rng_range(rng, ERASE_MIN_AREA, ERASE_MAX_AREA) * area / count;
            double aspect = exp(rng_range(rng, log_lo, log_hi));
            int eh = (int)nearbyint(sqrt(target * aspect)), ew = (int)nearbyint(sqrt(target / aspect));
            if (!(ew < w && eh < h))
                continue;
            int64_t *b = boxes + (size_t)k * 5;
            b[0] = (int64_t)rng_below(rng, (uint64_t)(h - eh + 1));
            b[1] = (int64_t)rng_below(rng, (uint64_t)(w - ew + 1));
            b[2] = eh;
            b[3] = ew;
            b[4] = (int64_t)(rng_u64(rng) >> 11);
            break;
        }
    }
}

void random_erasing_draw(const RandomErasing *re, int n, int h, int w, int64_t *boxes, CtRng *rng)
{
    int K = random_erasing_boxes(re), start = re->num_splits > 1 ? n / re->num_splits : 0;
    if (K > 0)
        memset(boxes, 0, sizeof *boxes * (size_t)start * (size_t)K * 5);
    for (int i = start; i < n && K > 0 && h > 0 && w > 0; i++)
        draw_image(re, h, w, K, boxes + (size_t)i * K * 5, rng);
}
