/*
 * The cpu backend's input ops (ir/ops/image.c): the uint8 batch normalised
 * through a 256-entry table per channel (each entry the ref kernel's double
 * rounded once, so both backends give the same bits), random erasing
 * element by element (each element takes the last box that covers it,
 * which is the ref kernel's overwriting in order), and mixup/cutmix
 * against the flipped batch. Images split among OpenMP threads.
 */
#include <stdint.h>
#include <string.h>

#include "ir/counter_rng.h"
#include "runtime/cpu/cpu.h"

void cpu_image_normalize(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *s = cpu_in_shape(g, n, 0);
    int64_t B = s->d[0], HW = s->d[1] * s->d[2], C = s->d[3];
    const uint8_t *x = (const uint8_t *)in[0];
    float lut[4][256];
    for (int64_t c = 0; c < C; c++)
        for (int v = 0; v < 256; v++)
            lut[c][v] = (float)((v / 255.0 - n->fattr[c]) / n->fattr[4 + c]);
#pragma omp parallel for if (B * C * HW > CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            const uint8_t *src = x + b * HW * C + c;
            float *dst = out[0] + (b * C + c) * HW;
            for (int64_t p = 0; p < HW; p++)
                dst[p] = lut[c][src[p * C]];
        }
}

void cpu_random_erase(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *s = cpu_in_shape(g, n, 0);
    int64_t B = s->d[0], C = s->d[1], H = s->d[2], W = s->d[3], K = cpu_in_shape(g, n, 1)->d[1];
    const int64_t *boxes = (const int64_t *)in[1];
    int mode = (int)n->iattr[0];
    if (out[0] != in[0])
        memcpy(out[0], in[0], sizeof(float) * (size_t)shape_numel(s));
#pragma omp parallel for if (B * C * H * W > CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                const int64_t *box = NULL;
                for (int64_t k = 0; k < K; k++) {
                    const int64_t *q = boxes + (b * K + k) * 5;
                    if (q[2] > 0 && q[3] > 0 && y >= q[0] && y < q[0] + q[2] && x >= q[1] && x < q[1] + q[3])
                        box = q;
                }
                if (!box)
                    continue;
                unsigned long long seed = (unsigned long long)box[4];
                for (int64_t c = 0; c < C; c++) {
                    unsigned long long i = (unsigned long long)((c * box[2] + y - box[0]) * box[3] + x - box[1]);
                    double v = mode == 0 ? 0 : crng_normal(seed, mode == 1 ? (unsigned long long)c : i);
                    out[0][((b * C + c) * H + y) * W + x] = (float)v;
                }
            }
}

void cpu_mix_images(const Graph *g, const Node *n, float *const *in, float *const *out)
{
    const CtShape *s = cpu_in_shape(g, n, 0);
    int64_t B = s->d[0], H = s->d[2], W = s->d[3], per = shape_numel(s) / B;
#pragma omp parallel for if (B * per > CPU_PARALLEL_MIN)
    for (int64_t b = 0; b < B; b++) {
        const float *p = in[1] + b * 6, *own = in[0] + b * per, *other = in[0] + (B - 1 - b) * per;
        float *dst = out[0] + b * per;
        float lam = p[0], rest = (float)(1.0 - (double)p[0]);
        for (int64_t i = 0; i < per; i++) {
            int64_t y = i / W % H, x = i % W;
            if (p[1] != 0)
                dst[i] = y >= p[2] && y < p[3] && x >= p[4] && x < p[5] ? other[i] : own[i];
            else
                dst[i] = lam == 1 ? own[i] : lam * own[i] + rest * other[i];
        }
    }
}
