/*
 * Arch-string decoding and the blocks of the EfficientNet family; see
 * efficientnet_builder.h. Block inputs and outputs are [N,C,H,W].
 */
#include "models/efficientnet_builder.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* ---- numbers ---------------------------------------------------------- */

/* Python's round() of a float: to nearest, ties to even (the default
 * floating-point rounding mode). */
static int py_round(double v) { return (int)nearbyint(v); }

int eb_make_divisible(double v, int divisor, double round_limit)
{
    int new_v = (int)(v + divisor / 2.0) / divisor * divisor;
    if (new_v < divisor)
        new_v = divisor;
    if (new_v < round_limit * v)
        new_v += divisor;
    return new_v;
}

int eb_round_channels(int channels, EbRound r)
{
    if (r.multiplier == 0)
        return channels;
    return eb_make_divisible(channels * r.multiplier, r.divisor ? r.divisor : 8, r.round_limit);
}

/* ---- decoding --------------------------------------------------------- */

typedef struct BlockOpts {
    const char *str; /* the whole block string, for messages */
    struct {
        const char *key, *val;
        size_t klen;
    } o[32];
    int n;
} BlockOpts;

/* The value of option `key`; a later occurrence wins, as in timm's dict. */
static const char *opt(const BlockOpts *o, const char *key)
{
    size_t len = strlen(key);
    for (int i = o->n - 1; i >= 0; i--)
        if (o->o[i].klen == len && strncmp(o->o[i].key, key, len) == 0)
            return o->o[i].val;
    return NULL;
}

static int opt_int(Builder *b, const BlockOpts *o, const char *key, int dflt, int required, int *out)
{
    const char *v = opt(o, key);
    if (!v) {
        *out = dflt;
        return required ? b_fail(b, "block '%s': option '%s' is missing", o->str, key) : 0;
    }
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < 0 || x > 1 << 20)
        return b_fail(b, "block '%s': option '%s%s' is not a count", o->str, key, v);
    *out = (int)x;
    return 0;
}

static int opt_float(Builder *b, const BlockOpts *o, const char *key, double dflt, int required, double *out)
{
    const char *v = opt(o, key);
    if (!v) {
        *out = dflt;
        return required ? b_fail(b, "block '%s': option '%s' is missing", o->str, key) : 0;
    }
    char *end;
    *out = strtod(v, &end);
    if (end == v || *end || !(*out >= 0))
        return b_fail(b, "block '%s': option '%s%s' is not a ratio", o->str, key, v);
    return 0;
}

/* A kernel size option, or MixedConv2d's list "3.5.7" (timm's _parse_ksize);
 * a lone 0 is uir's "no such conv". */
static int opt_kernel(Builder *b, const BlockOpts *o, const char *key, int dflt, int required, EbKernel *out)
{
    const char *v = opt(o, key);
    *out = (EbKernel){1, {dflt}};
    if (!v)
        return required ? b_fail(b, "block '%s': option '%s' is missing", o->str, key) : 0;
    out->n = 0;
    for (const char *at = v;; at++) {
        char *end;
        long k = strtol(at, &end, 10);
        int lone = at == v && !*end;
        if (end == at || (*end && *end != '.') || k < (lone ? 0 : 1) || k > 31 || out->n == EB_MAX_MIX)
            return b_fail(b, "block '%s': option '%s%s' is not a kernel size or a list of at most %d", o->str, key,
                          v, EB_MAX_MIX);
        out->k[out->n++] = (int)k;
        if (!*end)
            return 0;
        at = end;
    }
}

/* Splits the options after the block type: skip / noskip, the activation
 * ('n' + re/sw/hs) and "<key><number>" pairs; other tokens are ignored, as
 * timm ignores them. Tokens point into `ops`, which strtok_r cuts up. */
