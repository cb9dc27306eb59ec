/*
 * MaxViT and CoAtNet (timm/models/maxxvit.py): a stem of two 3x3 convs
 * (BatchNorm + act between), four stages of stride 2 whose blocks are
 * MBConv ('C': pre-norm, 1x1 expand, depthwise kxk, SE, 1x1 project, an
 * avg-pool + 1x1 shortcut when strided), NCHW transformer blocks ('T':
 * LayerNorm2d, avg-pool downsample, 1x1-conv attention over the whole map
 * with a relative position bias, ConvMlp) or MaxViT blocks ('M': an MBConv
 * then channels-last window attention and grid attention, each with its own
 * relative position bias, LayerNorm and Mlp), then LayerNorm2d and an
 * average-pooling head, or the TF ports' NormMlpClassifierHead. The TF
 * ports pad their strided convs 'same' (one row and column after), add the
 * bias of RelPosBiasTf (a [heads, 2h-1, 2w-1] table read at key minus query)
 * and interleave q, k, v before the heads. Partitions are img_size // 32 a
 * side. Init as timm's 'vit_eff' scheme: conv parts normal(sqrt(2 /
 * fan_out)), transformer parts xavier_uniform with zero biases but the
 * Mlp's normal(1e-6), bias tables trunc_normal(.02) (the TF one's
 * normal(.02)), norms and the head at PyTorch's defaults. The position
 * indices are timm's non-persistent buffers: build-time constants here.
 */
#include <math.h>
#include <stdlib.h>

#include "models/layer_groups.h"
#include "models/registry.h"

enum { ACT_SILU, ACT_GELU, ACT_GELU_TANH, ACT_RELU };

typedef struct MaxxArch {
    int embed[4], depths[4];
    char types[4]; /* 'C', 'T' or 'M' per stage */
    int stem[2], stem_bias;
    /* MaxxVitConvCfg */
    int stride_pool, pre_norm_act, expand_output, output_bias, attn_early, act, se_act;
    double attn_ratio, conv_eps;
    int pad_same;
    /* MaxxVitTransformerCfg */
    int dim_head, expand_first, shortcut_bias, head_first, rel_pos_tf, t_act;
    double t_eps;
    int head_hidden; /* NormMlpClassifierHead's hidden size; 0: LayerNorm2d + ClassifierHead */
} MaxxArch;

static ValueId act(Builder *b, ValueId x, int kind)
{
    switch (kind) {
    case ACT_SILU: return f_silu(b, x);
    case ACT_GELU: return f_gelu(b, x, 0);
    case ACT_GELU_TANH: return f_gelu(b, x, 1);
    default: return f_relu(b, x);
    }
}

/* timm's make_divisible(v, 8): to the nearest multiple of 8, not below 90% of v. */
static int64_t make_divisible(double v)
{
    int64_t n = (int64_t)(v + 4) / 8 * 8;
    if (n < 8)
        n = 8;
    return n < 0.9 * v ? n + 8 : n;
}

/* _init_conv's 'vit_eff' conv: normal(sqrt(2 / fan_out)), zero bias; with
 * 'same' padding a strided conv pads after (Conv2dSame on an even map), an
 * unstrided one k/2 each side. */
static ValueId conv(Builder *b, const MaxxArch *v, const char *name, ValueId x, int64_t out, int k, int stride,
                    int groups, int bias)
{
    if (v->pad_same && stride > 1) {
        const CtShape *s = b_shape(b, x);
        int64_t ph = (s->d[2] + stride - 1) / stride, pw = (s->d[3] + stride - 1) / stride;
        ph = (ph - 1) * stride + k - s->d[2];
        pw = (pw - 1) * stride + k - s->d[3];
        ph = ph > 0 ? ph : 0;
        pw = pw > 0 ? pw : 0;
        x = f_pad(b, x, ph / 2, ph - ph / 2, pw / 2, pw - pw / 2, 0);
    }
    int pad = v->pad_same && stride > 1 ? 0 : (stride - 1 + (k - 1)) / 2;
    return nn_conv2d(b, name, x, out, k,
                     (ConvOpts){.stride = stride, .padding = pad, .groups = groups, .bias = bias,
                                .weight_init = init_kaiming_normal_fan_out(k * k * out / (groups ? groups : 1)),
                                .bias_init = init_zeros()});
}

