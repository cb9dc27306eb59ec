/*
 * Vision Transformer family (timm/models/vision_transformer.py, deit.py):
 * patch embedding conv, class token, learned position embedding, pre-norm
 * blocks (LayerNorm eps 1e-6, fused-qkv attention, GELU MLP), final norm and
 * class-token pooling. Init as timm's init_weights_vit_timm: trunc_normal(.02)
 * linears with zero bias, pos_embed trunc_normal(.02), cls_token normal(1e-6),
 * the patch conv left at PyTorch's default.
 */
#include <math.h>

#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct VitArch {
    int patch, dim, depth, heads;
    double mlp_ratio;
} VitArch;

static const double LN_EPS = 1e-6;

static ValueId vit_linear(Builder *b, const char *name, ValueId x, int64_t out)
{
    return nn_linear(b, name, x, out, (LinearOpts){.weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
}

/* Attention: qkv [B,N,3D] -> q,k,v [B,H,N,hd] -> sdpa -> [B,N,D] -> proj. */
static ValueId attention(Builder *b, ValueId x, int64_t heads)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], N = s->d[1], D = s->d[2], hd = D / heads;
    b_push(b, "attn");
    ValueId qkv = vit_linear(b, "qkv", x, 3 * D);
    qkv = f_reshape(b, qkv, 5, (int64_t[]){B, N, 3, heads, hd});
    qkv = f_permute(b, qkv, 5, (int64_t[]){2, 0, 3, 1, 4});
    ValueId t[3];
    for (int i = 0; i < 3; i++)
        t[i] = f_reshape(b, f_slice(b, qkv, 0, i, i + 1, 1), 4, (int64_t[]){B, heads, N, hd});
    x = f_sdpa(b, t[0], t[1], t[2], 1.0 / sqrt((double)hd));
    x = f_permute(b, x, 4, (int64_t[]){0, 2, 1, 3});
    x = f_reshape(b, x, 3, (int64_t[]){B, N, D});
    x = vit_linear(b, "proj", x, D);
    b_pop(b);
    return x;
}

static ValueId mlp(Builder *b, ValueId x, int64_t hidden)
{
    int64_t D = b_shape(b, x)->d[2];
    b_push(b, "mlp");
    x = f_gelu(b, vit_linear(b, "fc1", x, hidden), 0);
    x = vit_linear(b, "fc2", x, D);
    b_pop(b);
    return x;
}

static ValueId embed(Builder *b, const VitArch *v, ValueId x)
{
    int64_t B = b_shape(b, x)->d[0], D = v->dim;
    if (b_shape(b, x)->d[2] % v->patch || b_shape(b, x)->d[3] % v->patch)
        return b_fail(b, "image size %lldx%lld is not a multiple of the patch size %d",
                      (long long)b_shape(b, x)->d[2], (long long)b_shape(b, x)->d[3], v->patch);
    ValueId cls = b_param(b, "cls_token", (CtShape){3, {1, 1, D}}, init_normal(1e-6));
    b_push(b, "patch_embed");
    x = nn_conv2d(b, "proj", x, D, v->patch, (ConvOpts){.stride = v->patch, .bias = 1});
    b_pop(b);
    if (x < 0)
        return -1;
    int64_t N = b_shape(b, x)->d[2] * b_shape(b, x)->d[3];
    x = f_permute(b, f_reshape(b, x, 3, (int64_t[]){B, D, N}), 3, (int64_t[]){0, 2, 1});
    ValueId pos = b_param(b, "pos_embed", (CtShape){3, {1, N + 1, D}}, init_trunc_normal(.02));
    x = f_concat(b, 2, (ValueId[]){f_expand(b, cls, 3, (int64_t[]){B, 1, D}), x}, 1);
    return f_add(b, x, pos);
}

static ValueId build_vit(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const VitArch *v = m->arch;
    x = embed(b, v, x);
    b_push(b, "blocks");
    for (int i = 0; i < v->depth; i++) {
        double dpr = v->depth > 1 ? a->drop_path_rate * i / (v->depth - 1) : 0;
        b_push(b, "%d", i);
        x = f_add(b, x, f_drop_path(b, attention(b, nn_layer_norm(b, "norm1", x, LN_EPS), v->heads), dpr));
        x = f_add(b, x, f_drop_path(b, mlp(b, nn_layer_norm(b, "norm2", x, LN_EPS), (int64_t)(v->dim * v->mlp_ratio)), dpr));
        b_pop(b);
    }
    b_pop(b);
    x = nn_layer_norm(b, "norm", x, LN_EPS);
    if (x < 0)
        return -1;
    int64_t B = b_shape(b, x)->d[0];
    x = f_reshape(b, f_slice(b, x, 1, 0, 1, 1), 2, (int64_t[]){B, v->dim});
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return vit_linear(b, "head", x, classes);
}

static const char *const vit_no_wd[] = {"cls_token", "dist_token", "pos_embed", "reg_token", NULL};

#define VIT_CFG(tag_, size, crop, m0, m1, m2, s0, s1, s2)                                                      \
    {.tag = tag_, .input_size = {3, size, size}, .mean = {m0, m1, m2}, .std = {s0, s1, s2},                    \
     .crop_pct = crop, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                 \
     .first_conv = "patch_embed.proj", .classifier = "head", .fixed_input_size = 1}
#define INCEPTION(tag, size, crop) VIT_CFG(tag, size, crop, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5)
#define IMAGENET(tag, size, crop) VIT_CFG(tag, size, crop, 0.485, 0.456, 0.406, 0.229, 0.224, 0.225)

static const VitArch tiny16 = {16, 192, 12, 3, 4}, small16 = {16, 384, 12, 6, 4}, base16 = {16, 768, 12, 12, 4};
static const VitArch base32 = {32, 768, 12, 12, 4}, vtest = {16, 64, 6, 2, 3};

static const ModelEntry entries[] = {
    {"deit_tiny_patch16_224", build_vit, &tiny16, IMAGENET("fb_in1k", 224, 0.9), vit_no_wd},
    {"test_vit", build_vit, &vtest, INCEPTION("r160_in1k", 160, 0.95), vit_no_wd},
    {"vit_base_patch16_224", build_vit, &base16, INCEPTION("augreg2_in21k_ft_in1k", 224, 0.9), vit_no_wd},
    {"vit_base_patch32_384", build_vit, &base32, INCEPTION("augreg_in21k_ft_in1k", 384, 1.0), vit_no_wd},
    {"vit_small_patch16_224", build_vit, &small16, INCEPTION("augreg_in21k_ft_in1k", 224, 0.9), vit_no_wd},
    {"vit_tiny_patch16_224", build_vit, &tiny16, INCEPTION("augreg_in21k_ft_in1k", 224, 0.9), vit_no_wd},
};

/* VisionTransformer.group_matcher: the final norm joins the last block */
static const GroupRule groups[] = {
    {"^cls_token|reg_token|pos_embed|patch_embed", 0, LG_NO_SUFFIX},
    {"^blocks\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^norm", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily vit_family = {entries, sizeof entries / sizeof entries[0], groups};
