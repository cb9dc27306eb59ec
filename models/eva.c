/*
 * EVA-02 (timm/models/eva.py, class Eva): a ViT whose attention rotates the
 * patch tokens' queries and keys by an axial rotary position embedding
 * (RotaryEmbeddingCat) on top of the learned absolute one, with a packed
 * SwiGLU MLP (GluMlp: fc1 to twice the hidden width, silu of the first half
 * times the second, fc2). The qkv projection has no bias of its own: q_bias
 * and v_bias params around timm's zero, non-persistent k_bias. Mean pooling
 * over the patches with fc_norm (the class token and the final norm with
 * 'token' pooling). LayerNorm eps 1e-6.
 * Init as Eva.init_weights: trunc_normal(.02) linears with zero biases,
 * pos_embed and cls_token trunc_normal(.02), then fix_init_weight (block
 * i's attn.proj and mlp.fc2 weights over sqrt(2 (i + 1))) and the head
 * scaled by head_init_scale 0.001; the patch conv at PyTorch's default.
 * A run's global_pool ('avg', 'token'), class_token, init_values (layer
 * scale gamma_1 / gamma_2) and qkv_bias replace the registered model's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/layer_groups.h"
#include "models/registry.h"

enum { POOL_AVG, POOL_TOKEN };

typedef struct EvaArch {
    int patch, dim, depth, heads;
    double mlp_ratio;
    int ref_grid; /* ref_feat_shape: the RoPE grid's coordinates are rescaled onto ref_grid x ref_grid */
    int no_class_token, pool, no_qkv_bias;
    double init_values; /* layer scale; 0: none */
} EvaArch;

static const double head_init_scale = 0.001;

static ValueId linear(Builder *b, const char *name, ValueId x, int64_t out, double std, int no_bias)
{
    return nn_linear(b, name, x, out,
                     (LinearOpts){.no_bias = no_bias, .weight_init = init_trunc_normal(std), .bias_init = init_zeros()});
}

/* RotaryEmbeddingCat(in_pixels=False, temperature 1e4, 'ij') of a gh x gw
 * patch grid for head_dim hd, timm's non-persistent "rope.pos_embed"
 * [N, 2 hd]: sin then cos of each position's angles, the row coordinate's
 * hd/4 bands then the column's, each repeated twice (the interleaved
 * layout). timm computes it in float32: so is each step here, rounded
 * where torch rounds; the bands and angles come out bit-equal, the sines
 * and cosines correctly rounded, where torch's vectorised float32 ones are
 * a unit in the last place off for some 6% of them. */
static ValueId rope_table(Builder *b, int gh, int gw, int ref, int64_t hd)
{
    int64_t nb = hd / 4, n = (int64_t)gh * gw;
    double *t = malloc(sizeof *t * (size_t)(n * 2 * hd));
    float *band = malloc(sizeof *band * (size_t)nb);
    CT_ASSERT(t && band);
    for (int64_t k = 0; k < nb; k++)
        band[k] = (float)(1.0 / (double)(float)pow(1e4, (double)((float)k / (float)nb)));
    for (int i = 0; i < gh; i++)
        for (int j = 0; j < gw; j++) {
            float c[2] = {(float)((float)i / (float)gh) * (float)ref, (float)((float)j / (float)gw) * (float)ref};
            double *row = t + (int64_t)(i * gw + j) * 2 * hd;
            for (int a = 0; a < 2; a++)
                for (int64_t k = 0; k < nb; k++) {
                    float ang = c[a] * band[k];
                    int64_t at = 2 * (a * nb + k);
                    row[at] = row[at + 1] = (float)sin((double)ang);
                    row[hd + at] = row[hd + at + 1] = (float)cos((double)ang);
                }
        }
    b_push(b, "rope");
    ValueId v = b_const(b, "pos_embed", (CtShape){2, {n, 2 * hd}}, b->param_dtype, t);
    b_pop(b);
    free(t);
    free(band);
    return v;
}

/* apply_rot_embed_cat(x, rope) (interleaved): x * cos + rot(x) * sin, rot
 * turning each pair (x0, x1) into (-x1, x0). x [B,H,N,hd], rope [N, 2 hd]. */
static ValueId rotate(Builder *b, ValueId x, ValueId rope)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1], N = s->d[2], hd = s->d[3];
    ValueId sin = f_reshape(b, f_slice(b, rope, 1, 0, hd, 1), 4, (int64_t[]){1, 1, N, hd});
    ValueId cos = f_reshape(b, f_slice(b, rope, 1, hd, 2 * hd, 1), 4, (int64_t[]){1, 1, N, hd});
    ValueId pairs = f_reshape(b, x, 5, (int64_t[]){B, H, N, hd / 2, 2});
    ValueId rot[2] = {f_scale_shift(b, f_slice(b, pairs, 4, 1, 2, 1), -1, 0), f_slice(b, pairs, 4, 0, 1, 1)};
    ValueId r = f_reshape(b, f_concat(b, 2, rot, 4), 4, (int64_t[]){B, H, N, hd});
    return f_add(b, f_mul(b, x, cos), f_mul(b, r, sin));
}

