#include "frontend/builder.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int module_add(Builder *b, const char *path, int parent)
{
    b->modules = ct_grow(b->modules, &b->cap_modules, b->nmodules + 1, sizeof *b->modules);
    b->modules[b->nmodules] = (BModule){arena_strdup(&b->g->arena, path), parent};
    return b->nmodules++;
}

void b_init(Builder *b, Graph *g, int training)
{
    memset(b, 0, sizeof *b);
    b->g = g;
    b->training = training;
    b->param_dtype = CT_F32;
    b->rng = -1;
    b->e = (Emitter){.g = g, .scope = b->scope};
    module_add(b, "", -1);
}

int b_fail(Builder *b, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return emit_fail(&b->e, "%s", msg);
}

void b_push(Builder *b, const char *fmt, ...)
{
    CT_ASSERT(b->depth < B_MAX_DEPTH);
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    size_t len = strlen(b->scope);
    b->scope_len[b->depth] = (int)len;
    snprintf(b->scope + len, sizeof b->scope - len, len ? ".%s" : "%s", name);
    int parent = b->depth ? b->module_at[b->depth - 1] : 0, m = -1;
    for (int i = 0; i < b->nmodules && m < 0; i++)
        if (b->modules[i].parent == parent && strcmp(b->modules[i].path, b->scope) == 0)
            m = i;
    b->module_at[b->depth++] = m >= 0 ? m : module_add(b, b->scope, parent);
}

void b_pop(Builder *b)
{
    CT_ASSERT(b->depth > 0);
    b->scope[b->scope_len[--b->depth]] = '\0';
}

static ValueId add_state(Builder *b, const char *leaf, CtShape shape, CtDType dtype, CtRole role, CtInit init)
{
    if (b->e.failed)
        return -1;
    char name[600];
    snprintf(name, sizeof name, b->scope[0] ? "%s.%s" : "%s%s", b->scope, leaf);
    for (int i = 0; i < b->g->nvalues; i++)
        if (b->g->values[i].name && strcmp(b->g->values[i].name, name) == 0)
            return b_fail(b, "'%s' is created twice", name);
    ValueId v = graph_add_value(b->g, (CtType){shape, dtype}, role, name);
    CT_ASSERT(init.kind != CT_INIT_DEFAULT);
    b->g->values[v].init = init;
    b->value_module = ct_grow(b->value_module, &b->cap_value_module, v + 1, sizeof *b->value_module);
    b->value_module[v] = b->depth ? b->module_at[b->depth - 1] : 0;
    return v;
}

ValueId b_input(Builder *b, const char *name, CtShape shape, CtDType dtype)
{
    if (b->e.failed)
        return -1;
    ValueId v = graph_add_value(b->g, (CtType){shape, dtype}, CT_ROLE_INPUT, name);
    b->value_module = ct_grow(b->value_module, &b->cap_value_module, v + 1, sizeof *b->value_module);
    b->value_module[v] = -1;
    return v;
}

ValueId b_param(Builder *b, const char *leaf, CtShape shape, CtInit init)
{
    return add_state(b, leaf, shape, b->param_dtype, CT_ROLE_PARAM, init);
}

ValueId b_buffer(Builder *b, const char *leaf, CtShape shape, CtDType dtype, CtInit init)
{
    return add_state(b, leaf, shape, dtype, CT_ROLE_BUFFER, init);
}

ValueId b_const(Builder *b, const char *leaf, CtShape shape, CtDType dtype, const double *data)
{
    int64_t n = shape_numel(&shape);
    CtInit init = {.kind = CT_INIT_DATA, .data = data};
    if (data) {
        init = init_in_arena(&b->g->arena, init, n);
    } else {
        double *zeros = arena_alloc(&b->g->arena, sizeof *zeros * (size_t)(n ? n : 1));
        memset(zeros, 0, sizeof *zeros * (size_t)n);
        init.data = zeros;
    }
    return add_state(b, leaf, shape, dtype, CT_ROLE_CONST, init);
}

ValueId b_node(Builder *b, CtOp op, int nin, const ValueId *in, const int64_t *iattr, int niattr,
               const double *fattr, int nfattr, int which)
{
    return emit(&b->e, op, nin, in, iattr, niattr, fattr, nfattr, which);
}

