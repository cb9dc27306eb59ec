/*
 * EfficientNet family (timm/models/efficientnet.py, class EfficientNet):
 * conv_stem (3x3 s2) + bn1, the arch-string blocks, conv_head (1x1) + bn2,
 * global average pool, dropout, classifier. B0..B3 scale channels and depth
 * from one arch_def; test_efficientnet mixes cn/er/ir blocks. Init is
 * _init_weight_goog (see efficientnet_builder.h).
 */
#include <math.h>

#include "models/efficientnet_builder.h"
#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct EffNetArch {
    const EbArchDef *def;
    double channel_multiplier, depth_multiplier, round_limit;
    int stem_size, num_features; /* before channel rounding */
    EbAct act;
} EffNetArch;

static ValueId build_efficientnet(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const EffNetArch *e = m->arch;
    EbConfig cfg = {.round = {e->channel_multiplier, 8, e->round_limit}, .act = e->act,
                    .drop_path_rate = a->drop_path_rate};
    EbBlocks blocks;
    if (eb_decode_arch(b, e->def, e->depth_multiplier, 0, &blocks))
        return -1;
    x = eb_conv(b, "conv_stem", x, eb_round_channels(e->stem_size, cfg.round), 3, 2, 1, 0);
    x = eb_bn_act(b, "bn1", x, e->act);
    int head_in;
    x = eb_build_blocks(b, &cfg, &blocks, x, &head_in);
    x = eb_conv(b, "conv_head", x, eb_round_channels(e->num_features, cfg.round), 1, 1, 1, 0);
    x = eb_bn_act(b, "bn2", x, e->act);
    int classes = model_num_classes(m, a);
    return nn_classifier(b, "classifier", x, classes, a->drop_rate,
                         (LinearOpts){.weight_init = init_uniform(1.0 / sqrt((double)classes)), .bias_init = init_zeros()});
}

static const EbArchDef effnet_def = {7,
                                     {{"ds_r1_k3_s1_e1_c16_se0.25"},
                                      {"ir_r2_k3_s2_e6_c24_se0.25"},
                                      {"ir_r2_k5_s2_e6_c40_se0.25"},
                                      {"ir_r3_k3_s2_e6_c80_se0.25"},
                                      {"ir_r3_k5_s1_e6_c112_se0.25"},
                                      {"ir_r4_k5_s2_e6_c192_se0.25"},
                                      {"ir_r1_k3_s1_e6_c320_se0.25"}}};

static const EbArchDef test_def = {5,
                                   {{"cn_r1_k3_s1_e1_c16_skip"},
                                    {"er_r1_k3_s2_e4_c24"},
                                    {"er_r1_k3_s2_e4_c32"},
                                    {"ir_r1_k3_s2_e4_c48_se0.25"},
                                    {"ir_r1_k3_s2_e4_c64_se0.25"}}};

/* _gen_efficientnet_edge: EdgeResidual stages first, ReLU, no SE */
static const EbArchDef edge_def = {6,
                                   {{"er_r1_k3_s1_e4_c24_fc24_noskip"},
                                    {"er_r2_k3_s2_e8_c32"},
                                    {"er_r4_k3_s2_e8_c48"},
                                    {"ir_r5_k5_s2_e8_c96"},
                                    {"ir_r4_k5_s1_e8_c144"},
                                    {"ir_r2_k5_s2_e8_c192"}}};

/* _gen_efficientnetv2_s with rw=True: timm's first V2 small */
static const EbArchDef v2_rw_s_def = {6,
                                      {{"er_r2_k3_s1_e1_c24"},
                                       {"er_r4_k3_s2_e4_c48"},
                                       {"er_r4_k3_s2_e4_c64"},
                                       {"ir_r6_k3_s2_e4_c128_se0.25"},
                                       {"ir_r9_k3_s1_e6_c160_se0.25"},
                                       {"ir_r15_k3_s2_e6_c272_se0.25"}}};

#define EFFNET(cm, dm) {&effnet_def, cm, dm, 0.9, 32, 1280, EB_ACT_SILU}
static const EffNetArch b0 = EFFNET(1.0, 1.0), b1 = EFFNET(1.0, 1.1), b2 = EFFNET(1.1, 1.2), b3 = EFFNET(1.2, 1.4);
static const EffNetArch b4 = EFFNET(1.4, 1.8);
static const EffNetArch es = {&edge_def, 1.0, 1.0, 0.9, 32, 1280, EB_ACT_RELU};
static const EffNetArch v2_rw_s = {&v2_rw_s_def, 1.0, 1.0, 0.9, 24, 1792, EB_ACT_SILU};
static const EffNetArch etest = {&test_def, 1.0, 1.0, 0.0, 24, 256, EB_ACT_SILU};

#define EFFNET_CFG(tag_, size, crop, m0, m1, m2, s0, s1, s2, test, test_crop)                                  \
    {.tag = tag_, .input_size = {3, size, size}, .mean = {m0, m1, m2}, .std = {s0, s1, s2},                    \
     .crop_pct = crop, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                 \
     .first_conv = "conv_stem", .classifier = "classifier", .test_input_size = test, .test_crop_pct = test_crop}
#define IMAGENET(tag, size, crop, test, test_crop)                                                              \
    EFFNET_CFG(tag, size, crop, 0.485, 0.456, 0.406, 0.229, 0.224, 0.225, test, test_crop)
#define INCEPTION(tag, size, crop, test, test_crop)                                                             \
    EFFNET_CFG(tag, size, crop, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, test, test_crop)

static const ModelEntry entries[] = {
    {"efficientnet_b0", build_efficientnet, &b0, IMAGENET("ra_in1k", 224, 0.875, 0, 0), NULL},
    {"efficientnet_b1", build_efficientnet, &b1, INCEPTION("ra4_e3600_r240_in1k", 240, 0.9, 288, 1.0), NULL},
    {"efficientnet_b2", build_efficientnet, &b2, IMAGENET("ra_in1k", 256, 0.875, 288, 1.0), NULL},
    {"efficientnet_b3", build_efficientnet, &b3, IMAGENET("ra2_in1k", 288, 0.875, 320, 1.0), NULL},
    {"efficientnet_b4", build_efficientnet, &b4, IMAGENET("ra2_in1k", 320, 0.875, 384, 1.0), NULL},
    {"efficientnet_es", build_efficientnet, &es, IMAGENET("ra_in1k", 224, 0.875, 0, 0), NULL},
    {"efficientnetv2_rw_s", build_efficientnet, &v2_rw_s, IMAGENET("ra2_in1k", 288, 1.0, 384, 0), NULL},
    {"test_efficientnet", build_efficientnet, &etest, IMAGENET("r160_in1k", 160, 0.95, 0, 0), NULL},
};

/* EfficientNet.group_matcher(coarse=False): the head conv joins the last
 * block */
static const GroupRule groups[] = {
    {"^conv_stem|bn1", 0, LG_NO_SUFFIX},
    {"^blocks\\.([0-9]+)\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"conv_head|bn2", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily efficientnet_family = {entries, sizeof entries / sizeof entries[0], groups};