/* _init_transformer's 'vit_eff' 1x1 conv or linear: xavier_uniform, the
 * Mlp's bias normal(1e-6), others zero. */
static CtInit xavier(int64_t fan_in, int64_t fan_out) { return init_uniform(sqrt(6.0 / (double)(fan_in + fan_out))); }

static ValueId t_linear(Builder *b, const char *name, ValueId x, int64_t out, int bias, int mlp)
{
    int64_t in = b_shape(b, x)->d[b_shape(b, x)->ndim - 1];
    return nn_linear(b, name, x, out,
                     (LinearOpts){.no_bias = !bias, .weight_init = xavier(in, out),
                                  .bias_init = mlp ? init_normal(1e-6) : init_zeros()});
}

static ValueId t_conv1x1(Builder *b, const char *name, ValueId x, int64_t out, int bias, int mlp)
{
    int64_t in = b_shape(b, x)->d[1];
    return nn_conv2d(b, name, x, out, 1,
                     (ConvOpts){.bias = bias, .weight_init = xavier(in, out),
                                .bias_init = mlp ? init_normal(1e-6) : init_zeros()});
}

static ValueId avg_pool2(Builder *b, ValueId x) { return f_avg_pool2d(b, x, 2, 2, 0, 0, 1); }

static ValueId bn_act(Builder *b, const char *name, ValueId x, double eps, int kind)
{
    x = nn_batch_norm(b, name, x, (BNOpts){.eps = eps});
    return kind < 0 ? x : act(b, x, kind);
}

/* SEModule: channel means (x.mean((2, 3)): a sum and a scale, which fvcore
 * does not count) through 1x1 convs fc1 (to rd), act, fc2, a sigmoid gate. */
static ValueId se_module(Builder *b, const MaxxArch *v, const char *name, ValueId x, int64_t rd)
{
    const CtShape *sh = b_shape(b, x);
    int64_t ch = sh->d[1];
    double inv = 1.0 / (double)(sh->d[2] * sh->d[3]);
    b_push(b, "%s", name);
    ValueId s = f_scale_shift(b, f_reduce_sum(b, x, 4 | 8), inv, 0.0);
    s = act(b, conv(b, v, "fc1", s, rd, 1, 1, 1, 1), v->se_act);
    s = conv(b, v, "fc2", s, ch, 1, 1, 1, 1);
    b_pop(b);
    return f_mul(b, x, f_sigmoid(b, s));
}

static ValueId mbconv(Builder *b, const MaxxArch *v, ValueId x, int64_t out, int stride, double dpr)
{
    int64_t in = b_shape(b, x)->d[1];
    int64_t mid = make_divisible((double)(v->expand_output ? out : in) * 4.0);
    int64_t rd = (int64_t)(v->attn_ratio * (double)(v->expand_output ? out : mid));
    ValueId sc = x;
    if (stride == 2) {
        sc = avg_pool2(b, x);
        if (in != out)
            sc = conv(b, v, "shortcut.expand", sc, out, 1, 1, 1, v->output_bias);
    }
    x = bn_act(b, "pre_norm", x, v->conv_eps, v->pre_norm_act ? v->act : -1);
    int pooled = v->stride_pool && stride == 2;
    if (pooled)
        x = avg_pool2(b, x);
    x = bn_act(b, "norm1", conv(b, v, "conv1_1x1", x, mid, 1, 1, 1, 0), v->conv_eps, v->act);
    x = conv(b, v, "conv2_kxk", x, mid, 3, pooled ? 1 : stride, (int)mid, 0);
    if (v->attn_early)
        x = se_module(b, v, "se_early", x, rd);
    x = bn_act(b, "norm2", x, v->conv_eps, v->act);
    if (!v->attn_early)
        x = se_module(b, v, "se", x, rd);
    x = conv(b, v, "conv3_1x1", x, out, 1, 1, 1, v->output_bias);
    return f_add(b, f_drop_path(b, x, dpr), sc);
}

