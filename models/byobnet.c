/*
 * ByobNet, timm's Bring-Your-Own-Blocks network (timm/models/byobnet.py),
 * as far as its configs here need it: a 3x3 stride-2 ConvNormAct stem, one
 * block type per stage (edge, dark, basic or bottle; all conv-BN-act and
 * ending in the ReLU after the residual add), a shortcut of a 1x1
 * ConvNormAct (downsample 'conv1x1') or of a 2x2 ceil-mode average pool and
 * a 1x1 ConvNormAct (DownsampleAvg, 'avg') wherever shape changes, an
 * optional SE on the block's mid or out width, an optional final 1x1
 * ConvNormAct, then the avg-pool classifier.
 * Init (_init_weights, children before their block): convs normal(0,
 * sqrt(2 / (k*k*out/groups))) with zero biases (SE's), BN weight 1 / bias 0
 * with each block's last BN zeroed (zero_init_last: every block here has a
 * shortcut module), the head normal(0, 0.01) with a zero bias.
 */
#include "models/efficientnet_builder.h"
#include "models/layer_groups.h"
#include "models/registry.h"

typedef enum { BYOB_EDGE, BYOB_DARK, BYOB_BASIC, BYOB_BOTTLE } ByobBlockType;

/* ByoBlockCfg: d blocks of c channels, the first of stride s; group size gs
 * (0: one group), bottle ratio br. */
typedef struct ByobStage {
    ByobBlockType type;
    int d, c, s, gs;
    double br;
} ByobStage;

enum { BYOB_MAX_STAGES = 5 };

typedef struct ByobArch {
    ByobStage stages[BYOB_MAX_STAGES];
    int nstages;
    int stem_chs;
    int avg_down;        /* downsample 'avg', else 'conv1x1' */
    int num_features;    /* the final 1x1 ConvNormAct's width; 0: none */
    double se_rd_ratio;  /* attn_layer 'se' with this rd_ratio; 0: no attention */
} ByobArch;

/* create_shortcut: identity where shape stays. */
static ValueId shortcut(Builder *b, const ByobArch *r, ValueId x, int64_t out, int stride)
{
    if (b_shape(b, x)->d[1] == out && stride == 1)
        return x;
    if (!r->avg_down)
        return nn_conv_bn_act(b, "shortcut", x, out, 1, stride, 1, 0, 1);
    b_push(b, "shortcut");
    if (stride > 1)
        x = f_avg_pool2d(b, x, 2, stride, 0, 1, 0);
    x = nn_conv_bn_act(b, "conv", x, out, 1, 1, 1, 0, 1);
    b_pop(b);
    return x;
}

/* SEModule(rd = make_divisible(ch * rd_ratio, 8, round_limit=0)), or x. */
static ValueId attn(Builder *b, const ByobArch *r, const char *name, ValueId x)
{
    if (r->se_rd_ratio == 0)
        return x;
    int64_t rd = eb_make_divisible((double)b_shape(b, x)->d[1] * r->se_rd_ratio, 8, 0);
    return nn_se_module(b, name, x, rd, (SEOpts){.bias_init = init_zeros()});
}

/* The module order (shortcut first, then the convs and attention as each
 * block class declares them) is the state_dict's. The edge and bottle
 * blocks put the SE on the mid width ("attn"), dark and basic on the
 * output ("attn_last"). */
