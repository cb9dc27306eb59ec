/*
 * Vision Transformer family (timm/models/vision_transformer.py, deit.py): the
 * patch embedding conv, a class token and register tokens (either optional),
 * learned position embedding (over the prefix tokens too, or with
 * no_embed_class over the patches only), an optional pre-norm (CLIP), pre-norm
 * blocks (fused-qkv attention, GELU MLP, layer scale where init_values), then
 * the final norm and pooling: the class token, the mean of the tokens (then
 * fc_norm instead of the final norm, unless fc_norm says otherwise), or MAP (AttentionPoolLatent: a learned latent query attending to
 * the tokens, then an MLP). LayerNorm eps 1e-6 (CLIP's 1e-5), or RmsNorm.
 * Init as timm's init_weights_vit_timm: trunc_normal(.02) linears with zero
 * bias, pos_embed trunc_normal(.02), cls/reg tokens normal(1e-6), the MAP
 * latent trunc_normal_tf(dim^-0.5), layer scales init_values, the patch conv
 * left at PyTorch's default. A run's global_pool, class_token, reg_tokens,
 * fc_norm, no_embed_class, init_values and qkv_bias (create_model's kwargs)
 * replace the registered model's, as timm's model_args dict(model_args, **kwargs).
 */
#include <math.h>
#include <string.h>

#include "models/layer_groups.h"
#include "models/registry.h"

enum { POOL_TOKEN, POOL_AVG, POOL_MAP };
enum { NORM_LN, NORM_LN_EPS5, NORM_RMS };

typedef struct VitArch {
    int patch, dim, depth, heads;
    double mlp_ratio;
    int no_class_token, reg_tokens, no_embed_class, pre_norm;
    int pool;                /* POOL_* */
    int fc_norm;             /* timm's fc_norm: 0 None (the final norm after avg pooling, else before), 1 True, -1 False */
    int no_qkv_bias;
    int pool_include_prefix; /* MAP / avg over the prefix tokens too */
    double init_values;      /* layer scale; 0: none */
    int norm;                /* NORM_* */
    int quick_gelu;          /* act_layer 'quick_gelu' (OpenAI CLIP's): x * sigmoid(1.702 x) */
} VitArch;

