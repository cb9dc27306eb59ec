/* Contract: runtime/cpu/onednn.h (its pooling). Built only with CTIMM_HAVE_DNNL. */
#include <stdlib.h>

#include "ir/ops/pool_window.h"
#include "runtime/cpu/cpu.h"
#include "runtime/cpu/onednn.h"
#include "runtime/cpu/onednn_lib.h"

struct OnednnPool {
    dnnl_primitive_t fwd, bwd; /* fwd NULL: avg_pool2d_grad; bwd NULL: a forward */
    dnnl_stream_t stream;
    dnnl_memory_desc_t x, y, ws, fwd_pad, bwd_pad;
    int max_grad; /* the forward recomputes y and the argmax workspace the backward reads */
};

int onednn_pool_create(const Graph *g, const Node *n, OnednnPool **out, CtErr *err)
{
    dnnl_engine_t engine = onednn_engine(err);
    if (!engine)
        return -1;
    int max = n->op == CT_OP_max_pool2d || n->op == CT_OP_max_pool2d_grad;
    int grad = n->op == CT_OP_max_pool2d_grad || n->op == CT_OP_avg_pool2d_grad;
    ValueId xv = grad ? n->out[0] : n->in[0], yv = grad ? n->in[n->nin - 1] : n->out[0];
    const CtShape *x = &g->values[xv].type.shape, *y = &g->values[yv].type.shape;
    const int64_t *a = n->iattr;
    /* the right padding the output size implies (ceil_mode's overhang
     * included; negative where the stride leaves rows unread) */
    dnnl_dims_t k = {a[POOL_KH], a[POOL_KW]}, s = {a[POOL_SH], a[POOL_SW]}, pl = {a[POOL_PH], a[POOL_PW]};
    dnnl_dims_t pr = {(y->d[2] - 1) * a[POOL_SH] + a[POOL_KH] - x->d[2] - a[POOL_PH],
                      (y->d[3] - 1) * a[POOL_SW] + a[POOL_KW] - x->d[3] - a[POOL_PW]};
    /* oneDNN's avg_include_padding divides by the whole window, PyTorch's
     * count_include_pad by the part up to the padded edge: they differ on a
     * ceil_mode overhang past the padding */
    if (!max && a[POOL_COUNT_PAD] && (pr[0] > pl[0] || pr[1] > pl[1]))
        return ct_fail(err, "oneDNN: no average pooling counting padding with a window past it");
    /* x and dx, y and dy share a memory description */
    if (max && grad && cpu_stored_nhwc(g, n->in[0]) != cpu_stored_nhwc(g, xv))
        return ct_fail(err, "oneDNN: max pooling's gradient with x and dx in two layouts");
    OnednnPool *p = calloc(1, sizeof *p);
    CT_ASSERT(p != NULL);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL;
    dnnl_alg_kind_t alg = max ? dnnl_pooling_max
                              : a[POOL_COUNT_PAD] ? dnnl_pooling_avg_include_padding : dnnl_pooling_avg_exclude_padding;
    p->max_grad = max && grad;
    DN(onednn_md4(&p->x, g, xv, 0));
    DN(onednn_md4(&p->y, g, yv, 0));
    DN(dnnl_primitive_attr_create(&attr));
    DN(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_pooling_desc_t fd, bd;
    DN(dnnl_pooling_forward_desc_init(&fd, grad ? dnnl_forward_training : dnnl_forward_inference, alg, &p->x, &p->y, s,
                                      k, pl, pr));
    DN(dnnl_primitive_desc_create(&fpd, &fd, attr, engine, NULL));
    if (!grad || p->max_grad) {
        DN(dnnl_primitive_create(&p->fwd, fpd));
        p->fwd_pad = *dnnl_primitive_desc_query_md(fpd, dnnl_query_scratchpad_md, 0);
        if (p->max_grad)
            p->ws = *dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0);
    }
    if (grad) {
        DN(dnnl_pooling_backward_desc_init(&bd, alg, &p->x, &p->y, s, k, pl, pr));
        DN(dnnl_primitive_desc_create(&bpd, &bd, attr, engine, fpd));
        DN(dnnl_primitive_create(&p->bwd, bpd));
        p->bwd_pad = *dnnl_primitive_desc_query_md(bpd, dnnl_query_scratchpad_md, 0);
    }
    DN(dnnl_stream_create(&p->stream, engine, dnnl_stream_default_flags));
    dnnl_primitive_desc_destroy(fpd);
    if (bpd)
        dnnl_primitive_desc_destroy(bpd);
    dnnl_primitive_attr_destroy(attr);
    *out = p;
    return 0;
fail:
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    if (bpd)
        dnnl_primitive_desc_destroy(bpd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    onednn_pool_free(p);
    return -1;
}

/* Runs primitive prim with args and its scratchpad (pad, in a scratch slot
 * apart from every operand's). */
static void run_with_pad(const OnednnPool *p, dnnl_primitive_t prim, const dnnl_memory_desc_t *pad, int na,
                         dnnl_exec_arg_t *args)
{
    dnnl_memory_t m = NULL;
    if (dnnl_memory_desc_get_size(pad))
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m = onednn_wrap(pad, onednn_scratch(pad, CPU_SCRATCH_WINO_IN))};
    onednn_exec(prim, p->stream, na, args);
    if (m)
        dnnl_memory_destroy(m);
}

void onednn_pool_run(OnednnPool *p, float *const *in, float *const *out)
{
    dnnl_memory_t x = NULL, y = NULL, ws = NULL, dy = NULL, dx = NULL;
    if (p->fwd) { /* a forward, or max_pool2d_grad's: y, the workspace in scratch slots */
        x = onednn_wrap(&p->x, in[0]);
        y = onednn_wrap(&p->y, p->max_grad ? onednn_scratch(&p->y, CPU_SCRATCH_ROWS) : out[0]);
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, y}};
        int na = 2;
        if (p->max_grad)
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, ws = onednn_wrap(&p->ws, onednn_scratch(&p->ws, CPU_SCRATCH_COLS))};
        run_with_pad(p, p->fwd, &p->fwd_pad, na, args);
    }
    if (p->bwd) {
        dy = onednn_wrap(&p->y, in[p->max_grad ? 1 : 0]);
        dx = onednn_wrap(&p->x, out[0]);
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_SRC, dx}};
        int na = 2;
        if (ws)
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, ws};
        run_with_pad(p, p->bwd, &p->bwd_pad, na, args);
    }
    CT_ASSERT(dnnl_stream_wait(p->stream) == dnnl_success);
    dnnl_memory_t m[5] = {x, y, ws, dy, dx};
    for (int k = 0; k < 5; k++)
        if (m[k])
            dnnl_memory_destroy(m[k]);
}

void onednn_pool_free(OnednnPool *p)
{
    if (!p)
        return;
    if (p->fwd)
        dnnl_primitive_destroy(p->fwd);
    if (p->bwd)
        dnnl_primitive_destroy(p->bwd);
    if (p->stream)
        dnnl_stream_destroy(p->stream);
    free(p);
}
