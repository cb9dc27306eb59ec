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
#include <stdlib.h>

#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct SwinArch {
    int patch, window, embed_dim;
    int depths[4], heads[4];
} SwinArch;

static ValueId swin_linear(Builder *b, const char *name, ValueId x, int64_t out, int no_bias)
{
    return nn_linear(b, name, x, out,
                     (LinearOpts){.no_bias = no_bias, .weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
}

static ValueId layer_norm(Builder *b, const char *name, ValueId x) { return nn_layer_norm(b, name, x, 1e-5); }

/* torch.roll(x, shift, dim): out[i] = x[(i - shift) mod n]. */
static ValueId roll(Builder *b, ValueId x, int dim, int64_t shift)
{
    int64_t n = b_shape(b, x)->d[dim], s = ((-shift) % n + n) % n;
    if (s == 0)
        return x;
    ValueId parts[2] = {f_slice(b, x, dim, s, n, 1), f_slice(b, x, dim, 0, s, 1)};
    return f_concat(b, 2, parts, dim);
}

/* F.pad of x [B,H,W,C] by ph rows and pw columns of zeros at the end (a
 * negative amount crops). */
static ValueId pad_hw(Builder *b, ValueId x, int64_t ph, int64_t pw)
{
    if (ph == 0 && pw == 0)
        return x;
    x = f_permute(b, x, 4, (int64_t[]){0, 3, 1, 2});
    x = f_pad(b, x, 0, ph, 0, pw, 0);
    return f_permute(b, x, 4, (int64_t[]){0, 2, 3, 1});
}

/* get_relative_position_index: for tokens i, j of a wh x ww window, the row
 * of the (2wh-1)(2ww-1) bias table for their offset. */
static ValueId rel_pos_index(Builder *b, int64_t wh, int64_t ww)
{
    int64_t N = wh * ww;
    double *idx = malloc(sizeof *idx * (size_t)(N * N));
    if (!idx)
        return b_fail(b, "out of memory for a relative position index of %lld tokens", (long long)N);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++)
            idx[i * N + j] = (double)((i / ww - j / ww + wh - 1) * (2 * ww - 1) + (i % ww - j % ww + ww - 1));
    ValueId v = b_const(b, "relative_position_index", (CtShape){2, {N, N}}, CT_I32, idx);
    free(idx);
    return v;
}

/* SwinTransformerBlock.get_attn_mask for the padded Hp x Wp grid shifted by
 * (sh, sw): the grid's three bands a dim (before the last window, the last
 * window's unshifted part, the part the roll brought in) number nine
 * regions; tokens of a window in different regions get -100. [nW, N, N]. */
static ValueId shift_mask(Builder *b, int64_t Hp, int64_t Wp, int64_t wh, int64_t ww, int64_t sh, int64_t sw)
{
    int64_t nw = (Hp / wh) * (Wp / ww), N = wh * ww;
    double *m = malloc(sizeof *m * (size_t)(nw * N * N));
    int *region = malloc(sizeof *region * (size_t)N);
    if (!m || !region) {
        free(m);
        free(region);
        return b_fail(b, "out of memory for a shifted-window mask of %lld windows", (long long)nw);
    }
    for (int64_t w = 0; w < nw; w++) {
        for (int64_t i = 0; i < N; i++) {
            int64_t r = w / (Wp / ww) * wh + i / ww, c = w % (Wp / ww) * ww + i % ww;
            int hr = r < Hp - wh ? 0 : r < Hp - sh ? 1 : 2, wr = c < Wp - ww ? 0 : c < Wp - sw ? 1 : 2;
            region[i] = hr * 3 + wr;
        }
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < N; j++)
                m[(w * N + i) * N + j] = region[i] == region[j] ? 0 : -100;
    }
    ValueId v = b_const(b, "attn_mask", (CtShape){3, {nw, N, N}}, CT_F32, m);
    free(m);
    free(region);
    return v;
}

/* WindowAttention over x [B*nW, N, C] with the relative position bias, plus
 * the shift mask [nW, N, N] when given: q, k, v viewed [B, nW*heads, N, hd]
 * so one bias [1, nW*heads, N, N] serves the whole batch. */
static ValueId window_attention(Builder *b, ValueId x, int heads, int64_t wh, int64_t ww, ValueId mask)
{
    const CtShape *s = b_shape(b, x);
    int64_t Bw = s->d[0], N = s->d[1], C = s->d[2], hd = C / heads, T = (2 * wh - 1) * (2 * ww - 1);
    int64_t nw = mask >= 0 ? b_shape(b, mask)->d[0] : 1;
    b_push(b, "attn");
    ValueId table = b_param(b, "relative_position_bias_table", (CtShape){2, {T, heads}}, init_trunc_normal(.02));
    ValueId index = rel_pos_index(b, wh, ww);
    ValueId qkv = swin_linear(b, "qkv", x, 3 * C, 0);
    qkv = f_permute(b, f_reshape(b, qkv, 5, (int64_t[]){Bw, N, 3, heads, hd}), 5, (int64_t[]){2, 0, 3, 1, 4});
    ValueId t[3];
    for (int i = 0; i < 3; i++)
        t[i] = f_reshape(b, f_slice(b, qkv, 0, i, i + 1, 1), 4, (int64_t[]){Bw / nw, nw * heads, N, hd});
    ValueId bias = f_permute(b, f_gather(b, table, 0, index), 3, (int64_t[]){2, 0, 1});
    bias = f_reshape(b, bias, 4, (int64_t[]){1, heads, N, N});
    if (mask >= 0)
        bias = f_add(b, f_reshape(b, mask, 4, (int64_t[]){nw, 1, N, N}), bias);
    bias = f_reshape(b, bias, 4, (int64_t[]){1, nw * heads, N, N});
    x = f_sdpa_bias(b, t[0], t[1], t[2], bias, 1.0 / sqrt((double)hd));
    x = f_reshape(b, x, 4, (int64_t[]){Bw, heads, N, hd});
    x = f_reshape(b, f_permute(b, x, 4, (int64_t[]){0, 2, 1, 3}), 3, (int64_t[]){Bw, N, C});
    x = swin_linear(b, "proj", x, C, 0);
    b_pop(b);
    return x;
}

