/*
 * ConvNeXt family (timm/models/convnext.py), the default path: patchify stem
 * (conv 4x4/4 + LayerNorm2d), four stages with a LayerNorm2d + conv 2x2/2
 * downsample from stage 1 on, ConvNeXtBlock with the channels-last MLP
 * (dw conv 7x7 -> NHWC -> LayerNorm -> fc1 -> GELU -> fc2 -> NCHW -> * gamma,
 * drop_path, residual; conv_mlp: LayerNorm2d and 1x1 convs on NCHW; V2: a
 * GlobalResponseNorm after the activation and no gamma), and
 * NormMlpClassifierHead (avg pool -> LayerNorm2d -> flatten -> dropout -> fc).
 * Shapes: [B,C,H,W] (C the input channels) -> stem [B,C0,H/4,W/4] -> stage s [B,Cs,H/2^(s+2),W/2^(s+2)]
 * -> logits [B,classes] (the normed pooled features [B,C3] when classes = 0).
 * Init as timm's _init_weights: trunc_normal(.02) conv and linear weights with
 * zero bias (head_init_scale is 1 for every model here), LayerNorm weight 1 /
 * bias 0, layer scale gamma = ls_init_value 1e-6.
 */
#include "models/layer_groups.h"
#include "models/registry.h"

enum { ACT_GELU, ACT_GELU_TANH, ACT_SILU };

typedef struct ConvNeXtArch {
    int depths[4], dims[4];
    double norm_eps; /* timm's LayerNorm/LayerNorm2d default 1e-6; the test models 1e-5 */
    int act;         /* ACT_*: act_layer 'gelu' (erf), 'gelu_tanh', 'silu' */
    int kernel[4];   /* the depthwise conv's kernel per stage; 0: 7 */
    int conv_mlp;    /* the MLP as 1x1 convs on NCHW after a LayerNorm2d */
    int grn;         /* ConvNeXt-V2: GlobalResponseNorm after the MLP's activation */
    int no_ls;       /* ls_init_value None: no layer scale gamma */
} ConvNeXtArch;

static const double LS_INIT_VALUE = 1e-6;

