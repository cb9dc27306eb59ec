/*
 * LeViT (timm/models/levit.py, nn.Linear mode, timm's LevitDistilled): a
 * stride-16 stem of four ConvNorms (3x3 stride-2 conv without bias +
 * BatchNorm2d, hard-swish between), then token stages of attention and MLP
 * residual blocks, the stages after the first opening with an
 * AttentionDownsample (queries from every second token of each axis) and an
 * MLP residual; the tokens' mean, then two NormLinear heads (BatchNorm1d +
 * Linear) whose logits are averaged. Every linear is a LinearNorm: a Linear
 * without bias and a BatchNorm1d over the B*N tokens. The attention adds a
 * learned per-head bias, attention_biases [H, N_k], gathered at the
 * relative-offset index attention_bias_idxs [N_q, N_k] (timm's
 * non-persistent buffer: a build-time constant here).
 *
 * In training timm averages the two heads too: LevitDistilled returns the
 * (head, head_dist) tuple only after set_distilled_training(True), which
 * train.py never calls. The value dim differs from the key dim (attn_ratio),
 * so the attention is timm's own q @ k^T, scale, bias, softmax, @ v (sdpa
 * takes k and v of one shape), which fvcore counts as timm runs it: LeViT
 * never calls F.scaled_dot_product_attention.
 *
 * Init as timm's: PyTorch's default conv and linear inits; BN weights ones,
 * except zeros on the attention's proj and the MLP's second LinearNorm (the
 * downsample's proj keeps ones); the heads' linears trunc_normal(.02) with
 * zero bias; attention_biases zeros.
 */
#include <math.h>
#include <stdlib.h>

#include "models/layer_groups.h"
#include "models/registry.h"

typedef struct LevitArch {
    int embed[3], heads[3], depth[3], key_dim;
} LevitArch;

enum { ATTN_RATIO = 2, MLP_RATIO = 2, DOWN_ATTN_RATIO = 4, DOWN_MLP_RATIO = 2 };

/* LinearNorm of x [B,N,C]: the BatchNorm1d sees x.flatten(0, 1). */
static ValueId linear_norm(Builder *b, const char *name, ValueId x, int64_t out, int zero_bn)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], N = s->d[1];
    b_push(b, "%s", name);
    x = nn_linear(b, "linear", x, out, (LinearOpts){.no_bias = 1});
    x = f_reshape(b, x, 2, (int64_t[]){B * N, out});
    x = nn_batch_norm(b, "bn", x, (BNOpts){.zero_weight = zero_bn});
    b_pop(b);
    return f_reshape(b, x, 3, (int64_t[]){B, N, out});
}

/* NormLinear of x [B,C]. */
static ValueId norm_linear(Builder *b, const char *name, ValueId x, int classes, double drop_rate)
{
    b_push(b, "%s", name);
    x = nn_batch_norm(b, "bn", x, (BNOpts){0});
    x = f_dropout(b, x, drop_rate);
    x = nn_linear(b, "linear", x, classes,
                  (LinearOpts){.weight_init = init_trunc_normal(.02), .bias_init = init_zeros()});
    b_pop(b);
    return x;
}

/* Of t [B,N,H*per], the heads' channels [from, from + n) as [B,H,N,n]
 * (perm {0,2,1,3}) or, for the keys, [B,H,n,N] (perm {0,2,3,1}). */
static ValueId head_part(Builder *b, ValueId t, int64_t heads, int64_t from, int64_t n, const int64_t *perm)
{
    const CtShape *s = b_shape(b, t);
    int64_t B = s->d[0], N = s->d[1], per = s->d[2] / heads;
    t = f_reshape(b, t, 4, (int64_t[]){B, N, heads, per});
    return f_permute(b, f_slice(b, t, 3, from, from + n, 1), 4, perm);
}

static const int64_t to_bhnd[4] = {0, 2, 1, 3}, to_bhdn[4] = {0, 2, 3, 1};

/* The attention's bias [H, Nq, Nk]: attention_biases [H, R*R] at timm's
 * index of |dy| * R + |dx| between query position (y, x) * stride and key
 * position (y', x') on the R x R grid. */
