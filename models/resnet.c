/*
 * ResNet family (timm/models/resnet.py): BasicBlock and Bottleneck stages,
 * plain 7x7 or deep 3x3 stem (tiered: 3/4 of the width first), conv or
 * avg-pool ("d") downsampling, ResNeXt's grouped 3x3 (cardinality, base
 * width), SE or ECA attention after each block's last norm (named "se"
 * either way, as timm's create_attn), BatchNorm2d or GroupNorm ("_gn").
 * Init: kaiming_normal(fan_out) of every Conv2d (SE's too; ECA's Conv1d
 * keeps torch's default), norm weight
 * 1 / bias 0 with the last of each residual branch zeroed
 * (zero_init_last), nn.Linear default fc.
 */
#include <math.h>

#include "models/efficientnet_builder.h"
#include "models/layer_groups.h"
#include "models/registry.h"

enum { ATTN_NONE, ATTN_SE, ATTN_ECA };

typedef struct ResNetArch {
    int bottleneck[4]; /* block kind per stage: 0 BasicBlock, 1 Bottleneck */
    int layers[4];
    int channels[4];
    int stem_width; /* 0: plain 7x7 stem of 64 channels */
    int avg_down;
    int tiered;                  /* deep_tiered stem: 3 * (stem_width / 4), stem_width, 2 * stem_width */
    int cardinality, base_width; /* 0: 1 and 64 */
    int attn;                    /* ATTN_* */
    int group_norm;              /* timm's GroupNorm (32 groups) for every BatchNorm2d, under the same names */
} ResNetArch;

static ValueId conv(Builder *b, const char *name, ValueId x, int64_t out, int k, int stride, int pad)
{
    return nn_conv2d(b, name, x, out, k,
                     (ConvOpts){.stride = stride, .padding = pad, .weight_init = init_kaiming_normal_fan_out(out * k * k)});
}

/* The arch's norm layer (norm_layer(C)): BatchNorm2d or timm's GroupNorm. */
static ValueId norm(Builder *b, const ResNetArch *r, const char *name, ValueId x, int zero)
{
    return r->group_norm ? nn_group_norm(b, name, x, (GNOpts){.groups = 32, .zero_weight = zero})
                         : nn_batch_norm(b, name, x, (BNOpts){.zero_weight = zero});
}

static ValueId conv_bn(Builder *b, const ResNetArch *r, const char *cname, const char *bname, ValueId x, int64_t out,
                       int k, int stride, int zero_bn)
{
    return norm(b, r, bname, conv(b, cname, x, out, k, stride, k / 2), zero_bn);
}

static ValueId downsample(Builder *b, const ResNetArch *r, ValueId x, int64_t out, int stride)
{
    b_push(b, "downsample");
    if (r->avg_down) {
        if (stride != 1)
            x = f_avg_pool2d(b, x, 2, stride, 0, 1, 0);
        x = conv_bn(b, r, "1", "2", x, out, 1, 1, 0);
    } else {
        x = conv_bn(b, r, "0", "1", x, out, 1, stride, 0);
    }
    b_pop(b);
    return x;
}

/* SEModule (rd_ratio 1/16, divisor 8), its conv biases of torch's default init. */
static ValueId se(Builder *b, ValueId x)
{
    int64_t rd = eb_make_divisible((double)b_shape(b, x)->d[1] / 16, 8, 0);
    return nn_se_module(b, "se", x, rd, (SEOpts){0});
}

/* EcaModule: the channel means convolved along the channels by a Conv1d of
 * k = odd int(|log2(C) + 1| / 2), at least 3, no bias -> sigmoid gate; as a
 * conv2d of [B, 1, 1, C] by the weight [1, 1, k] viewed [1, 1, 1, k]. */
static ValueId eca(Builder *b, ValueId x)
{
    const CtShape *xs = b_shape(b, x);
    int64_t B = xs->d[0], ch = xs->d[1];
    int t = (int)(fabs(log2((double)ch) + 1) / 2), k = t % 2 ? t : t + 1;
    k = k < 3 ? 3 : k;
    b_push(b, "se");
    b_push(b, "conv");
    ValueId w = b_param(b, "weight", (CtShape){3, {1, 1, k}}, init_uniform(1 / sqrt((double)k)));
    b_pop(b);
    ValueId y = f_reshape(b, f_adaptive_avg_pool2d(b, x, 1, 1), 4, (int64_t[]){B, 1, 1, ch});
    ValueId in[2] = {y, f_reshape(b, w, 4, (int64_t[]){1, 1, 1, k})};
    y = b_node(b, CT_OP_conv2d, 2, in, (int64_t[]){1, 1, 0, (k - 1) / 2, 1, 1, 1}, 7, NULL, 0, 0);
    b_pop(b);
    return f_mul(b, x, f_sigmoid(b, f_reshape(b, y, 4, (int64_t[]){B, ch, 1, 1})));
}