/* The relative position bias of a wh x ww window, [1, heads, N, N]:
 * RelPosBias (a [(2wh-1)(2ww-1), heads] table at query minus key) or
 * RelPosBiasTf (a [heads, 2wh-1, 2ww-1] table at key minus query). */
static ValueId rel_pos_bias(Builder *b, const MaxxArch *v, int64_t heads, int64_t wh, int64_t ww)
{
    int64_t N = wh * ww, T = (2 * wh - 1) * (2 * ww - 1);
    double *idx = malloc(sizeof *idx * (size_t)(N * N));
    if (!idx)
        return b_fail(b, "out of memory for a relative position index of %lld tokens", (long long)N);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++) {
            int64_t dh = i / ww - j / ww, dw = i % ww - j % ww;
            if (v->rel_pos_tf)
                dh = -dh, dw = -dw;
            idx[i * N + j] = (double)((dh + wh - 1) * (2 * ww - 1) + dw + ww - 1);
        }
    b_push(b, "rel_pos");
    ValueId bias;
    if (v->rel_pos_tf) {
        ValueId table = b_param(b, "relative_position_bias_table", (CtShape){3, {heads, 2 * wh - 1, 2 * ww - 1}},
                                init_normal(.02));
        ValueId index = b_const(b, "relative_position_index", (CtShape){2, {N, N}}, CT_I32, idx);
        bias = f_gather(b, f_reshape(b, table, 2, (int64_t[]){heads, T}), 1, index);
    } else {
        ValueId table = b_param(b, "relative_position_bias_table", (CtShape){2, {T, heads}}, init_trunc_normal(.02));
        ValueId index = b_const(b, "relative_position_index", (CtShape){1, {N * N}}, CT_I32, idx);
        bias = f_permute(b, f_reshape(b, f_gather(b, table, 0, index), 3, (int64_t[]){N, N, heads}), 3,
                         (int64_t[]){2, 0, 1});
    }
    b_pop(b);
    free(idx);
    return f_reshape(b, bias, 4, (int64_t[]){1, heads, N, N});
}

/* q, k, v [B, heads, N, hd] of a [B, N, 3*heads*hd] projection: per head
 * (q, k, v) when head_first, else (q, k, v) of all heads. */
static void split_qkv(Builder *b, const MaxxArch *v, ValueId qkv, int64_t heads, ValueId t[3])
{
    const CtShape *s = b_shape(b, qkv);
    int64_t B = s->d[0], N = s->d[1], hd = s->d[2] / 3 / heads;
    if (v->head_first)
        qkv = f_permute(b, f_reshape(b, qkv, 5, (int64_t[]){B, N, heads, 3, hd}), 5, (int64_t[]){3, 0, 2, 1, 4});
    else
        qkv = f_permute(b, f_reshape(b, qkv, 5, (int64_t[]){B, N, 3, heads, hd}), 5, (int64_t[]){2, 0, 3, 1, 4});
    for (int i = 0; i < 3; i++)
        t[i] = f_reshape(b, f_slice(b, qkv, 0, i, i + 1, 1), 4, (int64_t[]){B, heads, N, hd});
}

/* Attention2d over x [B, C, H, W] with a bias for the whole H x W map. */
static ValueId attention2d(Builder *b, const MaxxArch *v, ValueId x, int64_t out)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], C = s->d[1], H = s->d[2], W = s->d[3], N = H * W;
    int64_t dim_attn = v->expand_first ? out : C, heads = dim_attn / v->dim_head;
    b_push(b, "attn");
    ValueId qkv = t_conv1x1(b, "qkv", x, 3 * dim_attn, 1, 0);
    qkv = f_permute(b, f_reshape(b, qkv, 3, (int64_t[]){B, 3 * dim_attn, N}), 3, (int64_t[]){0, 2, 1});
    ValueId t[3];
    split_qkv(b, v, qkv, heads, t);
    ValueId bias = rel_pos_bias(b, v, heads, H, W);
    x = f_sdpa_bias(b, t[0], t[1], t[2], bias, 1.0 / sqrt((double)v->dim_head));
    x = f_reshape(b, f_permute(b, x, 4, (int64_t[]){0, 1, 3, 2}), 4, (int64_t[]){B, dim_attn, H, W});
    x = t_conv1x1(b, "proj", x, out, 1, 0);
    b_pop(b);
    return x;
}