static ValueId vit_linear_opt(Builder *b, const char *name, ValueId x, int64_t out, int no_bias)
{
    return nn_linear(b, name, x, out,
                     (LinearOpts){.no_bias = no_bias, .weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
}

static ValueId vit_linear(Builder *b, const char *name, ValueId x, int64_t out)
{
    return vit_linear_opt(b, name, x, out, 0);
}

/* timm's RmsNorm (eps 1e-6): x * rsqrt(mean(x^2) + eps) * weight over the last dim. */
static ValueId rms_norm(Builder *b, const char *name, ValueId x)
{
    const CtShape *s = b_shape(b, x);
    int64_t D = s->d[s->ndim - 1], last = (int64_t)1 << (s->ndim - 1); /* s is gone once a value is added */
    b_push(b, "%s", name);
    ValueId w = b_param(b, "weight", (CtShape){1, {D}}, init_ones());
    b_pop(b);
    ValueId ms = f_scale_shift(b, f_reduce_sum(b, f_mul(b, x, x), last), 1.0 / (double)D, 1e-6);
    return f_mul(b, f_mul(b, x, f_rsqrt(b, ms)), w);
}

static ValueId norm(Builder *b, const VitArch *v, const char *name, ValueId x)
{
    if (v->norm == NORM_RMS)
        return rms_norm(b, name, x);
    return nn_layer_norm(b, name, x, v->norm == NORM_LN_EPS5 ? 1e-5 : 1e-6);
}

/* q [B,H,Nq,hd], k and v [B,H,N,hd] -> sdpa -> [B,Nq,D]. */
static ValueId attend(Builder *b, ValueId q, ValueId k, ValueId v)
{
    return f_merge_heads(b, f_sdpa(b, q, k, v, 1.0 / sqrt((double)b_shape(b, q)->d[3])));
}

/* Attention: qkv [B,N,3D] -> sdpa of its heads -> [B,N,D] -> proj. */
static ValueId attention(Builder *b, const VitArch *v, ValueId x)
{
    int64_t D = b_shape(b, x)->d[2];
    b_push(b, "attn");
    ValueId qkv = vit_linear_opt(b, "qkv", x, 3 * D, v->no_qkv_bias);
    x = vit_linear(b, "proj", f_attention_qkv(b, qkv, v->heads, -1, 1.0 / sqrt((double)(D / v->heads))), D);
    b_pop(b);
    return x;
}

static ValueId act(Builder *b, const VitArch *v, ValueId x)
{
    return v->quick_gelu ? f_mul(b, x, f_sigmoid(b, f_scale_shift(b, x, 1.702, 0.0))) : f_gelu(b, x, 0);
}

static ValueId mlp(Builder *b, const VitArch *v, ValueId x, int64_t hidden)
{
    int64_t D = b_shape(b, x)->d[2];
    b_push(b, "mlp");
    x = act(b, v, vit_linear(b, "fc1", x, hidden));
    x = vit_linear(b, "fc2", x, D);
    b_pop(b);
    return x;
}

/* LayerScale: x * gamma over the last dim. */
static ValueId layer_scale(Builder *b, const VitArch *v, const char *name, ValueId x)
{
    if (v->init_values == 0)
        return x;
    b_push(b, "%s", name);
    ValueId g = b_param(b, "gamma", (CtShape){1, {v->dim}}, init_constant(v->init_values));
    b_pop(b);
    return f_mul(b, x, f_reshape(b, g, 3, (int64_t[]){1, 1, v->dim}));
}

static int prefix_tokens(const VitArch *v) { return !v->no_class_token + v->reg_tokens; }

static ValueId embed(Builder *b, const VitArch *v, ValueId x)
{
    int64_t B = b_shape(b, x)->d[0], D = v->dim;
    ValueId parts[3]; /* the prefix tokens, then the patches */
    int np = 0;
    if (!v->no_class_token)
        parts[np++] = b_param(b, "cls_token", (CtShape){3, {1, 1, D}}, init_normal(1e-6));
    if (v->reg_tokens)
        parts[np++] = b_param(b, "reg_token", (CtShape){3, {1, v->reg_tokens, D}}, init_normal(1e-6));
    /* CLIP's pre-norm patch embedding has no bias */
    x = nn_patch_embed(b, "patch_embed", x, D, v->patch, !v->pre_norm);
    if (x < 0)
        return -1;
    int64_t N = b_shape(b, x)->d[1];
    int64_t embed_len = v->no_embed_class ? N : N + prefix_tokens(v);
    ValueId pos = b_param(b, "pos_embed", (CtShape){3, {1, embed_len, D}}, init_trunc_normal(.02));
    if (v->no_embed_class)
        x = f_add(b, x, pos);
    if (np) {
        for (int i = 0; i < np; i++)
            parts[i] = f_expand(b, parts[i], 3, (int64_t[]){B, b_shape(b, parts[i])->d[1], D});
        parts[np] = x;
        x = f_concat(b, np + 1, parts, 1);
    }
    return v->no_embed_class ? x : f_add(b, x, pos);
}

/* AttentionPoolLatent (one latent, q projection, pool 'token'): the latent
 * query attends to the tokens, then proj and a pre-norm MLP residual. */
static ValueId attn_pool(Builder *b, const VitArch *v, ValueId x)
{
    int64_t B = b_shape(b, x)->d[0], D = v->dim;
    b_push(b, "attn_pool");
    ValueId latent = b_param(b, "latent", (CtShape){3, {1, 1, D}}, init_trunc_normal_tf(1.0 / sqrt((double)D)));
    ValueId q[1], kv[2];
    f_split_heads(b, vit_linear(b, "q", f_expand(b, latent, 3, (int64_t[]){B, 1, D}), D), 1, v->heads, q);
    f_split_heads(b, vit_linear(b, "kv", x, 2 * D), 2, v->heads, kv);
    x = vit_linear(b, "proj", attend(b, q[0], kv[0], kv[1]), D);
    x = f_add(b, x, mlp(b, v, norm(b, v, "norm", x), (int64_t)(D * v->mlp_ratio)));
    b_pop(b);
    return f_reshape(b, x, 2, (int64_t[]){B, D});
}

static ValueId pool(Builder *b, const VitArch *v, ValueId x)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], N = s->d[1], D = s->d[2];
    int64_t from = v->pool_include_prefix ? 0 : prefix_tokens(v);
    if (v->pool == POOL_TOKEN)
        return f_reshape(b, f_slice(b, x, 1, 0, 1, 1), 2, (int64_t[]){B, D});
    if (from)
        x = f_slice(b, x, 1, from, N, 1);
    if (v->pool == POOL_MAP)
        return attn_pool(b, v, x);
    x = f_scale_shift(b, f_reduce_sum(b, x, 2), 1.0 / (double)(N - from), 0.0);
    return f_reshape(b, x, 2, (int64_t[]){B, D});
}