static int split_options(Builder *b, char *ops, BlockOpts *o, int *skip, EbAct *act)
{
    char *save = NULL;
    for (char *op = strtok_r(ops, "_", &save); op; op = strtok_r(NULL, "_", &save)) {
        if (strcmp(op, "noskip") == 0) {
            *skip = 0;
        } else if (strcmp(op, "skip") == 0) {
            *skip = 1;
        } else if (op[0] == 'n') {
            if (strcmp(op, "nre") == 0)
                *act = EB_ACT_RELU;
            else if (strcmp(op, "nsw") == 0)
                *act = EB_ACT_SILU;
            else if (strcmp(op, "nhs") == 0)
                *act = EB_ACT_HARD_SWISH;
            else if (strcmp(op, "nr6") == 0 || strcmp(op, "nmi") == 0)
                return b_fail(b, "block '%s': activation '%s' (relu6 / mish) is not supported", o->str, op + 1);
        } else {
            size_t k = 0;
            while (op[k] && !isdigit((unsigned char)op[k]))
                k++;
            if (!op[k])
                continue;
            if (o->n == (int)(sizeof o->o / sizeof o->o[0]))
                return b_fail(b, "block '%s': too many options", o->str);
            o->o[o->n].key = op;
            o->o[o->n].klen = k;
            o->o[o->n++].val = op + k;
        }
    }
    return 0;
}

/* _decode_block_str: "<type>_<opt>_<opt>..." into block args and a repeat count. */
static int decode_block(Builder *b, const char *str, EbBlockArgs *a, int *repeats)
{
    char buf[160];
    BlockOpts o = {.str = str};
    int skip = -1; /* -1 unset, 0 noskip, 1 skip */
    if (strlen(str) >= sizeof buf)
        return b_fail(b, "block string '%.40s...' is too long", str);
    strcpy(buf, str);
    memset(a, 0, sizeof *a);
    char *sep = strchr(buf, '_'), *type = buf;
    if (sep)
        *sep = '\0';
    if (sep && split_options(b, sep + 1, &o, &skip, &a->act))
        return -1;

    static const char *const known[] = {"ir", "ds", "dsa", "er", "cn", "uir", "mha", "mqa"};
    size_t t = 0;
    while (t < sizeof known / sizeof known[0] && strcmp(type, known[t]) != 0)
        t++;
    if (t == sizeof known / sizeof known[0])
        return b_fail(b, "block '%s': unknown block type '%s'", str, type);
    if (t >= 6)
        return b_fail(b, "block '%s': type '%s' (MobileNetV4 attention) is not supported", str, type);

    int s2d = 0, cc = 0;
    if (opt_int(b, &o, "r", 0, 1, repeats) || opt_int(b, &o, "c", 0, 1, &a->out_chs) ||
        opt_int(b, &o, "s", 0, 1, &a->stride) || opt_kernel(b, &o, "a", 1, 0, &a->exp_kernel) ||
        opt_kernel(b, &o, "p", 1, 0, &a->pw_kernel) || opt_int(b, &o, "fc", 0, 0, &a->force_in_chs) ||
        opt_int(b, &o, "gs", -1, 0, &a->group_size) || opt_float(b, &o, "se", 0, 0, &a->se_ratio) ||
        opt_int(b, &o, "d", 0, 0, &s2d) || opt_int(b, &o, "cc", 0, 0, &cc))
        return -1;
    if (*repeats < 1)
        return b_fail(b, "block '%s': repeat count must be at least 1", str);
    a->exp_ratio = 1;
    if (strcmp(type, "ir") == 0) {
        a->type = EB_IR;
        a->noskip = skip == 0;
        if (opt_kernel(b, &o, "k", 0, 1, &a->kernel) || opt_float(b, &o, "e", 0, 1, &a->exp_ratio))
            return -1;
    } else if (strcmp(type, "ds") == 0 || strcmp(type, "dsa") == 0) {
        a->type = type[2] ? EB_DSA : EB_DS;
        a->noskip = a->type == EB_DSA || skip == 0;
        if (opt_kernel(b, &o, "k", 0, 1, &a->kernel))
            return -1;
    } else if (strcmp(type, "er") == 0) {
        a->type = EB_ER;
        a->noskip = skip == 0;
        if (opt_kernel(b, &o, "k", 0, 1, &a->kernel) || opt_float(b, &o, "e", 0, 1, &a->exp_ratio))
            return -1;
    } else if (strcmp(type, "uir") == 0) {
        a->type = EB_UIR;
        a->noskip = skip == 0;
        if (opt_kernel(b, &o, "a", 0, 0, &a->exp_kernel) || opt_kernel(b, &o, "k", 0, 1, &a->kernel) ||
            opt_kernel(b, &o, "p", 0, 0, &a->pw_kernel) || opt_float(b, &o, "e", 0, 1, &a->exp_ratio))
            return -1;
        /* No timm model has either; unsupported rather than unchecked. */
        if (a->pw_kernel.k[0] || a->se_ratio > 0)
            return b_fail(b, "block '%s': uir's end depthwise conv ('p') and SE are not supported", str);
        if (a->stride > 1 && !a->exp_kernel.k[0] && !a->kernel.k[0])
            return b_fail(b, "block '%s': a strided uir block needs a depthwise conv", str);
    } else {
        a->type = EB_CN;
        a->skip = skip == 1;
        a->se_ratio = 0; /* ConvBnAct has no SE */
        if (opt_kernel(b, &o, "k", 0, 1, &a->kernel))
            return -1;
    }
    if (a->type != EB_UIR && (!a->kernel.k[0] || !a->exp_kernel.k[0] || !a->pw_kernel.k[0]))
        return b_fail(b, "block '%s': kernel size 0 (only uir blocks omit convs)", str);
    if ((a->type == EB_IR || a->type == EB_DS || a->type == EB_DSA) && s2d > 0)
        return b_fail(b, "block '%s': space-to-depth ('d') is not supported", str);
    if (a->type == EB_IR && cc > 0)
        return b_fail(b, "block '%s': CondConv ('cc') is not supported", str);
    return 0;
}

