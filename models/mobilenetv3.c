/*
 * MobileNetV3 family (timm/models/mobilenetv3.py, class MobileNetV3):
 * conv_stem (3x3 s2) + bn1, the arch-string blocks (hard-swish by default,
 * 'nre' blocks ReLU; SE on the expanded channels, ReLU inside, hard-sigmoid
 * gate, channels by round_channels), then the "efficient head": global
 * average pool [N,C,1,1], conv_head (1x1 with bias, no norm) + act2, flatten,
 * dropout, classifier. Init is _init_weight_goog (see efficientnet_builder.h).
 */
#include "models/efficientnet_builder.h"
#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct MobileNetV3Arch {
    const EbArchDef *def;
    double channel_multiplier;
    int num_features; /* conv_head's channels, not rounded */
} MobileNetV3Arch;

static ValueId build_mobilenetv3(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const MobileNetV3Arch *v = m->arch;
    EbConfig cfg = {.round = {v->channel_multiplier, 8, 0.9}, .act = EB_ACT_HARD_SWISH, .se_from_exp = 1,
                    .se_hard_gate = 1, .se_force_relu = 1, .se_round_channels = 1,
                    .drop_path_rate = a->drop_path_rate};
    EbBlocks blocks;
    if (eb_decode_arch(b, v->def, 1.0, 0, &blocks))
        return -1;
    int fix_stem = v->channel_multiplier < 0.75;
    x = eb_conv(b, "conv_stem", x, fix_stem ? 16 : eb_round_channels(16, cfg.round), 3, 2, 1, 0, cfg.pad);
    x = eb_bn_act(b, &cfg, "bn1", x, cfg.act);
    int head_in;
    x = eb_build_blocks(b, &cfg, &blocks, x, &head_in);
    x = f_adaptive_avg_pool2d(b, x, 1, 1);
    x = eb_act(b, cfg.act, eb_conv(b, "conv_head", x, v->num_features, 1, 1, 1, 1, cfg.pad));
    if (x < 0)
        return -1;
    x = f_reshape(b, x, 2, (int64_t[]){b_shape(b, x)->d[0], v->num_features});
    x = f_dropout(b, x, a->drop_rate);
    int classes = model_num_classes(m, a);
    return classes ? eb_linear(b, "classifier", x, classes) : x;
}

static const EbArchDef large_def = {7,
                                    {{"ds_r1_k3_s1_e1_c16_nre"},
                                     {"ir_r1_k3_s2_e4_c24_nre", "ir_r1_k3_s1_e3_c24_nre"},
                                     {"ir_r3_k5_s2_e3_c40_se0.25_nre"},
                                     {"ir_r1_k3_s2_e6_c80", "ir_r1_k3_s1_e2.5_c80", "ir_r2_k3_s1_e2.3_c80"},
                                     {"ir_r2_k3_s1_e6_c112_se0.25"},
                                     {"ir_r3_k5_s2_e6_c160_se0.25"},
                                     {"cn_r1_k1_s1_c960"}}};

static const EbArchDef small_def = {6,
                                    {{"ds_r1_k3_s2_e1_c16_se0.25_nre"},
                                     {"ir_r1_k3_s2_e4.5_c24_nre", "ir_r1_k3_s1_e3.67_c24_nre"},
                                     {"ir_r1_k5_s2_e4_c40_se0.25", "ir_r2_k5_s1_e6_c40_se0.25"},
                                     {"ir_r2_k5_s1_e3_c48_se0.25"},
                                     {"ir_r3_k5_s2_e6_c96_se0.25"},
                                     {"cn_r1_k1_s1_c576"}}};

static const MobileNetV3Arch large100 = {&large_def, 1.0, 1280}, small100 = {&small_def, 1.0, 1024};

#define MNV3_CFG(tag_)                                                                                         \
    {.tag = tag_, .input_size = {3, 224, 224}, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},    \
     .crop_pct = 0.875, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                \
     .first_conv = "conv_stem", .classifier = "classifier"}

static const ModelEntry entries[] = {
    {"mobilenetv3_large_100", build_mobilenetv3, &large100, MNV3_CFG("ra_in1k"), NULL},
    {"mobilenetv3_small_100", build_mobilenetv3, &small100, MNV3_CFG("lamb_in1k"), NULL},
};

/* MobileNetV3.group_matcher(coarse=False) */
static const GroupRule groups[] = {
    {"^conv_stem|bn1", 0, LG_NO_SUFFIX},
    {"^blocks\\.([0-9]+)\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {NULL, 0, 0},
};

const ModelFamily mobilenetv3_family = {entries, sizeof entries / sizeof entries[0], groups};