static ValueId attention(Builder *b, const ResNetArch *r, ValueId x)
{
    return r->attn == ATTN_SE ? se(b, x) : r->attn == ATTN_ECA ? eca(b, x) : x;
}

static ValueId block(Builder *b, const ResNetArch *r, ValueId x, int bottleneck, int64_t planes, int stride, int down,
                     double drop_path)
{
    ValueId shortcut = x;
    int card = r->cardinality ? r->cardinality : 1, base = r->base_width ? r->base_width : 64;
    if (bottleneck) {
        int64_t width = (int64_t)floor((double)planes * base / 64) * card;
        x = f_relu(b, conv_bn(b, r, "conv1", "bn1", x, width, 1, 1, 0));
        x = nn_conv2d(b, "conv2", x, width, 3,
                      (ConvOpts){.stride = stride, .padding = 1, .groups = card,
                                 .weight_init = init_kaiming_normal_fan_out(width * 9 / card)});
        x = f_relu(b, norm(b, r, "bn2", x, 0));
        x = conv_bn(b, r, "conv3", "bn3", x, planes * 4, 1, 1, 1);
    } else {
        x = f_relu(b, conv_bn(b, r, "conv1", "bn1", x, planes, 3, stride, 0));
        x = conv_bn(b, r, "conv2", "bn2", x, planes, 3, 1, 1);
    }
    x = attention(b, r, x);
    x = f_drop_path(b, x, drop_path);
    if (down)
        shortcut = downsample(b, r, shortcut, planes * (bottleneck ? 4 : 1), stride);
    return f_relu(b, f_add(b, x, shortcut));
}

static ValueId stem(Builder *b, const ResNetArch *r, ValueId x, int64_t *inplanes)
{
    if (r->stem_width) {
        int64_t w = r->stem_width, first = r->tiered ? 3 * (w / 4) : w;
        *inplanes = 2 * w;
        b_push(b, "conv1");
        x = f_relu(b, conv_bn(b, r, "0", "1", x, first, 3, 2, 0));
        x = f_relu(b, conv_bn(b, r, "3", "4", x, w, 3, 1, 0));
        x = conv(b, "6", x, *inplanes, 3, 1, 1);
        b_pop(b);
    } else {
        *inplanes = 64;
        x = conv(b, "conv1", x, 64, 7, 2, 3);
    }
    x = f_relu(b, norm(b, r, "bn1", x, 0));
    return f_max_pool2d(b, x, 3, 2, 1);
}

static ValueId build_resnet(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const ResNetArch *r = m->arch;
    int64_t inplanes;
    int total = 0, idx = 0;
    for (int s = 0; s < 4; s++)
        total += r->layers[s];
    x = stem(b, r, x, &inplanes);
    for (int s = 0; s < 4; s++) {
        int64_t planes = r->channels[s], out = planes * (r->bottleneck[s] ? 4 : 1);
        int stride = s == 0 ? 1 : 2;
        b_push(b, "layer%d", s + 1);
        for (int i = 0; i < r->layers[s]; i++, idx++) {
            int st = i == 0 ? stride : 1;
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            b_push(b, "%d", i);
            x = block(b, r, x, r->bottleneck[s], planes, st, i == 0 && (st != 1 || inplanes != out), dpr);
            b_pop(b);
            inplanes = out;
        }
        b_pop(b);
    }
    return nn_classifier(b, "fc", x, model_num_classes(m, a), a->drop_rate, (LinearOpts){0});
}

#define IMAGENET_MEAN {0.485, 0.456, 0.406}
#define IMAGENET_STD {0.229, 0.224, 0.225}
#define RESNET_CFG(tag_, size, crop, interp, first, test, test_crop)                                           \
    {.tag = tag_, .input_size = {3, size, size}, .mean = IMAGENET_MEAN, .std = IMAGENET_STD,                   \
     .crop_pct = crop, .crop_mode = "center", .interpolation = interp, .num_classes = 1000,                    \
     .first_conv = first, .classifier = "fc", .test_input_size = test, .test_crop_pct = test_crop}

/* The four stages of 64, 128, 256, 512 planes: block kind, blocks per stage. */
#define STAGES(kind, l0, l1, l2, l3) \
    .bottleneck = {kind, kind, kind, kind}, .layers = {l0, l1, l2, l3}, .channels = {64, 128, 256, 512}
static const ResNetArch r18 = {STAGES(0, 2, 2, 2, 2)};
static const ResNetArch r26 = {STAGES(1, 2, 2, 2, 2)};
static const ResNetArch r34 = {STAGES(0, 3, 4, 6, 3)};
static const ResNetArch r50 = {STAGES(1, 3, 4, 6, 3)};
static const ResNetArch r50d = {STAGES(1, 3, 4, 6, 3), .stem_width = 32, .avg_down = 1};
static const ResNetArch rtest = {.bottleneck = {0, 0, 1, 0}, .layers = {1, 1, 1, 1}, .channels = {32, 48, 48, 96},
                                 .stem_width = 16, .avg_down = 1};
