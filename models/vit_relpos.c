/*
 * ViT with relative position attention (timm/models/vision_transformer_relpos.py,
 * rel_pos_type 'mlp'): no absolute position embedding; every block's
 * attention adds a bias per head that a small MLP (RelPosMlp, mode 'cr':
 * fc1, ReLU, dropout 0.125, fc2) computes from the log-spaced offsets of
 * the patch grid and a constant index spreads over token pairs, zero for
 * the class token's pairs. Layer scale (init 1e-6), LayerNorm eps 1e-6, an
 * optional class token (normal(1e-6)), 'avg' or 'token' pooling with
 * fc_norm or the final norm. Init as timm's init_weights_vit_timm
 * (trunc_normal(.02) linears with zero biases, the patch conv at PyTorch's
 * default). The offsets and the index are timm's non-persistent buffers:
 * build-time constants here.
 */
#include <math.h>
#include <stdlib.h>

#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct RelPosArch {
    int patch, dim, depth, heads;
    double mlp_ratio;
    int class_token, pool_token, fc_norm, mlp_hidden;
} RelPosArch;

static ValueId linear(Builder *b, const char *name, ValueId x, int64_t out, int no_bias)
{
    return nn_linear(b, name, x, out,
                     (LinearOpts){.no_bias = no_bias, .weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
}

static ValueId layer_norm(Builder *b, const char *name, ValueId x) { return nn_layer_norm(b, name, x, 1e-6); }

/* RelPosMlp.get_bias (mode 'cr') for a gh x gw grid after `prefix` tokens:
 * [1, heads, prefix + N, prefix + N]. */
static ValueId rel_pos_mlp(Builder *b, const RelPosArch *v, int64_t gh, int64_t gw, int prefix)
{
    int64_t th = 2 * gh - 1, tw = 2 * gw - 1, N = gh * gw, H = v->heads;
    double *coords = malloc(sizeof *coords * (size_t)(th * tw * 2));
    double *idx = malloc(sizeof *idx * (size_t)(N * N));
    if (!coords || !idx) {
        free(coords);
        free(idx);
        return b_fail(b, "out of memory for the relative positions of %lld tokens", (long long)N);
    }
    /* gen_relative_log_coords 'cr': sign(d) log(1 + |d|) of each offset */
    for (int64_t i = 0; i < th; i++)
        for (int64_t j = 0; j < tw; j++) {
            double dh = (double)(i - (gh - 1)), dw = (double)(j - (gw - 1));
            coords[(i * tw + j) * 2] = copysign(log1p(fabs(dh)), dh);
            coords[(i * tw + j) * 2 + 1] = copysign(log1p(fabs(dw)), dw);
        }
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++)
            idx[i * N + j] = (double)((i / gw - j / gw + gh - 1) * tw + (i % gw - j % gw + gw - 1));
    b_push(b, "rel_pos");
    ValueId index = b_const(b, "relative_position_index", (CtShape){1, {N * N}}, CT_I32, idx);
    ValueId table = b_const(b, "rel_coords_log", (CtShape){3, {th, tw, 2}}, CT_F32, coords);
    free(coords);
    free(idx);
    b_push(b, "mlp");
    ValueId t = f_dropout(b, f_relu(b, linear(b, "fc1", table, v->mlp_hidden, 0)), 0.125);
    t = linear(b, "fc2", t, H, 0);
    b_pop(b);
    b_pop(b);
    t = f_gather(b, f_reshape(b, t, 2, (int64_t[]){th * tw, H}), 0, index);
    t = f_permute(b, f_reshape(b, t, 3, (int64_t[]){N, N, H}), 3, (int64_t[]){2, 0, 1});
    t = f_reshape(b, t, 4, (int64_t[]){1, H, N, N});
    return prefix ? f_pad(b, t, prefix, 0, prefix, 0, 0) : t;
}

static ValueId attention(Builder *b, const RelPosArch *v, ValueId x, int64_t gh, int64_t gw)
{
    int64_t D = b_shape(b, x)->d[2], H = v->heads, hd = D / H;
    b_push(b, "attn");
    ValueId qkv = linear(b, "qkv", x, 3 * D, 1);
    ValueId bias = rel_pos_mlp(b, v, gh, gw, v->class_token);
    x = f_attention_qkv(b, qkv, H, bias, 1.0 / sqrt((double)hd));
    x = linear(b, "proj", x, D, 0);
    b_pop(b);
    return x;
}

/* LayerScale (init_values 1e-6): x * gamma. */
static ValueId layer_scale(Builder *b, const char *name, ValueId x, int64_t D)
{
    b_push(b, "%s", name);
    ValueId g = b_param(b, "gamma", (CtShape){1, {D}}, init_constant(1e-6));
    b_pop(b);
    return f_mul(b, x, g);
}

static ValueId build_relpos(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const RelPosArch *v = m->arch;
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], D = v->dim;
    int64_t gh = s->d[2] / v->patch, gw = s->d[3] / v->patch, N = gh * gw;
    ValueId cls = v->class_token ? b_param(b, "cls_token", (CtShape){3, {1, 1, D}}, init_normal(1e-6)) : -1;
    x = nn_patch_embed(b, "patch_embed", x, D, v->patch, 1);
    if (cls >= 0)
        x = f_concat(b, 2, (ValueId[]){f_expand(b, cls, 3, (int64_t[]){B, 1, D}), x}, 1);
    b_push(b, "blocks");
    for (int i = 0; i < v->depth; i++) {
        double dpr = v->depth > 1 ? a->drop_path_rate * i / (v->depth - 1) : 0;
        b_push(b, "%d", i);
        ValueId y = layer_scale(b, "ls1", attention(b, v, layer_norm(b, "norm1", x), gh, gw), D);
        x = f_add(b, x, f_drop_path(b, y, dpr));
        y = layer_norm(b, "norm2", x);
        b_push(b, "mlp");
        y = linear(b, "fc2", f_gelu(b, linear(b, "fc1", y, (int64_t)(D * v->mlp_ratio), 0), 0), D, 0);
        b_pop(b);
        x = f_add(b, x, f_drop_path(b, layer_scale(b, "ls2", y, D), dpr));
        b_pop(b);
    }
    b_pop(b);
    if (!v->fc_norm)
        x = layer_norm(b, "norm", x);
    if (x < 0)
        return -1;
    if (v->pool_token) {
        x = f_slice(b, x, 1, 0, 1, 1);
    } else {
        int64_t from = v->class_token;
        x = f_scale_shift(b, f_reduce_sum(b, f_slice(b, x, 1, from, N + from, 1), 2), 1.0 / (double)N, 0.0);
    }
    x = f_reshape(b, x, 2, (int64_t[]){B, D});
    if (v->fc_norm)
        x = layer_norm(b, "fc_norm", x);
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return linear(b, "head", x, classes, 0);
}