/* _scale_stage_depth: the stage's total repeats scaled, then handed back to
 * its block definitions last first, so the first is the least likely to grow. */
static int scale_depth(const int *repeats, int n, double mult, int round_depth, int *scaled)
{
    int num = 0;
    for (int i = 0; i < n; i++)
        num += repeats[i];
    int num_scaled = round_depth ? py_round(num * mult) : (int)ceil(num * mult);
    if (round_depth && num_scaled < 1)
        num_scaled = 1;
    int total = 0;
    for (int i = n - 1; i >= 0; i--) {
        int rs = py_round((double)repeats[i] / num * num_scaled);
        scaled[i] = rs < 1 ? 1 : rs;
        num -= repeats[i];
        num_scaled -= scaled[i];
        total += scaled[i];
    }
    return total;
}

int eb_decode_arch(Builder *b, const EbArchDef *def, double depth_multiplier, int round_depth, EbBlocks *out)
{
    out->n = 0;
    out->nstages = def->nstages;
    if (def->nstages < 1 || def->nstages > EB_MAX_STAGES)
        return b_fail(b, "arch def has %d stages (1..%d supported)", def->nstages, EB_MAX_STAGES);
    for (int s = 0; s < def->nstages; s++) {
        EbBlockArgs args[EB_MAX_STAGE_DEFS];
        int repeats[EB_MAX_STAGE_DEFS], scaled[EB_MAX_STAGE_DEFS], n = 0;
        for (; n < EB_MAX_STAGE_DEFS && def->stages[s][n]; n++)
            if (decode_block(b, def->stages[s][n], &args[n], &repeats[n]))
                return -1;
        if (n == 0)
            return b_fail(b, "arch def stage %d is empty", s);
        if (out->n + scale_depth(repeats, n, depth_multiplier, round_depth, scaled) > EB_MAX_BLOCKS)
            return b_fail(b, "arch def scales to more than %d blocks", EB_MAX_BLOCKS);
        for (int i = 0; i < n; i++)
            for (int r = 0; r < scaled[i]; r++) {
                out->b[out->n] = args[i];
                out->b[out->n++].stage = s;
            }
    }
    return 0;
}

/* ---- layers ----------------------------------------------------------- */

