/*
 * Swin Transformer V2 CR (timm/models/swin_transformer_v2_cr.py), timm's
 * own take on V2: res-post-norm blocks (norm1 and norm2 weights at
 * init_values 0) with cosine attention under a clamped learned logit
 * scale, a continuous position bias straight from meta_mlp (Mlp 2 ->
 * 384 -> heads, ReLU, dropout 0.125 on the hidden in training) over the
 * pairs' sign * log(1 + |offset|) coordinates (the constant
 * relative_coordinates_log), windows 1/8 of the patch grid (window_ratio
 * 8), patch merging as norm then reduction, a norm3 closing the last
 * stage (every stage with extra_norm_stage, the "ns" models) and no final
 * norm. Init: PyTorch's defaults throughout (weight_init 'reset' resets
 * nothing at build), logit_scale log(10).
 */
#include <math.h>
#include <stdlib.h>

#include "models/layer_groups.h"
#include "models/registry.h"
#include "models/swin_common.h"

typedef struct SwinV2CrArch {
    int patch, window_ratio, embed_dim;
    int depths[4], heads[4];
    int extra_norm_stage;
} SwinV2CrArch;

static ValueId linear(Builder *b, const char *name, ValueId x, int64_t out, int no_bias)
{
    return nn_linear(b, name, x, out, (LinearOpts){.no_bias = no_bias});
}

static ValueId layer_norm(Builder *b, const char *name, ValueId x) { return nn_layer_norm(b, name, x, 1e-5); }

/* relative_coordinates_log [N*N, 2]: for tokens i, j of a wh x ww window,
 * row i*N + j holds sign(d) * log(1 + |d|) of their (row, column) offset
 * d, in float32 as torch's (bit-equal to torch 1.13's for |d| <= 15). */
static ValueId rel_coords_log(Builder *b, int64_t wh, int64_t ww)
{
    int64_t N = wh * ww;
    double *t = malloc(sizeof *t * (size_t)(N * N * 2));
    if (!t)
        return b_fail(b, "out of memory for the relative coordinates of %lld tokens", (long long)N);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++) {
            float d[2] = {(float)(i / ww - j / ww), (float)(i % ww - j % ww)};
            for (int k = 0; k < 2; k++)
                t[(i * N + j) * 2 + k] = (d[k] > 0 ? 1.0f : d[k] < 0 ? -1.0f : 0.0f) * logf(1.0f + fabsf(d[k]));
        }
    ValueId v = b_const(b, "relative_coordinates_log", (CtShape){2, {N * N, 2}}, CT_F32, t);
    free(t);
    return v;
}

/* WindowMultiHeadAttention over x [B*nW, N, C]: cosine attention under the
 * clamped logit scale, the meta_mlp bias, plus the shift mask [nW, N, N]
 * when given. */
static ValueId window_attention(Builder *b, ValueId x, int heads, int64_t wh, int64_t ww, ValueId mask)
{
    int64_t N = b_shape(b, x)->d[1], C = b_shape(b, x)->d[2];
    b_push(b, "attn");
    ValueId logit_scale = b_param(b, "logit_scale", (CtShape){1, {heads}}, init_constant(log(10.0)));
    ValueId qkv = linear(b, "qkv", x, 3 * C, 0);
    /* proj comes before meta_mlp in the state_dict (registration order) */
    b_push(b, "proj");
    b_pop(b);

    ValueId pos = rel_coords_log(b, wh, ww);
    b_push(b, "meta_mlp");
    pos = f_dropout(b, f_relu(b, linear(b, "fc1", pos, 384, 0)), 0.125);
    pos = linear(b, "fc2", pos, heads, 0);
    b_pop(b);
    pos = f_reshape(b, f_permute(b, pos, 2, (int64_t[]){1, 0}), 4, (int64_t[]){1, heads, N, N});
    x = linear(b, "proj", swin_window_sdpa(b, qkv, heads, pos, mask, logit_scale), C, 0);
    b_pop(b);
    return x;
}

