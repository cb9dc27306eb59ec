/*
 * ResNetV2 with BiT's weights (timm/models/resnetv2.py, _create_resnetv2_bit):
 * pre-activation bottlenecks (GroupNormAct(32) + ReLU before each
 * weight-standardised conv, stride on the 3x3, the shortcut a 1x1 conv of
 * the block's pre-activation in each stage's first block), the 'fixed'
 * stem (a 7x7 stride-2 StdConv2d, ConstantPad2d(1, 0) and a 3x3 stride-2
 * max pool), a final GroupNormAct and ClassifierHead(use_conv=True): the
 * pooled features through a 1x1 conv "head.fc". Every StdConv2d has BiT's
 * eps 1e-8.
 * Init (_init_weights, zero_init_last off): convs kaiming_normal(fan_out),
 * norms weight 1 / bias 0, head.fc normal(0, 0.01) with a zero bias.
 */
#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct ResNetV2Arch {
    int layers[4];
    int width_factor;
} ResNetV2Arch;

enum { STEM_WIDTH = 64, GN_GROUPS = 32 };
static const int CHANNELS[4] = {256, 512, 1024, 2048};
#define BIT_STD_EPS 1e-8

static ValueId std_conv(Builder *b, const char *name, ValueId x, int64_t out, int k, int stride)
{
    return nn_std_conv2d(b, name, x, out, k,
                         (ConvOpts){.stride = stride, .padding = ((stride - 1) + (k - 1)) / 2,
                                    .weight_init = init_kaiming_normal_fan_out(out * k * k)},
                         (StdConvOpts){.eps = BIT_STD_EPS});
}

static ValueId norm_act(Builder *b, const char *name, ValueId x)
{
    return f_relu(b, nn_group_norm(b, name, x, (GNOpts){.groups = GN_GROUPS}));
}

/* The 'fixed' stem's ConstantPad2d(1, 0.) then MaxPool2d(3, 2): BiT has
 * no activation before the pool, so the zeros are values of its windows. */
static ValueId fixed_pad_pool(Builder *b, ValueId x)
{
    return f_max_pool2d(b, f_pad(b, x, 1, 1, 1, 1, 0.0), 3, 2, 0);
}

static ValueId block(Builder *b, ValueId x, int64_t out, int stride, int proj, double drop_path)
{
    int64_t mid = out / 4; /* make_divisible(out * 0.25): every width here is a multiple of 32 */
    /* timm registers downsample before norm1, though it runs on norm1's output */
    if (proj) {
        b_push(b, "downsample");
        b_pop(b);
    }
    ValueId preact = norm_act(b, "norm1", x), shortcut = x;
    if (proj) {
        b_push(b, "downsample");
        shortcut = std_conv(b, "conv", preact, out, 1, stride);
        b_pop(b);
    }
    x = std_conv(b, "conv1", preact, mid, 1, 1);
    x = std_conv(b, "conv2", norm_act(b, "norm2", x), mid, 3, stride);
    x = std_conv(b, "conv3", norm_act(b, "norm3", x), out, 1, 1);
    return f_add(b, f_drop_path(b, x, drop_path), shortcut);
}

static ValueId build_resnetv2(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const ResNetV2Arch *r = m->arch;
    int total = 0, idx = 0, classes = model_num_classes(m, a);
    for (int s = 0; s < 4; s++)
        total += r->layers[s];
    b_push(b, "stem");
    x = fixed_pad_pool(b, std_conv(b, "conv", x, STEM_WIDTH * r->width_factor, 7, 2));
    b_pop(b);
    for (int s = 0; s < 4; s++) {
        b_push(b, "stages");
        b_push(b, "%d", s);
        b_push(b, "blocks");
        for (int i = 0; i < r->layers[s]; i++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "%d", i);
            x = block(b, x, (int64_t)CHANNELS[s] * r->width_factor, i == 0 && s > 0 ? 2 : 1, i == 0, dpr);
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
        b_pop(b);
    }
    x = norm_act(b, "norm", x);
    /* ClassifierHead(use_conv=True): pool, dropout, a 1x1 conv, flatten */
    x = f_dropout(b, f_adaptive_avg_pool2d(b, x, 1, 1), a->drop_rate);
    if (classes)
        x = nn_conv2d(b, "head.fc", x, classes, 1,
                      (ConvOpts){.bias = 1, .weight_init = init_normal(0.01), .bias_init = init_zeros()});
    if (x < 0)
        return -1;
    const CtShape *s = b_shape(b, x);
    return f_reshape(b, x, 2, (int64_t[]){s->d[0], s->d[1]});
}

static const ResNetV2Arch r50x1 = {{3, 4, 6, 3}, 1};

static const ModelEntry entries[] = {
    {"resnetv2_50x1_bit", build_resnetv2, &r50x1,
     {.tag = "goog_distilled_in1k", .input_size = {3, 224, 224}, .mean = {0.5, 0.5, 0.5}, .std = {0.5, 0.5, 0.5},
      .crop_pct = 0.875, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,
      .first_conv = "stem.conv", .classifier = "head.fc"},
     NULL},
};

/* ResNetV2.group_matcher(coarse=False) */
static const GroupRule groups[] = {
    {"^stem", 0, LG_NO_SUFFIX},
    {"^stages\\.([0-9]+)\\.blocks\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^norm", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily resnetv2_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
