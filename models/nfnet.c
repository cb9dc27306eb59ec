/*
 * Normalization-free nets (timm/models/nfnet.py, NormFreeNet) of the NFNet
 * kind: every conv a ScaledStdConv2d (bias, gain, weight standardised with
 * eps 1e-5 and scaled by the activation's gamma / sqrt(fan_in)); the
 * 'deep_quad' stem (four 3x3 convs, strides 2, 1, 1, 2, SiLU between);
 * pre-activation blocks: act(x) * beta feeds the 1x1 conv, grouped 3x3,
 * extra grouped 3x3 and 1x1 of the residual branch (SiLU before each) and,
 * where the shape changes, the shortcut (2x2 avg pool with ceil_mode and
 * count_include_pad off, then a 1x1 conv); the branch's SE ("attn_last")
 * times attn_gain 2, then alpha 0.2 times the branch plus the shortcut;
 * beta = 1/sqrt(expected variance), which restarts each stage at 1 and
 * grows by alpha^2 a block. A final 1x1 conv and SiLU, then the linear head.
 * Init: convs (the SE's too) kaiming_normal(fan_in, linear), i.e. normal
 * with std 1/sqrt(fan_in), zero biases; gains 1 but the branch's last conv's
 * 0 (no skipinit); head.fc normal(0, 0.01) with a zero bias.
 */
#include <math.h>
#include <stdio.h>

#include "models/efficientnet_builder.h"
#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct NfArch {
    int depths[4], channels[4];
    int stem_chs, group_size;
    double bottle_ratio, feat_mult;
    double se_ratio; /* SEModule's rd_ratio, rd_divisor 8 */
} NfArch;

enum { CH_DIV = 8 };
#define NF_ALPHA 0.2
#define NF_ATTN_GAIN 2.0
#define NF_STD_EPS 1e-5
#define SILU_GAMMA 1.7881293296813965 /* _nonlin_gamma['silu'] */

/* ScaledStdConv2d(in, out, k, stride, groups): padding get_padding(k, stride). */
static ValueId sconv(Builder *b, const char *name, ValueId x, int64_t out, int k, int stride, int groups,
                     double gain_init)
{
    int64_t fan_in = b_shape(b, x)->d[1] / groups * k * k;
    return nn_std_conv2d(b, name, x, out, k,
                         (ConvOpts){.stride = stride, .padding = ((stride - 1) + (k - 1)) / 2, .groups = groups,
                                    .bias = 1, .weight_init = init_normal(1 / sqrt((double)fan_in)),
                                    .bias_init = init_zeros()},
                         (StdConvOpts){.eps = NF_STD_EPS, .scaled = 1, .gamma = SILU_GAMMA, .gain_init = gain_init});
}

static ValueId block(Builder *b, const NfArch *r, ValueId x, int64_t out, int stride, double beta, double drop_path)
{
    int64_t in = b_shape(b, x)->d[1];
    int64_t mid = eb_make_divisible((double)out * r->bottle_ratio, CH_DIV, 0.9);
    int groups = (int)(mid / r->group_size);
    mid = (int64_t)r->group_size * groups; /* group_size a multiple of ch_div */
    ValueId pre = f_scale_shift(b, f_silu(b, x), beta, 0), shortcut = x;
    if (in != out || stride != 1) {
        b_push(b, "downsample");
        shortcut = stride > 1 ? f_avg_pool2d(b, pre, 2, stride, 0, 1, 0) : pre;
        shortcut = sconv(b, "conv", shortcut, out, 1, 1, 1, 1);
        b_pop(b);
    }
    x = sconv(b, "conv1", pre, mid, 1, 1, 1, 1);
    x = sconv(b, "conv2", f_silu(b, x), mid, 3, stride, groups, 1);
    x = sconv(b, "conv2b", f_silu(b, x), mid, 3, 1, groups, 1);
    x = sconv(b, "conv3", f_silu(b, x), out, 1, 1, 1, 0);
    int64_t rd = eb_make_divisible((double)out * r->se_ratio, CH_DIV, 0);
    SEOpts se = {.fc1_init = init_normal(1 / sqrt((double)out)), .fc2_init = init_normal(1 / sqrt((double)rd)),
                 .bias_init = init_zeros()};
    x = f_scale_shift(b, nn_se_module(b, "attn_last", x, rd, se), NF_ATTN_GAIN, 0);
    return f_add(b, f_scale_shift(b, f_drop_path(b, x, drop_path), NF_ALPHA, 0), shortcut);
}

static ValueId build_nfnet(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const NfArch *r = m->arch;
    static const int stem_strides[4] = {2, 1, 1, 2};
    int total = 0, idx = 0;
    for (int s = 0; s < 4; s++)
        total += r->depths[s];
    b_push(b, "stem");
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "conv%d", i + 1);
        x = sconv(b, name, i ? f_silu(b, x) : x, r->stem_chs >> (3 - i), 3, stem_strides[i], 1, 1);
    }
    b_pop(b);
    double expected_var = 1.0;
    for (int s = 0; s < 4; s++) {
        b_push(b, "stages");
        b_push(b, "%d", s);
        for (int i = 0; i < r->depths[s]; i++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "%d", i);
            /* the stem's stride is 4: the first stage keeps it */
            x = block(b, r, x, eb_make_divisible(r->channels[s], CH_DIV, 0.9), i == 0 && s > 0 ? 2 : 1,
                      1 / sqrt(expected_var), dpr);
            b_pop(b);
            if (i == 0)
                expected_var = 1.0;
            expected_var += NF_ALPHA * NF_ALPHA;
        }
        b_pop(b);
        b_pop(b);
    }
    int64_t features = eb_make_divisible(r->channels[3] * r->feat_mult, CH_DIV, 0.9);
    x = f_silu(b, sconv(b, "final_conv", x, features, 1, 1, 1, 1));
    return nn_classifier(b, "head.fc", x, model_num_classes(m, a), a->drop_rate,
                         (LinearOpts){.weight_init = init_normal(0.01), .bias_init = init_zeros()});
}

static const NfArch test = {{1, 1, 1, 1}, {32, 64, 96, 128}, 128, 8, 0.25, 1.5, 0.25};

static const ModelEntry entries[] = {
    {"test_nfnet", build_nfnet, &test,
     {.tag = "r160_in1k", .input_size = {3, 160, 160}, .mean = {0.5, 0.5, 0.5}, .std = {0.5, 0.5, 0.5},
      .crop_pct = 0.95, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,
      .first_conv = "stem.conv1", .classifier = "head.fc"},
     NULL},
};

/* NormFreeNet.group_matcher(coarse=False) */
static const GroupRule groups[] = {
    {"^stem", 0, LG_NO_SUFFIX},
    {"^stages\\.([0-9]+)\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^final_conv", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily nfnet_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