static ValueId block(Builder *b, ValueId x, int heads, int window, int shifted, double dpr, int extra_norm)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1], W = s->d[2], C = s->d[3];
    ValueId y = swin_post_norm(b, "norm1", swin_shifted_window_attention(b, x, heads, window, shifted, window_attention));
    x = f_reshape(b, f_add(b, x, f_drop_path(b, y, dpr)), 3, (int64_t[]){B, H * W, C});
    b_push(b, "mlp");
    y = f_gelu(b, linear(b, "fc1", x, 4 * C, 0), 0);
    y = linear(b, "fc2", y, C, 0);
    b_pop(b);
    x = f_add(b, x, f_drop_path(b, swin_post_norm(b, "norm2", y), dpr));
    if (extra_norm)
        x = layer_norm(b, "norm3", x);
    return f_reshape(b, x, 4, (int64_t[]){B, H, W, C});
}

/* PatchMerging: the 2x2 gather to 4C -> LayerNorm -> bias-free linear to 2C. */
static ValueId patch_merging(Builder *b, ValueId x)
{
    int64_t C = b_shape(b, x)->d[3];
    x = swin_merge_2x2(b, x);
    b_push(b, "downsample");
    x = linear(b, "reduction", layer_norm(b, "norm", x), 2 * C, 1);
    b_pop(b);
    return x;
}

static ValueId build_swinv2_cr(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const SwinV2CrArch *v = m->arch;
    const CtShape *s = b_shape(b, x);
    if (s->d[2] % v->patch || s->d[3] % v->patch)
        return b_fail(b, "image size %lldx%lld is not a multiple of the patch size %d", (long long)s->d[2],
                      (long long)s->d[3], v->patch);
    if (s->d[2] != s->d[3])
        return b_fail(b, "image size %lldx%lld: only square images are built (one window size a stage)",
                      (long long)s->d[2], (long long)s->d[3]);
    /* window_sizes_from_ratio: the patch grid over window_ratio, every stage */
    int64_t grid = s->d[2] / v->patch;
    int window = grid / v->window_ratio > 1 ? (int)(grid / v->window_ratio) : 1;
    b_push(b, "patch_embed");
    x = nn_conv2d(b, "proj", x, v->embed_dim, v->patch, (ConvOpts){.stride = v->patch, .bias = 1});
    x = layer_norm(b, "norm", f_permute(b, x, 4, (int64_t[]){0, 2, 3, 1}));
    b_pop(b);
    int total = 0, idx = 0;
    for (int i = 0; i < 4; i++)
        total += v->depths[i];
    b_push(b, "stages");
    for (int i = 0; i < 4; i++) {
        b_push(b, "%d", i);
        if (i > 0)
            x = patch_merging(b, x);
        b_push(b, "blocks");
        for (int j = 0; j < v->depths[i]; j++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            int extra_norm = j == v->depths[i] - 1 && (v->extra_norm_stage || i == 3);
            b_push(b, "%d", j);
            x = block(b, x, v->heads[i], window, j % 2, dpr, extra_norm);
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
    }
    b_pop(b);
    if (x < 0)
        return -1;
    /* the stage's output back to NCHW, ClassifierHead's adaptive average pool (fvcore counts it) */
    x = f_global_avg_pool(b, f_permute(b, x, 4, (int64_t[]){0, 3, 1, 2}));
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return linear(b, "head.fc", x, classes, 0);
}

static const SwinV2CrArch tiny_ns = {4, 8, 96, {2, 2, 6, 2}, {3, 6, 12, 24}, 1};

static const ModelEntry entries[] = {
    {"swinv2_cr_tiny_ns_224", build_swinv2_cr, &tiny_ns,
     {.tag = "sw_in1k", .input_size = {3, 224, 224}, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},
      .crop_pct = 0.9, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,
      .first_conv = "patch_embed.proj", .classifier = "head.fc", .fixed_input_size = 1},
     NULL},
};

/* SwinTransformerV2Cr.group_matcher: a stage's downsample before its blocks */
static const GroupRule groups[] = {
    {"^patch_embed", 0, LG_NO_SUFFIX},
    {"^stages\\.([0-9]+).downsample", 1, 0},
    {"^stages\\.([0-9]+)\\.[A-Za-z0-9_]+\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {NULL, 0, 0},
};

const ModelFamily swinv2_cr_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