/* Depth-first over the module tree: a module's own params, then its own
 * buffers, then its children in first-seen order (torch's state_dict()). */
static void order_module(Builder *b, int m, ValueId *out, int *k)
{
    for (int role = CT_ROLE_PARAM; role <= CT_ROLE_BUFFER; role++)
        for (int v = 0; v < b->g->nvalues; v++)
            if ((int)b->g->values[v].role == role && b->value_module[v] == m)
                out[(*k)++] = v;
    for (int c = 0; c < b->nmodules; c++)
        if (b->modules[c].parent == m)
            order_module(b, c, out, k);
}

int b_finish(Builder *b, CtErr *err)
{
    int rc = 0;
    if (b->e.failed) {
        *err = b->e.err;
        rc = -1;
        goto free_builder;
    }
    Graph *g = b->g;
    if (b->rng >= 0) {
        ValueId next = f_scale_shift(b, b->rng, 1, 1);
        b_node(b, CT_OP_assign, 2, (ValueId[]){b->rng, next}, NULL, 0, NULL, 0, 0);
        if (b->e.failed) {
            *err = b->e.err;
            rc = -1;
            goto free_builder;
        }
    }
    free(g->state);
    g->state = malloc(sizeof *g->state * (size_t)(g->nvalues ? g->nvalues : 1));
    CT_ASSERT(g->state != NULL);
    g->nstate = 0;
    order_module(b, 0, g->state, &g->nstate);
    for (ValueId v = 0; v < g->nvalues; v++)
        if (g->values[v].role == CT_ROLE_CONST)
            g->state[g->nstate++] = v;
    if (b->rng >= 0)
        g->state[g->nstate++] = b->rng;
    rc = graph_verify(g, err);
free_builder:
    free(b->modules);
    free(b->value_module);
    b->modules = NULL;
    b->value_module = NULL;
    return rc;
}

const CtShape *b_shape(const Builder *b, ValueId v)
{
    static const CtShape none;
    return v >= 0 && v < b->g->nvalues ? &b->g->values[v].type.shape : &none;
}

CtDType b_dtype(const Builder *b, ValueId v)
{
    return v >= 0 && v < b->g->nvalues ? b->g->values[v].type.dtype : CT_F32;
}

CtInit init_kaiming_normal_fan_out(int64_t fan_out) { return init_normal(sqrt(2.0 / (double)fan_out)); }

/* nn.Conv2d / nn.Linear reset_parameters(): kaiming_uniform_(a=sqrt(5)) for
 * the weight and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias, which both
 * come to a bound of 1/sqrt(fan_in). */
static CtInit torch_default(CtInit given, int64_t fan_in)
{
    return given.kind == CT_INIT_DEFAULT ? init_uniform(1.0 / sqrt((double)fan_in)) : given;
}

/* A conv module's weight (and bias) params under the current scope: in[1]
 * (and in[2]) for the conv2d node of input in[0]; 0, or -1 after a failure. */
static int conv_params(Builder *b, const char *name, ValueId *in, int64_t out_ch, int kernel, const ConvOpts *o)
{
    int groups = o->groups ? o->groups : 1;
    int64_t in_ch = b_shape(b, in[0])->d[1];
    if (b_shape(b, in[0])->ndim != 4 || in_ch % groups)
        return b_fail(b, "conv2d '%s': input must be [N,C,H,W] with C divisible by groups=%d", name, groups);
    int64_t fan_in = in_ch / groups * kernel * kernel;
    in[1] = b_param(b, "weight", (CtShape){4, {out_ch, in_ch / groups, kernel, kernel}},
                    torch_default(o->weight_init, fan_in));
    if (o->bias)
        in[2] = b_param(b, "bias", (CtShape){1, {out_ch}}, torch_default(o->bias_init, fan_in));
    return 0;
}

static ValueId conv_node(Builder *b, const ValueId *in, const ConvOpts *o)
{
    int stride = o->stride ? o->stride : 1, dil = o->dilation ? o->dilation : 1, groups = o->groups ? o->groups : 1;
    int64_t a[] = {stride, stride, o->padding, o->padding, dil, dil, groups};
    return b_node(b, CT_OP_conv2d, o->bias ? 3 : 2, in, a, 7, NULL, 0, 0);
}

