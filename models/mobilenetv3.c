/*
 * MobileNetV3 family (timm/models/mobilenetv3.py, class MobileNetV3):
 * conv_stem (3x3 s2) + bn1, the arch-string blocks (hard-swish by default,
 * 'nre' blocks ReLU; SE on the expanded channels, ReLU inside, hard-sigmoid
 * gate, channels by round_channels), then the "efficient head": global
 * average pool [N,C,1,1], conv_head (1x1 with bias, no norm) + act2, flatten,
 * dropout, classifier. MobileNetV4's conv variants (_gen_mobilenet_v4) are
 * the same class: ReLU, a 32-channel stem, cn/er/uir blocks, and a head
 * conv without bias followed by norm_head (BatchNormAct2d). Init is
 * _init_weight_goog (see efficientnet_builder.h).
 */
#include "models/efficientnet_builder.h"
#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct MobileNetV3Arch {
    const EbArchDef *def;
    double channel_multiplier;
    int num_features; /* conv_head's channels, not rounded */
    int v4;           /* _gen_mobilenet_v4's settings, else _gen_mobilenet_v3's */
} MobileNetV3Arch;

static ValueId build_mobilenetv3(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const MobileNetV3Arch *v = m->arch;
    /* V4 takes MobileNetV3's default SqueezeExcite (sigmoid gate, the
     * block's act, channels by round()); its arch strings name no SE. */
    EbConfig cfg = {.round = {v->channel_multiplier, 8, 0.9}, .act = v->v4 ? EB_ACT_RELU : EB_ACT_HARD_SWISH,
                    .se_from_exp = 1, .se_hard_gate = !v->v4, .se_force_relu = !v->v4,
                    .se_round_channels = !v->v4, .drop_path_rate = a->drop_path_rate};
    eb_bn_args(&cfg, a);
    EbBlocks blocks;
    if (eb_decode_arch(b, v->def, 1.0, 0, &blocks))
        return -1;
    int stem = v->v4 ? 32 : 16;
    int fix_stem = v->channel_multiplier < (v->v4 ? 1.0 : 0.75);
    x = eb_conv(b, "conv_stem", x, fix_stem ? stem : eb_round_channels(stem, cfg.round), 3, 2, 1, 0, cfg.pad);
    x = eb_bn_act(b, &cfg, "bn1", x, cfg.act);
    int head_in;
    x = eb_build_blocks(b, &cfg, &blocks, x, &head_in);
    x = f_adaptive_avg_pool2d(b, x, 1, 1);
    if (v->v4)
        x = eb_bn_act(b, &cfg, "norm_head", eb_conv(b, "conv_head", x, v->num_features, 1, 1, 1, 0, cfg.pad), cfg.act);
    else
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

/* MobileNetV4: 'cn' ConvBnAct, 'er' FusedIB, 'uir' ExtraDW (a and k), IR
 * (k only), ConvNeXt-like (a only) or FFN (neither) */
static const EbArchDef v4_small_def = {5,
                                       {{"cn_r1_k3_s2_e1_c32", "cn_r1_k1_s1_e1_c32"},
                                        {"cn_r1_k3_s2_e1_c96", "cn_r1_k1_s1_e1_c64"},
                                        {"uir_r1_a5_k5_s2_e3_c96", "uir_r4_a0_k3_s1_e2_c96", "uir_r1_a3_k0_s1_e4_c96"},
                                        {"uir_r1_a3_k3_s2_e6_c128", "uir_r1_a5_k5_s1_e4_c128", "uir_r1_a0_k5_s1_e4_c128",
                                         "uir_r1_a0_k5_s1_e3_c128", "uir_r2_a0_k3_s1_e4_c128"},
                                        {"cn_r1_k1_s1_c960"}}};

static const EbArchDef v4_medium_def = {
    5,
    {{"er_r1_k3_s2_e4_c48"},
     {"uir_r1_a3_k5_s2_e4_c80", "uir_r1_a3_k3_s1_e2_c80"},
     {"uir_r1_a3_k5_s2_e6_c160", "uir_r2_a3_k3_s1_e4_c160", "uir_r1_a3_k5_s1_e4_c160", "uir_r1_a3_k3_s1_e4_c160",
      "uir_r1_a3_k0_s1_e4_c160", "uir_r1_a0_k0_s1_e2_c160", "uir_r1_a3_k0_s1_e4_c160"},
     {"uir_r1_a5_k5_s2_e6_c256", "uir_r1_a5_k5_s1_e4_c256", "uir_r2_a3_k5_s1_e4_c256", "uir_r1_a0_k0_s1_e4_c256",
      "uir_r1_a3_k0_s1_e4_c256", "uir_r1_a3_k5_s1_e2_c256", "uir_r1_a5_k5_s1_e4_c256", "uir_r2_a0_k0_s1_e4_c256",
      "uir_r1_a5_k0_s1_e2_c256"},
     {"cn_r1_k1_s1_c960"}}};

static const MobileNetV3Arch large100 = {&large_def, 1.0, 1280, 0}, small100 = {&small_def, 1.0, 1024, 0};
static const MobileNetV3Arch v4_small = {&v4_small_def, 1.0, 1280, 1}, v4_medium = {&v4_medium_def, 1.0, 1280, 1};

#define MNV3_CFG(tag_)                                                                                         \
    {.tag = tag_, .input_size = {3, 224, 224}, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},    \
     .crop_pct = 0.875, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                \
     .first_conv = "conv_stem", .classifier = "classifier"}
#define MNV4_CFG(tag_, size, crop, test, test_crop)                                                            \
    {.tag = tag_, .input_size = {3, size, size}, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},  \
     .crop_pct = crop, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                 \
     .first_conv = "conv_stem", .classifier = "classifier", .test_input_size = test, .test_crop_pct = test_crop}

static const ModelEntry entries[] = {
    {"mobilenetv3_large_100", build_mobilenetv3, &large100, MNV3_CFG("ra_in1k"), NULL},
    {"mobilenetv3_small_100", build_mobilenetv3, &small100, MNV3_CFG("lamb_in1k"), NULL},
    {"mobilenetv4_conv_small", build_mobilenetv3, &v4_small, MNV4_CFG("e2400_r224_in1k", 224, 0.875, 256, 0.95), NULL},
    {"mobilenetv4_conv_medium", build_mobilenetv3, &v4_medium, MNV4_CFG("e500_r256_in1k", 256, 0.95, 320, 1.0),
     NULL},
};

/* MobileNetV3.group_matcher(coarse=False) */
static const GroupRule groups[] = {
    {"^conv_stem|bn1", 0, LG_NO_SUFFIX},
    {"^blocks\\.([0-9]+)\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {NULL, 0, 0},
};

const ModelFamily mobilenetv3_family = {entries, sizeof entries / sizeof entries[0], groups,
                                        MODEL_OPT_BN_MOMENTUM | MODEL_OPT_BN_EPS, 0};