static ValueId transformer_block2d(Builder *b, const MaxxArch *v, ValueId x, int64_t out, int stride, double dpr)
{
    int64_t in = b_shape(b, x)->d[1];
    ValueId sc = x, y;
    if (stride == 2) {
        sc = avg_pool2(b, x);
        if (in != out)
            sc = t_conv1x1(b, "shortcut.expand", sc, out, v->shortcut_bias, 0);
        y = avg_pool2(b, nn_layer_norm2d(b, "norm1.norm", x, v->t_eps));
    } else {
        y = nn_layer_norm2d(b, "norm1", x, v->t_eps);
    }
    x = f_add(b, sc, f_drop_path(b, attention2d(b, v, y, out), dpr));
    y = nn_layer_norm2d(b, "norm2", x, v->t_eps);
    b_push(b, "mlp");
    y = act(b, t_conv1x1(b, "fc1", y, 4 * out, 1, 1), v->t_act);
    y = t_conv1x1(b, "fc2", y, out, 1, 1);
    b_pop(b);
    return f_add(b, x, f_drop_path(b, y, dpr));
}

/* PartitionAttentionCl over x [B, H, W, C]: windows of p x p tokens
 * (block) or a p x p grid strided over the map (grid), each attended with
 * its own bias, then the Mlp. */
static ValueId partition_attention(Builder *b, const MaxxArch *v, ValueId x, int64_t p, int grid, double dpr)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1], W = s->d[2], C = s->d[3], heads = C / v->dim_head;
    int64_t nh = H / p, nw = W / p;
    ValueId y = nn_layer_norm(b, "norm1", x, v->t_eps);
    if (grid) {
        y = f_permute(b, f_reshape(b, y, 6, (int64_t[]){B, p, nh, p, nw, C}), 6, (int64_t[]){0, 2, 4, 1, 3, 5});
    } else {
        y = f_permute(b, f_reshape(b, y, 6, (int64_t[]){B, nh, p, nw, p, C}), 6, (int64_t[]){0, 1, 3, 2, 4, 5});
    }
    /* AttentionCl sees the partitions as [B*nh*nw, p, p, C] */
    y = f_reshape(b, y, 4, (int64_t[]){B * nh * nw, p, p, C});
    b_push(b, "attn");
    ValueId t[3];
    y = t_linear(b, "qkv", y, 3 * C, 1, 0);
    split_qkv(b, v, f_reshape(b, y, 3, (int64_t[]){B * nh * nw, p * p, 3 * C}), heads, t);
    ValueId bias = rel_pos_bias(b, v, heads, p, p);
    y = f_sdpa_bias(b, t[0], t[1], t[2], bias, 1.0 / sqrt((double)v->dim_head));
    y = f_reshape(b, f_permute(b, y, 4, (int64_t[]){0, 2, 1, 3}), 4, (int64_t[]){B * nh * nw, p, p, C});
    y = t_linear(b, "proj", y, C, 1, 0);
    b_pop(b);
    y = f_reshape(b, y, 6, (int64_t[]){B, nh, nw, p, p, C});
    if (grid)
        y = f_permute(b, y, 6, (int64_t[]){0, 3, 1, 4, 2, 5});
    else
        y = f_permute(b, y, 6, (int64_t[]){0, 1, 3, 2, 4, 5});
    x = f_add(b, x, f_drop_path(b, f_reshape(b, y, 4, (int64_t[]){B, H, W, C}), dpr));
    y = nn_layer_norm(b, "norm2", x, v->t_eps);
    b_push(b, "mlp");
    y = act(b, t_linear(b, "fc1", y, 4 * C, 1, 1), v->t_act);
    y = t_linear(b, "fc2", y, C, 1, 1);
    b_pop(b);
    return f_add(b, x, f_drop_path(b, y, dpr));
}

