/*
 * The EfficientNet / MobileNetV3 trunk builder (timm/models/_efficientnet_builder.py
 * and _efficientnet_blocks.py): architecture strings such as
 * "ir_r2_k3_s2_e6_c24_se0.25" decoded into block arguments, stage depths scaled
 * by a depth multiplier, channels rounded by a channel multiplier, and the
 * blocks (DepthwiseSeparableConv, InvertedResidual, EdgeResidual, ConvBnAct,
 * MobileNetV4's UniversalInvertedResidual, SqueezeExcite) built under timm's
 * names: blocks.<stage>.<block>.<module>, each norm + act the model's norm
 * layer (BatchNorm2d unless the model says otherwise).
 *
 * Init is timm's _init_weight_goog: conv weight normal(0, sqrt(2 / fan_out))
 * with fan_out = k*k*out_ch // groups and zero bias, BN weight 1 / bias 0,
 * linear weight uniform(+-1/sqrt(out_features)) and zero bias.
 */
#ifndef CTIMM_EFFICIENTNET_BUILDER_H
#define CTIMM_EFFICIENTNET_BUILDER_H

#include "frontend/builder.h"
#include "models/registry.h"

#define EB_MAX_STAGES 12
#define EB_MAX_STAGE_DEFS 16 /* block strings in one stage (MobileNetV4 hybrid large: 15) */
#define EB_MAX_BLOCKS 256   /* blocks after depth scaling */

/* Activations the arch strings and models name; EB_ACT_DEFAULT: the model's. */
typedef enum EbAct { EB_ACT_DEFAULT, EB_ACT_NONE, EB_ACT_RELU, EB_ACT_SILU, EB_ACT_HARD_SWISH } EbAct;

typedef enum EbBlockType { EB_DS, EB_DSA, EB_IR, EB_ER, EB_CN, EB_UIR } EbBlockType;

/* The norm layer of every norm + act (timm's get_norm_act_layer of the
 * model's norm_layer), each eps 1e-5 and weight 1 / bias 0 at init:
 *   EB_NORM_BN     BatchNormAct2d (momentum 0.1)
 *   EB_NORM_GN     GroupNormAct: group_size channels a group
 *   EB_NORM_LN     LayerNormAct2d: layer norm over C at each pixel
 *   EB_NORM_EVO_S0 EvoNorm2dS0: x * sigmoid(v * x) / group_std(x) * weight
 *                  + bias (group_size channels a group, biased variance),
 *                  its own swish-like act whatever the model's; without an
 *                  act only the affine (no v, no normalisation). */
typedef enum EbNormType { EB_NORM_BN, EB_NORM_GN, EB_NORM_LN, EB_NORM_EVO_S0 } EbNormType;
typedef struct EbNorm {
    EbNormType type;
    int group_size; /* GN and EvoNorm */
} EbNorm;

/* create_conv2d's padding (timm's pad_type): '' (PyTorch-style symmetric,
 * get_padding) or 'same' (TensorFlow's SAME, the tf_ ports'). */
typedef enum EbPad { EB_PAD_DEFAULT, EB_PAD_SAME } EbPad;

/* A model's arch_def: stages of block strings, each stage ended by NULL. */
typedef struct EbArchDef {
    int nstages;
    const char *stages[EB_MAX_STAGES][EB_MAX_STAGE_DEFS + 1];
} EbArchDef;

/* A conv's kernel size, or MixedConv2d's list of them ("k3.5.7"): n of
 * them, the channels split among them as timm's _split_channels. */
enum { EB_MAX_MIX = 8 };
typedef struct EbKernel {
    int n, k[EB_MAX_MIX];
} EbKernel;

