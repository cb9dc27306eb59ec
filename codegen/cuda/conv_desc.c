/* Contract: conv_desc(step) gives the step's convolution in cuDNN's terms
 * and, forward, the prefix of its epilogue cuDNN's fused call computes. */
#include "codegen/cuda/conv_desc.h"

#include <stdio.h>
#include <string.h>

#include "ir/ops.h"

enum { STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, GROUPS };

/* NHWC for a channels_last value; a value stored the same in both layouts
 * follows `act` (the step's activation format). */
static int is_nhwc(const Value *v, int act)
{
    const CtShape *s = &v->type.shape;
    if (s->d[1] == 1 || s->d[2] * s->d[3] == 1)
        return act;
    return v->layout == CT_LAYOUT_CHANNELS_LAST;
}

int conv_desc(const Graph *g, const FusePlan *p, const FuseStep *st, ConvDesc *d, CtErr *err)
{
    memset(d, 0, sizeof *d);
    d->stats = -1;
    const Node *n = &g->nodes[p->nodes[st->first]];
    switch (n->op) {
    case CT_OP_conv2d: d->dir = CONV_FWD; d->x = n->in[0]; d->wt = n->in[1]; d->y = n->out[0]; break;
    case CT_OP_conv2d_grad_input: d->dir = CONV_BWD_DATA; d->y = n->in[0]; d->wt = n->in[1]; d->x = n->out[0]; break;
    case CT_OP_conv2d_grad_weight: d->dir = CONV_BWD_FILTER; d->x = n->in[0]; d->y = n->in[1]; d->wt = n->out[0]; break;
    default:
        return ct_fail(err, "step of %s is not a convolution", op_def(n->op)->name);
    }
    if (st->kind != FUSE_LIBRARY)
        return ct_fail(err, "a %s step that is not a library call", op_def(n->op)->name);
    const Value *x = &g->values[d->x], *w = &g->values[d->wt], *y = &g->values[d->y];
    const int64_t *a = n->iattr;
    d->n = x->type.shape.d[0], d->c = x->type.shape.d[1], d->h = x->type.shape.d[2], d->w = x->type.shape.d[3];
    d->k = w->type.shape.d[0], d->r = w->type.shape.d[2], d->s = w->type.shape.d[3];
    d->p = y->type.shape.d[2], d->q = y->type.shape.d[3];
    d->stride_h = a[STRIDE_H], d->stride_w = a[STRIDE_W], d->pad_h = a[PAD_H], d->pad_w = a[PAD_W];
    d->dil_h = a[DIL_H], d->dil_w = a[DIL_W], d->groups = a[GROUPS];
    /* the activation format: the step's larger activation decides */
    int act = shape_numel(&x->type.shape) >= shape_numel(&y->type.shape) ? x->layout == CT_LAYOUT_CHANNELS_LAST
                                                                          : y->layout == CT_LAYOUT_CHANNELS_LAST;
    d->x_nhwc = is_nhwc(x, act), d->y_nhwc = is_nhwc(y, act), d->w_nhwc = is_nhwc(w, act);
    d->x_type = x->type.dtype, d->w_type = w->type.dtype, d->y_type = y->type.dtype;
    if (d->dir == CONV_FWD) {
        d->epi.bias = n->nin == 3 ? n->in[2] : -1;
        epi_desc(g, p, st, d->k, 0, &d->epi);
        d->bias_type = d->epi.bias >= 0 ? g->values[d->epi.bias].type.dtype : d->y_type;
    } else {
        d->epi = (EpiDesc){.bias = -1, .residual = -1, .aux = -1, .bgrad = -1, .d = n->out[0], .tail = 1};
        d->bias_type = d->y_type;
    }
    return 0;
}

void conv_desc_key(const ConvDesc *d, char *buf, size_t n)
{
    static const char *const dir[] = {"fwd", "bwd_data", "bwd_filter"};
    snprintf(buf, n,
             "conv %s x %lldx%lldx%lldx%lld %s %s w %lldx%lldx%lldx%lld %s %s y %lldx%lld %s %s pad %lld,%lld "
             "stride %lld,%lld dil %lld,%lld groups %lld epi %d%d%d%s",
             dir[d->dir], (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w,
             d->x_nhwc ? "nhwc" : "nchw", ct_dtype_name(d->x_type), (long long)d->k, (long long)(d->c / d->groups),
             (long long)d->r, (long long)d->s, d->w_nhwc ? "nhwc" : "nchw", ct_dtype_name(d->w_type), (long long)d->p,
             (long long)d->q, d->y_nhwc ? "nhwc" : "nchw", ct_dtype_name(d->y_type), (long long)d->pad_h,
             (long long)d->pad_w, (long long)d->stride_h, (long long)d->stride_w, (long long)d->dil_h,
             (long long)d->dil_w, (long long)d->groups, d->epi.bias >= 0, d->epi.residual >= 0, (int)d->epi.act,
             d->stats >= 0 ? " stats" : "");
}
