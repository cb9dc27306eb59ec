/*
 * PP-HGNetV2 (timm/models/hgnet.py, HighPerfGpuNet with stem_type 'v2').
 * Every ConvBNAct is a bias-free conv (symmetric padding (k-1)/2), BN, then
 * ReLU and, with use_lab, a LearnableAffineBlock (scalar scale and bias)
 * unless it is linear. StemV2: stem1 (3x3 s2); its output padded right and
 * bottom by one feeds both the 2x2 stem2a -> pad -> 2x2 stem2b branch and a
 * 2x2 stride-1 max pool (ceil_mode changes nothing at stride 1: the windows
 * tile the input exactly), the two concatenated into stem3 (3x3 s2) and
 * stem4 (1x1). Each stage: an optional linear depthwise 3x3 s2 downsample,
 * then blocks of layer_num convs (3x3 ConvBNAct, or LightConvBNAct: a linear
 * 1x1 then a depthwise kxk), the block's input and every layer's output
 * concatenated into the 'se' aggregation (1x1 to out/2, 1x1 to out), the
 * block input added from the second block on. The head pools first, then
 * a bias-free 1x1 conv to 2048, ReLU, LAB, dropout, flatten, fc.
 * Init: convs kaiming_normal(fan_out = out * k * k, relu), BN weight 1 /
 * bias 0, LAB scale 1 / bias 0, the fc torch's default weight with a zero bias.
 */
#include <stdio.h>

#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct HgStage {
    int in, mid, out, blocks, downsample, light, kernel, layers;
} HgStage;

typedef struct HgArch {
    int stem_mid, stem_out;
    HgStage stages[4];
    int use_lab;
} HgArch;

enum { HEAD_HIDDEN = 2048 };

static ValueId conv(Builder *b, const char *name, ValueId x, int64_t out, int k, int stride, int groups, int bias)
{
    return nn_conv2d(b, name, x, out, k,
                     (ConvOpts){.stride = stride, .padding = (k - 1) / 2, .groups = groups, .bias = bias,
                                .weight_init = init_kaiming_normal_fan_out(out * k * k),
                                .bias_init = init_zeros()});
}

/* LearnableAffineBlock: scale * x + bias, both of shape [1]. */
static ValueId lab(Builder *b, const char *name, ValueId x)
{
    b_push(b, "%s", name);
    ValueId scale = b_param(b, "scale", (CtShape){1, {1}}, init_ones());
    ValueId bias = b_param(b, "bias", (CtShape){1, {1}}, init_zeros());
    b_pop(b);
    return f_add(b, f_mul(b, scale, x), bias);
}

static ValueId conv_bn_act(Builder *b, const HgArch *r, const char *name, ValueId x, int64_t out, int k, int stride,
                           int groups, int act)
{
    b_push(b, "%s", name);
    x = nn_batch_norm(b, "bn", conv(b, "conv", x, out, k, stride, groups, 0), (BNOpts){0});
    if (act) {
        x = f_relu(b, x);
        if (r->use_lab)
            x = lab(b, "lab", x);
    }
    b_pop(b);
    return x;
}

static ValueId stem_v2(Builder *b, const HgArch *r, ValueId x)
{
    b_push(b, "stem");
    x = conv_bn_act(b, r, "stem1", x, r->stem_mid, 3, 2, 1, 1);
    x = f_pad(b, x, 0, 1, 0, 1, 0);
    ValueId x2 = conv_bn_act(b, r, "stem2a", x, r->stem_mid / 2, 2, 1, 1, 1);
    x2 = conv_bn_act(b, r, "stem2b", f_pad(b, x2, 0, 1, 0, 1, 0), r->stem_mid, 2, 1, 1, 1);
    ValueId cat[2] = {f_max_pool2d(b, x, 2, 1, 0), x2};
    x = conv_bn_act(b, r, "stem3", f_concat(b, 2, cat, 1), r->stem_mid, 3, 2, 1, 1);
    x = conv_bn_act(b, r, "stem4", x, r->stem_out, 1, 1, 1, 1);
    b_pop(b);
    return x;
}

enum { MAX_LAYERS = 8 };

