/* timm's Mixup / CutMix (runtime/data/mixup.h, the pixels by the graph's
 * mix_images on the ref and cpu backends): mixup_target's values for a
 * fixed lam, the cutmix box and its lam correction, the mixed batch as the
 * convex combination or the box paste of the flipped batch in each mode,
 * the Beta sampler's moments, determinism by (seed, epoch, batch). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "one_node.h"
#include "runtime/data/mixup.h"

enum { N = 8, C = 3, H = 16, W = 12, K = 5 };

static Mixup base(void)
{
    return (Mixup){.prob = 1, .switch_prob = 0.5, .mode = CT_MIXUP_BATCH, .correct_lam = 1, .label_smoothing = 0.1,
                   .num_classes = K, .enabled = 1};
}

/* Image i is the constant i + 1, so each pixel says where it came from. */
static void fill(float *x)
{
    for (int i = 0; i < N; i++)
        for (int k = 0; k < C * H * W; k++)
            x[(size_t)i * C * H * W + k] = (float)(i + 1);
}

static const int64_t labels[N] = {0, 1, 2, 3, 4, 0, 1, 2};

/* x [n, C, H, W] mixed in place as a training step does it: the numbers
 * drawn on the host, the pixels by mix_images. */
static int mixup_apply(const Mixup *m, float *x, int n, const int64_t *y, float *target, double *lam, CtRng *rng,
                       CtErr *err)
{
    float params[N * MIX_PARAMS];
    if (mixup_draw(m, n, H, W, y, params, target, lam, rng, err))
        return -1;
    CtTensor in[2] = {{{{4, {n, C, H, W}}, CT_F32}, x}, {{{2, {n, MIX_PARAMS}}, CT_F32}, params}};
    one_node_f32(CT_OP_mix_images, 2, in, NULL, 0, NULL, 0, x, (int64_t)n * C * H * W, 1e-5);
    return 0;
}

static void check_targets(const float *t, const double *lam)
{
    double off = 0.1 / K, on = 1 - 0.1 + off;
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int k = 0; k < K; k++) {
            double want = (k == labels[i] ? on : off) * lam[i] + (k == labels[N - 1 - i] ? on : off) * (1 - lam[i]);
            CHECK_NEAR(t[i * K + k], want, 1e-6);
            s += t[i * K + k];
        }
        CHECK_NEAR(s, 1, 1e-5);
    }
}

/* Every image is its own value where it was not mixed; mixup: the convex
 * combination everywhere; cutmix: the partner's value on exactly the
 * fraction 1 - lam of its pixels. */
static void check_mixed(const float *x, const double *lam)
{
    for (int i = 0; i < N; i++) {
        const float *p = x + (size_t)i * C * H * W;
        float own = (float)(i + 1), other = (float)(N - i);
        int same = 0, partner = 0, blend = 0;
        float mixed = (float)(own * (float)lam[i] + other * (float)(1 - lam[i]));
        for (int k = 0; k < C * H * W; k++) {
            same += p[k] == own;
            partner += p[k] == other && other != own;
            blend += fabsf(p[k] - mixed) < 1e-5f;
        }
        int cut_like = same + partner == C * H * W &&
                       fabs((double)partner / (C * H * W) - (1 - lam[i])) < 1e-6;
        CHECKF(lam[i] == 1 ? same == C * H * W : (cut_like || blend == C * H * W),
               "image %d lam %g: %d own, %d partner, %d blended", i, lam[i], same, partner, blend);
    }
}

