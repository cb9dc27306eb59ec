/* Contract: runtime/cpu/onednn.h. Built only with CTIMM_HAVE_DNNL. */
#include "runtime/cpu/onednn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu.h"
#include "runtime/cpu/onednn_lib.h"

enum { A_SRC, A_WEI, A_DST, NARGS }; /* forward x w y, grad_input dy w dx, grad_weight x dy dw */

typedef struct Operand {
    int id;                       /* DNNL_ARG_* */
    dnnl_memory_desc_t user, own; /* ctimm's NCHW / (g)OIHW buffer, and the layout the primitive runs in */
    dnnl_primitive_t reorder;     /* user -> own for inputs, own -> user for the output; NULL: the same layout */
    int slot;                     /* cpu_scratch slot of the copy in `own` */
} Operand;

struct OnednnConv {
    dnnl_primitive_t prim;
    dnnl_stream_t stream;
    Operand op[NARGS];
    int bias;
    int sum;                    /* a residual add as the sum post-op: the residual is put in the destination first */
    dnnl_primitive_t sum_in;    /* the residual's NCHW -> the destination's layout; NULL: the same layout */
    dnnl_memory_desc_t bias_md, pad_md; /* pad: the primitive's scratchpad (user-managed: a cpu_scratch slot) */
};

/* The weight [O, C/groups, KH, KW]; grouped, oneDNN's [groups, O/groups, ...] view of the same bytes. */
static dnnl_status_t md_weight(dnnl_memory_desc_t *md, const CtShape *w, int64_t groups, int any)
{
    if (groups == 1) {
        dnnl_dims_t d = {w->d[0], w->d[1], w->d[2], w->d[3]};
        return dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, any ? dnnl_format_tag_any : dnnl_oihw);
    }
    dnnl_dims_t d = {groups, w->d[0] / groups, w->d[1], w->d[2], w->d[3]};
    return dnnl_memory_desc_init_by_tag(md, 5, d, dnnl_f32, any ? dnnl_format_tag_any : dnnl_goihw);
}

static dnnl_query_t md_query(int arg)
{
    switch (arg) {
    case DNNL_ARG_SRC: return dnnl_query_src_md;
    case DNNL_ARG_WEIGHTS: return dnnl_query_weights_md;
    case DNNL_ARG_DST: return dnnl_query_dst_md;
    case DNNL_ARG_DIFF_DST: return dnnl_query_diff_dst_md;
    case DNNL_ARG_DIFF_SRC: return dnnl_query_diff_src_md;
    default: return dnnl_query_diff_weights_md;
    }
}

/* A reorder primitive from one layout of a tensor to another. */
static dnnl_status_t reorder_create(dnnl_engine_t engine, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                    dnnl_primitive_t *r)
{
    dnnl_primitive_desc_t rpd;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, NULL);
    if (st != dnnl_success)
        return st;
    st = dnnl_primitive_create(r, rpd);
    dnnl_primitive_desc_destroy(rpd);
    return st;
}

/* Appends activation node a as eltwise post-ops: 0, or -1 where oneDNN has none computing it. */
static int append_act(dnnl_post_ops_t po, const Node *a)
{
    switch (a->op) {
    case CT_OP_relu: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0.f, 0.f) ? -1 : 0;
    case CT_OP_sigmoid: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_logistic, 0.f, 0.f) ? -1 : 0;
    case CT_OP_silu: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_swish, 1.f, 0.f) ? -1 : 0;
    case CT_OP_hard_swish: return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_hardswish, 0.f, 0.f) ? -1 : 0;
    case CT_OP_hard_sigmoid: /* relu6(x + 3) / 6 = clip(x / 6 + 1/2, 0, 1) */
        return dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_linear, 1.f / 6, .5f) ||
                       dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_clip_v2, 0.f, 1.f)
                   ? -1
                   : 0;
    case CT_OP_gelu:
        return dnnl_post_ops_append_eltwise(po, 1.f, a->iattr[0] ? dnnl_eltwise_gelu_tanh : dnnl_eltwise_gelu_erf,
                                            0.f, 0.f)
                   ? -1
                   : 0;
    default: return -1;
    }
}

/* The epilogue nodes as post-ops on attr: 0, or -1 with err. A residual
 * is read in the destination's stored layout. */
