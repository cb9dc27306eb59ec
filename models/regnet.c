/*
 * RegNet X and Y (timm/models/regnet.py): a 3x3 stride-2 stem, four stages
 * of ResNet-like bottlenecks with a grouped 3x3 (bottle ratio 1) and, in Y,
 * an SE after it whose reduction is a quarter of the block's input width;
 * the shortcut a 1x1 conv + BN where shape changes. The stage widths,
 * depths and group sizes are what timm's generate_regnet and
 * adjust_widths_groups_comp compute in float32 from (w0, wa, wm, depth,
 * group size), recorded per model rather than recomputed.
 * Init (_init_weights): convs normal(0, sqrt(2 / (k*k*out/groups))) with
 * zero biases (SE's too), BN weight 1 / bias 0 with each block's last BN
 * zeroed, the head normal(0, 0.01) with a zero bias.
 */
#include <math.h>

#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct RegNetArch {
    int widths[4], depths[4], group_size[4];
    int se; /* RegNet Y: SE of rd = round(block input * 0.25) */
} RegNetArch;

enum { STEM_WIDTH = 32 };

static ValueId block(Builder *b, const RegNetArch *r, ValueId x, int64_t out, int stride, int group_size,
                     double drop_path)
{
    ValueId shortcut = x;
    int64_t in = b_shape(b, x)->d[1];
    x = nn_conv_bn_act(b, "conv1", x, out, 1, 1, 1, 0, 0);
    x = nn_conv_bn_act(b, "conv2", x, out, 3, stride, (int)(out / group_size), 0, 0);
    if (r->se)
        x = nn_se_module(b, "se", x, (int64_t)nearbyint((double)in * 0.25), /* round(): ties to even */
                         (SEOpts){.bias_init = init_zeros()});
    x = nn_conv_bn_act(b, "conv3", x, out, 1, 1, 1, 1, 1);
    if (in != out || stride != 1)
        shortcut = nn_conv_bn_act(b, "downsample", shortcut, out, 1, stride, 1, 0, 1);
    return f_relu(b, f_add(b, f_drop_path(b, x, drop_path), shortcut));
}

static ValueId build_regnet(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const RegNetArch *r = m->arch;
    int total = 0, idx = 0;
    for (int s = 0; s < 4; s++)
        total += r->depths[s];
    x = nn_conv_bn_act(b, "stem", x, STEM_WIDTH, 3, 2, 1, 0, 0);
    for (int s = 0; s < 4; s++) {
        b_push(b, "s%d", s + 1);
        for (int i = 0; i < r->depths[s]; i++, idx++) {
            /* calculate_drop_path_rates: linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "b%d", i + 1);
            x = block(b, r, x, r->widths[s], i == 0 ? 2 : 1, r->group_size[s], dpr);
            b_pop(b);
        }
        b_pop(b);
    }
    return nn_classifier(b, "head.fc", x, model_num_classes(m, a), a->drop_rate,
                         (LinearOpts){.weight_init = init_normal(0.01), .bias_init = init_zeros()});
}

#define REGNET_CFG(tag_, crop, test, test_crop)                                                                    \
    {.tag = tag_, .input_size = {3, 224, 224}, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},        \
     .crop_pct = crop, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                     \
     .first_conv = "stem.conv", .classifier = "head.fc", .test_input_size = test, .test_crop_pct = test_crop}

static const RegNetArch x032 = {{96, 192, 432, 1008}, {2, 6, 15, 2}, {48, 48, 48, 48}, 0};
static const RegNetArch y016 = {{48, 120, 336, 888}, {2, 6, 17, 2}, {24, 24, 24, 24}, 1};
static const RegNetArch y032 = {{72, 216, 576, 1512}, {2, 5, 13, 1}, {24, 24, 24, 24}, 1};
static const RegNetArch y040 = {{128, 192, 512, 1088}, {2, 6, 12, 2}, {64, 64, 64, 64}, 1};

static const ModelEntry entries[] = {
    {"regnetx_032", build_regnet, &x032, REGNET_CFG("tv2_in1k", 0.965, 0, 0), NULL},
    {"regnety_016", build_regnet, &y016, REGNET_CFG("tv2_in1k", 0.965, 0, 0), NULL},
    {"regnety_032", build_regnet, &y032, REGNET_CFG("ra_in1k", 0.95, 288, 1.0), NULL},
    {"regnety_040", build_regnet, &y040, REGNET_CFG("ra3_in1k", 0.95, 288, 1.0), NULL},
};

/* RegNet.group_matcher(coarse=False) */
static const GroupRule groups[] = {
    {"^stem", 0, LG_NO_SUFFIX},
    {"^s([0-9]+)\\.b([0-9]+)", 1, LG_NO_SUFFIX},
    {NULL, 0, 0},
};

const ModelFamily regnet_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