/* The patch tokens of x [B,H,N,hd] rotated, the npt prefix tokens as they are. */
static ValueId rope_patches(Builder *b, ValueId x, ValueId rope, int npt)
{
    int64_t N = b_shape(b, x)->d[2];
    if (!npt)
        return rotate(b, x, rope);
    ValueId parts[2] = {f_slice(b, x, 2, 0, npt, 1), rotate(b, f_slice(b, x, 2, npt, N, 1), rope)};
    return f_concat(b, 2, parts, 2);
}

/* EvaAttention (fused qkv, no q/k norm, no inner scale norm). */
static ValueId attention(Builder *b, const EvaArch *v, ValueId x, ValueId rope, double proj_std)
{
    int64_t D = b_shape(b, x)->d[2], hd = D / v->heads;
    int npt = !v->no_class_token;
    b_push(b, "attn");
    ValueId qkv = linear(b, "qkv", x, 3 * D, .02, 1);
    if (!v->no_qkv_bias) {
        ValueId bias[3] = {b_param(b, "q_bias", (CtShape){1, {D}}, init_zeros()), -1,
                           b_param(b, "v_bias", (CtShape){1, {D}}, init_zeros())};
        /* timm's F.linear(x, qkv.weight, cat(q_bias, k_bias, v_bias)), k_bias a zero buffer */
        bias[1] = b_const(b, "k_bias", (CtShape){1, {D}}, b->param_dtype, NULL);
        qkv = f_add(b, qkv, f_concat(b, 3, bias, 0));
    }
    ValueId t[3];
    f_split_heads(b, qkv, 3, v->heads, t);
    ValueId q = rope_patches(b, t[0], rope, npt), k = rope_patches(b, t[1], rope, npt);
    x = f_merge_heads(b, f_sdpa(b, q, k, t[2], 1.0 / sqrt((double)hd)));
    x = linear(b, "proj", x, D, proj_std, 0);
    b_pop(b);
    return x;
}

/* GluMlp(act SiLU, gate_last=False): silu(first half of fc1) * second half. */
static ValueId glu_mlp(Builder *b, const EvaArch *v, ValueId x, double fc2_std)
{
    int64_t hidden = (int64_t)(v->dim * v->mlp_ratio);
    b_push(b, "mlp");
    x = linear(b, "fc1", x, 2 * hidden, .02, 0);
    x = f_mul(b, f_silu(b, f_slice(b, x, 2, 0, hidden, 1)), f_slice(b, x, 2, hidden, 2 * hidden, 1));
    x = linear(b, "fc2", x, v->dim, fc2_std, 0);
    b_pop(b);
    return x;
}

static ValueId layer_scale(Builder *b, const EvaArch *v, const char *name, ValueId x)
{
    if (v->init_values == 0)
        return x;
    return f_mul(b, x, b_param(b, name, (CtShape){1, {v->dim}}, init_constant(v->init_values)));
}

static ValueId embed(Builder *b, const EvaArch *v, ValueId x)
{
    int64_t B = b_shape(b, x)->d[0], D = v->dim;
    ValueId cls = v->no_class_token ? -1 : b_param(b, "cls_token", (CtShape){3, {1, 1, D}}, init_trunc_normal(.02));
    x = nn_patch_embed(b, "patch_embed", x, D, v->patch, 1);
    if (x < 0)
        return -1;
    int64_t N = b_shape(b, x)->d[1];
    ValueId pos = b_param(b, "pos_embed", (CtShape){3, {1, N + !v->no_class_token, D}}, init_trunc_normal(.02));
    if (cls >= 0)
        x = f_concat(b, 2, (ValueId[]){f_expand(b, cls, 3, (int64_t[]){B, 1, D}), x}, 1);
    return f_add(b, x, pos);
}

