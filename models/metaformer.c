/*
 * PoolFormer (timm/models/metaformer.py, class MetaFormer with pooling token
 * mixers): a conv 7x7/4 stem, four stages (a conv 3x3/2 downsample from stage
 * 1 on), MetaFormerBlock = x + ls1 * (avgpool3x3(n) - n) with n = GroupNorm1(x),
 * then x + ls2 * Mlp(GroupNorm1(x)) with 1x1-conv fc1 -> GELU -> fc2; the head
 * pools, applies a LayerNorm2d, flattens and classifies.
 * Shapes: [B,C,H,W] -> stem [B,D0,H/4,W/4] -> stage s [B,Ds,H/2^(s+2),W/2^(s+2)] -> logits [B,classes].
 * Init (MetaFormer._init_weights): trunc_normal(.02) conv and linear weights,
 * zero biases; GroupNorm and LayerNorm weight 1 / bias 0; layer scales 1e-5.
 */
#include "models/registry.h"

typedef struct MetaFormerArch {
    int depths[4], dims[4];
    double layer_scale_init;
} MetaFormerArch;

static ValueId mf_conv(Builder *b, const char *name, ValueId x, int64_t out, int k, int stride, int pad)
{
    return nn_conv2d(b, name, x, out, k,
                     (ConvOpts){.stride = stride, .padding = pad, .bias = 1, .weight_init = init_trunc_normal(.02),
                                .bias_init = init_zeros()});
}

/* timm's Scale: x * scale.view(C, 1, 1). */
static ValueId layer_scale(Builder *b, const char *name, ValueId x, double init)
{
    int64_t C = b_shape(b, x)->d[1];
    b_push(b, "%s", name);
    ValueId s = b_param(b, "scale", (CtShape){1, {C}}, init_constant(init));
    b_pop(b);
    return f_mul(b, x, f_reshape(b, s, 4, (int64_t[]){1, C, 1, 1}));
}

static ValueId block(Builder *b, const MetaFormerArch *a, ValueId x, double drop_path)
{
    int64_t C = b_shape(b, x)->d[1];
    ValueId n = nn_group_norm(b, "norm1", x, (GNOpts){.groups = 1});
    /* Pooling: the window's mean over the in-image cells, less the cell itself */
    ValueId mix = f_add(b, f_avg_pool2d(b, n, 3, 1, 1, 0, 0), f_scale_shift(b, n, -1.0, 0.0));
    x = f_add(b, x, f_drop_path(b, layer_scale(b, "layer_scale1", mix, a->layer_scale_init), drop_path));
    n = nn_group_norm(b, "norm2", x, (GNOpts){.groups = 1});
    b_push(b, "mlp");
    n = mf_conv(b, "fc2", f_gelu(b, mf_conv(b, "fc1", n, 4 * C, 1, 1, 0), 0), C, 1, 1, 0);
    b_pop(b);
    return f_add(b, x, f_drop_path(b, layer_scale(b, "layer_scale2", n, a->layer_scale_init), drop_path));
}

/* global_pool -> norm (LayerNorm2d, eps 1e-6) -> flatten -> fc. */
static ValueId head(Builder *b, ValueId x, int classes)
{
    b_push(b, "head");
    x = f_adaptive_avg_pool2d(b, x, 1, 1);
    x = nn_layer_norm2d(b, "norm", x, 1e-6);
    const CtShape *s = b_shape(b, x);
    x = f_reshape(b, x, 2, (int64_t[]){s->d[0], s->d[1]});
    if (classes > 0)
        x = nn_linear(b, "fc", x, classes, (LinearOpts){.weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
    b_pop(b);
    return x;
}

static ValueId build_metaformer(Builder *b, const ModelEntry *m, const ModelArgs *args, ValueId x)
{
    const MetaFormerArch *a = m->arch;
    int total = 0, idx = 0;
    for (int s = 0; s < 4; s++)
        total += a->depths[s];
    b_push(b, "stem");
    x = mf_conv(b, "conv", x, a->dims[0], 7, 4, 2);
    b_pop(b);
    b_push(b, "stages");
    for (int s = 0; s < 4; s++) {
        b_push(b, "%d", s);
        if (s > 0 && a->dims[s] != a->dims[s - 1]) {
            b_push(b, "downsample");
            x = mf_conv(b, "conv", x, a->dims[s], 3, 2, 1);
            b_pop(b);
        }
        b_push(b, "blocks");
        for (int i = 0; i < a->depths[s]; i++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? args->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "%d", i);
            x = block(b, a, x, dpr);
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
    }
    b_pop(b);
    /* use_mlp_head=False: the head's dropout is an Identity, drop_rate unused */
    return head(b, x, model_num_classes(m, args));
}

#define POOLFORMER_CFG(crop)                                                                                  \
    {.tag = "sail_in1k", .input_size = {3, 224, 224}, .mean = {0.485, 0.456, 0.406},                         \
     .std = {0.229, 0.224, 0.225}, .crop_pct = crop, .crop_mode = "center", .interpolation = "bicubic",       \
     .num_classes = 1000, .first_conv = "stem.conv", .classifier = "head.fc"}

static const MetaFormerArch s12 = {{2, 2, 6, 2}, {64, 128, 320, 512}, 1e-5};
static const MetaFormerArch s24 = {{4, 4, 12, 4}, {64, 128, 320, 512}, 1e-5};

/* MetaFormer defines no no_weight_decay() and no group_matcher(): timm's
 * auto_group_layers makes --layer-decay's layers (a NULL matcher here). */
static const ModelEntry entries[] = {
    {"poolformer_s12", build_metaformer, &s12, POOLFORMER_CFG(0.9), NULL},
    {"poolformer_s24", build_metaformer, &s24, POOLFORMER_CFG(0.9), NULL},
};

const ModelFamily metaformer_family = {entries, sizeof entries / sizeof entries[0], NULL, 0, 0};