/* The registered arch under a run's options, with VisionTransformer.__init__'s checks. */
static int vit_options(Builder *b, const VitArch *reg, const ModelArgs *a, VitArch *v)
{
    static const char *const pools[] = {[POOL_TOKEN] = "token", [POOL_AVG] = "avg", [POOL_MAP] = "map"};
    *v = *reg;
    if (a->opt.set & MODEL_OPT_GLOBAL_POOL) {
        v->pool = -1;
        for (int i = 0; i < (int)(sizeof pools / sizeof *pools); i++)
            if (!strcmp(a->opt.global_pool, pools[i]))
                v->pool = i;
        if (v->pool < 0)
            return b_fail(b, "global_pool '%s' is not built (ctimm's ViTs pool by 'token', 'avg' or 'map'; timm's "
                          "'max', 'avgmax', 'prr' and '' are not)", a->opt.global_pool);
    }
    if (a->opt.set & MODEL_OPT_CLASS_TOKEN)
        v->no_class_token = !a->opt.class_token;
    if (a->opt.set & MODEL_OPT_REG_TOKENS)
        v->reg_tokens = a->opt.reg_tokens;
    if (a->opt.set & MODEL_OPT_FC_NORM)
        v->fc_norm = a->opt.fc_norm ? 1 : -1;
    if (a->opt.set & MODEL_OPT_NO_EMBED_CLASS)
        v->no_embed_class = a->opt.no_embed_class;
    if (a->opt.set & MODEL_OPT_INIT_VALUES)
        v->init_values = a->opt.init_values;
    if (a->opt.set & MODEL_OPT_QKV_BIAS)
        v->no_qkv_bias = !a->opt.qkv_bias;
    if (v->no_class_token && v->pool == POOL_TOKEN)
        return b_fail(b, "token pooling needs the class token (timm's assertion): with class_token=False give "
                      "global_pool 'avg' or 'map'");
    return 0;
}

static ValueId build_vit(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    VitArch arch;
    if (vit_options(b, m->arch, a, &arch))
        return -1;
    const VitArch *v = &arch;
    /* timm's use_fc_norm: the final norm after the pooling, not before */
    int fc_norm = v->fc_norm ? v->fc_norm > 0 : v->pool == POOL_AVG;
    x = embed(b, v, x);
    if (v->pre_norm)
        x = norm(b, v, "norm_pre", x);
    b_push(b, "blocks");
    for (int i = 0; i < v->depth; i++) {
        double dpr = v->depth > 1 ? a->drop_path_rate * i / (v->depth - 1) : 0;
        b_push(b, "%d", i);
        ValueId y = layer_scale(b, v, "ls1", attention(b, v, norm(b, v, "norm1", x)));
        x = f_add(b, x, f_drop_path(b, y, dpr));
        y = layer_scale(b, v, "ls2", mlp(b, v, norm(b, v, "norm2", x), (int64_t)(v->dim * v->mlp_ratio)));
        x = f_add(b, x, f_drop_path(b, y, dpr));
        b_pop(b);
    }
    b_pop(b);
    if (!fc_norm)
        x = norm(b, v, "norm", x);
    if (x < 0)
        return -1;
    x = pool(b, v, x);
    if (fc_norm)
        x = norm(b, v, "fc_norm", x);
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return vit_linear(b, "head", x, classes);
}

static const char *const vit_no_wd[] = {"cls_token", "dist_token", "pos_embed", "reg_token", NULL};

#define VIT_CFG(tag_, size, crop, m0, m1, m2, s0, s1, s2, classes)                                             \
    {.tag = tag_, .input_size = {3, size, size}, .mean = {m0, m1, m2}, .std = {s0, s1, s2},                    \
     .crop_pct = crop, .crop_mode = "center", .interpolation = "bicubic", .num_classes = classes,              \
     .first_conv = "patch_embed.proj", .classifier = "head", .fixed_input_size = 1}
#define INCEPTION(tag, size, crop) VIT_CFG(tag, size, crop, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1000)
#define IMAGENET(tag, size, crop) VIT_CFG(tag, size, crop, 0.485, 0.456, 0.406, 0.229, 0.224, 0.225, 1000)
#define OPENAI_CLIP(tag, size, crop)                                                                           \
    VIT_CFG(tag, size, crop, 0.48145466, 0.4578275, 0.40821073, 0.26862954, 0.26130258, 0.27577711, 1000)
/* image-text and self-supervised weights: no classifier (num_classes 0) */
#define FEATURES(tag, size, crop, m0, m1, m2, s0, s1, s2) VIT_CFG(tag, size, crop, m0, m1, m2, s0, s1, s2, 0)

