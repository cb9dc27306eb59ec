/*
 * ResNet family (timm/models/resnet.py): BasicBlock and Bottleneck stages,
 * plain 7x7 or deep 3x3 stem, conv or avg-pool ("d") downsampling.
 * Init: kaiming_normal(fan_out) convs, BN weight 1 / bias 0 with the last BN
 * of each residual branch zeroed (zero_init_last), nn.Linear default fc.
 */
#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct ResNetArch {
    int bottleneck[4]; /* block kind per stage: 0 BasicBlock, 1 Bottleneck */
    int layers[4];
    int channels[4];
    int stem_width; /* 0: plain 7x7 stem of 64 channels */
    int avg_down;
} ResNetArch;

static ValueId conv(Builder *b, const char *name, ValueId x, int64_t out, int k, int stride, int pad)
{
    return nn_conv2d(b, name, x, out, k,
                     (ConvOpts){.stride = stride, .padding = pad, .weight_init = init_kaiming_normal_fan_out(out * k * k)});
}

static ValueId conv_bn(Builder *b, const char *cname, const char *bname, ValueId x, int64_t out, int k, int stride,
                       int zero_bn)
{
    x = conv(b, cname, x, out, k, stride, k / 2);
    return nn_batch_norm(b, bname, x, (BNOpts){.zero_weight = zero_bn});
}

static ValueId downsample(Builder *b, ValueId x, int64_t out, int stride, int avg_down)
{
    b_push(b, "downsample");
    if (avg_down) {
        if (stride != 1)
            x = f_avg_pool2d(b, x, 2, stride, 0, 1, 0);
        x = conv_bn(b, "1", "2", x, out, 1, 1, 0);
    } else {
        x = conv_bn(b, "0", "1", x, out, 1, stride, 0);
    }
    b_pop(b);
    return x;
}

static ValueId block(Builder *b, ValueId x, int bottleneck, int64_t planes, int stride, int down, int avg_down,
                     double drop_path)
{
    ValueId shortcut = x;
    if (bottleneck) {
        x = f_relu(b, conv_bn(b, "conv1", "bn1", x, planes, 1, 1, 0));
        x = f_relu(b, conv_bn(b, "conv2", "bn2", x, planes, 3, stride, 0));
        x = conv_bn(b, "conv3", "bn3", x, planes * 4, 1, 1, 1);
    } else {
        x = f_relu(b, conv_bn(b, "conv1", "bn1", x, planes, 3, stride, 0));
        x = conv_bn(b, "conv2", "bn2", x, planes, 3, 1, 1);
    }
    x = f_drop_path(b, x, drop_path);
    if (down)
        shortcut = downsample(b, shortcut, planes * (bottleneck ? 4 : 1), stride, avg_down);
    return f_relu(b, f_add(b, x, shortcut));
}

static ValueId stem(Builder *b, const ResNetArch *r, ValueId x, int64_t *inplanes)
{
    if (r->stem_width) {
        int64_t w = r->stem_width;
        *inplanes = 2 * w;
        b_push(b, "conv1");
        x = f_relu(b, conv_bn(b, "0", "1", x, w, 3, 2, 0));
        x = f_relu(b, conv_bn(b, "3", "4", x, w, 3, 1, 0));
        x = conv(b, "6", x, *inplanes, 3, 1, 1);
        b_pop(b);
    } else {
        *inplanes = 64;
        x = conv(b, "conv1", x, 64, 7, 2, 3);
    }
    x = f_relu(b, nn_batch_norm(b, "bn1", x, (BNOpts){0}));
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
            x = block(b, x, r->bottleneck[s], planes, st, i == 0 && (st != 1 || inplanes != out), r->avg_down, dpr);
            b_pop(b);
            inplanes = out;
        }
        b_pop(b);
    }
    x = f_global_avg_pool(b, x);
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return nn_linear(b, "fc", x, classes, (LinearOpts){0});
}

#define IMAGENET_MEAN {0.485, 0.456, 0.406}
#define IMAGENET_STD {0.229, 0.224, 0.225}
#define RESNET_CFG(tag_, size, crop, interp, first, test, test_crop)                                           \
    {.tag = tag_, .input_size = {3, size, size}, .mean = IMAGENET_MEAN, .std = IMAGENET_STD,                   \
     .crop_pct = crop, .crop_mode = "center", .interpolation = interp, .num_classes = 1000,                    \
     .first_conv = first, .classifier = "fc", .test_input_size = test, .test_crop_pct = test_crop}

static const ResNetArch r18 = {{0, 0, 0, 0}, {2, 2, 2, 2}, {64, 128, 256, 512}, 0, 0};
static const ResNetArch r26 = {{1, 1, 1, 1}, {2, 2, 2, 2}, {64, 128, 256, 512}, 0, 0};
static const ResNetArch r34 = {{0, 0, 0, 0}, {3, 4, 6, 3}, {64, 128, 256, 512}, 0, 0};
static const ResNetArch r50 = {{1, 1, 1, 1}, {3, 4, 6, 3}, {64, 128, 256, 512}, 0, 0};
static const ResNetArch r50d = {{1, 1, 1, 1}, {3, 4, 6, 3}, {64, 128, 256, 512}, 32, 1};
static const ResNetArch rtest = {{0, 0, 1, 0}, {1, 1, 1, 1}, {32, 48, 48, 96}, 16, 1};

static const ModelEntry entries[] = {
    {"resnet18", build_resnet, &r18, RESNET_CFG("a1_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0), NULL},
    {"resnet26", build_resnet, &r26, RESNET_CFG("bt_in1k", 224, 0.875, "bicubic", "conv1", 288, 0.95), NULL},
    {"resnet34", build_resnet, &r34, RESNET_CFG("a1_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0), NULL},
    {"resnet50", build_resnet, &r50, RESNET_CFG("a1_in1k", 224, 0.95, "bicubic", "conv1", 288, 1.0), NULL},
    {"resnet50d", build_resnet, &r50d, RESNET_CFG("ra2_in1k", 224, 0.875, "bicubic", "conv1.0", 288, 0.95), NULL},
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

const ModelFamily resnet_family = {entries, sizeof entries / sizeof entries[0], groups};