static const ResNetArch r101 = {STAGES(1, 3, 4, 23, 3)};
static const ResNetArch r152 = {STAGES(1, 3, 8, 36, 3)};
static const ResNetArch rx50_32x4d = {STAGES(1, 3, 4, 6, 3), .cardinality = 32, .base_width = 4};
static const ResNetArch rx101_32x8d = {STAGES(1, 3, 4, 23, 3), .cardinality = 32, .base_width = 8};
static const ResNetArch wr50_2 = {STAGES(1, 3, 4, 6, 3), .cardinality = 1, .base_width = 128};
static const ResNetArch ser34 = {STAGES(0, 3, 4, 6, 3), .attn = ATTN_SE};
static const ResNetArch ser50 = {STAGES(1, 3, 4, 6, 3), .attn = ATTN_SE};
static const ResNetArch serx26t = {STAGES(1, 2, 2, 2, 2), .stem_width = 32, .avg_down = 1, .tiered = 1,
                                   .cardinality = 32, .base_width = 4, .attn = ATTN_SE};
static const ResNetArch serx50 = {STAGES(1, 3, 4, 6, 3), .cardinality = 32, .base_width = 4, .attn = ATTN_SE};
static const ResNetArch r50gn = {STAGES(1, 3, 4, 6, 3), .group_norm = 1};
static const ResNetArch ecar50d = {STAGES(1, 3, 4, 6, 3), .stem_width = 32, .avg_down = 1, .attn = ATTN_ECA};

static const ModelEntry entries[] = {
    {"resnet18", build_resnet, &r18, RESNET_CFG("a1_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0), NULL},
    {"resnet26", build_resnet, &r26, RESNET_CFG("bt_in1k", 224, 0.875, "bicubic", "conv1", 288, 0.95), NULL},
    {"resnet34", build_resnet, &r34, RESNET_CFG("a1_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0), NULL},
    {"resnet50", build_resnet, &r50, RESNET_CFG("a1_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0), NULL},
    {"resnet50d", build_resnet, &r50d, RESNET_CFG("ra2_in1k", 224, 0.875, "bicubic", "conv1.0", 288, 0.95), NULL},
    {"resnet101", build_resnet, &r101, RESNET_CFG("a1h_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0), NULL},
    {"resnet152", build_resnet, &r152, RESNET_CFG("a1h_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0), NULL},
    {"resnext50_32x4d", build_resnet, &rx50_32x4d, RESNET_CFG("a1h_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0),
     NULL},
    {"resnext101_32x8d", build_resnet, &rx101_32x8d, RESNET_CFG("tv_in1k", 224, 0.875, "bilinear", "conv1", 0, 0),
     NULL},
    {"wide_resnet50_2", build_resnet, &wr50_2, RESNET_CFG("racm_in1k", 224, 0.875, "bicubic", "conv1", 288, 0.95),
     NULL},
    {"seresnet34", build_resnet, &ser34, RESNET_CFG("untrained", 224, 0.875, "bicubic", "conv1", 288, 0.95), NULL},
    {"seresnet50", build_resnet, &ser50, RESNET_CFG("a1_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0), NULL},
    {"seresnext26t_32x4d", build_resnet, &serx26t,
     RESNET_CFG("bt_in1k", 224, 0.875, "bicubic", "conv1.0", 288, 0.95), NULL},
    {"seresnext50_32x4d", build_resnet, &serx50,
     RESNET_CFG("racm_in1k", 224, 0.875, "bicubic", "conv1", 288, 0.95), NULL},
    {"resnet50_gn", build_resnet, &r50gn, RESNET_CFG("a1h_in1k", 224, 0.94, "bicubic", "conv1", 288, 0.95), NULL},
    {"ecaresnet50d", build_resnet, &ecar50d, RESNET_CFG("miil_in1k", 224, 0.875, "bicubic", "conv1.0", 288, 0.95),
     NULL},
    {"test_resnet", build_resnet, &rtest,
     {.tag = "r160_in1k", .input_size = {3, 160, 160}, .mean = {0.5, 0.5, 0.5}, .std = {0.5, 0.5, 0.5},
      .crop_pct = 0.95, .crop_mode = "center", .interpolation = "bilinear", .num_classes = 1000,
      .first_conv = "conv1.0", .classifier = "fc"},
     NULL},
};

/* ResNet.group_matcher(coarse=False) */
static const GroupRule groups[] = {
    {"^conv1|bn1|maxpool", 0, LG_NO_SUFFIX},
    {"^layer([0-9]+)\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {NULL, 0, 0},
};

const ModelFamily resnet_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
