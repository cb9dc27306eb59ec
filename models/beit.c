/*
 * BEiT (timm/models/beit.py): a ViT whose attention adds a relative position
 * bias per head, gathered from a table of (2h-1)(2w-1) patch offsets plus
 * three class-token entries by a constant index (the class token has no
 * absolute position embedding here), q and v biases with a constant zero k
 * bias, layer scale (gamma_1, gamma_2), and mean pooling through fc_norm.
 * Init as Beit.init_weights: trunc_normal(.02) linears with zero biases,
 * the attention projection and fc2 divided by sqrt(2 (layer + 1)), the head
 * scaled by head_init_scale 1e-3, zero bias tables, the patch conv at
 * PyTorch's default.
 */
#include <math.h>
#include <stdlib.h>

#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct BeitArch {
    int patch, dim, depth, heads;
    double mlp_ratio, init_values;
} BeitArch;

static ValueId beit_linear(Builder *b, const char *name, ValueId x, int64_t out, double std)
{
    return nn_linear(b, name, x, out, (LinearOpts){.weight_init = init_trunc_normal(std), .bias_init = init_zeros()});
}

/* gen_relative_position_index for a gh x gw grid and the class token
 * (token 0): patch pairs by offset, then the table's last three rows for
 * class-to-patch, patch-to-class and class-to-class. */
static ValueId rel_pos_index(Builder *b, int64_t gh, int64_t gw)
{
    int64_t N = gh * gw + 1, T = (2 * gh - 1) * (2 * gw - 1) + 3;
    double *idx = malloc(sizeof *idx * (size_t)(N * N));
    if (!idx)
        return b_fail(b, "out of memory for a relative position index of %lld tokens", (long long)N);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t p = i - 1, q = j - 1;
            idx[i * N + j] = (double)(i == 0 && j == 0 ? T - 1
                                      : j == 0       ? T - 2
                                      : i == 0       ? T - 3
                                                     : (p / gw - q / gw + gh - 1) * (2 * gw - 1) + (p % gw - q % gw + gw - 1));
        }
    ValueId v = b_const(b, "relative_position_index", (CtShape){2, {N, N}}, CT_I32, idx);
    free(idx);
    return v;
}

/* Attention over x [B,N,D] with the grid's relative position bias. */
static ValueId attention(Builder *b, const BeitArch *v, ValueId x, int64_t gh, int64_t gw, double proj_std)
{
    int64_t N = b_shape(b, x)->d[1], D = b_shape(b, x)->d[2], H = v->heads, hd = D / H;
    int64_t T = (2 * gh - 1) * (2 * gw - 1) + 3;
    b_push(b, "attn");
    ValueId qb = b_param(b, "q_bias", (CtShape){1, {D}}, init_zeros());
    ValueId kb = b_const(b, "k_bias", (CtShape){1, {D}}, CT_F32, NULL);
    ValueId vb = b_param(b, "v_bias", (CtShape){1, {D}}, init_zeros());
    ValueId table = b_param(b, "relative_position_bias_table", (CtShape){2, {T, H}}, init_zeros());
    ValueId index = rel_pos_index(b, gh, gw);
    /* F.linear(x, qkv.weight, cat(q_bias, k_bias, v_bias)) */
    ValueId qkv_bias = f_concat(b, 3, (ValueId[]){qb, kb, vb}, 0);
    b_push(b, "qkv");
    ValueId w = b_param(b, "weight", (CtShape){2, {3 * D, D}}, init_trunc_normal(.02));
    ValueId qkv = b_node(b, CT_OP_linear, 3, (ValueId[]){x, w, qkv_bias}, NULL, 0, NULL, 0, 0);
    b_pop(b);
    ValueId bias = f_permute(b, f_gather(b, table, 0, index), 3, (int64_t[]){2, 0, 1});
    bias = f_reshape(b, bias, 4, (int64_t[]){1, H, N, N});
    x = f_attention_qkv(b, qkv, H, bias, 1.0 / sqrt((double)hd));
    x = beit_linear(b, "proj", x, D, proj_std);
    b_pop(b);
    return x;
}

static ValueId layer_norm(Builder *b, const char *name, ValueId x) { return nn_layer_norm(b, name, x, 1e-6); }

static ValueId build_beit(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const BeitArch *v = m->arch;
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], D = v->dim;
    int64_t gh = s->d[2] / v->patch, gw = s->d[3] / v->patch, N = gh * gw;
    ValueId cls = b_param(b, "cls_token", (CtShape){3, {1, 1, D}}, init_trunc_normal(.02));
    x = nn_patch_embed(b, "patch_embed", x, D, v->patch, 1);
    x = f_concat(b, 2, (ValueId[]){f_expand(b, cls, 3, (int64_t[]){B, 1, D}), x}, 1);
    b_push(b, "blocks");
    for (int i = 0; i < v->depth; i++) {
        double dpr = v->depth > 1 ? a->drop_path_rate * i / (v->depth - 1) : 0;
        double rescaled = .02 / sqrt(2.0 * (i + 1)); /* fix_init_weight */
        b_push(b, "%d", i);
        ValueId g1 = b_param(b, "gamma_1", (CtShape){1, {D}}, init_constant(v->init_values));
        ValueId g2 = b_param(b, "gamma_2", (CtShape){1, {D}}, init_constant(v->init_values));
        ValueId y = attention(b, v, layer_norm(b, "norm1", x), gh, gw, rescaled);
        x = f_add(b, x, f_drop_path(b, f_mul(b, y, g1), dpr));
        y = layer_norm(b, "norm2", x);
        b_push(b, "mlp");
        y = f_gelu(b, beit_linear(b, "fc1", y, (int64_t)(D * v->mlp_ratio), .02), 0);
        y = beit_linear(b, "fc2", y, D, rescaled);
        b_pop(b);
        x = f_add(b, x, f_drop_path(b, f_mul(b, y, g2), dpr));
        b_pop(b);
    }
    b_pop(b);
    if (x < 0)
        return -1;
    /* global_pool 'avg': the patch tokens' mean, then fc_norm */
    x = f_scale_shift(b, f_reduce_sum(b, f_slice(b, x, 1, 1, N + 1, 1), 2), 1.0 / (double)N, 0.0);
    x = layer_norm(b, "fc_norm", f_reshape(b, x, 2, (int64_t[]){B, D}));
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return beit_linear(b, "head", x, classes, .02 * 1e-3);
}

static const char *const beit_no_wd[] = {"pos_embed", "cls_token", "*relative_position_bias_table", NULL};

static const BeitArch base16 = {16, 768, 12, 12, 4, 0.1};

static const ModelEntry entries[] = {
    {"beit_base_patch16_224", build_beit, &base16,
     {.tag = "in22k_ft_in22k_in1k", .input_size = {3, 224, 224}, .mean = {0.5, 0.5, 0.5}, .std = {0.5, 0.5, 0.5},
      .crop_pct = 0.9, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,
      .first_conv = "patch_embed.proj", .classifier = "head", .fixed_input_size = 1},
     beit_no_wd},
};

/* Beit.group_matcher: the final norm (fc_norm here) with the last block */
static const GroupRule groups[] = {
    {"^cls_token|pos_embed|patch_embed|rel_pos_bias", 0, LG_NO_SUFFIX},
    {"^blocks\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^norm", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily beit_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