static int eva_options(Builder *b, const EvaArch *reg, const ModelArgs *a, EvaArch *v)
{
    *v = *reg;
    if (a->opt.set & MODEL_OPT_GLOBAL_POOL) {
        if (!strcmp(a->opt.global_pool, "avg"))
            v->pool = POOL_AVG;
        else if (!strcmp(a->opt.global_pool, "token"))
            v->pool = POOL_TOKEN;
        else
            return b_fail(b, "global_pool '%s' is not built (ctimm's EVA pools by 'avg' or 'token'; timm's 'max', "
                          "'avgmax', 'map' and '' are not)", a->opt.global_pool);
    }
    if (a->opt.set & MODEL_OPT_CLASS_TOKEN)
        v->no_class_token = !a->opt.class_token;
    if (a->opt.set & MODEL_OPT_INIT_VALUES)
        v->init_values = a->opt.init_values;
    if (a->opt.set & MODEL_OPT_QKV_BIAS)
        v->no_qkv_bias = !a->opt.qkv_bias;
    if (v->no_class_token && v->pool == POOL_TOKEN)
        return b_fail(b, "token pooling needs the class token (timm's assertion): with class_token=False give "
                      "global_pool 'avg'");
    return 0;
}

static ValueId build_eva(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    EvaArch arch;
    if (eva_options(b, m->arch, a, &arch))
        return -1;
    const EvaArch *v = &arch;
    const CtShape *s = b_shape(b, x);
    int gh = (int)(s->d[2] / v->patch), gw = (int)(s->d[3] / v->patch);
    x = embed(b, v, x);
    ValueId rope = rope_table(b, gh, gw, v->ref_grid, v->dim / v->heads);
    b_push(b, "blocks");
    for (int i = 0; i < v->depth; i++) {
        double dpr = v->depth > 1 ? a->drop_path_rate * i / (v->depth - 1) : 0;
        double rescaled = .02 / sqrt(2.0 * (i + 1)); /* fix_init_weight */
        b_push(b, "%d", i);
        ValueId y = layer_scale(b, v, "gamma_1", attention(b, v, nn_layer_norm(b, "norm1", x, 1e-6), rope, rescaled));
        x = f_add(b, x, f_drop_path(b, y, dpr));
        y = layer_scale(b, v, "gamma_2", glu_mlp(b, v, nn_layer_norm(b, "norm2", x, 1e-6), rescaled));
        x = f_add(b, x, f_drop_path(b, y, dpr));
        b_pop(b);
    }
    b_pop(b);
    s = b_shape(b, x);
    int64_t B = s->d[0], N = s->d[1], D = s->d[2];
    if (v->pool == POOL_TOKEN) {
        x = nn_layer_norm(b, "norm", x, 1e-6);
        x = f_reshape(b, f_slice(b, x, 1, 0, 1, 1), 2, (int64_t[]){B, D});
    } else {
        int64_t from = !v->no_class_token;
        x = f_scale_shift(b, f_reduce_sum(b, f_slice(b, x, 1, from, N, 1), 2), 1.0 / (double)(N - from), 0.0);
        x = nn_layer_norm(b, "fc_norm", f_reshape(b, x, 2, (int64_t[]){B, D}), 1e-6);
    }
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return linear(b, "head", x, classes, .02 * head_init_scale, 0);
}

static const char *const eva_no_wd[] = {"pos_embed", "cls_token", "reg_token", NULL};

#define EVA02_CFG(tag_)                                                                                        \
    {.tag = tag_, .input_size = {3, 224, 224}, .mean = {0.48145466, 0.4578275, 0.40821073},                    \
     .std = {0.26862954, 0.26130258, 0.27577711}, .crop_pct = 0.9, .crop_mode = "center",                      \
     .interpolation = "bicubic", .num_classes = 0, .first_conv = "patch_embed.proj", .classifier = "head",     \
     .fixed_input_size = 1}

static const EvaArch eva02_tiny14 = {.patch = 14, .dim = 192, .depth = 12, .heads = 3, .mlp_ratio = 4 * 2.0 / 3,
                                     .ref_grid = 16};
static const EvaArch eva02_small14 = {.patch = 14, .dim = 384, .depth = 12, .heads = 6, .mlp_ratio = 4 * 2.0 / 3,
                                      .ref_grid = 16};

static const ModelEntry entries[] = {
    {"eva02_small_patch14_224", build_eva, &eva02_small14, EVA02_CFG("mim_in22k"), eva_no_wd},
    {"eva02_tiny_patch14_224", build_eva, &eva02_tiny14, EVA02_CFG("mim_in22k"), eva_no_wd},
};

/* Eva.group_matcher: the final norm joins the last block */
static const GroupRule groups[] = {
    {"^cls_token|reg_token|pos_embed|patch_embed|norm_pre", 0, LG_NO_SUFFIX},
    {"^blocks\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^norm", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily eva_family = {entries, sizeof entries / sizeof entries[0], groups,
                                MODEL_OPT_GLOBAL_POOL | MODEL_OPT_CLASS_TOKEN | MODEL_OPT_INIT_VALUES |
                                    MODEL_OPT_QKV_BIAS, 0};
