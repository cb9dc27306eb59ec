/*
 * EfficientNet family (timm/models/efficientnet.py, class EfficientNet):
 * conv_stem (3x3 s2) + bn1, the arch-string blocks, conv_head (1x1) + bn2,
 * global average pool, dropout, classifier. B0..B3 scale channels and depth
 * from one arch_def; test_efficientnet mixes cn/er/ir blocks, its _gn, _ln
 * and _evos variants with GroupNormAct, LayerNormAct2d or EvoNorm2dS0 for
 * every BatchNormAct2d. The tf_ ports of TensorFlow weights pad convs as TF's
 * SAME and take BN eps 1e-3. Init is _init_weight_goog (see efficientnet_builder.h).
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
    int round_depth;    /* depth_trunc 'round' (MixNet-M/L/XL), else 'ceil' */
    int fixed_features; /* num_features as given (MixNet's), else rounded by the channel multiplier */
    EbNorm norm;
    int tf;             /* pad_type 'same', bn_eps BN_EPS_TF_DEFAULT (the tf_ models) */
} EffNetArch;

static ValueId build_efficientnet(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const EffNetArch *e = m->arch;
    EbConfig cfg = {.round = {e->channel_multiplier, 8, e->round_limit}, .act = e->act,
                    .norm = e->norm, .drop_path_rate = a->drop_path_rate, .pad = e->tf ? EB_PAD_SAME : EB_PAD_DEFAULT,
                    .bn_eps = e->tf ? 1e-3 : 0};
    eb_bn_args(&cfg, a);
    EbBlocks blocks;
    if (eb_decode_arch(b, e->def, e->depth_multiplier, e->round_depth, &blocks))
        return -1;
    x = eb_conv(b, "conv_stem", x, eb_round_channels(e->stem_size, cfg.round), 3, 2, 1, 0, cfg.pad);
    x = eb_bn_act(b, &cfg, "bn1", x, e->act);
    int head_in;
    x = eb_build_blocks(b, &cfg, &blocks, x, &head_in);
    int features = e->fixed_features ? e->num_features : eb_round_channels(e->num_features, cfg.round);
    x = eb_conv(b, "conv_head", x, features, 1, 1, 1, 0, cfg.pad);
    x = eb_bn_act(b, &cfg, "bn2", x, e->act);
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

/* _gen_efficientnetv2_s (rw=False): the official V2 small */
static const EbArchDef v2_s_def = {6,
                                   {{"cn_r2_k3_s1_e1_c24_skip"},
                                    {"er_r4_k3_s2_e4_c48"},
                                    {"er_r4_k3_s2_e4_c64"},
                                    {"ir_r6_k3_s2_e4_c128_se0.25"},
                                    {"ir_r9_k3_s1_e6_c160_se0.25"},
                                    {"ir_r15_k3_s2_e6_c256_se0.25"}}};

/* _gen_mixnet_s: MixedConv2d kernels ('k3.5.7'), grouped pointwise ('a1.1',
 * 'p1.1'), ReLU but where 'nsw' says swish */
static const EbArchDef mixnet_s_def = {
    6,
    {{"ds_r1_k3_s1_e1_c16"},
     {"ir_r1_k3_a1.1_p1.1_s2_e6_c24", "ir_r1_k3_a1.1_p1.1_s1_e3_c24"},
     {"ir_r1_k3.5.7_s2_e6_c40_se0.5_nsw", "ir_r3_k3.5_a1.1_p1.1_s1_e6_c40_se0.5_nsw"},
     {"ir_r1_k3.5.7_p1.1_s2_e6_c80_se0.25_nsw", "ir_r2_k3.5_p1.1_s1_e6_c80_se0.25_nsw"},
     {"ir_r1_k3.5.7_a1.1_p1.1_s1_e6_c120_se0.5_nsw", "ir_r2_k3.5.7.9_a1.1_p1.1_s1_e3_c120_se0.5_nsw"},
     {"ir_r1_k3.5.7.9.11_s2_e6_c200_se0.5_nsw", "ir_r2_k3.5.7.9_p1.1_s1_e6_c200_se0.5_nsw"}}};

/* _gen_mixnet_m (mixnet_xl scales it) */
static const EbArchDef mixnet_m_def = {
    6,
    {{"ds_r1_k3_s1_e1_c24"},
     {"ir_r1_k3.5.7_a1.1_p1.1_s2_e6_c32", "ir_r1_k3_a1.1_p1.1_s1_e3_c32"},
     {"ir_r1_k3.5.7.9_s2_e6_c40_se0.5_nsw", "ir_r3_k3.5_a1.1_p1.1_s1_e6_c40_se0.5_nsw"},
     {"ir_r1_k3.5.7_s2_e6_c80_se0.25_nsw", "ir_r3_k3.5.7.9_a1.1_p1.1_s1_e6_c80_se0.25_nsw"},
     {"ir_r1_k3_s1_e6_c120_se0.5_nsw", "ir_r3_k3.5.7.9_a1.1_p1.1_s1_e3_c120_se0.5_nsw"},
     {"ir_r1_k3.5.7.9_s2_e6_c200_se0.5_nsw", "ir_r3_k3.5.7.9_p1.1_s1_e6_c200_se0.5_nsw"}}};

#define EFFNET(cm, dm) {&effnet_def, cm, dm, 0.9, 32, 1280, .act = EB_ACT_SILU}
static const EffNetArch b0 = EFFNET(1.0, 1.0), b1 = EFFNET(1.0, 1.1), b2 = EFFNET(1.1, 1.2), b3 = EFFNET(1.2, 1.4);
static const EffNetArch b4 = EFFNET(1.4, 1.8);
static const EffNetArch tf_b0 = {&effnet_def, 1.0, 1.0, 0.9, 32, 1280, .act = EB_ACT_SILU, .tf = 1};
static const EffNetArch es = {&edge_def, 1.0, 1.0, 0.9, 32, 1280, .act = EB_ACT_RELU};
static const EffNetArch mixnet_s = {&mixnet_s_def, 1.0, 1.0, 0.9, 16, 1536, EB_ACT_RELU, .fixed_features = 1};
static const EffNetArch mixnet_xl = {&mixnet_m_def, 1.6, 1.2, 0.9, 24, 1536, EB_ACT_RELU, .round_depth = 1,
                                     .fixed_features = 1};
static const EffNetArch v2_rw_s = {&v2_rw_s_def, 1.0, 1.0, 0.9, 24, 1792, .act = EB_ACT_SILU};
static const EffNetArch tf_v2_s = {&v2_s_def, 1.0, 1.0, 0.9, 24, 1280, .act = EB_ACT_SILU, .tf = 1};
static const EffNetArch etest = {&test_def, 1.0, 1.0, 0.0, 24, 256, .act = EB_ACT_SILU};
static const EffNetArch etest_gn = {&test_def, 1.0, 1.0, 0.0, 24, 256, .act = EB_ACT_SILU, .norm = {EB_NORM_GN, 8}};
static const EffNetArch etest_ln = {&test_def, 1.0, 1.0, 0.0, 24, 256, .act = EB_ACT_SILU, .norm = {EB_NORM_LN, 0}};
static const EffNetArch etest_evos = {&test_def, 1.0, 1.0, 0.0, 24, 256, .act = EB_ACT_SILU,
                                      .norm = {EB_NORM_EVO_S0, 8}};

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
    {"mixnet_s", build_efficientnet, &mixnet_s, IMAGENET("ft_in1k", 224, 0.875, 0, 0), NULL},
    {"mixnet_xl", build_efficientnet, &mixnet_xl, IMAGENET("ra_in1k", 224, 0.875, 0, 0), NULL},
    {"efficientnetv2_rw_s", build_efficientnet, &v2_rw_s, IMAGENET("ra2_in1k", 288, 1.0, 384, 0), NULL},
    {"tf_efficientnet_b0", build_efficientnet, &tf_b0, IMAGENET("ns_jft_in1k", 224, 0.875, 0, 0), NULL},
    {"tf_efficientnetv2_s", build_efficientnet, &tf_v2_s, INCEPTION("in21k_ft_in1k", 300, 1.0, 384, 0), NULL},
    {"test_efficientnet", build_efficientnet, &etest, IMAGENET("r160_in1k", 160, 0.95, 0, 0), NULL},
    {"test_efficientnet_gn", build_efficientnet, &etest_gn, INCEPTION("r160_in1k", 160, 0.95, 0, 0), NULL},
    {"test_efficientnet_ln", build_efficientnet, &etest_ln, IMAGENET("r160_in1k", 160, 0.95, 0, 0), NULL},
    {"test_efficientnet_evos", build_efficientnet, &etest_evos, INCEPTION("r160_in1k", 160, 0.95, 0, 0), NULL},
};

/* EfficientNet.group_matcher(coarse=False): the head conv joins the last
 * block */
static const GroupRule groups[] = {
    {"^conv_stem|bn1", 0, LG_NO_SUFFIX},
    {"^blocks\\.([0-9]+)\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"conv_head|bn2", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily efficientnet_family = {entries, sizeof entries / sizeof entries[0], groups,
                                         MODEL_OPT_BN_MOMENTUM | MODEL_OPT_BN_EPS, 0};