ValueId nn_conv2d(Builder *b, const char *name, ValueId x, int64_t out_ch, int kernel, ConvOpts o)
{
    if (b->e.failed || x < 0)
        return -1;
    ValueId in[3] = {x, -1, -1};
    b_push(b, "%s", name);
    ValueId y = conv_params(b, name, in, out_ch, kernel, &o) ? -1 : conv_node(b, in, &o);
    b_pop(b);
    return y;
}

ValueId nn_std_conv2d(Builder *b, const char *name, ValueId x, int64_t out_ch, int kernel, ConvOpts o,
                      StdConvOpts s)
{
    if (b->e.failed || x < 0)
        return -1;
    if (!(s.eps > 0))
        return b_fail(b, "std conv '%s': eps %g must be positive", name, s.eps);
    ValueId in[3] = {x, -1, -1};
    b_push(b, "%s", name);
    if (conv_params(b, name, in, out_ch, kernel, &o)) {
        b_pop(b);
        return -1;
    }
    CtShape ws = *b_shape(b, in[1]);
    int64_t fan_in = ws.d[1] * ws.d[2] * ws.d[3], groups = out_ch;
    /* group_norm of [1, out, fan_in] in `out` groups is F.batch_norm's
     * training-mode standardisation of each output channel's row. */
    ValueId gn[2] = {f_reshape(b, in[1], 3, (int64_t[]){1, out_ch, fan_in}), -1};
    if (s.scaled) {
        ValueId gain = b_param(b, "gain", (CtShape){4, {out_ch, 1, 1, 1}}, init_constant(s.gain_init));
        gn[1] = f_reshape(b, f_scale_shift(b, gain, s.gamma * pow((double)fan_in, -0.5), 0), 1, &out_ch);
    }
    in[1] = b_node(b, CT_OP_group_norm, s.scaled ? 2 : 1, gn, &groups, 1, &s.eps, 1, 0);
    in[1] = f_reshape(b, in[1], 4, ws.d);
    ValueId y = conv_node(b, in, &o);
    b_pop(b);
    return y;
}

/* One BatchNorm2d's state in the current scope, and x normalised by it
 * (x < 0: the state alone). */
static ValueId batch_norm_of(Builder *b, ValueId x, int64_t channels, BNOpts o)
{
    CtShape c = {1, {channels}};
    ValueId in[5] = {x, b_param(b, "weight", c, o.zero_weight ? init_zeros() : init_ones()),
                     b_param(b, "bias", c, init_zeros()), b_buffer(b, "running_mean", c, b->param_dtype, init_zeros()),
                     b_buffer(b, "running_var", c, b->param_dtype, init_ones())};
    ValueId nbt = b_buffer(b, "num_batches_tracked", (CtShape){0}, CT_I64, init_zeros());
    if (x < 0)
        return -1;
    int64_t training = b->training;
    double f[2] = {o.momentum ? o.momentum : 0.1, o.eps ? o.eps : 1e-5};
    ValueId y = b_node(b, CT_OP_batch_norm, 5, in, &training, 1, f, 2, 0);
    if (b->training && !b->e.failed) {
        const Node *n = &b->g->nodes[b->g->nnodes - 1];
        ValueId mean = n->out[1], var = n->out[2];
        b_node(b, CT_OP_assign, 2, (ValueId[]){in[3], mean}, NULL, 0, NULL, 0, 0);
        b_node(b, CT_OP_assign, 2, (ValueId[]){in[4], var}, NULL, 0, NULL, 0, 0);
        b_node(b, CT_OP_assign, 2, (ValueId[]){nbt, f_scale_shift(b, nbt, 1, 1)}, NULL, 0, NULL, 0, 0);
    }
    return y;
}