#define VIT(p, d, n, h, r) .patch = p, .dim = d, .depth = n, .heads = h, .mlp_ratio = r
static const VitArch tiny16 = {VIT(16, 192, 12, 3, 4)}, small16 = {VIT(16, 384, 12, 6, 4)};
static const VitArch base16 = {VIT(16, 768, 12, 12, 4)}, base32 = {VIT(32, 768, 12, 12, 4)};
static const VitArch vtest = {VIT(16, 64, 6, 2, 3)};
static const VitArch deit3_small = {VIT(16, 384, 12, 6, 4), .no_embed_class = 1, .init_values = 1e-6};
static const VitArch deit3_base = {VIT(16, 768, 12, 12, 4), .no_embed_class = 1, .init_values = 1e-6};
static const VitArch clip_base16 = {VIT(16, 768, 12, 12, 4), .pre_norm = 1, .norm = NORM_LN_EPS5};
static const VitArch clip_quickgelu_base16 = {VIT(16, 768, 12, 12, 4), .pre_norm = 1, .norm = NORM_LN_EPS5,
                                              .quick_gelu = 1};
static const VitArch siglip_base16 = {VIT(16, 768, 12, 12, 4), .no_class_token = 1, .pool = POOL_MAP};
static const VitArch dinov2_small14 = {VIT(14, 384, 12, 6, 4), .init_values = 1e-5};
static const VitArch reg4_gap_base16 = {VIT(16, 768, 12, 12, 4), .no_class_token = 1, .no_embed_class = 1,
                                        .pool = POOL_AVG, .reg_tokens = 4};
static const VitArch vtest2 = {VIT(16, 64, 8, 2, 3), .no_class_token = 1, .reg_tokens = 1, .pool = POOL_AVG,
                               .init_values = 1e-5};
static const VitArch vtest3 = {VIT(16, 96, 9, 3, 2), .no_class_token = 1, .reg_tokens = 1, .pool = POOL_MAP,
                               .pool_include_prefix = 1, .init_values = 1e-5};
static const VitArch vtest4 = {VIT(16, 96, 9, 3, 3), .no_class_token = 1, .reg_tokens = 1, .pool = POOL_AVG,
                               .init_values = 1e-5, .norm = NORM_RMS};

static const ModelEntry entries[] = {
    {"deit3_base_patch16_224", build_vit, &deit3_base, IMAGENET("fb_in1k", 224, 0.9), vit_no_wd},
    {"deit3_small_patch16_224", build_vit, &deit3_small, IMAGENET("fb_in1k", 224, 0.9), vit_no_wd},
    {"deit_tiny_patch16_224", build_vit, &tiny16, IMAGENET("fb_in1k", 224, 0.9), vit_no_wd},
    {"test_vit", build_vit, &vtest, INCEPTION("r160_in1k", 160, 0.95), vit_no_wd},
    {"test_vit2", build_vit, &vtest2, INCEPTION("r160_in1k", 160, 0.95), vit_no_wd},
    {"test_vit3", build_vit, &vtest3, INCEPTION("r160_in1k", 160, 0.95), vit_no_wd},
    {"test_vit4", build_vit, &vtest4, INCEPTION("r160_in1k", 160, 0.95), vit_no_wd},
    {"vit_base_patch16_224", build_vit, &base16, INCEPTION("augreg2_in21k_ft_in1k", 224, 0.9), vit_no_wd},
    {"vit_base_patch16_clip_224", build_vit, &clip_base16, OPENAI_CLIP("laion2b_ft_in12k_in1k", 224, 0.95), vit_no_wd},
    /* the image tower with its 512-wide projection as the head */
    {"vit_base_patch16_clip_quickgelu_224", build_vit, &clip_quickgelu_base16,
     VIT_CFG("metaclip_2pt5b", 224, 1.0, 0.48145466, 0.4578275, 0.40821073, 0.26862954, 0.26130258, 0.27577711, 512),
     vit_no_wd},
    {"vit_base_patch16_reg4_gap_256", build_vit, &reg4_gap_base16, INCEPTION("untrained", 256, 0.9), vit_no_wd},
    {"vit_base_patch16_siglip_224", build_vit, &siglip_base16,
     FEATURES("v2_webli", 224, 0.9, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5), vit_no_wd},
    {"vit_base_patch32_384", build_vit, &base32, INCEPTION("augreg_in21k_ft_in1k", 384, 1.0), vit_no_wd},
    {"vit_small_patch14_dinov2", build_vit, &dinov2_small14,
     FEATURES("lvd142m", 518, 1.0, 0.485, 0.456, 0.406, 0.229, 0.224, 0.225), vit_no_wd},
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

const ModelFamily vit_family = {entries, sizeof entries / sizeof entries[0], groups,
                                MODEL_OPT_GLOBAL_POOL | MODEL_OPT_CLASS_TOKEN | MODEL_OPT_REG_TOKENS |
                                    MODEL_OPT_FC_NORM | MODEL_OPT_NO_EMBED_CLASS | MODEL_OPT_INIT_VALUES |
                                    MODEL_OPT_QKV_BIAS, 0};