ValueId eb_act(Builder *b, EbAct act, ValueId x)
{
    switch (act) {
    case EB_ACT_RELU: return f_relu(b, x);
    case EB_ACT_SILU: return f_silu(b, x);
    case EB_ACT_HARD_SWISH: return f_hard_swish(b, x);
    case EB_ACT_NONE: return x;
    case EB_ACT_DEFAULT: break;
    }
    return b_fail(b, "activation not resolved");
}

/* timm's get_same_padding: the padding SAME adds to a dim of size n. */
static int64_t same_padding(int64_t n, int kernel, int stride)
{
    int64_t p = ((n + stride - 1) / stride - 1) * stride + kernel - n;
    return p > 0 ? p : 0;
}

ValueId eb_conv(Builder *b, const char *name, ValueId x, int64_t out, int kernel, int stride, int groups, int bias,
                EbPad pad)
{
    int64_t fan_out = (int64_t)kernel * kernel * out / groups;
    int padding = (stride - 1 + kernel - 1) / 2;
    if (pad == EB_PAD_SAME && (stride != 1 || kernel % 2 == 0)) {
        int64_t ph = same_padding(b_shape(b, x)->d[2], kernel, stride);
        int64_t pw = same_padding(b_shape(b, x)->d[3], kernel, stride);
        padding = 0;
        if (ph || pw) {
            b_push(b, "%s", name);
            x = f_pad(b, x, ph / 2, ph - ph / 2, pw / 2, pw - pw / 2, 0);
            b_pop(b);
        }
    }
    return nn_conv2d(b, name, x, out, kernel,
                     (ConvOpts){.stride = stride, .padding = padding, .groups = groups, .bias = bias,
                                .weight_init = init_kaiming_normal_fan_out(fan_out), .bias_init = init_zeros()});
}

/* timm's _split_channels: n equal parts, the first taking the rest. */
static int64_t split_part(int64_t chans, int n, int i) { return chans / n + (i == 0 ? chans % n : 0); }

ValueId eb_mixconv(Builder *b, const char *name, ValueId x, int64_t out, const EbKernel *k, int stride, int groups,
                   EbPad pad)
{
    if (k->n == 1)
        return eb_conv(b, name, x, out, k->k[0], stride, groups, 0, pad);
    int64_t in = b_shape(b, x)->d[1], from = 0;
    int depthwise = groups == in;
    if (!depthwise && groups != 1)
        return b_fail(b, "conv '%s': mixed kernels take groups 1 or depthwise, not %d", name, groups);
    ValueId parts[EB_MAX_MIX];
    b_push(b, "%s", name);
    for (int i = 0; i < k->n; i++) {
        int64_t cin = split_part(in, k->n, i), cout = split_part(out, k->n, i);
        char sub[12];
        snprintf(sub, sizeof sub, "%d", i);
        ValueId xi = f_slice(b, x, 1, from, from + cin, 1);
        parts[i] = eb_conv(b, sub, xi, cout, k->k[i], stride, depthwise ? (int)cin : 1, 0, pad);
        from += cin;
    }
    b_pop(b);
    return f_concat(b, k->n, parts, 1);
}

/* A per-channel parameter [C] as [1,C,1,1]. */
static ValueId channel_param(Builder *b, const char *leaf, int64_t c, CtInit init)
{
    return f_reshape(b, b_param(b, leaf, (CtShape){1, {c}}, init), 4, (int64_t[]){1, c, 1, 1});
}

/* EvoNorm2dS0 (eps 1e-5). group_std is sqrt(var + eps) of each sample's
 * group of channels, the variance biased; through reduce_sum, which fvcore
 * does not count, as it does not count timm's var. */
