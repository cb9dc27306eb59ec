/*
 * The builder API: model code reads like timm's module code.
 *
 *   b_push(b, "layer%d", i + 1);
 *   x = nn_conv2d(b, "conv1", x, planes, 3, (ConvOpts){.stride = 2, .padding = 1});
 *   x = nn_batch_norm(b, "bn1", x, (BNOpts){0});
 *   x = f_relu(b, x);
 *   b_pop(b);
 *
 * Name scopes give parameters and buffers timm's state_dict names. Errors are
 * sticky: the first failure is recorded in the builder, every later call
 * returns -1 and does nothing, and b_finish reports it. So model code need
 * not check each call, and a message still names the first module that failed.
 */
#ifndef CTIMM_BUILDER_H
#define CTIMM_BUILDER_H

#include "ir/emit.h"

#define B_MAX_DEPTH 32

typedef struct BModule {
    const char *path;
    int parent;
} BModule;

typedef struct Builder {
    Graph *g;
    int training;
    /* timm's convert_splitbn_model (--split-bn): > 1 makes every batch norm a
     * SplitBatchNorm2d of this many splits; 0: plain */
    int split_bn;
    CtDType param_dtype; /* of params and float buffers: f32, or f64 for gradient checks */
    char scope[512];
    int scope_len[B_MAX_DEPTH];
    int module_at[B_MAX_DEPTH];
    int depth;
    BModule *modules; /* module tree in first-seen order, for state_dict order */
    int nmodules, cap_modules;
    int *value_module; /* module of each param/buffer value (-1 otherwise) */
    int cap_value_module;
    int64_t next_node_seed;
    ValueId rng; /* the RNG counter state, made by the first stochastic node */
    Emitter e; /* its scope points at `scope`; its sticky error is the build's */
} Builder;

void b_init(Builder *b, Graph *g, int training);
/* Orders the state_dict, verifies the graph and releases the builder's
 * bookkeeping; returns the first error of the whole build, if any. */
int b_finish(Builder *b, CtErr *err);

