/*
 * Swin Transformer (timm/models/swin_transformer.py): a 4x4 patch embedding
 * with LayerNorm, four stages of window-attention blocks over [B,H,W,C]
 * tokens (the odd blocks' windows shifted by half a window, a cyclic roll
 * with a -100 mask between tokens the roll brought together), a relative
 * position bias per head gathered from a table by a constant index, patch
 * merging (2x2 neighbours to 4C, LayerNorm, a bias-free linear to 2C)
 * between stages, the final LayerNorm and an average-pooling head. The
 * index and the masks are timm's non-persistent buffers: build-time
 * constants here. Init as timm's init_weights_vit_timm (trunc_normal(.02)
 * linears with zero biases, the bias tables trunc_normal(.02), the patch
 * conv at PyTorch's default).
 */
#include <math.h>

#include "models/layer_groups.h"
#include "models/registry.h"
#include "models/swin_common.h"

static ValueId swin_linear(Builder *b, const char *name, ValueId x, int64_t out, int no_bias)
{
    return nn_linear(b, name, x, out,
                     (LinearOpts){.no_bias = no_bias, .weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
}

static ValueId layer_norm(Builder *b, const char *name, ValueId x) { return nn_layer_norm(b, name, x, 1e-5); }

/* WindowAttention over x [B*nW, N, C]: the relative position bias gathered
 * from its table, plus the shift mask [nW, N, N] when given. */
static ValueId window_attention(Builder *b, ValueId x, int heads, int64_t wh, int64_t ww, ValueId mask)
{
    int64_t N = b_shape(b, x)->d[1], C = b_shape(b, x)->d[2], T = (2 * wh - 1) * (2 * ww - 1);
    b_push(b, "attn");
    ValueId table = b_param(b, "relative_position_bias_table", (CtShape){2, {T, heads}}, init_trunc_normal(.02));
    ValueId index = swin_rel_pos_index(b, wh, ww);
    ValueId qkv = swin_linear(b, "qkv", x, 3 * C, 0);
    ValueId bias = f_permute(b, f_gather(b, table, 0, index), 3, (int64_t[]){2, 0, 1});
    bias = f_reshape(b, bias, 4, (int64_t[]){1, heads, N, N});
    x = swin_linear(b, "proj", swin_window_sdpa(b, qkv, heads, bias, mask, -1), C, 0);
    b_pop(b);
    return x;
}

static ValueId block(Builder *b, ValueId x, int heads, int window, int shifted, double dpr)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1], W = s->d[2], C = s->d[3];
    ValueId y = swin_shifted_window_attention(b, layer_norm(b, "norm1", x), heads, window, shifted, window_attention);
    x = f_reshape(b, f_add(b, x, f_drop_path(b, y, dpr)), 3, (int64_t[]){B, H * W, C});
    y = layer_norm(b, "norm2", x);
    b_push(b, "mlp");
    y = f_gelu(b, swin_linear(b, "fc1", y, 4 * C, 0), 0);
    y = swin_linear(b, "fc2", y, C, 0);
    b_pop(b);
    x = f_add(b, x, f_drop_path(b, y, dpr));
    return f_reshape(b, x, 4, (int64_t[]){B, H, W, C});
}

/* PatchMerging: the 2x2 gather to 4C -> LayerNorm -> [B,H/2,W/2,2C]. */
static ValueId patch_merging(Builder *b, ValueId x)
{
    int64_t C = b_shape(b, x)->d[3];
    x = swin_merge_2x2(b, x);
    b_push(b, "downsample");
    x = swin_linear(b, "reduction", layer_norm(b, "norm", x), 2 * C, 1);
    b_pop(b);
    return x;
}

static ValueId build_swin(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    return swin_build(b, m, a, x, block, patch_merging);
}

static const char *const swin_no_wd[] = {"*relative_position_bias_table", NULL};

#define SWIN_CFG(tag_)                                                                                         \
    {.tag = tag_, .input_size = {3, 224, 224}, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},    \
     .crop_pct = 0.9, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                  \
     .first_conv = "patch_embed.proj", .classifier = "head.fc", .fixed_input_size = 1}

static const SwinArch tiny = {4, 7, 96, {2, 2, 6, 2}, {3, 6, 12, 24}};
static const SwinArch small = {4, 7, 96, {2, 2, 18, 2}, {3, 6, 12, 24}};

static const ModelEntry entries[] = {
    {"swin_small_patch4_window7_224", build_swin, &small, SWIN_CFG("ms_in22k_ft_in1k"), swin_no_wd},
    {"swin_tiny_patch4_window7_224", build_swin, &tiny, SWIN_CFG("ms_in1k"), swin_no_wd},
};

/* SwinTransformer.group_matcher: a stage's downsample before its blocks,
 * the final norm with the last block */
static const GroupRule groups[] = {
    {"^patch_embed", 0, LG_NO_SUFFIX},
    {"^layers\\.([0-9]+).downsample", 1, 0},
    {"^layers\\.([0-9]+)\\.[A-Za-z0-9_]+\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^norm", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily swin_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0.1};