static ValueId evo_norm_s0(Builder *b, const char *name, ValueId x, int group_size, int apply_act)
{
    const CtShape *s = b_shape(b, x);
    int64_t N = s->d[0], C = s->d[1], H = s->d[2], W = s->d[3];
    if (C % group_size)
        return b_fail(b, "norm '%s': group size %d does not divide %lld channels", name, group_size, (long long)C);
    b_push(b, "%s", name);
    ValueId w = channel_param(b, "weight", C, init_ones()), bias = channel_param(b, "bias", C, init_zeros());
    if (apply_act) {
        ValueId v = channel_param(b, "v", C, init_ones());
        int64_t grouped[4] = {N, C / group_size, group_size, H * W};
        double inv_n = 1.0 / (double)(group_size * H * W);
        ValueId xg = f_reshape(b, x, 4, grouped);
        ValueId neg_mean = f_scale_shift(b, f_reduce_sum(b, xg, 12), -inv_n, 0);
        ValueId d = f_add(b, xg, neg_mean);
        ValueId std = f_sqrt(b, f_scale_shift(b, f_reduce_sum(b, f_mul(b, d, d), 12), inv_n, 1e-5));
        ValueId num = f_reshape(b, f_mul(b, x, f_sigmoid(b, f_mul(b, x, v))), 4, grouped);
        x = f_reshape(b, f_div(b, num, std), 4, (int64_t[]){N, C, H, W});
    }
    b_pop(b);
    return f_add(b, f_mul(b, x, w), bias);
}

void eb_bn_args(EbConfig *cfg, const ModelArgs *a)
{
    if (a->opt.set & MODEL_OPT_BN_MOMENTUM)
        cfg->bn_momentum = a->opt.bn_momentum;
    if (a->opt.set & MODEL_OPT_BN_EPS)
        cfg->bn_eps = a->opt.bn_eps;
}

ValueId eb_bn_act(Builder *b, const EbConfig *cfg, const char *name, ValueId x, EbAct act)
{
    if (b->e.failed || x < 0)
        return -1;
    const EbNorm *norm = &cfg->norm;
    int64_t C = b_shape(b, x)->d[1];
    switch (norm->type) {
    case EB_NORM_BN:
        return eb_act(b, act, nn_batch_norm(b, name, x, (BNOpts){.eps = cfg->bn_eps, .momentum = cfg->bn_momentum}));
    case EB_NORM_GN:
        if (C % norm->group_size)
            return b_fail(b, "norm '%s': group size %d does not divide %lld channels", name, norm->group_size,
                          (long long)C);
        return eb_act(b, act, nn_group_norm(b, name, x, (GNOpts){.groups = (int)(C / norm->group_size)}));
    case EB_NORM_LN: return eb_act(b, act, nn_layer_norm2d(b, name, x, 1e-5));
    case EB_NORM_EVO_S0: return evo_norm_s0(b, name, x, norm->group_size, act != EB_ACT_NONE);
    }
    return b_fail(b, "norm '%s': unknown norm layer %d", name, (int)norm->type);
}

ValueId eb_linear(Builder *b, const char *name, ValueId x, int64_t out)
{
    return nn_linear(b, name, x, out,
                     (LinearOpts){.weight_init = init_uniform(1.0 / sqrt((double)out)), .bias_init = init_zeros()});
}

/* ---- blocks ----------------------------------------------------------- */

/* num_groups: group_size channels a group; -1 takes the block's default
 * (`dflt`: 1 depthwise, 0 a plain conv). */
static int num_groups(Builder *b, int group_size, int dflt, int64_t channels)
{
    int gs = group_size < 0 ? dflt : group_size;
    if (!gs)
        return 1;
    if (channels % gs)
        return b_fail(b, "group size %d does not divide %lld channels", gs, (long long)channels);
    return (int)(channels / gs);
}

/* SqueezeExcite: x * gate(conv_expand(act(conv_reduce(mean_hw(x))))). */
static ValueId squeeze_excite(Builder *b, const EbConfig *cfg, ValueId x, double rd_ratio, EbAct block_act)
{
    int64_t chs = b_shape(b, x)->d[1];
    double v = (double)chs * rd_ratio;
    int rd = cfg->se_round_channels ? eb_make_divisible(v, 8, 0.9) : py_round(v);
    b_push(b, "se");
    ValueId s = f_adaptive_avg_pool2d(b, x, 1, 1);
    s = eb_conv(b, "conv_reduce", s, rd, 1, 1, 1, 1, EB_PAD_DEFAULT);
    s = eb_act(b, cfg->se_force_relu ? EB_ACT_RELU : block_act, s);
    s = eb_conv(b, "conv_expand", s, chs, 1, 1, 1, 1, EB_PAD_DEFAULT);
    s = cfg->se_hard_gate ? f_hard_sigmoid(b, s) : f_sigmoid(b, s);
    b_pop(b);
    return f_mul(b, x, s);
}