static ValueId attention_bias(Builder *b, int64_t heads, int64_t R, int stride)
{
    int64_t Rq = (R - 1) / stride + 1, Nq = Rq * Rq, Nk = R * R;
    double *idx = malloc(sizeof *idx * (size_t)(Nq * Nk));
    if (!idx)
        return b_fail(b, "out of memory for a %lldx%lld attention bias index", (long long)Nq, (long long)Nk);
    for (int64_t q = 0; q < Nq; q++)
        for (int64_t k = 0; k < Nk; k++)
            idx[q * Nk + k] = (double)(llabs(q / Rq * stride - k / R) * R + llabs(q % Rq * stride - k % R));
    ValueId ab = b_param(b, "attention_biases", (CtShape){2, {heads, Nk}}, init_zeros());
    ValueId ix = b_const(b, "attention_bias_idxs", (CtShape){2, {Nq, Nk}}, CT_I32, idx);
    free(idx);
    return f_gather(b, ab, 1, ix);
}

/* softmax(q k * scale + bias) v for q [B,H,Nq,kd], k [B,H,kd,Nk], v
 * [B,H,Nk,vd], as [B,Nq,H*vd] (timm's (attn @ v).transpose(1, 2)). */
static ValueId attend(Builder *b, ValueId q, ValueId k, ValueId v, ValueId bias, int64_t key_dim)
{
    ValueId attn = f_scale_shift(b, f_matmul(b, q, k), pow((double)key_dim, -0.5), 0);
    attn = f_softmax(b, f_add(b, attn, bias), 3);
    ValueId x = f_permute(b, f_matmul(b, attn, v), 4, to_bhnd);
    const CtShape *s = b_shape(b, x);
    return f_reshape(b, x, 3, (int64_t[]){s->d[0], s->d[1], s->d[2] * s->d[3]});
}

/* Attention of x [B,N,C] on the R x R grid. */
static ValueId attention(Builder *b, ValueId x, int64_t heads, int64_t kd, int64_t R)
{
    int64_t C = b_shape(b, x)->d[2], vd = ATTN_RATIO * kd;
    b_push(b, "attn");
    ValueId bias = attention_bias(b, heads, R, 1);
    ValueId qkv = linear_norm(b, "qkv", x, heads * (2 * kd + vd), 0);
    x = attend(b, head_part(b, qkv, heads, 0, kd, to_bhnd), head_part(b, qkv, heads, kd, kd, to_bhdn),
               head_part(b, qkv, heads, 2 * kd, vd, to_bhnd), bias, kd);
    x = linear_norm(b, "proj.ln", f_hard_swish(b, x), C, 1);
    b_pop(b);
    return x;
}

/* LevitMlp: LinearNorm, hard-swish, LinearNorm (BN weight zeros). */
static ValueId mlp(Builder *b, ValueId x, int64_t hidden)
{
    int64_t C = b_shape(b, x)->d[2];
    b_push(b, "mlp");
    x = linear_norm(b, "ln2", f_hard_swish(b, linear_norm(b, "ln1", x, hidden, 0)), C, 1);
    b_pop(b);
    return x;
}

/* LevitDownsample of x [B,R*R,C] to [B,Rq*Rq,out]: AttentionDownsample with
 * C / kd heads, then an MLP residual. */
static ValueId downsample(Builder *b, ValueId x, int64_t out, int64_t kd, int64_t R, double dpr)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], C = s->d[2], heads = C / kd, vd = DOWN_ATTN_RATIO * kd, Rq = (R - 1) / 2 + 1;
    b_push(b, "downsample");
    b_push(b, "attn_downsample");
    ValueId bias = attention_bias(b, heads, R, 2);
    ValueId kv = linear_norm(b, "kv", x, heads * (kd + vd), 0);
    /* Downsample: x.view(B, R, R, C)[:, ::2, ::2] */
    ValueId sub = f_reshape(b, x, 4, (int64_t[]){B, R, R, C});
    sub = f_slice(b, f_slice(b, sub, 1, 0, R, 2), 2, 0, R, 2);
    ValueId q = linear_norm(b, "q.ln", f_reshape(b, sub, 3, (int64_t[]){B, Rq * Rq, C}), heads * kd, 0);
    x = attend(b, head_part(b, q, heads, 0, kd, to_bhnd), head_part(b, kv, heads, 0, kd, to_bhdn),
               head_part(b, kv, heads, kd, vd, to_bhnd), bias, kd);
    x = linear_norm(b, "proj.ln", f_hard_swish(b, x), out, 0);
    b_pop(b);
    x = f_add(b, x, f_drop_path(b, mlp(b, x, DOWN_MLP_RATIO * out), dpr));
    b_pop(b);
    return x;
}