ValueId nn_batch_norm(Builder *b, const char *name, ValueId x, BNOpts o)
{
    if (b->e.failed || x < 0)
        return -1;
    int64_t channels = b_shape(b, x)->d[1], batch = b_shape(b, x)->d[0];
    int S = b->split_bn > 1 ? b->split_bn : 1, split = b->training && S > 1;
    if (split && batch % S)
        return b_fail(b, "--split-bn: the batch of %lld does not split into %d equal parts", (long long)batch, S);
    b_push(b, "%s", name);
    ValueId part[CT_JSD_MAX_SPLITS];
    part[0] = batch_norm_of(b, split ? f_slice(b, x, 0, 0, batch / S, 1) : x, channels, o);
    for (int i = 1; i < S; i++) {
        b_push(b, "aux_bn.%d", i - 1);
        part[i] = batch_norm_of(b, split ? f_slice(b, x, 0, i * batch / S, (i + 1) * batch / S, 1) : -1, channels, o);
        b_pop(b);
    }
    b_pop(b);
    return split ? f_concat(b, S, part, 0) : part[0];
}

ValueId nn_linear(Builder *b, const char *name, ValueId x, int64_t out_features, LinearOpts o)
{
    if (b->e.failed || x < 0)
        return -1;
    const CtShape *s = b_shape(b, x);
    int64_t in_features = s->d[s->ndim - 1];
    b_push(b, "%s", name);
    ValueId in[3] = {x, b_param(b, "weight", (CtShape){2, {out_features, in_features}},
                                torch_default(o.weight_init, in_features))};
    if (!o.no_bias)
        in[2] = b_param(b, "bias", (CtShape){1, {out_features}}, torch_default(o.bias_init, in_features));
    ValueId y = b_node(b, CT_OP_linear, o.no_bias ? 2 : 3, in, NULL, 0, NULL, 0, 0);
    b_pop(b);
    return y;
}

ValueId nn_patch_embed(Builder *b, const char *name, ValueId x, int64_t dim, int patch, int bias)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[2], W = s->d[3];
    if (b->e.failed || x < 0)
        return -1;
    if (H % patch || W % patch)
        return b_fail(b, "image size %lldx%lld is not a multiple of the patch size %d", (long long)H, (long long)W,
                      patch);
    b_push(b, "%s", name);
    x = nn_conv2d(b, "proj", x, dim, patch, (ConvOpts){.stride = patch, .bias = bias});
    b_pop(b);
    int64_t N = (H / patch) * (W / patch);
    /* timm's flatten(2).transpose(1, 2) as the same values transposed first: a channels-last x is then
     * already [B, H, W, dim] in memory (a view), where flattening first copies it twice */
    return f_reshape(b, f_permute(b, x, 4, (int64_t[]){0, 2, 3, 1}), 3, (int64_t[]){B, N, dim});
}

ValueId nn_layer_norm(Builder *b, const char *name, ValueId x, double eps)
{
    if (b->e.failed || x < 0)
        return -1;
    const CtShape *s = b_shape(b, x);
    CtShape d = {1, {s->d[s->ndim - 1]}};
    int64_t dt = b_dtype(b, x); /* y's */
    b_push(b, "%s", name);
    ValueId in[3] = {x, b_param(b, "weight", d, init_ones()), b_param(b, "bias", d, init_zeros())};
    ValueId y = b_node(b, CT_OP_layer_norm, 3, in, &dt, 1, &eps, 1, 0);
    b_pop(b);
    return y;
}

ValueId nn_se_module(Builder *b, const char *name, ValueId x, int64_t rd, SEOpts o)
{
    if (b->e.failed || x < 0)
        return -1;
    int64_t ch = b_shape(b, x)->d[1];
    b_push(b, "%s", name);
    CtInit w1 = o.fc1_init.kind == CT_INIT_DEFAULT ? init_kaiming_normal_fan_out(rd) : o.fc1_init;
    CtInit w2 = o.fc2_init.kind == CT_INIT_DEFAULT ? init_kaiming_normal_fan_out(ch) : o.fc2_init;
    ConvOpts o1 = {.bias = 1, .weight_init = w1, .bias_init = o.bias_init};
    ConvOpts o2 = {.bias = 1, .weight_init = w2, .bias_init = o.bias_init};
    ValueId s = f_relu(b, nn_conv2d(b, "fc1", f_adaptive_avg_pool2d(b, x, 1, 1), rd, 1, o1));
    s = nn_conv2d(b, "fc2", s, ch, 1, o2);
    b_pop(b);
    return f_mul(b, x, f_sigmoid(b, s));
}