/* One block under the current scope; the resolved arguments are timm's
 * _make_block: rounded channels, the model's act, the SE ratio. */
typedef struct Resolved {
    int in, out, stride;
    EbAct act;
    double se_ratio;
} Resolved;

static ValueId depthwise_separable(Builder *b, const EbConfig *cfg, const EbBlockArgs *a, const Resolved *r,
                                   ValueId x, int *has_skip)
{
    *has_skip = r->stride == 1 && r->in == r->out && !a->noskip;
    x = eb_mixconv(b, "conv_dw", x, r->in, &a->kernel, r->stride, num_groups(b, a->group_size, 1, r->in), cfg->pad);
    x = eb_bn_act(b, cfg, "bn1", x, r->act);
    if (r->se_ratio > 0)
        x = squeeze_excite(b, cfg, x, r->se_ratio, r->act);
    x = eb_mixconv(b, "conv_pw", x, r->out, &a->pw_kernel, 1, 1, cfg->pad);
    return eb_bn_act(b, cfg, "bn2", x, a->type == EB_DSA ? r->act : EB_ACT_NONE);
}

static ValueId inverted_residual(Builder *b, const EbConfig *cfg, const EbBlockArgs *a, const Resolved *r,
                                 ValueId x, int *has_skip)
{
    int mid = eb_make_divisible(r->in * a->exp_ratio, 8, 0.9);
    *has_skip = r->in == r->out && r->stride == 1 && !a->noskip;
    x = eb_mixconv(b, "conv_pw", x, mid, &a->exp_kernel, 1, 1, cfg->pad);
    x = eb_bn_act(b, cfg, "bn1", x, r->act);
    x = eb_mixconv(b, "conv_dw", x, mid, &a->kernel, r->stride, num_groups(b, a->group_size, 1, mid), cfg->pad);
    x = eb_bn_act(b, cfg, "bn2", x, r->act);
    if (r->se_ratio > 0)
        x = squeeze_excite(b, cfg, x, r->se_ratio, r->act);
    x = eb_mixconv(b, "conv_pwl", x, r->out, &a->pw_kernel, 1, 1, cfg->pad);
    return eb_bn_act(b, cfg, "bn3", x, EB_ACT_NONE);
}

static ValueId edge_residual(Builder *b, const EbConfig *cfg, const EbBlockArgs *a, const Resolved *r, ValueId x,
                             int *has_skip)
{
    int base = a->force_in_chs > 0 ? eb_round_channels(a->force_in_chs, cfg->round) : r->in;
    int mid = eb_make_divisible(base * a->exp_ratio, 8, 0.9);
    *has_skip = r->in == r->out && r->stride == 1 && !a->noskip;
    x = eb_mixconv(b, "conv_exp", x, mid, &a->kernel, r->stride, num_groups(b, a->group_size, 0, mid), cfg->pad);
    x = eb_bn_act(b, cfg, "bn1", x, r->act);
    if (r->se_ratio > 0)
        x = squeeze_excite(b, cfg, x, r->se_ratio, r->act);
    x = eb_mixconv(b, "conv_pwl", x, r->out, &a->pw_kernel, 1, 1, cfg->pad);
    return eb_bn_act(b, cfg, "bn2", x, EB_ACT_NONE);
}

static ValueId conv_bn_act(Builder *b, const EbConfig *cfg, const EbBlockArgs *a, const Resolved *r, ValueId x,
                           int *has_skip)
{
    *has_skip = a->skip && r->stride == 1 && r->in == r->out;
    x = eb_mixconv(b, "conv", x, r->out, &a->kernel, r->stride, num_groups(b, a->group_size, 0, r->in), cfg->pad);
    return eb_bn_act(b, cfg, "bn1", x, r->act);
}