static ValueId block(Builder *b, const HgArch *r, const HgStage *s, ValueId x, int residual, double drop_path)
{
    ValueId outs[MAX_LAYERS + 1] = {x};
    b_push(b, "layers");
    for (int i = 0; i < s->layers; i++) {
        char name[12];
        snprintf(name, sizeof name, "%d", i);
        if (s->light) {
            b_push(b, "%s", name);
            x = conv_bn_act(b, r, "conv1", x, s->mid, 1, 1, 1, 0);
            x = conv_bn_act(b, r, "conv2", x, s->mid, s->kernel, 1, s->mid, 1);
            b_pop(b);
        } else {
            x = conv_bn_act(b, r, name, x, s->mid, s->kernel, 1, 1, 1);
        }
        outs[i + 1] = x;
    }
    b_pop(b);
    b_push(b, "aggregation");
    x = conv_bn_act(b, r, "0", f_concat(b, s->layers + 1, outs, 1), s->out / 2, 1, 1, 1, 1);
    x = conv_bn_act(b, r, "1", x, s->out, 1, 1, 1, 1);
    b_pop(b);
    return residual ? f_add(b, f_drop_path(b, x, drop_path), outs[0]) : x;
}

static ValueId build_hgnet(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const HgArch *r = m->arch;
    int total = 0, idx = 0;
    for (int s = 0; s < 4; s++)
        total += r->stages[s].blocks;
    x = stem_v2(b, r, x);
    for (int s = 0; s < 4; s++) {
        const HgStage *st = &r->stages[s];
        CT_ASSERT(st->layers <= MAX_LAYERS);
        b_push(b, "stages");
        b_push(b, "%d", s);
        if (st->downsample)
            x = conv_bn_act(b, r, "downsample", x, st->in, 3, 2, st->in, 0);
        b_push(b, "blocks");
        for (int i = 0; i < st->blocks; i++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "%d", i);
            x = block(b, r, st, x, i > 0, dpr);
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
        b_pop(b);
    }
    b_push(b, "head");
    x = f_adaptive_avg_pool2d(b, x, 1, 1);
    b_push(b, "last_conv");
    x = f_relu(b, conv(b, "0", x, HEAD_HIDDEN, 1, 1, 1, 0));
    if (r->use_lab)
        x = lab(b, "2", x);
    b_pop(b);
    const CtShape *sh = b_shape(b, x);
    x = f_reshape(b, f_dropout(b, x, a->drop_rate), 2, (int64_t[]){sh->d[0], sh->d[1]});
    int classes = model_num_classes(m, a);
    if (classes)
        x = nn_linear(b, "fc", x, classes, (LinearOpts){.bias_init = init_zeros()});
    b_pop(b);
    return x;
}

/* in, mid, out, blocks, downsample, light_block, kernel_size, layer_num */
static const HgArch b0 = {16, 16,
                          {{16, 16, 64, 1, 0, 0, 3, 3},
                           {64, 32, 256, 1, 1, 0, 3, 3},
                           {256, 64, 512, 2, 1, 1, 5, 3},
                           {512, 128, 1024, 1, 1, 1, 5, 3}},
                          1};

static const ModelEntry entries[] = {
    {"hgnetv2_b0", build_hgnet, &b0,
     {.tag = "ssld_stage2_ft_in1k", .input_size = {3, 224, 224}, .mean = {0.485, 0.456, 0.406},
      .std = {0.229, 0.224, 0.225}, .crop_pct = 0.965, .crop_mode = "center", .interpolation = "bicubic",
      .num_classes = 1000, .first_conv = "stem.stem1.conv", .classifier = "head.fc", .test_input_size = 288,
      .test_crop_pct = 1.0},
     NULL},
};

/* HighPerfGpuNet.group_matcher(coarse=False): a stage's downsample keys as
 * (1, stage, 0), its first block's layer */
static const GroupRule groups[] = {
    {"^stem", 0, LG_NO_SUFFIX},
    {"^stages\\.([0-9]+)\\.downsample", 1, 0},
    {"^stages\\.([0-9]+)\\.blocks\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {NULL, 0, 0},
};

const ModelFamily hgnet_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