ValueId nn_classifier(Builder *b, const char *fc, ValueId x, int classes, double drop_rate, LinearOpts o)
{
    x = f_dropout(b, f_global_avg_pool(b, x), drop_rate);
    return classes ? nn_linear(b, fc, x, classes, o) : x;
}

ValueId nn_conv_bn_act(Builder *b, const char *name, ValueId x, int64_t out, int k, int stride, int groups,
                       int zero_bn, int linear)
{
    b_push(b, "%s", name);
    x = nn_conv2d(b, "conv", x, out, k,
                  (ConvOpts){.stride = stride, .padding = k / 2, .groups = groups,
                             .weight_init = init_kaiming_normal_fan_out(k * k * out / groups)});
    x = nn_batch_norm(b, "bn", x, (BNOpts){.zero_weight = zero_bn});
    b_pop(b);
    return linear ? x : f_relu(b, x);
}

ValueId nn_layer_norm2d(Builder *b, const char *name, ValueId x, double eps)
{
    x = f_permute(b, x, 4, (int64_t[]){0, 2, 3, 1});
    x = nn_layer_norm(b, name, x, eps);
    return f_permute(b, x, 4, (int64_t[]){0, 3, 1, 2});
}

ValueId nn_group_norm(Builder *b, const char *name, ValueId x, GNOpts o)
{
    if (b->e.failed || x < 0)
        return -1;
    const CtShape *s = b_shape(b, x);
    if (s->ndim < 2)
        return b_fail(b, "group_norm '%s': input must be [N,C,...], got %d dims", name, s->ndim);
    CtShape c = {1, {s->d[1]}};
    int64_t g = o.groups;
    double eps = o.eps ? o.eps : 1e-5;
    b_push(b, "%s", name);
    ValueId in[3] = {x, b_param(b, "weight", c, o.zero_weight ? init_zeros() : init_ones()),
                     b_param(b, "bias", c, init_zeros())};
    ValueId y = b_node(b, CT_OP_group_norm, 3, in, &g, 1, &eps, 1, 0);
    b_pop(b);
    return y;
}

static ValueId unary(Builder *b, CtOp op, ValueId x) { return b_node(b, op, 1, &x, NULL, 0, NULL, 0, 0); }

ValueId f_relu(Builder *b, ValueId x) { return unary(b, CT_OP_relu, x); }
ValueId f_silu(Builder *b, ValueId x) { return unary(b, CT_OP_silu, x); }
ValueId f_sigmoid(Builder *b, ValueId x) { return unary(b, CT_OP_sigmoid, x); }
ValueId f_hard_swish(Builder *b, ValueId x) { return unary(b, CT_OP_hard_swish, x); }
ValueId f_hard_sigmoid(Builder *b, ValueId x) { return unary(b, CT_OP_hard_sigmoid, x); }
ValueId f_sqrt(Builder *b, ValueId x) { return unary(b, CT_OP_sqrt, x); }
ValueId f_rsqrt(Builder *b, ValueId x) { return unary(b, CT_OP_rsqrt, x); }
ValueId f_exp(Builder *b, ValueId x) { return unary(b, CT_OP_exp, x); }

ValueId f_clamp(Builder *b, ValueId x, double lo, double hi)
{
    return b_node(b, CT_OP_clamp, 1, &x, NULL, 0, (double[]){lo, hi}, 2, 0);
}

ValueId f_normalize(Builder *b, ValueId x, double eps)
{
    if (b->e.failed || x < 0)
        return -1;
    int nd = b_shape(b, x)->ndim;
    ValueId sq = f_reduce_sum(b, f_mul(b, x, x), (int64_t)1 << (nd - 1));
    return f_mul(b, x, f_rsqrt(b, f_clamp(b, sq, eps * eps, HUGE_VAL)));
}

ValueId f_gelu(Builder *b, ValueId x, int tanh_approx)
{
    int64_t a = tanh_approx;
    return b_node(b, CT_OP_gelu, 1, &x, &a, 1, NULL, 0, 0);
}