/* One block's arguments, as timm's _decode_block_str leaves them. */
typedef struct EbBlockArgs {
    EbBlockType type;
    int stage;
    int out_chs, stride;
    EbKernel kernel;                /* depthwise (ds, ir, uir's middle), expansion (er) or the conv's (cn) */
    EbKernel exp_kernel, pw_kernel; /* ir's 'a' and 'p'; er's and ds's 'p'; uir's start depthwise
                                     * ('a'). uir's 'a' and 'k' may be 0: no such conv */
    double exp_ratio;          /* 1 where the type has none */
    double se_ratio;           /* 0: no SqueezeExcite */
    int noskip, skip;          /* skip: cn's forced residual */
    int force_in_chs;          /* er's 'fc' */
    int group_size;            /* 'gs'; -1: the block's default */
    EbAct act;
} EbBlockArgs;

typedef struct EbBlocks {
    int n, nstages;
    EbBlockArgs b[EB_MAX_BLOCKS];
} EbBlocks;

/* decode_arch_def: depth_multiplier scales each stage's repeats with 'ceil'
 * (or 'round' when round_depth) truncation. Fails through the builder. */
int eb_decode_arch(Builder *b, const EbArchDef *def, double depth_multiplier, int round_depth, EbBlocks *out);

/* timm's make_divisible (min_value = divisor) and round_channels. */
int eb_make_divisible(double v, int divisor, double round_limit);

typedef struct EbRound {
    double multiplier; /* 0 leaves channels as they are */
    int divisor;       /* 0: 8 */
    double round_limit;
} EbRound;
int eb_round_channels(int channels, EbRound r);

/* The model-level settings the blocks are built with (EfficientNetBuilder). */
typedef struct EbConfig {
    EbRound round;
    EbAct act;
    int se_from_exp;       /* SE ratio relative to the expanded channels (MobileNetV3) */
    int se_hard_gate;      /* hard_sigmoid gate, else sigmoid */
    int se_force_relu;     /* SE's act is ReLU whatever the block's */
    int se_round_channels; /* SE channels by round_channels, else Python's round() */
    EbNorm norm;
    double drop_path_rate;
    EbPad pad;     /* every create_conv2d's */
    double bn_eps;      /* 0: 1e-5; the tf_ ports' BN_EPS_TF_DEFAULT is 1e-3 */
    double bn_momentum; /* 0: 0.1 */
} EbConfig;

/* timm's resolve_bn_args: the bn_momentum and bn_eps model kwargs given in a
 * (train.py's --bn-momentum, --bn-eps) over cfg's. */
void eb_bn_args(EbConfig *cfg, const ModelArgs *a);

/* Builds the stages under "blocks" from x with in_chs channels; *out_chs
 * gets the channels of the last block. */
ValueId eb_build_blocks(Builder *b, const EbConfig *cfg, const EbBlocks *blocks, ValueId x, int *out_chs);

/* The pieces the model classes share with the blocks. */
ValueId eb_act(Builder *b, EbAct act, ValueId x);
/* create_conv2d(padding=pad) with goog init. 'same' is static where timm's
 * is_static_pad says so (stride 1, odd kernel: the symmetric padding);
 * elsewhere it is Conv2dSame: x padded as pad_same computes from x's size
 * (a pad node under the conv's name, none where that is 0), then the conv
 * without padding. */
ValueId eb_conv(Builder *b, const char *name, ValueId x, int64_t out, int kernel, int stride, int groups, int bias,
                EbPad pad);
/* The same for a kernel list: with several, MixedConv2d ("<name>.<i>"
 * convs over channel splits, concatenated), depthwise when groups is the
 * input's channels, else (groups 1) plain. */
ValueId eb_mixconv(Builder *b, const char *name, ValueId x, int64_t out, const EbKernel *k, int stride, int groups,
                   EbPad pad);
/* The model's norm + act (cfg->norm, see EbNorm; BatchNormAct2d, eps
 * cfg->bn_eps, by default, as timm names every one "bn*"); EB_ACT_NONE is
 * timm's apply_act=False. */
ValueId eb_bn_act(Builder *b, const EbConfig *cfg, const char *name, ValueId x, EbAct act);
/* nn.Linear with goog init. */
ValueId eb_linear(Builder *b, const char *name, ValueId x, int64_t out);

#endif