static ValueId maxxvit_block(Builder *b, const MaxxArch *v, ValueId x, int64_t out, int stride, int64_t p,
                             double dpr)
{
    b_push(b, "conv");
    x = mbconv(b, v, x, out, stride, dpr);
    b_pop(b);
    x = f_permute(b, x, 4, (int64_t[]){0, 2, 3, 1});
    b_push(b, "attn_block");
    x = partition_attention(b, v, x, p, 0, dpr);
    b_pop(b);
    b_push(b, "attn_grid");
    x = partition_attention(b, v, x, p, 1, dpr);
    b_pop(b);
    return f_permute(b, x, 4, (int64_t[]){0, 3, 1, 2});
}

static ValueId build_maxxvit(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const MaxxArch *v = m->arch;
    const CtShape *s = b_shape(b, x);
    /* every stride halves an even map (timm's avg-pool shortcut and strided
     * conv disagree on an odd one) and the partitions, img_size // 32 a side,
     * divide the last map */
    if (s->d[2] % 32 || s->d[3] % 32)
        return b_fail(b, "image size %lldx%lld is not a multiple of 32", (long long)s->d[2], (long long)s->d[3]);
    int64_t p = s->d[2] / 32;
    if (s->d[3] != s->d[2])
        return b_fail(b, "a %lldx%lld image: the partition is square", (long long)s->d[2], (long long)s->d[3]);
    b_push(b, "stem");
    x = conv(b, v, "conv1", x, v->stem[0], 3, 2, 1, v->stem_bias);
    x = bn_act(b, "norm1", x, v->conv_eps, v->act);
    x = conv(b, v, "conv2", x, v->stem[1], 3, 1, 1, v->stem_bias);
    b_pop(b);
    int total = 0, idx = 0;
    for (int i = 0; i < 4; i++)
        total += v->depths[i];
    b_push(b, "stages");
    for (int i = 0; i < 4; i++) {
        b_push(b, "%d", i);
        b_push(b, "blocks");
        for (int j = 0; j < v->depths[i]; j++, idx++) {
            /* calculate_drop_path_rates(stagewise): linspace(0, rate, total) split by stage */
            double dpr = total > 1 ? a->drop_path_rate * idx / (total - 1) : 0;
            int stride = j == 0 ? 2 : 1;
            b_push(b, "%d", j);
            if (v->types[i] == 'C')
                x = mbconv(b, v, x, v->embed[i], stride, dpr);
            else if (v->types[i] == 'T')
                x = transformer_block2d(b, v, x, v->embed[i], stride, dpr);
            else
                x = maxxvit_block(b, v, x, v->embed[i], stride, p, dpr);
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
    }
    b_pop(b);
    int classes = model_num_classes(m, a);
    if (!v->head_hidden) {
        x = nn_layer_norm2d(b, "norm", x, v->t_eps);
        return nn_classifier(b, "head.fc", x, classes, a->drop_rate, (LinearOpts){0});
    }
    /* NormMlpClassifierHead: pool, LayerNorm2d, Linear + tanh, dropout, fc */
    x = f_adaptive_avg_pool2d(b, x, 1, 1);
    x = nn_layer_norm2d(b, "head.norm", x, v->t_eps);
    x = f_reshape(b, x, 2, (int64_t[]){b_shape(b, x)->d[0], b_shape(b, x)->d[1]});
    x = nn_linear(b, "head.pre_logits.fc", x, v->head_hidden, (LinearOpts){0});
    x = f_scale_shift(b, f_sigmoid(b, f_scale_shift(b, x, 2, 0)), 2, -1); /* tanh(x) = 2 sigmoid(2x) - 1 */
    if (classes == 0)
        return x;
    x = f_dropout(b, x, a->drop_rate);
    return nn_linear(b, "head.fc", x, classes, (LinearOpts){0});
}

static const char *const maxxvit_no_wd[] = {"*relative_position_bias_table*", "*rel_pos.mlp*", NULL};

#define MAXXVIT_CFG(tag_, size_, crop_)                                                                        \
    {.tag = tag_, .input_size = {3, size_, size_}, .mean = {0.5, 0.5, 0.5}, .std = {0.5, 0.5, 0.5},           \
     .crop_pct = crop_, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,                \
     .first_conv = "stem.conv1", .classifier = "head.fc", .fixed_input_size = 1}

/* _rw_max_cfg's conv and transformer cfgs (the test models) */
#define RW_MAX .expand_output = 0, .act = ACT_SILU, .se_act = ACT_SILU, .conv_eps = 1e-5, .dim_head = 32,           \
               .expand_first = 0, .shortcut_bias = 1, .head_first = 1, .t_act = ACT_GELU, .t_eps = 1e-6

static const MaxxArch test_maxvit = {
    .embed = {32, 64, 96, 128}, .depths = {1, 1, 1, 1}, .types = {'M', 'M', 'M', 'M'}, .stem = {16, 32},
    .attn_ratio = 1.0 / 16, RW_MAX};
static const MaxxArch test_coatnet = {
    .embed = {32, 64, 96, 128}, .depths = {1, 1, 2, 1}, .types = {'C', 'C', 'T', 'T'}, .stem = {16, 32},
    .stride_pool = 1, .output_bias = 1, .attn_ratio = 0.25, RW_MAX};
/* _rw_coat_cfg(conv_attn_early=True, transformer_shortcut_bias=False) */
static const MaxxArch coatnet_0_rw = {
    .embed = {96, 192, 384, 768}, .depths = {2, 3, 7, 2}, .types = {'C', 'C', 'T', 'T'}, .stem = {32, 64},
    .stride_pool = 1, .pre_norm_act = 1, .attn_early = 1, .act = ACT_SILU, .se_act = ACT_RELU, .attn_ratio = 0.25,
    .conv_eps = 1e-5, .dim_head = 32, .head_first = 1, .t_act = ACT_GELU, .t_eps = 1e-6};

/* _tf_cfg: MaxxVitConvCfg(norm_eps=1e-3, act gelu_tanh, padding 'same') and
 * MaxxVitTransformerCfg(norm_eps=1e-5, gelu_tanh, head_first=False, 'bias_tf') */
static const MaxxArch maxvit_tiny_tf = {
    .embed = {64, 128, 256, 512}, .depths = {2, 2, 5, 2}, .types = {'M', 'M', 'M', 'M'}, .stem = {64, 64},
    .stem_bias = 1, .expand_output = 1, .output_bias = 1, .act = ACT_GELU_TANH, .se_act = ACT_SILU,
    .attn_ratio = 0.25, .conv_eps = 1e-3, .pad_same = 1, .dim_head = 32, .expand_first = 1, .shortcut_bias = 1,
    .rel_pos_tf = 1, .t_act = ACT_GELU_TANH, .t_eps = 1e-5, .head_hidden = 512};

static const ModelEntry entries[] = {
    {"coatnet_0_rw_224", build_maxxvit, &coatnet_0_rw, MAXXVIT_CFG("sw_in1k", 224, 0.95), maxxvit_no_wd},
    {"maxvit_tiny_tf_224", build_maxxvit, &maxvit_tiny_tf,
     {.tag = "in1k", .input_size = {3, 224, 224}, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},
      .crop_pct = 0.95, .crop_mode = "center", .interpolation = "bicubic", .num_classes = 1000,
      .first_conv = "stem.conv1", .classifier = "head.fc", .fixed_input_size = 1},
     maxxvit_no_wd},
    {"test_coatnet", build_maxxvit, &test_coatnet, MAXXVIT_CFG("untrained", 160, 0.95), maxxvit_no_wd},
    {"test_maxvit", build_maxxvit, &test_maxvit, MAXXVIT_CFG("untrained", 160, 0.95), maxxvit_no_wd},
};

/* MaxxVit.group_matcher: a layer per stage, the final norm with the last */
static const GroupRule groups[] = {
    {"^stem", 0, LG_NO_SUFFIX},
    {"^stages\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {"^norm", 1, LG_MATCH_PREV},
    {NULL, 0, 0},
};

const ModelFamily maxxvit_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