static ValueId cx_conv(Builder *b, const char *name, ValueId x, int64_t out, int k, int stride, int pad, int groups)
{
    return nn_conv2d(b, name, x, out, k,
                     (ConvOpts){.stride = stride, .padding = pad, .groups = groups, .bias = 1,
                                .weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
}

static ValueId cx_linear(Builder *b, const char *name, ValueId x, int64_t out)
{
    return nn_linear(b, name, x, out, (LinearOpts){.weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
}

static ValueId act(Builder *b, const ConvNeXtArch *c, ValueId x)
{
    return c->act == ACT_SILU ? f_silu(b, x) : f_gelu(b, x, c->act == ACT_GELU_TANH);
}

/* timm's GlobalResponseNorm (weight and bias zeros, eps 1e-6): x + bias +
 * weight * x * n, n the spatial L2 norm over its mean across channels;
 * x [B,H,W,C] (channels_last) or [B,C,H,W]. */
static ValueId grn(Builder *b, ValueId x, int channels_last)
{
    int64_t C = b_shape(b, x)->d[channels_last ? 3 : 1];
    int64_t spatial = channels_last ? 6 : 12, channel = channels_last ? 8 : 2;
    int64_t view[4] = {1, 1, 1, 1};
    view[channels_last ? 3 : 1] = C;
    b_push(b, "grn");
    ValueId w = f_reshape(b, b_param(b, "weight", (CtShape){1, {C}}, init_zeros()), 4, view);
    ValueId bias = f_reshape(b, b_param(b, "bias", (CtShape){1, {C}}, init_zeros()), 4, view);
    b_pop(b);
    ValueId g = f_sqrt(b, f_reduce_sum(b, f_mul(b, x, x), spatial));
    ValueId n = f_div(b, g, f_scale_shift(b, f_reduce_sum(b, g, channel), 1.0 / (double)C, 1e-6));
    return f_add(b, x, f_add(b, bias, f_mul(b, w, f_mul(b, x, n))));
}

/* Mlp, or GlobalResponseNormMlp with grn: fc1 -> act -> [grn] -> fc2, as
 * linears over the last dim or, with conv_mlp, 1x1 convs over NCHW. */
static ValueId mlp(Builder *b, const ConvNeXtArch *c, ValueId x, int64_t C, int64_t hidden)
{
    b_push(b, "mlp");
    x = c->conv_mlp ? cx_conv(b, "fc1", x, hidden, 1, 1, 0, 1) : cx_linear(b, "fc1", x, hidden);
    x = act(b, c, x);
    if (c->grn)
        x = grn(b, x, !c->conv_mlp);
    x = c->conv_mlp ? cx_conv(b, "fc2", x, C, 1, 1, 0, 1) : cx_linear(b, "fc2", x, C);
    b_pop(b);
    return x;
}

/* ConvNeXtBlock: in and out [B,C,H,W]; the norm and MLP channels-last
 * unless conv_mlp. */
static ValueId block(Builder *b, const ConvNeXtArch *c, ValueId x, int kernel, double drop_path)
{
    int64_t C = b_shape(b, x)->d[1];
    ValueId shortcut = x;
    x = cx_conv(b, "conv_dw", x, C, kernel, 1, kernel / 2, (int)C);
    if (c->conv_mlp) {
        x = mlp(b, c, nn_layer_norm2d(b, "norm", x, c->norm_eps), C, 4 * C);
    } else {
        x = f_permute(b, x, 4, (int64_t[]){0, 2, 3, 1});
        x = mlp(b, c, nn_layer_norm(b, "norm", x, c->norm_eps), C, 4 * C);
        x = f_permute(b, x, 4, (int64_t[]){0, 3, 1, 2});
    }
    if (!c->no_ls) {
        ValueId gamma = b_param(b, "gamma", (CtShape){1, {C}}, init_constant(LS_INIT_VALUE));
        x = f_mul(b, x, f_reshape(b, gamma, 4, (int64_t[]){1, C, 1, 1}));
    }
    return f_add(b, f_drop_path(b, x, drop_path), shortcut);
}

/* NormMlpClassifierHead without hidden layer: pool -> norm -> flatten -> drop -> fc. */
static ValueId head(Builder *b, const ConvNeXtArch *c, ValueId x, int classes, double drop_rate)
{
    b_push(b, "head");
    x = f_adaptive_avg_pool2d(b, x, 1, 1);
    x = nn_layer_norm2d(b, "norm", x, c->norm_eps);
    const CtShape *s = b_shape(b, x);
    x = f_reshape(b, x, 2, (int64_t[]){s->d[0], s->d[1]});
    x = f_dropout(b, x, drop_rate);
    if (classes > 0)
        x = cx_linear(b, "fc", x, classes);
    b_pop(b);
    return x;
}

static ValueId build_convnext(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const ConvNeXtArch *c = m->arch;
    int total = 0, idx = 0;
    for (int s = 0; s < 4; s++)
        total += c->depths[s];
    b_push(b, "stem");
    x = cx_conv(b, "0", x, c->dims[0], 4, 4, 0, 1);
    x = nn_layer_norm2d(b, "1", x, c->norm_eps);
    b_pop(b);
    b_push(b, "stages");
    for (int s = 0; s < 4; s++) {
        b_push(b, "%d", s);
        if (s > 0) {
            b_push(b, "downsample");
            x = nn_layer_norm2d(b, "0", x, c->norm_eps);
            x = cx_conv(b, "1", x, c->dims[s], 2, 2, 0, 1);
            b_pop(b);
        }
        b_push(b, "blocks");
        for (int i = 0; i < c->depths[s]; i++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "%d", i);
            x = block(b, c, x, c->kernel[s] ? c->kernel[s] : 7, dpr);
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
    }
    b_pop(b);
    return head(b, c, x, model_num_classes(m, a), a->drop_rate);
}

#define CONVNEXT_CFG(tag_, size, crop, m0, m1, m2, s0, s1, s2, test, test_crop)                                \
    {.tag = tag_, .input_size = {3, size, size}, .mean = {m0, m1, m2}, .std = {s0, s1, s2},                    \
     .crop_pct = crop, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                 \
     .first_conv = "stem.0", .classifier = "head.fc", .test_input_size = test, .test_crop_pct = test_crop}
/* the ImageNet-normalised weights, evaluated at 288 with crop_pct 1.0 */
#define IMAGENET(tag, crop) CONVNEXT_CFG(tag, 224, crop, 0.485, 0.456, 0.406, 0.229, 0.224, 0.225, 288, 1.0)
#define TEST_CFG CONVNEXT_CFG("r160_in1k", 160, 0.95, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0, 0)

static const ConvNeXtArch tiny = {{3, 3, 9, 3}, {96, 192, 384, 768}, 1e-6, .act = ACT_GELU};
static const ConvNeXtArch small = {{3, 3, 27, 3}, {96, 192, 384, 768}, 1e-6, .act = ACT_GELU};
static const ConvNeXtArch base = {{3, 3, 27, 3}, {128, 256, 512, 1024}, 1e-6, .act = ACT_GELU};
static const ConvNeXtArch large = {{3, 3, 27, 3}, {192, 384, 768, 1536}, 1e-6, .act = ACT_GELU};
static const ConvNeXtArch nano = {{2, 2, 8, 2}, {80, 160, 320, 640}, 1e-6, .conv_mlp = 1};
static const ConvNeXtArch v2_nano = {{2, 2, 8, 2}, {80, 160, 320, 640}, 1e-6, .conv_mlp = 1, .grn = 1, .no_ls = 1};
static const ConvNeXtArch v2_tiny = {{3, 3, 9, 3}, {96, 192, 384, 768}, 1e-6, .grn = 1, .no_ls = 1};
static const ConvNeXtArch ctest = {{1, 2, 4, 2}, {24, 32, 48, 64}, 1e-5, .act = ACT_GELU_TANH};
static const ConvNeXtArch ctest2 = {{1, 1, 1, 1}, {32, 64, 96, 128}, 1e-5, .act = ACT_GELU_TANH};
static const ConvNeXtArch ctest3 = {{1, 1, 1, 1}, {32, 64, 96, 128}, 1e-5, .act = ACT_SILU, .kernel = {7, 5, 5, 3}};

/* ConvNeXt defines no no_weight_decay(): gamma, norms and biases are exempt
 * by timm's ndim <= 1 / ".bias" rule alone. */
static const ModelEntry entries[] = {
    {"convnext_base", build_convnext, &base, IMAGENET("fb_in22k_ft_in1k", 0.875), NULL},
    {"convnext_large", build_convnext, &large, IMAGENET("fb_in22k_ft_in1k", 0.875), NULL},
    {"convnext_nano", build_convnext, &nano, IMAGENET("in12k_ft_in1k", 0.95), NULL},
    {"convnextv2_nano", build_convnext, &v2_nano, IMAGENET("fcmae_ft_in22k_in1k", 0.875), NULL},
    {"convnextv2_tiny", build_convnext, &v2_tiny, IMAGENET("fcmae_ft_in22k_in1k", 0.875), NULL},
    {"convnext_small", build_convnext, &small, IMAGENET("in12k_ft_in1k", 0.95), NULL},
    {"convnext_tiny", build_convnext, &tiny, IMAGENET("in12k_ft_in1k", 0.95), NULL},
    {"test_convnext", build_convnext, &ctest, TEST_CFG, NULL},
    {"test_convnext2", build_convnext, &ctest2, TEST_CFG, NULL},
    {"test_convnext3", build_convnext, &ctest3, TEST_CFG, NULL},
};

/* ConvNeXt.group_matcher(coarse=False): a stage's downsample shares its
 * first block's layer */
static const GroupRule groups[] = {
    {"^stem", 0, LG_NO_SUFFIX},
    {"^stages\\.([0-9]+)\\.downsample", 1, 0},
    {"^stages\\.([0-9]+)\\.blocks\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^norm_pre", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily convnext_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