ValueId f_add(Builder *b, ValueId x, ValueId y) { return b_node(b, CT_OP_add, 2, (ValueId[]){x, y}, NULL, 0, NULL, 0, 0); }
ValueId f_mul(Builder *b, ValueId x, ValueId y) { return b_node(b, CT_OP_mul, 2, (ValueId[]){x, y}, NULL, 0, NULL, 0, 0); }
ValueId f_div(Builder *b, ValueId x, ValueId y) { return b_node(b, CT_OP_div, 2, (ValueId[]){x, y}, NULL, 0, NULL, 0, 0); }

ValueId f_reduce_sum(Builder *b, ValueId x, int64_t mask)
{
    return b_node(b, CT_OP_reduce_sum, 1, &x, (int64_t[]){mask, 1}, 2, NULL, 0, 0);
}

ValueId f_scale_shift(Builder *b, ValueId x, double a, double c)
{
    return b_node(b, CT_OP_scale_shift, 1, &x, NULL, 0, (double[]){a, c}, 2, 0);
}

ValueId f_avg_pool2d(Builder *b, ValueId x, int kernel, int stride, int padding, int ceil_mode, int count_include_pad)
{
    int64_t a[] = {kernel, kernel, stride, stride, padding, padding, ceil_mode, count_include_pad};
    return b_node(b, CT_OP_avg_pool2d, 1, &x, a, 8, NULL, 0, 0);
}

ValueId f_max_pool2d(Builder *b, ValueId x, int kernel, int stride, int padding)
{
    int64_t a[] = {kernel, kernel, stride, stride, padding, padding, 0};
    return b_node(b, CT_OP_max_pool2d, 1, &x, a, 7, NULL, 0, 0);
}

ValueId f_adaptive_avg_pool2d(Builder *b, ValueId x, int oh, int ow)
{
    int64_t a[] = {oh, ow};
    return b_node(b, CT_OP_adaptive_avg_pool2d, 1, &x, a, 2, NULL, 0, 0);
}

ValueId f_global_avg_pool(Builder *b, ValueId x)
{
    ValueId y = f_adaptive_avg_pool2d(b, x, 1, 1);
    if (y < 0)
        return -1;
    const CtShape *s = b_shape(b, y);
    return f_reshape(b, y, 2, (int64_t[]){s->d[0], s->d[1]});
}

static ValueId with_dims(Builder *b, CtOp op, ValueId x, int ndim, const int64_t *dims)
{
    int64_t a[1 + CT_MAX_DIMS] = {ndim};
    if (ndim < 0 || ndim > CT_MAX_DIMS)
        return b_fail(b, "%s: %d dims is out of range", op_def(op)->name, ndim);
    for (int i = 0; i < ndim; i++)
        a[1 + i] = dims[i];
    return b_node(b, op, 1, &x, a, 1 + ndim, NULL, 0, 0);
}

ValueId f_reshape(Builder *b, ValueId x, int ndim, const int64_t *dims) { return with_dims(b, CT_OP_reshape, x, ndim, dims); }
ValueId f_permute(Builder *b, ValueId x, int ndim, const int64_t *perm) { return with_dims(b, CT_OP_permute, x, ndim, perm); }
ValueId f_expand(Builder *b, ValueId x, int ndim, const int64_t *dims) { return with_dims(b, CT_OP_expand, x, ndim, dims); }

ValueId f_slice(Builder *b, ValueId x, int dim, int64_t start, int64_t end, int64_t step)
{
    int64_t a[] = {dim, start, end, step};
    return b_node(b, CT_OP_slice, 1, &x, a, 4, NULL, 0, 0);
}

ValueId f_pad(Builder *b, ValueId x, int64_t top, int64_t bottom, int64_t left, int64_t right, double value)
{
    int64_t a[] = {top, bottom, left, right};
    return b_node(b, CT_OP_pad, 1, &x, a, 4, &value, 1, 0);
}

ValueId f_gather(Builder *b, ValueId x, int dim, ValueId index)
{
    int64_t a = dim;
    return b_node(b, CT_OP_gather, 2, (ValueId[]){x, index}, &a, 1, NULL, 0, 0);
}

