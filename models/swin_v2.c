/*
 * Swin Transformer V2 (timm/models/swin_transformer_v2.py): Swin's
 * shifted-window blocks over [B,H,W,C] tokens with the V2 changes:
 * res-post-norm (x + norm1(attn(x)), x + norm2(mlp(x)), both norms
 * zero-initialised by _init_respostnorm); cosine attention, F.normalize of
 * q and k with a learned per-head logit scale (clamped to log 100, then
 * exp'ed) in place of 1/sqrt(hd); a continuous position bias: cpb_mlp
 * (Linear(2,512), ReLU, Linear(512,heads) without bias) over the
 * log-spaced relative_coords_table, gathered by relative_position_index,
 * 16 sigmoid of it; q_bias and v_bias around a zero k_bias; patch merging
 * as reduction then norm. The coordinate table, index, shift mask and
 * k_bias are timm's non-persistent buffers: build-time constants here.
 * Init as timm's _init_weights: trunc_normal(.02) linears (cpb_mlp's too)
 * with zero biases, logit_scale log(10), the patch conv at PyTorch's
 * default.
 */
#include <math.h>
#include <stdlib.h>

#include "models/layer_groups.h"
#include "models/registry.h"
#include "models/swin_common.h"

static ValueId linear(Builder *b, const char *name, ValueId x, int64_t out, int no_bias)
{
    return nn_linear(b, name, x, out,
                     (LinearOpts){.no_bias = no_bias, .weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
}

static ValueId layer_norm(Builder *b, const char *name, ValueId x) { return nn_layer_norm(b, name, x, 1e-5); }

/* One coordinate of relative_coords_table: d / max(w - 1, 1) * 8, then
 * sign * log2(|.| + 1) / log2(8), each step in float32 as torch's (bit-equal
 * to torch 1.13's table for windows 2, 3, 6, 7, 8, 12 and 16). */
static float log_coord(int64_t d, int64_t w)
{
    float v = (float)d / (float)(w > 1 ? w - 1 : 1) * 8.0f;
    float s = v > 0 ? 1.0f : v < 0 ? -1.0f : 0.0f;
    return s * log2f(fabsf(v) + 1.0f) / 3.0f;
}

/* relative_coords_table [1, 2wh-1, 2ww-1, 2]: each offset's (row, column),
 * log-spaced into [-1, 1] (no pretrained window size). */
static ValueId rel_coords_table(Builder *b, int64_t wh, int64_t ww)
{
    int64_t th = 2 * wh - 1, tw = 2 * ww - 1;
    double *t = malloc(sizeof *t * (size_t)(th * tw * 2));
    if (!t)
        return b_fail(b, "out of memory for a relative coordinates table");
    for (int64_t i = 0; i < th; i++)
        for (int64_t j = 0; j < tw; j++) {
            t[(i * tw + j) * 2] = log_coord(i - (wh - 1), wh);
            t[(i * tw + j) * 2 + 1] = log_coord(j - (ww - 1), ww);
        }
    ValueId v = b_const(b, "relative_coords_table", (CtShape){4, {1, th, tw, 2}}, CT_F32, t);
    free(t);
    return v;
}

/* WindowAttention over x [B*nW, N, C]: cosine attention under the clamped
 * logit scale, the bias 16 sigmoid(cpb), plus the shift mask [nW, N, N]
 * when given. */
static ValueId window_attention(Builder *b, ValueId x, int heads, int64_t wh, int64_t ww, ValueId mask)
{
    int64_t N = b_shape(b, x)->d[1], C = b_shape(b, x)->d[2];
    b_push(b, "attn");
    ValueId logit_scale = b_param(b, "logit_scale", (CtShape){3, {heads, 1, 1}}, init_constant(log(10.0)));
    ValueId bias[3] = {b_param(b, "q_bias", (CtShape){1, {C}}, init_zeros()),
                       b_const(b, "k_bias", (CtShape){1, {C}}, b->param_dtype, NULL),
                       b_param(b, "v_bias", (CtShape){1, {C}}, init_zeros())};

    /* the continuous position bias: [heads, N, N] */
    ValueId cpb = rel_coords_table(b, wh, ww);
    b_push(b, "cpb_mlp");
    cpb = f_relu(b, linear(b, "0", cpb, 512, 0));
    cpb = linear(b, "2", cpb, heads, 1);
    b_pop(b);
    cpb = f_reshape(b, cpb, 2, (int64_t[]){(2 * wh - 1) * (2 * ww - 1), heads});
    cpb = f_permute(b, f_gather(b, cpb, 0, swin_rel_pos_index(b, wh, ww)), 3, (int64_t[]){2, 0, 1});
    ValueId pos = f_scale_shift(b, f_sigmoid(b, cpb), 16, 0);
    pos = f_reshape(b, pos, 4, (int64_t[]){1, heads, N, N});

    /* timm's F.linear(x, qkv.weight, cat(q_bias, k_bias, v_bias)) */
    ValueId qkv = f_add(b, linear(b, "qkv", x, 3 * C, 1), f_concat(b, 3, bias, 0));
    x = linear(b, "proj", swin_window_sdpa(b, qkv, heads, pos, mask, logit_scale), C, 0);
    b_pop(b);
    return x;
}

static ValueId block(Builder *b, ValueId x, int heads, int window, int shifted, double dpr)
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
    return f_reshape(b, x, 4, (int64_t[]){B, H, W, C});
}

/* PatchMerging: the 2x2 gather to 4C -> bias-free linear to 2C -> LayerNorm. */
static ValueId patch_merging(Builder *b, ValueId x)
{
    int64_t C = b_shape(b, x)->d[3];
    x = swin_merge_2x2(b, x);
    b_push(b, "downsample");
    x = layer_norm(b, "norm", linear(b, "reduction", x, 2 * C, 1));
    b_pop(b);
    return x;
}

static ValueId build_swinv2(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    return swin_build(b, m, a, x, block, patch_merging);
}

/* SwinTransformerV2.no_weight_decay: every name holding cpb_mlp or logit_scale */
static const char *const swinv2_no_wd[] = {"*cpb_mlp*", "*logit_scale*", NULL};

static const SwinArch tiny_w8 = {4, 8, 96, {2, 2, 6, 2}, {3, 6, 12, 24}};

static const ModelEntry entries[] = {
    {"swinv2_tiny_window8_256", build_swinv2, &tiny_w8,
     {.tag = "ms_in1k", .input_size = {3, 256, 256}, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},
      .crop_pct = 0.9, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,
      .first_conv = "patch_embed.proj", .classifier = "head.fc", .fixed_input_size = 1},
     swinv2_no_wd},
};

/* SwinTransformerV2.group_matcher: a stage's downsample before its blocks,
 * the final norm with the last block */
static const GroupRule groups[] = {
    {"^absolute_pos_embed|patch_embed", 0, LG_NO_SUFFIX},
    {"^layers\\.([0-9]+).downsample", 1, 0},
    {"^layers\\.([0-9]+)\\.[A-Za-z0-9_]+\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^norm", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily swinv2_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0.1};