static ValueId block(Builder *b, const ByobArch *r, const ByobStage *st, ValueId x, int stride, double drop_path)
{
    int64_t out = st->c;
    int64_t mid = eb_make_divisible(out * st->br, 8, 0.9);
    int groups = st->gs ? (int)(mid / st->gs) : 1;
    ValueId sc = shortcut(b, r, x, out, stride);
    switch (st->type) {
    case BYOB_EDGE:
        x = nn_conv_bn_act(b, "conv1_kxk", x, mid, 3, stride, groups, 0, 0);
        x = attn(b, r, "attn", x);
        x = nn_conv_bn_act(b, "conv2_1x1", x, out, 1, 1, 1, 1, 1);
        break;
    case BYOB_DARK:
        x = nn_conv_bn_act(b, "conv1_1x1", x, mid, 1, 1, 1, 0, 0);
        x = nn_conv_bn_act(b, "conv2_kxk", x, out, 3, stride, groups, 1, 1);
        x = attn(b, r, "attn_last", x);
        break;
    case BYOB_BASIC:
        x = nn_conv_bn_act(b, "conv1_kxk", x, mid, 3, stride, 1, 0, 0);
        x = nn_conv_bn_act(b, "conv2_kxk", x, out, 3, 1, groups, 1, 1);
        x = attn(b, r, "attn_last", x);
        break;
    case BYOB_BOTTLE:
        x = nn_conv_bn_act(b, "conv1_1x1", x, mid, 1, 1, 1, 0, 0);
        x = nn_conv_bn_act(b, "conv2_kxk", x, mid, 3, stride, groups, 0, 0);
        x = attn(b, r, "attn", x);
        x = nn_conv_bn_act(b, "conv3_1x1", x, out, 1, 1, 1, 1, 1);
        break;
    }
    return f_relu(b, f_add(b, f_drop_path(b, x, drop_path), sc));
}

static ValueId build_byobnet(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const ByobArch *r = m->arch;
    int total = 0, idx = 0;
    for (int s = 0; s < r->nstages; s++)
        total += r->stages[s].d;
    x = nn_conv_bn_act(b, "stem", x, r->stem_chs, 3, 2, 1, 0, 0);
    for (int s = 0; s < r->nstages; s++) {
        b_push(b, "stages");
        b_push(b, "%d", s);
        for (int i = 0; i < r->stages[s].d; i++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "%d", i);
            x = block(b, r, &r->stages[s], x, i == 0 ? r->stages[s].s : 1, dpr);
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
    }
    if (r->num_features)
        x = nn_conv_bn_act(b, "final_conv", x, r->num_features, 1, 1, 1, 0, 0);
    return nn_classifier(b, "head.fc", x, model_num_classes(m, a), a->drop_rate,
                         (LinearOpts){.weight_init = init_normal(0.01), .bias_init = init_zeros()});
}

static const ByobArch test = {
    {{BYOB_EDGE, 1, 32, 2, 0, 0.5},
     {BYOB_DARK, 1, 64, 2, 0, 0.5},
     {BYOB_BASIC, 1, 128, 2, 32, 0.25},
     {BYOB_BOTTLE, 1, 256, 2, 64, 0.25}},
    4, 24, 1, 0, 0.25,
};

static const ByobArch gernet_s = {
    {{BYOB_BASIC, 1, 48, 2, 0, 1.0},
     {BYOB_BASIC, 3, 48, 2, 0, 1.0},
     {BYOB_BOTTLE, 7, 384, 2, 0, 0.25},
     {BYOB_BOTTLE, 2, 560, 2, 1, 3.0},
     {BYOB_BOTTLE, 1, 256, 1, 1, 3.0}},
    5, 13, 0, 1920, 0,
};

#define BYOB_CFG(tag_, size, crop, interp)                                                                         \
    {.tag = tag_, .input_size = {3, size, size}, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},      \
     .crop_pct = crop, .crop_mode = "center", .interpolation = interp, .num_classes = 1000,                        \
     .first_conv = "stem.conv", .classifier = "head.fc"}

static const ModelEntry entries[] = {
    {"gernet_s", build_byobnet, &gernet_s, BYOB_CFG("idstcv_in1k", 224, 0.875, "bilinear"), NULL},
    {"test_byobnet", build_byobnet, &test, BYOB_CFG("r160_in1k", 160, 0.95, "bicubic"), NULL},
};

/* ByobNet.group_matcher(coarse=False) */
static const GroupRule groups[] = {
    {"^stem", 0, LG_NO_SUFFIX},
    {"^stages\\.([0-9]+)\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^final_conv", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily byobnet_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