ValueId f_concat(Builder *b, int n, const ValueId *xs, int dim)
{
    int64_t a = dim;
    if (n < 2 || n > CT_MAX_IN)
        return b_fail(b, "concat of %d tensors (2..%d supported)", n, CT_MAX_IN);
    return b_node(b, CT_OP_concat, n, xs, &a, 1, NULL, 0, 0);
}

ValueId f_matmul(Builder *b, ValueId x, ValueId y) { return b_node(b, CT_OP_matmul, 2, (ValueId[]){x, y}, NULL, 0, NULL, 0, 0); }

ValueId f_softmax(Builder *b, ValueId x, int dim)
{
    int64_t a = dim;
    return b_node(b, CT_OP_softmax, 1, &x, &a, 1, NULL, 0, 0);
}

ValueId f_sdpa(Builder *b, ValueId q, ValueId k, ValueId v, double scale)
{
    return b_node(b, CT_OP_sdpa, 3, (ValueId[]){q, k, v}, (int64_t[]){0}, 1, &scale, 1, 0);
}

ValueId f_sdpa_bias(Builder *b, ValueId q, ValueId k, ValueId v, ValueId bias, double scale)
{
    return b_node(b, CT_OP_sdpa, 4, (ValueId[]){q, k, v, bias}, (int64_t[]){0}, 1, &scale, 1, 0);
}

void f_split_heads(Builder *b, ValueId t, int n, int64_t heads, ValueId *out)
{
    const CtShape *s = b_shape(b, t);
    int64_t B = s->d[0], N = s->d[1], hd = s->d[2] / n / heads;
    t = f_reshape(b, t, 5, (int64_t[]){B, N, n, heads, hd});
    t = f_permute(b, t, 5, (int64_t[]){2, 0, 3, 1, 4});
    for (int i = 0; i < n; i++)
        out[i] = f_reshape(b, f_slice(b, t, 0, i, i + 1, 1), 4, (int64_t[]){B, heads, N, hd});
}

ValueId f_merge_heads(Builder *b, ValueId x)
{
    const CtShape *s = b_shape(b, x);
    int64_t B = s->d[0], H = s->d[1], N = s->d[2], hd = s->d[3];
    return f_reshape(b, f_permute(b, x, 4, (int64_t[]){0, 2, 1, 3}), 3, (int64_t[]){B, N, H * hd});
}

ValueId f_attention_qkv(Builder *b, ValueId qkv, int64_t heads, ValueId bias, double scale)
{
    const CtShape *s = b_shape(b, qkv);
    if (s->ndim != 3 || heads < 1 || s->d[2] % (3 * heads))
        return b_fail(b, "attention: qkv must be [B, N, 3*heads*hd] for %lld heads", (long long)heads);
    int64_t B = s->d[0], N = s->d[1], hd = s->d[2] / 3 / heads;
    qkv = f_reshape(b, qkv, 5, (int64_t[]){B, N, 3, heads, hd});
    return f_reshape(b, f_sdpa_qkv(b, qkv, bias, scale), 3, (int64_t[]){B, N, heads * hd});
}

ValueId f_sdpa_qkv(Builder *b, ValueId qkv, ValueId bias, double scale)
{
    return b_node(b, CT_OP_sdpa, bias < 0 ? 1 : 2, (ValueId[]){qkv, bias}, (int64_t[]){1}, 1, &scale, 1, 0);
}

static ValueId stochastic(Builder *b, CtOp op, ValueId x, double p)
{
    if (p < 0 || p >= 1)
        return b_fail(b, "%s rate %g must be in [0, 1)", op_def(op)->name, p);
    if (!b->training || p == 0)
        return x;
    if (b->rng < 0) {
        b->rng = graph_add_value(b->g, (CtType){{0}, CT_I64}, CT_ROLE_STATE, "rng.counter");
        b->g->values[b->rng].init = init_zeros();
    }
    int64_t node = ++b->next_node_seed;
    return b_node(b, op, 2, (ValueId[]){x, b->rng}, &node, 1, &p, 1, 0);
}

ValueId f_dropout(Builder *b, ValueId x, double p) { return stochastic(b, CT_OP_dropout, x, p); }
ValueId f_drop_path(Builder *b, ValueId x, double p) { return stochastic(b, CT_OP_drop_path, x, p); }
