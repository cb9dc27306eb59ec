/*
 * The input ops: what DESIGN.md makes the graph's first nodes, so the
 * loader's uint8 batch goes to the backend as it is and the pixel work of
 * timm's PrefetchLoader (normalisation, random erasing) and of train.py's
 * mixup_fn runs there, fused with what follows, instead of as passes over
 * the batch on the host. The host draws only the few numbers a batch needs
 * (boxes, lambdas, seeds: runtime/data/mixup.h, transforms.h), from the
 * step's generator, and feeds them as small inputs. None is differentiated:
 * their inputs are data.
 *
 * image_normalize(x), fattr mean0..3, std0..3: x the loader's uint8 batch
 *   [B, H, W, C] (C <= 4, row-major NHWC: 3 for RGB, 1 for timm's 'L'
 *   images, 4 for 'RGBA'; the fattr past C are not read); y [B, C, H, W] f32 =
 *   (x / 255 - mean_c) / std_c, computed in double and rounded once, as
 *   timm's ToTensor and Normalize give it. Its NHWC form is the plain
 *   per-element map, so the layout pass gives a channels-last net its input
 *   in that form; the uint8 input keeps its own bytes (layout_keep).
 * random_erase(x, boxes), iattr mode: timm's RandomErasing on the
 *   normalised batch x [B, C, H, W]; boxes i64 [B, K, 5] holds each
 *   image's boxes as (top, left, height, width, seed), height or width 0
 *   for none, clipped to the image, later boxes over earlier ones; a seed
 *   below 2^53, so the ref backend's doubles hold it exactly. Mode 0
 *   ('const') fills zeros, 1 ('rand') the normal value crng_normal(seed, c)
 *   per channel, 2 ('pixel') crng_normal(seed, (c * height + i) * width + j)
 *   at row i, column j of the box (ir/counter_rng.h).
 * mix_images(x, params): train.py's mixup_fn on x [B, C, H, W]; params f32
 *   [B, 6] holds each image's (lam, cut, y0, y1, x0, x1), its partner the
 *   image B-1-b (timm's flipped batch, in every mode). cut 0: lam * x[b] +
 *   (1 - lam) * x[B-1-b], x[b] itself where lam is 1; cut 1: x[B-1-b] in
 *   rows [y0, y1), columns [x0, x1), x[b] elsewhere. Reads other images,
 *   so never in place.
 */
#include <math.h>
#include <string.h>

#include "ir/counter_rng.h"
#include "ops_impl.h"

static int infer_image_normalize(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    const CtType *t = in_type(g, n, 0);
    char b[96];
    if (t->dtype != CT_U8 || t->shape.ndim != 4)
        return ct_fail(err, "input 0 must be the uint8 batch [B, H, W, C], got %s %s", ct_dtype_name(t->dtype),
                       shape_str(&t->shape, b, sizeof b));
    int64_t c = t->shape.d[3];
    if (c < 1 || c > 4)
        return ct_fail(err, "the uint8 batch has %lld channels; mean and std are given for up to 4", (long long)c);
    for (int k = 0; k < c; k++)
        if (!isfinite(n->fattr[k]) || !isfinite(n->fattr[4 + k]) || n->fattr[4 + k] == 0)
            return ct_fail(err, "channel %d's mean %g / std %g: both finite, std not 0", k, n->fattr[k],
                           n->fattr[4 + k]);
    out[0].dtype = CT_F32;
    out[0].shape = shape_make(4, (int64_t[]){t->shape.d[0], c, t->shape.d[1], t->shape.d[2]});
    return 1;
}

static void image_normalize_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t B = s->d[0], H = s->d[1], W = s->d[2], C = s->d[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < H * W; p++)
                out[0][(b * C + c) * H * W + p] = (in[0][(b * H * W + p) * C + c] / 255.0 - n->fattr[c]) / n->fattr[4 + c];
}

const OpDef op_image_normalize = {.name = "image_normalize", .min_in = 1, .max_in = 1,
                                  .fattr = {"mean0", "mean1", "mean2", "mean3", "std0", "std1", "std2", "std3"},
                                  .infer = infer_image_normalize, .ref = image_normalize_ref, .nondiff = 1,
                                  .fusion = OP_LIBRARY, .amp = OP_AMP_F32, .layout = OP_LAYOUT_NHWC,
                                  .layout_keep = 1, .cost = op_cost_none};