/* SwinTransformerBlock._attn over x [B,H,W,C]: roll, pad to whole windows,
 * partition, attend, merge, crop, roll back. A window no smaller than the
 * grid becomes the grid, unshifted (_calc_window_shift). */
static ValueId shifted_window_attention(Builder *b, ValueId x, int heads, int window, int shifted)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1], W = s->d[2], C = s->d[3];
    int64_t wh = H <= window ? H : window, ww = W <= window ? W : window;
    int64_t sh = shifted && H > wh ? window / 2 : 0, sw = shifted && W > ww ? window / 2 : 0;
    x = roll(b, roll(b, x, 1, -sh), 2, -sw);
    int64_t ph = (wh - H % wh) % wh, pw = (ww - W % ww) % ww, Hp = H + ph, Wp = W + pw;
    x = pad_hw(b, x, ph, pw);
    ValueId mask = sh || sw ? shift_mask(b, Hp, Wp, wh, ww, sh, sw) : -1;
    int64_t nh = Hp / wh, nw = Wp / ww;
    x = f_reshape(b, x, 6, (int64_t[]){B, nh, wh, nw, ww, C});
    x = f_permute(b, x, 6, (int64_t[]){0, 1, 3, 2, 4, 5});
    x = window_attention(b, f_reshape(b, x, 3, (int64_t[]){B * nh * nw, wh * ww, C}), heads, wh, ww, mask);
    x = f_reshape(b, x, 6, (int64_t[]){B, nh, nw, wh, ww, C});
    x = f_permute(b, x, 6, (int64_t[]){0, 1, 3, 2, 4, 5});
    x = pad_hw(b, f_reshape(b, x, 4, (int64_t[]){B, Hp, Wp, C}), -ph, -pw);
    return roll(b, roll(b, x, 1, sh), 2, sw);
}

static ValueId block(Builder *b, ValueId x, int heads, int window, int shifted, double dpr)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1], W = s->d[2], C = s->d[3];
    ValueId y = shifted_window_attention(b, layer_norm(b, "norm1", x), heads, window, shifted);
    x = f_reshape(b, f_add(b, x, f_drop_path(b, y, dpr)), 3, (int64_t[]){B, H * W, C});
    y = layer_norm(b, "norm2", x);
    b_push(b, "mlp");
    y = f_gelu(b, swin_linear(b, "fc1", y, 4 * C, 0), 0);
    y = swin_linear(b, "fc2", y, C, 0);
    b_pop(b);
    x = f_add(b, x, f_drop_path(b, y, dpr));
    return f_reshape(b, x, 4, (int64_t[]){B, H, W, C});
}

/* PatchMerging: [B,H,W,C] (padded to even) -> 2x2 neighbours as 4C in
 * (w, h) order -> LayerNorm -> [B,H/2,W/2,2C]. */
static ValueId patch_merging(Builder *b, ValueId x)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1] + s->d[1] % 2, W = s->d[2] + s->d[2] % 2, C = s->d[3];
    x = pad_hw(b, x, s->d[1] % 2, s->d[2] % 2);
    x = f_reshape(b, x, 6, (int64_t[]){B, H / 2, 2, W / 2, 2, C});
    x = f_permute(b, x, 6, (int64_t[]){0, 1, 3, 4, 2, 5});
    x = f_reshape(b, x, 4, (int64_t[]){B, H / 2, W / 2, 4 * C});
    b_push(b, "downsample");
    x = swin_linear(b, "reduction", layer_norm(b, "norm", x), 2 * C, 1);
    b_pop(b);
    return x;
}

static ValueId build_swin(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const SwinArch *v = m->arch;
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0];
    if (s->d[2] % v->patch || s->d[3] % v->patch)
        return b_fail(b, "image size %lldx%lld is not a multiple of the patch size %d", (long long)s->d[2],
                      (long long)s->d[3], v->patch);
    b_push(b, "patch_embed");
    x = nn_conv2d(b, "proj", x, v->embed_dim, v->patch, (ConvOpts){.stride = v->patch, .bias = 1});
    x = layer_norm(b, "norm", f_permute(b, x, 4, (int64_t[]){0, 2, 3, 1}));
    b_pop(b);
    int total = 0, idx = 0;
    for (int i = 0; i < 4; i++)
        total += v->depths[i];
    b_push(b, "layers");
    for (int i = 0; i < 4; i++) {
        b_push(b, "%d", i);
        if (i > 0)
            x = patch_merging(b, x);
        b_push(b, "blocks");
        for (int j = 0; j < v->depths[i]; j++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "%d", j);
            x = block(b, x, v->heads[i], v->window, j % 2, dpr);
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
    }
    b_pop(b);
    x = layer_norm(b, "norm", x);
    if (x < 0)
        return -1;
    s = b_shape(b, x);
    int64_t H = s->d[1], W = s->d[2], C = s->d[3];
    /* ClassifierHead over NHWC: the mean over H and W */
    x = f_scale_shift(b, f_reduce_sum(b, x, 2 | 4), 1.0 / (double)(H * W), 0.0);
    x = f_reshape(b, x, 2, (int64_t[]){B, C});
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return swin_linear(b, "head.fc", x, classes, 0);
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

const ModelFamily swin_family = {entries, sizeof entries / sizeof entries[0], groups, 0};