/* Stem16: conv1..conv4 (ConvNorm), hard-swish between. */
static ValueId stem(Builder *b, ValueId x, int64_t dim)
{
    b_push(b, "stem");
    for (int i = 0; i < 4; i++) {
        if (i)
            x = f_hard_swish(b, x);
        b_push(b, "conv%d", i + 1);
        x = nn_conv2d(b, "linear", x, dim >> (3 - i), 3, (ConvOpts){.stride = 2, .padding = 1});
        x = nn_batch_norm(b, "bn", x, (BNOpts){0});
        b_pop(b);
    }
    b_pop(b);
    return x;
}

static ValueId build_levit(Builder *b, const ModelEntry *m, const ModelArgs *a, ValueId x)
{
    const LevitArch *l = m->arch;
    int64_t B = b_shape(b, x)->d[0], img = b_shape(b, x)->d[2];
    x = stem(b, x, l->embed[0]);
    if (x < 0)
        return -1;
    /* timm's token grid is img_size // 16, which the stem's output is only
     * when they agree (its views fail otherwise) */
    int64_t R = img / 16, C = l->embed[0];
    if (b_shape(b, x)->d[2] != R)
        return b_fail(b, "image size %lld: the stem gives %lldx%lld tokens, timm's grid is img_size // 16 = %lld",
                      (long long)img, (long long)b_shape(b, x)->d[2], (long long)b_shape(b, x)->d[3], (long long)R);
    x = f_permute(b, f_reshape(b, x, 3, (int64_t[]){B, C, R * R}), 3, (int64_t[]){0, 2, 1});
    b_push(b, "stages");
    for (int i = 0; i < 3; i++) {
        b_push(b, "%d", i);
        if (i) {
            x = downsample(b, x, l->embed[i], l->key_dim, R, a->drop_path_rate);
            R = (R - 1) / 2 + 1;
        }
        b_push(b, "blocks");
        for (int j = 0; j < l->depth[i]; j++) {
            b_push(b, "%d", j);
            x = f_add(b, x, f_drop_path(b, attention(b, x, l->heads[i], l->key_dim, R), a->drop_path_rate));
            x = f_add(b, x, f_drop_path(b, mlp(b, x, MLP_RATIO * l->embed[i]), a->drop_path_rate));
            b_pop(b);
        }
        b_pop(b);
        b_pop(b);
    }
    b_pop(b);
    if (x < 0)
        return -1;
    C = l->embed[2];
    x = f_reduce_sum(b, x, 1 << 1);
    x = f_reshape(b, f_scale_shift(b, x, 1.0 / (double)(R * R), 0), 2, (int64_t[]){B, C});
    int classes = model_num_classes(m, a);
    if (classes == 0)
        return x;
    ValueId y = norm_linear(b, "head", x, classes, a->drop_rate);
    ValueId y_dist = norm_linear(b, "head_dist", x, classes, a->drop_rate);
    return f_scale_shift(b, f_add(b, y, y_dist), 0.5, 0);
}

static const LevitArch levit_128s = {{128, 256, 384}, {4, 6, 8}, {2, 3, 4}, 16};
static const LevitArch levit_128 = {{128, 256, 384}, {4, 8, 12}, {4, 4, 4}, 16};

static const char *const levit_no_wd[] = {"*attention_biases", NULL};

#define LEVIT_CFG                                                                                                \
    {.tag = "fb_dist_in1k", .input_size = {3, 224, 224}, .mean = {0.485, 0.456, 0.406},                         \
     .std = {0.229, 0.224, 0.225}, .crop_pct = 0.9, .crop_mode = "center", .interpolation = "bicubic",          \
     .num_classes = 1000, .first_conv = "stem.conv1.linear", .classifier = "head.linear",                       \
     .classifier_dist = "head_dist.linear", .fixed_input_size = 1}

static const ModelEntry entries[] = {
    {"levit_128", build_levit, &levit_128, LEVIT_CFG, levit_no_wd},
    {"levit_128s", build_levit, &levit_128s, LEVIT_CFG, levit_no_wd},
};

/* Levit.group_matcher */
static const GroupRule groups[] = {
    {"^stem", 0, LG_NO_SUFFIX},
    {"^stages\\.([0-9]+)\\.downsample", 1, 0},
    {"^stages\\.([0-9]+)\\.blocks\\.([0-9]+)", 1, LG_NO_SUFFIX},
    {NULL, 0, 0},
};

const ModelFamily levit_family = {entries, sizeof entries / sizeof entries[0], groups, 0, 0};