/* boxes i64 [B, K, 5] for x [B, ...] (random_erase), or params f32 [B, 6]
 * (mix_images). */
static int require_per_image(const Graph *g, const Node *n, CtDType dt, int ndim, int64_t last, const char *what,
                             CtErr *err)
{
    const CtType *x = in_type(g, n, 0), *t = in_type(g, n, 1);
    char b[96];
    if (require_float(g, n, 0, 4, err))
        return -1;
    if (t->dtype != dt || t->shape.ndim != ndim || t->shape.d[0] != x->shape.d[0] || t->shape.d[ndim - 1] != last)
        return ct_fail(err, "input 1 must be the %s, got %s %s", what, ct_dtype_name(t->dtype),
                       shape_str(&t->shape, b, sizeof b));
    return 0;
}

static int infer_random_erase(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (n->iattr[0] < 0 || n->iattr[0] > 2)
        return ct_fail(err, "mode %lld is not 0 (const), 1 (rand) or 2 (pixel)", (long long)n->iattr[0]);
    if (require_per_image(g, n, CT_I64, 3, 5, "i64 boxes [B, K, 5]", err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static int64_t clip(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void random_erase_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t B = s->d[0], C = s->d[1], H = s->d[2], W = s->d[3], K = in_shape(g, n, 1)->d[1];
    memcpy(out[0], in[0], sizeof(double) * (size_t)shape_numel(s));
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++) {
            const double *box = in[1] + (b * K + k) * 5;
            int64_t top = (int64_t)box[0], left = (int64_t)box[1], h = (int64_t)box[2], w = (int64_t)box[3];
            unsigned long long seed = (unsigned long long)(int64_t)box[4];
            if (h <= 0 || w <= 0)
                continue;
            for (int64_t c = 0; c < C; c++)
                for (int64_t y = clip(top, 0, H); y < clip(top + h, 0, H); y++)
                    for (int64_t x = clip(left, 0, W); x < clip(left + w, 0, W); x++) {
                        unsigned long long i = (unsigned long long)((c * h + y - top) * w + x - left);
                        double v = n->iattr[0] == 0 ? 0 : crng_normal(seed, n->iattr[0] == 1 ? (unsigned long long)c : i);
                        out[0][((b * C + c) * H + y) * W + x] = v;
                    }
        }
}

const OpDef op_random_erase = {.name = "random_erase", .min_in = 2, .max_in = 2, .iattr = {"mode"},
                               .infer = infer_random_erase, .ref = random_erase_ref, .nondiff = 3, .inplace = 1,
                               .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW, .layout = OP_LAYOUT_EITHER,
                               .cost = op_cost_none};

static int infer_mix_images(const Graph *g, const Node *n, CtType *out, CtErr *err)
{
    if (require_per_image(g, n, CT_F32, 2, 6, "f32 params [B, 6]", err))
        return -1;
    return infer_like_input0(g, n, out, err);
}

static void mix_images_ref(const Graph *g, const Node *n, double *const *in, double *const *out)
{
    const CtShape *s = in_shape(g, n, 0);
    int64_t B = s->d[0], C = s->d[1], H = s->d[2], W = s->d[3], per = C * H * W;
    for (int64_t b = 0; b < B; b++) {
        const double *p = in[1] + b * 6, *own = in[0] + b * per, *other = in[0] + (B - 1 - b) * per;
        for (int64_t c = 0; c < C; c++)
            for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++) {
                    int64_t i = (c * H + y) * W + x;
                    double v = own[i];
                    if (p[1] != 0)
                        v = y >= p[2] && y < p[3] && x >= p[4] && x < p[5] ? other[i] : own[i];
                    else if (p[0] != 1)
                        v = p[0] * own[i] + (1 - p[0]) * other[i];
                    out[0][b * per + i] = v;
                }
    }
}

const OpDef op_mix_images = {.name = "mix_images", .min_in = 2, .max_in = 2, .infer = infer_mix_images,
                             .ref = mix_images_ref, .nondiff = 3, .fusion = OP_LIBRARY, .amp = OP_AMP_FOLLOW,
                             .amp_keep = 2, .layout = OP_LAYOUT_EITHER, .cost = op_cost_none};