void b_push(Builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void b_pop(Builder *b);
/* Records a failure (sticky) and returns -1. */
int b_fail(Builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

ValueId b_input(Builder *b, const char *name, CtShape shape, CtDType dtype);
ValueId b_param(Builder *b, const char *leaf, CtShape shape, CtInit init);
ValueId b_buffer(Builder *b, const char *leaf, CtShape shape, CtDType dtype, CtInit init);
/* A constant computed at build time, timm's register_buffer(...,
 * persistent=False): `data` holds its numel values (copied; ints exact),
 * or NULL for zeros, stored as dtype. It is bound like a buffer but is in no state_dict. */
ValueId b_const(Builder *b, const char *leaf, CtShape shape, CtDType dtype, const double *data);
/* Appends one node; returns output `which` of it. */
ValueId b_node(Builder *b, CtOp op, int nin, const ValueId *in, const int64_t *iattr, int niattr,
               const double *fattr, int nfattr, int which);

static inline CtInit init_zeros(void) { return (CtInit){.kind = CT_INIT_ZEROS, .a = 0}; }
static inline CtInit init_ones(void) { return (CtInit){.kind = CT_INIT_ONES, .a = 0}; }
static inline CtInit init_normal(double std) { return (CtInit){.kind = CT_INIT_NORMAL, .a = std}; }
static inline CtInit init_trunc_normal(double std) { return (CtInit){.kind = CT_INIT_TRUNC_NORMAL, .a = std}; }
static inline CtInit init_uniform(double bound) { return (CtInit){.kind = CT_INIT_UNIFORM, .a = bound}; }
static inline CtInit init_constant(double v) { return (CtInit){.kind = CT_INIT_CONSTANT, .a = v}; }
static inline CtInit init_trunc_normal_tf(double std) { return (CtInit){.kind = CT_INIT_TRUNC_NORMAL_TF, .a = std}; }
/* kaiming_normal_(mode='fan_out', nonlinearity='relu'): std = sqrt(2/fan_out). */
CtInit init_kaiming_normal_fan_out(int64_t fan_out);

/* Modules: create their parameters under the current scope + name. */
typedef struct ConvOpts {
    int stride, padding, dilation, groups; /* 0 means PyTorch's default (1, 0, 1, 1) */
    int bias;
    CtInit weight_init, bias_init; /* CT_INIT_DEFAULT: nn.Conv2d's reset_parameters */
} ConvOpts;
ValueId nn_conv2d(Builder *b, const char *name, ValueId x, int64_t out_ch, int kernel, ConvOpts o);
/* timm's StdConv2d and ScaledStdConv2d: a conv whose weight is standardised
 * per output channel on every forward (F.batch_norm of the weight viewed
 * [1, out, fan_in], training: the mean and biased variance, eps inside the
 * root), the gradient flowing to the raw weight. `scaled` adds timm's
 * ScaledStdConv2d: a param "gain" [out,1,1,1] (after the bias) of
 * gain_init, the standardised weight times gain * gamma / sqrt(fan_in). The
 * conv's padding is o.padding, as nn_conv2d's (timm's default, get_padding,
 * is the caller's to give). */
typedef struct StdConvOpts {
    double eps; /* StdConv2d's 1e-6, BiT's 1e-8, NFNet's 1e-5: required */
    int scaled;
    double gamma, gain_init;
} StdConvOpts;
ValueId nn_std_conv2d(Builder *b, const char *name, ValueId x, int64_t out_ch, int kernel, ConvOpts o,
                      StdConvOpts s);

typedef struct BNOpts {
    double eps, momentum; /* 0 means 1e-5 and 0.1 */
    int zero_weight;      /* timm's zero_init_last on the residual's last BN */
} BNOpts;
/* With b->split_bn = S > 1, timm's SplitBatchNorm2d: besides its own state
 * the module has aux_bn.0 .. aux_bn.{S-2}, each a BatchNorm2d; training
 * normalises the batch's S equal parts by the module, then by each aux_bn
 * in turn (concatenated back); eval by the module alone. */
ValueId nn_batch_norm(Builder *b, const char *name, ValueId x, BNOpts o);

typedef struct LinearOpts {
    int no_bias;
    CtInit weight_init, bias_init; /* CT_INIT_DEFAULT: nn.Linear's reset_parameters */
} LinearOpts;
ValueId nn_linear(Builder *b, const char *name, ValueId x, int64_t out_features, LinearOpts o);
/* timm's ConvNormAct with a BatchNorm2d, as the ResNet-like families
 * (RegNet, ByobNet) build and init it: "<name>.conv" (no bias, padding k/2,
 * kaiming_normal fan_out weights) and "<name>.bn" (its weight zeroed with
 * zero_bn: zero_init_last), then ReLU unless `linear`. */
ValueId nn_conv_bn_act(Builder *b, const char *name, ValueId x, int64_t out, int k, int stride, int groups,
                       int zero_bn, int linear);
/* timm's SEModule (no norm, ReLU, sigmoid gate): the channel means through
 * 1x1 convs "<name>.fc1" (to rd channels) and "<name>.fc2" (back), with
 * biases; x times the gate. The inits are the model's: CT_INIT_DEFAULT
 * weights kaiming_normal(fan_out), CT_INIT_DEFAULT biases torch's. */
typedef struct SEOpts {
    CtInit fc1_init, fc2_init, bias_init;
} SEOpts;
ValueId nn_se_module(Builder *b, const char *name, ValueId x, int64_t rd, SEOpts o);
/* timm's create_classifier / ClassifierHead with pool 'avg': global average
 * pool, dropout, then the Linear `fc` (a dotted name: "head.fc") of
 * `classes` outputs, or the pooled features when classes is 0. */
ValueId nn_classifier(Builder *b, const char *fc, ValueId x, int classes, double drop_rate, LinearOpts o);
ValueId nn_layer_norm(Builder *b, const char *name, ValueId x, double eps);
/* timm's PatchEmbed (flattened, NLC): "<name>.proj", a patch x patch conv
 * at stride patch to dim channels (with a bias or not, PyTorch's default
 * init), then the tokens [B, H/patch * W/patch, dim] in row-major grid
 * order. An image size that is not a multiple of the patch fails. */
ValueId nn_patch_embed(Builder *b, const char *name, ValueId x, int64_t dim, int patch, int bias);
/* timm's LayerNorm2d: layer norm over C of [N,C,H,W], through channels-last. */
ValueId nn_layer_norm2d(Builder *b, const char *name, ValueId x, double eps);
typedef struct GNOpts {
    int groups;
    double eps;      /* 0 means 1e-5 */
    int zero_weight; /* timm's zero_init_last on the residual's last norm */
} GNOpts;
/* torch.nn.GroupNorm(groups, C, eps) over x [N, C, ...], affine: weight ones, bias zeros. */
ValueId nn_group_norm(Builder *b, const char *name, ValueId x, GNOpts o);

/* Functional ops (no parameters). */
ValueId f_relu(Builder *b, ValueId x);
ValueId f_gelu(Builder *b, ValueId x, int tanh_approx);
ValueId f_silu(Builder *b, ValueId x);
ValueId f_sigmoid(Builder *b, ValueId x);
ValueId f_hard_swish(Builder *b, ValueId x);
ValueId f_hard_sigmoid(Builder *b, ValueId x);
ValueId f_sqrt(Builder *b, ValueId x);
ValueId f_rsqrt(Builder *b, ValueId x);
ValueId f_exp(Builder *b, ValueId x);
/* torch.clamp(x, lo, hi); an infinite bound is none. */
ValueId f_clamp(Builder *b, ValueId x, double lo, double hi);
/* F.normalize(x, dim=-1, eps): x / max(||x||_2, eps), as x * rsqrt(max(sum x^2, eps^2)). */
ValueId f_normalize(Builder *b, ValueId x, double eps);
ValueId f_add(Builder *b, ValueId x, ValueId y);
ValueId f_mul(Builder *b, ValueId x, ValueId y);
ValueId f_div(Builder *b, ValueId x, ValueId y);
ValueId f_scale_shift(Builder *b, ValueId x, double a, double c);
/* The sum over the dims of x whose bits are set in mask, each kept as size 1. */
ValueId f_reduce_sum(Builder *b, ValueId x, int64_t mask);
ValueId f_avg_pool2d(Builder *b, ValueId x, int kernel, int stride, int padding, int ceil_mode, int count_include_pad);
ValueId f_max_pool2d(Builder *b, ValueId x, int kernel, int stride, int padding);
ValueId f_adaptive_avg_pool2d(Builder *b, ValueId x, int oh, int ow);
/* [N,C,H,W] -> [N,C]: timm's SelectAdaptivePool2d('avg', flatten=True). */
ValueId f_global_avg_pool(Builder *b, ValueId x);
ValueId f_reshape(Builder *b, ValueId x, int ndim, const int64_t *dims);
ValueId f_permute(Builder *b, ValueId x, int ndim, const int64_t *perm);
ValueId f_slice(Builder *b, ValueId x, int dim, int64_t start, int64_t end, int64_t step);
ValueId f_concat(Builder *b, int n, const ValueId *xs, int dim);
/* F.pad(x, (left, right, top, bottom), value=value) of x [N,C,H,W]: constant
 * padding of H and W, a negative amount cropping that side. */
ValueId f_pad(Builder *b, ValueId x, int64_t top, int64_t bottom, int64_t left, int64_t right, double value);
/* torch.index_select(x, dim, index) for an i32 or i64 index of any shape K:
 * x.shape[:dim] + K + x.shape[dim+1:] (table[index] when dim is 0). */
ValueId f_gather(Builder *b, ValueId x, int dim, ValueId index);
ValueId f_expand(Builder *b, ValueId x, int ndim, const int64_t *dims);
ValueId f_matmul(Builder *b, ValueId x, ValueId y);
ValueId f_softmax(Builder *b, ValueId x, int dim);
ValueId f_sdpa(Builder *b, ValueId q, ValueId k, ValueId v, double scale);
/* F.scaled_dot_product_attention(q, k, v, attn_mask=bias) with a float mask:
 * softmax(q k^T * scale + bias) v, bias [B or 1, H or 1, N, M] in q's dtype. */
ValueId f_sdpa_bias(Builder *b, ValueId q, ValueId k, ValueId v, ValueId bias, double scale);
/* Of t [B, N, n*heads*hd] (a fused qkv or kv projection), the n tensors
 * [B, heads, N, hd] into out; and back: x [B, heads, N, hd] -> [B, N, heads*hd]. */
void f_split_heads(Builder *b, ValueId t, int n, int64_t heads, ValueId *out);
ValueId f_merge_heads(Builder *b, ValueId x);
/* The packed sdpa (ir/ops/attention_geom.h): qkv [B, N, 3, H, D] -> y
 * [B, N, H, D], bias [B or 1, H or 1, N, N] or -1 for none. */
ValueId f_sdpa_qkv(Builder *b, ValueId qkv, ValueId bias, double scale);
/* Self-attention of `heads` heads straight from a fused qkv projection:
 * qkv [B, N, 3*heads*hd] -> [B, N, heads*hd], what f_split_heads, f_sdpa
 * (or f_sdpa_bias, bias >= 0) and f_merge_heads compute, as one packed sdpa
 * that reads the heads where the projection left them and writes them where
 * the next one reads them (no copies). */
ValueId f_attention_qkv(Builder *b, ValueId qkv, int64_t heads, ValueId bias, double scale);
/* Identity in eval mode or at rate 0, as nn.Dropout / timm's DropPath. In
 * training the mask is a counter-based draw from (RNG counter, node, index):
 * the graph's state value "rng.counter" (i64) is read by every stochastic
 * node and incremented once per run, so each step draws new masks, the same
 * state gives the same masks, and the backward pass regenerates them. */
ValueId f_dropout(Builder *b, ValueId x, double p);
ValueId f_drop_path(Builder *b, ValueId x, double p);

/* Shape of v; an empty shape for the -1 of a failed build, so model code
 * can go on to the end without checking. Valid until the next node is
 * added: copy what is needed across calls. */
const CtShape *b_shape(const Builder *b, ValueId v);
/* Dtype of v (f32 for the -1 of a failed build). */
CtDType b_dtype(const Builder *b, ValueId v);

#endif