static int set_post_ops(const Graph *g, dnnl_primitive_attr_t attr, const Node *epi, int nepi, int *sum, CtErr *err)
{
    dnnl_post_ops_t po;
    if (dnnl_post_ops_create(&po) != dnnl_success)
        return ct_fail(err, "oneDNN: no post-ops");
    int rc = 0;
    for (int k = 0; k < nepi && !rc; k++)
        if (epi[k].op == CT_OP_add && cpu_stored_nhwc(g, epi[k].in[0]) != cpu_stored_nhwc(g, epi[k].in[1])) {
            rc = ct_fail(err, "oneDNN: a residual in another layout than the convolution's output");
        } else if (epi[k].op == CT_OP_add) {
            *sum = 1;
            rc = dnnl_post_ops_append_sum(po, 1.f) ? ct_fail(err, "oneDNN: no sum post-op") : 0;
        } else if (append_act(po, &epi[k])) {
            rc = ct_fail(err, "oneDNN: no post-op for %s", op_def(epi[k].op)->name);
        }
    if (!rc && dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)
        rc = ct_fail(err, "oneDNN: post-ops not taken");
    dnnl_post_ops_destroy(po);
    return rc;
}

int onednn_conv_create(const Graph *g, const Node *n, const Node *epi, int nepi, OnednnConv **out, CtErr *err)
{
    dnnl_engine_t engine = onednn_engine(err);
    if (!engine)
        return -1;
    OnednnConv *c = calloc(1, sizeof *c);
    CT_ASSERT(c != NULL);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    int fwd = n->op == CT_OP_conv2d, data = n->op == CT_OP_conv2d_grad_input;
    ValueId xv = data ? n->out[0] : n->in[0], wv = n->op == CT_OP_conv2d_grad_weight ? n->out[0] : n->in[1];
    ValueId yv = fwd ? n->out[0] : data ? n->in[0] : n->in[1];
    const CtShape *x = &g->values[xv].type.shape, *w = &g->values[wv].type.shape, *y = &g->values[yv].type.shape;
    const int64_t *a = n->iattr; /* stride h w, pad h w, dilation h w, groups */
    dnnl_memory_desc_t xm, wm, ym;
    DN(onednn_md4(&xm, g, xv, 1));
    DN(md_weight(&wm, w, a[6], 1));
    DN(onednn_md4(&ym, g, yv, 1));
    c->bias = fwd && n->nin == 3;
    if (c->bias) {
        dnnl_dims_t bd = {w->d[0]};
        DN(dnnl_memory_desc_init_by_tag(&c->bias_md, 1, bd, dnnl_f32, dnnl_a));
    }
    /* oneDNN counts dilation from 0; the right/bottom padding is what the
     * output size implies (negative where stride leaves input rows unread) */
    dnnl_dims_t s = {a[0], a[1]}, pl = {a[2], a[3]}, dl = {a[4] - 1, a[5] - 1};
    dnnl_dims_t pr = {(y->d[2] - 1) * a[0] + (w->d[2] - 1) * a[4] + 1 - x->d[2] - a[2],
                      (y->d[3] - 1) * a[1] + (w->d[3] - 1) * a[5] + 1 - x->d[3] - a[3]};
    DN(dnnl_primitive_attr_create(&attr));
    DN(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (nepi && !fwd) {
        ct_fail(err, "oneDNN: post-ops on a convolution's gradient");
        goto fail;
    }
    if (nepi && set_post_ops(g, attr, epi, nepi, &c->sum, err))
        goto fail;
    dnnl_convolution_desc_t fd, bd;
    DN(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &xm, &wm,
                                                  c->bias ? &c->bias_md : NULL, &ym, s, dl, pl, pr));
    DN(dnnl_primitive_desc_create(&fwd_pd, &fd, attr, engine, NULL));
    if (fwd) {
        pd = fwd_pd;
        fwd_pd = NULL;
    } else {
        if (data)
            DN(dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &xm, &wm, &ym, s, dl, pl,
                                                                pr));
        else
            DN(dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &xm, &wm, NULL, &ym,
                                                                   s, dl, pl, pr));
        DN(dnnl_primitive_desc_create(&pd, &bd, attr, engine, fwd_pd));
    }
    DN(dnnl_primitive_create(&c->prim, pd));
    static const int ids[3][NARGS] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                                      {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                                      {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
    /* the blocked copies in the slots the own kernels' big buffers use */
    static const int slots[NARGS] = {CPU_SCRATCH_COLS, CPU_SCRATCH_WINO_U, CPU_SCRATCH_ROWS};
    int kind = fwd ? 0 : data ? 1 : 2;
    const ValueId user[3][NARGS] = {{xv, wv, yv}, {yv, wv, xv}, {xv, yv, wv}};
    for (int k = 0; k < NARGS; k++) {
        Operand *o = &c->op[k];
        o->id = ids[kind][k];
        o->slot = slots[k];
        o->own = *dnnl_primitive_desc_query_md(pd, md_query(o->id), 0);
        if (user[kind][k] == wv)
            DN(md_weight(&o->user, w, a[6], 0));
        else
            DN(onednn_md4(&o->user, g, user[kind][k], 0));
        if (dnnl_memory_desc_equal(&o->user, &o->own))
            continue;
        int in = k != A_DST;
        DN(reorder_create(engine, in ? &o->user : &o->own, in ? &o->own : &o->user, &o->reorder));
        if (k == A_DST && c->sum)
            DN(reorder_create(engine, &o->user, &o->own, &c->sum_in));
    }
    c->pad_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    DN(dnnl_stream_create(&c->stream, engine, dnnl_stream_default_flags));
    if (fwd_pd)
        dnnl_primitive_desc_destroy(fwd_pd);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    *out = c;
    return 0;
fail:
    if (fwd_pd)
        dnnl_primitive_desc_destroy(fwd_pd);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    onednn_conv_free(c);
    return -1;
}

int onednn_conv_dst_private(const OnednnConv *c) { return c->op[A_DST].reorder != NULL; }

int onednn_conv_blocked_match(const OnednnConv *from, const OnednnConv *to, size_t nbytes)
{
    const Operand *d = &from->op[A_DST], *s = &to->op[A_SRC];
    /* a sum reads its residual in NCHW into the private destination */
    return d->id == DNNL_ARG_DST && s->id == DNNL_ARG_SRC && !from->sum && d->reorder && s->reorder &&
           dnnl_memory_desc_equal(&d->own, &s->own) && dnnl_memory_desc_get_size(&d->own) == nbytes;
}

void onednn_conv_keep_blocked(OnednnConv *c, int dst)
{
    Operand *o = &c->op[dst ? A_DST : A_SRC];
    if (o->reorder)
        dnnl_primitive_destroy(o->reorder);
    o->reorder = NULL;
    o->user = o->own;
}

void onednn_conv_run(OnednnConv *c, float *const *in, const float *residual, float *const *out)
{
    dnnl_memory_t user[NARGS], own[NARGS] = {0}, bias = NULL, pad = NULL;
    dnnl_exec_arg_t args[NARGS + 2];
    int na = 0;
    for (int k = 0; k < NARGS; k++) {
        Operand *o = &c->op[k];
        user[k] = onednn_wrap(&o->user, k == A_DST ? out[0] : in[k]);
        if (o->reorder) {
            own[k] = onednn_wrap(&o->own, onednn_scratch(&o->own, o->slot));
            if (k != A_DST)
                onednn_exec(o->reorder, c->stream, 2,
                     (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, user[k]}, {DNNL_ARG_TO, own[k]}});
        }
        args[na++] = (dnnl_exec_arg_t){o->id, o->reorder ? own[k] : user[k]};
    }
    if (c->sum && c->sum_in) {
        dnnl_memory_t r = onednn_wrap(&c->op[A_DST].user, (void *)residual);
        onednn_exec(c->sum_in, c->stream, 2, (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, r}, {DNNL_ARG_TO, own[A_DST]}});
        dnnl_memory_destroy(r);
    } else if (c->sum && residual != out[0]) {
        memcpy(out[0], residual, dnnl_memory_desc_get_size(&c->op[A_DST].user));
    }
    if (c->bias)
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bias = onednn_wrap(&c->bias_md, in[2])};
    if (dnnl_memory_desc_get_size(&c->pad_md))
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pad = onednn_wrap(&c->pad_md, onednn_scratch(&c->pad_md, CPU_SCRATCH_WINO_IN))};
    onednn_exec(c->prim, c->stream, na, args);
    if (c->op[A_DST].reorder)
        onednn_exec(c->op[A_DST].reorder, c->stream, 2,
             (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, own[A_DST]}, {DNNL_ARG_TO, user[A_DST]}});
    CT_ASSERT(dnnl_stream_wait(c->stream) == dnnl_success);
    for (int k = 0; k < NARGS; k++) {
        dnnl_memory_destroy(user[k]);
        if (own[k])
            dnnl_memory_destroy(own[k]);
    }
    if (bias)
        dnnl_memory_destroy(bias);
    if (pad)
        dnnl_memory_destroy(pad);
}

void onednn_conv_free(OnednnConv *c)
{
    if (!c)
        return;
    for (int k = 0; k < NARGS; k++)
        if (c->op[k].reorder)
            dnnl_primitive_destroy(c->op[k].reorder);
    if (c->sum_in)
        dnnl_primitive_destroy(c->sum_in);
    if (c->prim)
        dnnl_primitive_destroy(c->prim);
    if (c->stream)
        dnnl_stream_destroy(c->stream);
    free(c);
}