static const char *const relpos_no_wd[] = {"cls_token", NULL};

#define RELPOS_CFG(tag_, size, crop)                                                                           \
    {.tag = tag_, .input_size = {3, size, size}, .mean = {0.5, 0.5, 0.5}, .std = {0.5, 0.5, 0.5},              \
     .crop_pct = crop, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                 \
     .first_conv = "patch_embed.proj", .classifier = "head", .fixed_input_size = 1}

/* patch, dim, depth, heads, mlp_ratio, class_token, pool_token, fc_norm, rel_pos_dim (RelPosMlp's 128 default) */
static const RelPosArch vtest = {16, 96, 9, 3, 2, 0, 0, 1, 128};
static const RelPosArch small16 = {16, 384, 12, 6, 4, 0, 0, 1, 128};
static const RelPosArch medium16 = {16, 512, 12, 8, 4, 0, 0, 1, 128};
static const RelPosArch base16 = {16, 768, 12, 12, 4, 0, 0, 1, 128};
static const RelPosArch medium16_cls = {16, 512, 12, 8, 4, 1, 1, 0, 256};
static const RelPosArch base16_clsgap = {16, 768, 12, 12, 4, 1, 0, 1, 128};

static const ModelEntry entries[] = {
    {"test_vit_relpos", build_relpos, &vtest, RELPOS_CFG("untrained", 160, 0.95), relpos_no_wd},
    {"vit_relpos_base_patch16_224", build_relpos, &base16, RELPOS_CFG("sw_in1k", 224, 0.9), relpos_no_wd},
    {"vit_relpos_base_patch16_clsgap_224", build_relpos, &base16_clsgap, RELPOS_CFG("sw_in1k", 224, 0.9),
     relpos_no_wd},
    {"vit_relpos_medium_patch16_224", build_relpos, &medium16, RELPOS_CFG("sw_in1k", 224, 0.9), relpos_no_wd},
    {"vit_relpos_medium_patch16_cls_224", build_relpos, &medium16_cls, RELPOS_CFG("sw_in1k", 224, 0.9),
     relpos_no_wd},
    {"vit_relpos_small_patch16_224", build_relpos, &small16, RELPOS_CFG("sw_in1k", 224, 0.9), relpos_no_wd},
};

/* VisionTransformerRelPos.group_matcher: the final norm with the last block */
static const GroupRule groups[] = {
    {"^cls_token|patch_embed", 0, LG_NO_SUFFIX},
    {"^blocks\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^norm", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily vit_relpos_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