/* ConvNormAct "<name>": conv (no bias) then the model's norm + act as "bn". */
static ValueId conv_norm_act(Builder *b, const EbConfig *cfg, const char *name, ValueId x, int64_t out,
                             const EbKernel *k, int stride, int groups, EbAct act)
{
    b_push(b, "%s", name);
    x = eb_mixconv(b, "conv", x, out, k, stride, groups, cfg->pad);
    x = eb_bn_act(b, cfg, "bn", x, act);
    b_pop(b);
    return x;
}

/* MobileNetV4's UniversalInvertedResidual: [dw_start] (no act), pw_exp,
 * [dw_mid], pw_proj (no act); a depthwise conv exists where its kernel is
 * not 0, and the first of them strides. timm's layer scale is the hybrid
 * models' (with attention blocks), not built here. */
static ValueId universal_inverted_residual(Builder *b, const EbConfig *cfg, const EbBlockArgs *a,
                                           const Resolved *r, ValueId x, int *has_skip)
{
    int mid = eb_make_divisible(r->in * a->exp_ratio, 8, 0.9);
    int dw = a->kernel.k[0] != 0;
    const EbKernel one = {1, {1}};
    *has_skip = r->in == r->out && r->stride == 1 && !a->noskip;
    if (a->exp_kernel.k[0])
        x = conv_norm_act(b, cfg, "dw_start", x, r->in, &a->exp_kernel, dw ? 1 : r->stride,
                          num_groups(b, a->group_size, 1, r->in), EB_ACT_NONE);
    x = conv_norm_act(b, cfg, "pw_exp", x, mid, &one, 1, 1, r->act);
    if (dw)
        x = conv_norm_act(b, cfg, "dw_mid", x, mid, &a->kernel, r->stride, num_groups(b, a->group_size, 1, mid),
                          r->act);
    return conv_norm_act(b, cfg, "pw_proj", x, r->out, &one, 1, 1, EB_ACT_NONE);
}

ValueId eb_build_blocks(Builder *b, const EbConfig *cfg, const EbBlocks *blocks, ValueId x, int *out_chs)
{
    int in = (int)b_shape(b, x)->d[1];
    b_push(b, "blocks");
    for (int k = 0, first = 0; k < blocks->n; k++) {
        const EbBlockArgs *a = &blocks->b[k];
        if (k > 0 && a->stage != blocks->b[k - 1].stage)
            first = k;
        if (a->stride != 1 && a->stride != 2) {
            x = b_fail(b, "block %d: stride %d (1 or 2 supported)", k, a->stride);
            break;
        }
        /* Only the first block of a stage strides. */
        Resolved r = {in, eb_round_channels(a->out_chs, cfg->round), k == first ? a->stride : 1,
                      a->act ? a->act : cfg->act, a->se_ratio};
        if (r.se_ratio > 0 && !cfg->se_from_exp)
            r.se_ratio /= a->exp_ratio;
        double dpr = cfg->drop_path_rate * k / blocks->n;
        int has_skip = 0;
        ValueId shortcut = x;
        b_push(b, "%d", a->stage);
        b_push(b, "%d", k - first);
        switch (a->type) {
        case EB_DS:
        case EB_DSA: x = depthwise_separable(b, cfg, a, &r, x, &has_skip); break;
        case EB_IR: x = inverted_residual(b, cfg, a, &r, x, &has_skip); break;
        case EB_ER: x = edge_residual(b, cfg, a, &r, x, &has_skip); break;
        case EB_CN: x = conv_bn_act(b, cfg, a, &r, x, &has_skip); break;
        case EB_UIR: x = universal_inverted_residual(b, cfg, a, &r, x, &has_skip); break;
        }
        if (has_skip)
            x = f_add(b, f_drop_path(b, x, dpr), shortcut);
        b_pop(b);
        b_pop(b);
        in = r.out;
    }
    b_pop(b);
    *out_chs = in;
    return x;
}