int main(void)
{
    /* mixup_target: lam 0.7, smoothing 0.1 over 5 classes: on 0.92, off 0.02 */
    {
        int64_t y[2] = {1, 3};
        double lam[2] = {0.7, 0.7};
        float t[2 * K];
        mixup_target(y, 2, K, lam, 0.1, t);
        CHECK_NEAR(t[1], 0.7 * 0.92 + 0.3 * 0.02, 1e-7);
        CHECK_NEAR(t[3], 0.7 * 0.02 + 0.3 * 0.92, 1e-7);
        CHECK_NEAR(t[0], 0.02, 1e-7);
        CHECK_NEAR(t[K + 3], 0.65, 1e-7);
        CHECK_NEAR(t[K + 1], 0.29, 1e-7);
    }
    /* rand_bbox: lam 0.75 on 32x32 is a 16x16 box clipped to the image; lam
     * corrected to its area; minmax boxes within [min, max) of each side */
    {
        Mixup m = base();
        CtRng r = rng_for(1, 0, 0);
        int unclipped = 0;
        for (int t = 0; t < 200; t++) {
            int b[4];
            double l;
            mixup_cutmix_box(&m, 32, 32, 0.75, &r, b, &l);
            CHECK(b[0] >= 0 && b[0] <= b[1] && b[1] <= 32 && b[2] >= 0 && b[2] <= b[3] && b[3] <= 32);
            CHECK(b[1] - b[0] <= 16 && b[3] - b[2] <= 16);
            CHECK_NEAR(l, 1 - (b[1] - b[0]) * (b[3] - b[2]) / 1024.0, 1e-12);
            unclipped += b[1] - b[0] == 16 && b[3] - b[2] == 16;
        }
        CHECK(unclipped > 20);
        m.correct_lam = 0;
        int b[4];
        double l;
        mixup_cutmix_box(&m, 32, 32, 0.75, &r, b, &l);
        CHECK(l == 0.75);
        m.has_minmax = 1;
        m.cutmix_minmax[0] = 0.25;
        m.cutmix_minmax[1] = 0.5;
        for (int t = 0; t < 100; t++) {
            mixup_cutmix_box(&m, 32, 40, 0.9, &r, b, &l);
            CHECK(b[1] - b[0] >= 8 && b[1] - b[0] < 16 && b[3] - b[2] >= 10 && b[3] - b[2] < 20);
            CHECK(b[1] <= 32 && b[3] <= 40);
            CHECK_NEAR(l, 1 - (b[1] - b[0]) * (b[3] - b[2]) / (32.0 * 40), 1e-12); /* minmax always corrects */
        }
    }
    /* Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)) */
    {
        const double as[] = {0.2, 1.0, 2.5};
        for (int k = 0; k < 3; k++) {
            CtRng r = rng_for(7, 0, (uint64_t)k);
            double s = 0, s2 = 0;
            int n = 200000;
            for (int t = 0; t < n; t++) {
                double v = mixup_beta(&r, as[k]);
                CHECK(v >= 0 && v <= 1);
                s += v;
                s2 += v * v;
            }
            double mean = s / n, var = s2 / n - mean * mean;
            CHECK_NEAR(mean, 0.5, 5e-3);
            CHECK_NEAR(var, 1 / (4 * (2 * as[k] + 1)), 3e-3);
        }
    }
    /* each mode with mixup only, cutmix only, both */
    float *x = malloc(sizeof *x * N * C * H * W), *y = malloc(sizeof *y * N * C * H * W);
    float t[N * K], t2[N * K];
    double lam[N], lam2[N];
    CtErr err = {{0}};
    for (int mode = CT_MIXUP_BATCH; mode <= CT_MIXUP_ELEM; mode++)
        for (int kind = 0; kind < 3; kind++)
            for (uint64_t b = 0; b < 6; b++) {
                Mixup m = base();
                m.mode = (CtMixupMode)mode;
                m.mixup_alpha = kind != 1 ? 0.8 : 0;
                m.cutmix_alpha = kind != 0 ? 1.0 : 0;
                fill(x);
                CtRng r = rng_for(42, 3, b);
                CHECK(mixup_apply(&m, x, N, labels, t, lam, &r, &err) == 0);
                check_targets(t, lam);
                check_mixed(x, lam);
                for (int i = 0; i < N && mode != CT_MIXUP_ELEM; i++)
                    CHECK(lam[i] == lam[mode == CT_MIXUP_BATCH ? 0 : N - 1 - i]);
                /* the same (seed, epoch, batch): the same batch and targets */
                fill(y);
                r = rng_for(42, 3, b);
                CHECK(mixup_apply(&m, y, N, labels, t2, lam2, &r, &err) == 0);
                CHECK(!memcmp(x, y, sizeof *x * N * C * H * W) && !memcmp(t, t2, sizeof t) &&
                      !memcmp(lam, lam2, sizeof lam));
            }
    /* batch mode: lam differs between batches, and mixes every pair */
    {
        Mixup m = base();
        m.mixup_alpha = 1;
        CtRng r0 = rng_for(42, 0, 0), r1 = rng_for(42, 0, 1);
        fill(x);
        CHECK(mixup_apply(&m, x, N, labels, t, lam, &r0, &err) == 0);
        CHECK(mixup_apply(&m, x, N, labels, t, lam2, &r1, &err) == 0);
        CHECK(lam[0] != lam2[0] && lam[0] != 1);
    }
    /* prob 0 or disabled (--mixup-off-epoch): untouched, smoothed one-hot */
    for (int k = 0; k < 2; k++) {
        Mixup m = base();
        m.mixup_alpha = 1;
        m.cutmix_alpha = 1;
        m.mode = k ? CT_MIXUP_ELEM : CT_MIXUP_BATCH;
        if (k)
            m.enabled = 0;
        else
            m.prob = 0;
        CtRng r = rng_for(1, 1, 1);
        fill(x);
        fill(y);
        CHECK(mixup_apply(&m, x, N, labels, t, lam, &r, &err) == 0);
        CHECK(!memcmp(x, y, sizeof *x * N * C * H * W));
        for (int i = 0; i < N; i++)
            CHECK(lam[i] == 1);
        check_targets(t, lam);
    }
    {
        Mixup m = base();
        m.mixup_alpha = 1;
        CtRng r = rng_for(1, 1, 1);
        CHECK(mixup_apply(&m, x, N - 1, labels, t, lam, &r, &err) == -1);
        CHECK(strstr(err.msg, "even batch size") != NULL);
    }
    CHECK(mixup_mode_parse("pair") == CT_MIXUP_PAIR && mixup_mode_parse("Batch") == -1);
    free(x);
    free(y);
    return check_done("test_mixup");
}
