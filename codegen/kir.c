/* Contract: kir_lower(g, plan, launch) builds the kernel IR of one fused
 * launch: for each of its steps a loop over the step's elements computing
 * its nodes by the ref kernels' formulas (ir/ops/elementwise.c, clip.c,
 * shape.c, optim.c), storing what the plan materialises and what its
 * assigns take. */
#include "codegen/kir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KIR_PI 3.14159265358979323846

static int emit_ins(KirLoop *l, KirInstr in)
{
    l->ins = ct_grow(l->ins, &l->cap_ins, l->nins + 1, sizeof *l->ins);
    l->ins[l->nins] = in;
    return l->nins++;
}

static int k_const(KirLoop *l, double v)
{
    for (int j = 0; j < l->nins; j++) /* constants are shared */
        if (l->ins[j].op == KIR_CONST && l->ins[j].imm == v && signbit(l->ins[j].imm) == signbit(v))
            return j;
    return emit_ins(l, (KirInstr){.op = KIR_CONST, .imm = v});
}
static int k1(KirLoop *l, KirOp op, int a) { return emit_ins(l, (KirInstr){.op = op, .a = a}); }
static int k2(KirLoop *l, KirOp op, int a, int b) { return emit_ins(l, (KirInstr){.op = op, .a = a, .b = b}); }
static int ksel(KirLoop *l, int c, int a, int b) { return emit_ins(l, (KirInstr){.op = KIR_SELECT, .a = c, .b = a, .c = b}); }
static int kmulc(KirLoop *l, double c, int a) { return k2(l, KIR_MUL, k_const(l, c), a); }
static int kaddc(KirLoop *l, int a, double c) { return k2(l, KIR_ADD, a, k_const(l, c)); }

static int buf_of(KirKernel *k, const Graph *g, ValueId v)
{
    for (int b = 0; b < k->nbufs; b++)
        if (k->bufs[b].value == v)
            return b;
    k->bufs = ct_grow(k->bufs, &k->cap_bufs, k->nbufs + 1, sizeof *k->bufs);
    k->bufs[k->nbufs] = (KirBuf){.value = v, .dtype = g->values[v].type.dtype};
    return k->nbufs++;
}

/* Whether v is stored N, H, W, C. */
static int stored_nhwc(const Graph *g, ValueId v, int layouts)
{
    return layouts && g->values[v].type.shape.ndim == 4 && g->values[v].layout == CT_LAYOUT_CHANNELS_LAST;
}

/* The memory strides of v's logical dims. */
static void memory_strides(const Graph *g, ValueId v, int layouts, int64_t *st)
{
    const Value *val = &g->values[v];
    const int64_t *d = val->type.shape.d;
    if (stored_nhwc(g, v, layouts)) {
        st[1] = 1, st[3] = d[1], st[2] = d[3] * d[1], st[0] = d[2] * d[3] * d[1];
        return;
    }
    int64_t s = 1;
    for (int i = val->type.shape.ndim - 1; i >= 0; i--) {
        st[i] = s;
        s *= d[i];
    }
}

/* The view reading value `in` broadcast to `out`'s shape, in out's memory
 * order, with dims of size 1 dropped and contiguous runs merged. */
static KirView broadcast_view(const Graph *g, ValueId in, ValueId out, int layouts)
{
    const CtShape *is = &g->values[in].type.shape, *os = &g->values[out].type.shape;
    int64_t mst[CT_MAX_DIMS], st[CT_MAX_DIMS];
    memory_strides(g, in, layouts, mst);
    for (int i = 0; i < os->ndim; i++) {
        int j = i - (os->ndim - is->ndim);
        st[i] = j >= 0 && is->d[j] != 1 ? mst[j] : 0;
    }
    int order[CT_MAX_DIMS] = {0, 1, 2, 3, 4, 5};
    if (stored_nhwc(g, out, layouts))
        order[1] = 2, order[2] = 3, order[3] = 1;
    KirView v = {0};
    for (int k = 0; k < os->ndim; k++) {
        int64_t size = os->d[order[k]], stride = st[order[k]];
        if (size == 1)
            continue;
        if (v.ndim && v.stride[v.ndim - 1] == stride * size) {
            v.size[v.ndim - 1] *= size;
            v.stride[v.ndim - 1] = stride;
            continue;
        }
        v.size[v.ndim] = size;
        v.stride[v.ndim++] = stride;
    }
    if (v.ndim == 1 && v.stride[0] == 1)
        v.ndim = 0; /* element i itself */
    else if (v.ndim == 0)
        v = (KirView){.ndim = 1, .size = {1}, .stride = {0}}; /* a scalar */
    return v;
}

static int same_view(const KirView *a, const KirView *b)
{
    return a->ndim == b->ndim && !memcmp(a->size, b->size, sizeof *a->size * (size_t)a->ndim) &&
           !memcmp(a->stride, b->stride, sizeof *a->stride * (size_t)a->ndim);
}

static int view_of(KirLoop *l, KirView v)
{
    for (int j = 0; j < l->nviews; j++)
        if (same_view(&l->views[j], &v))
            return j;
    l->views = ct_grow(l->views, &l->cap_views, l->nviews + 1, sizeof *l->views);
    l->views[l->nviews] = v;
    return l->nviews++;
}

/* Lowering state of one loop: the SSA id of every value computed so far. */
typedef struct Lower {
    const Graph *g;
    KirKernel *k;
    KirLoop *l;
    int *ssa; /* per value: its instruction, -1 */
    int layouts;
} Lower;

/* Input k of node n: its SSA value when computed here, else a load through
 * the view of a broadcast to n's output (a reshape reads element i). */
static int operand(Lower *w, const Node *n, int k)
{
    ValueId v = n->in[k];
    if (w->ssa[v] >= 0)
        return w->ssa[v];
    KirView view = n->op == CT_OP_reshape ? (KirView){0} : broadcast_view(w->g, v, n->out[0], w->layouts);
    KirInstr in = {.op = KIR_LOAD, .buf = buf_of(w->k, w->g, v), .view = view_of(w->l, view)};
    for (int j = 0; j < w->l->nins; j++)
        if (w->l->ins[j].op == KIR_LOAD && w->l->ins[j].buf == in.buf && w->l->ins[j].view == in.view)
            return j;
    return emit_ins(w->l, in);
}

static int sigmoid(KirLoop *l, int x)
{
    return k2(l, KIR_DIV, k_const(l, 1), kaddc(l, k1(l, KIR_EXP, k1(l, KIR_NEG, x)), 1));
}

static int hard_sigmoid(KirLoop *l, int x)
{
    int mid = kaddc(l, k2(l, KIR_DIV, x, k_const(l, 6)), 0.5);
    return ksel(l, k2(l, KIR_LE, x, k_const(l, -3)), k_const(l, 0),
                ksel(l, k2(l, KIR_LE, k_const(l, 3), x), k_const(l, 1), mid));
}

/* 0.5 x (1 + erf(x / sqrt 2)), or the tanh form. */
static int gelu(KirLoop *l, int x, int approx)
{
    int inner;
    if (approx) {
        int x3 = k2(l, KIR_MUL, k2(l, KIR_MUL, x, x), x);
        int t = kmulc(l, sqrt(2 / KIR_PI), k2(l, KIR_ADD, x, kmulc(l, 0.044715, x3)));
        inner = k1(l, KIR_TANH, t);
    } else {
        inner = k1(l, KIR_ERF, k2(l, KIR_DIV, x, k_const(l, sqrt(2))));
    }
    return k2(l, KIR_MUL, kmulc(l, 0.5, x), kaddc(l, inner, 1));
}

/* The activation at x; relu selects on x <= 0 so that NaN passes, as torch's. */
static int act(KirLoop *l, CtOp op, int approx, int x)
{
    switch (op) {
    case CT_OP_relu: return ksel(l, k2(l, KIR_LE, x, k_const(l, 0)), k_const(l, 0), x);
    case CT_OP_sigmoid: return sigmoid(l, x);
    case CT_OP_silu: return k2(l, KIR_MUL, x, sigmoid(l, x));
    case CT_OP_hard_sigmoid: return hard_sigmoid(l, x);
    case CT_OP_hard_swish: return k2(l, KIR_MUL, x, hard_sigmoid(l, x));
    case CT_OP_rsqrt: return k2(l, KIR_DIV, k_const(l, 1), k1(l, KIR_SQRT, x));
    case CT_OP_gelu: return gelu(l, x, approx);
    default: CT_ASSERT(!"not an activation"); return -1;
    }
}

/* The activation's gradient dy * f'(x) (ir/ops/elementwise.c's *_grad):
 * 0 where it is flat, selected rather than multiplied, as torch's. */
static int act_grad(KirLoop *l, CtOp op, int approx, int x, int dy)
{
    int zero = k_const(l, 0), one = k_const(l, 1);
    switch (op) {
    case CT_OP_relu: return ksel(l, k2(l, KIR_LE, x, zero), zero, dy);
    case CT_OP_sigmoid: {
        int s = sigmoid(l, x);
        return k2(l, KIR_MUL, dy, k2(l, KIR_MUL, s, k2(l, KIR_SUB, one, s)));
    }
    case CT_OP_silu: {
        int s = sigmoid(l, x);
        return k2(l, KIR_MUL, dy, k2(l, KIR_MUL, s, k2(l, KIR_ADD, one, k2(l, KIR_MUL, x, k2(l, KIR_SUB, one, s)))));
    }
    case CT_OP_hard_sigmoid:
        return ksel(l, k2(l, KIR_LT, k_const(l, -3), x),
                    ksel(l, k2(l, KIR_LT, x, k_const(l, 3)), kmulc(l, 1.0 / 6, dy), zero), zero);
    case CT_OP_hard_swish: {
        int mid = k2(l, KIR_MUL, dy, kaddc(l, k2(l, KIR_DIV, x, k_const(l, 3)), 0.5));
        return ksel(l, k2(l, KIR_LT, x, k_const(l, -3)), zero, ksel(l, k2(l, KIR_LE, x, k_const(l, 3)), mid, dy));
    }
    case CT_OP_rsqrt:
        return k2(l, KIR_MUL, dy, k2(l, KIR_DIV, k_const(l, -0.5), k2(l, KIR_MUL, x, k1(l, KIR_SQRT, x))));
    case CT_OP_gelu: {
        int d;
        if (approx) {
            double kk = sqrt(2 / KIR_PI);
            int x2 = k2(l, KIR_MUL, x, x);
            int t = k1(l, KIR_TANH, kmulc(l, kk, k2(l, KIR_ADD, x, kmulc(l, 0.044715, k2(l, KIR_MUL, x2, x)))));
            int left = kmulc(l, 0.5, k2(l, KIR_ADD, one, t));
            int sech2 = k2(l, KIR_SUB, one, k2(l, KIR_MUL, t, t));
            int right = k2(l, KIR_MUL, k2(l, KIR_MUL, kmulc(l, 0.5, x), sech2),
                           kmulc(l, kk, kaddc(l, kmulc(l, 3 * 0.044715, x2), 1)));
            d = k2(l, KIR_ADD, left, right);
        } else {
            int cdf = kmulc(l, 0.5, kaddc(l, k1(l, KIR_ERF, k2(l, KIR_DIV, x, k_const(l, sqrt(2)))), 1));
            int pdf = k2(l, KIR_DIV, k1(l, KIR_EXP, kmulc(l, -0.5, k2(l, KIR_MUL, x, x))), k_const(l, sqrt(2 * KIR_PI)));
            d = k2(l, KIR_ADD, cdf, k2(l, KIR_MUL, x, pdf));
        }
        return k2(l, KIR_MUL, dy, d);
    }
    default: CT_ASSERT(!"not an activation"); return -1;
    }
}

/* min(num / max(sqrt(sq) + shift, floor), 1), num = c or c * max(sqrt(ref), ref_eps). */
static int clip_coef(Lower *w, const Node *n)
{
    KirLoop *l = w->l;
    int num = k_const(l, n->fattr[0]);
    if (n->nin == 2) {
        int r = k1(l, KIR_SQRT, operand(w, n, 1)), eps = k_const(l, n->fattr[1]);
        num = kmulc(l, n->fattr[0], ksel(l, k2(l, KIR_LT, r, eps), eps, r));
    }
    int den = kaddc(l, k1(l, KIR_SQRT, operand(w, n, 0)), n->fattr[2]), fl = k_const(l, n->fattr[3]);
    int q = k2(l, KIR_DIV, num, ksel(l, k2(l, KIR_LT, den, fl), fl, den));
    return ksel(l, k2(l, KIR_LT, k_const(l, 1), q), k_const(l, 1), q);
}

/* With an `apply` input (the last): new where apply != 0, else old. */
static int applied(Lower *w, const Node *n, int has_apply, int fresh, int old)
{
    return has_apply ? ksel(w->l, operand(w, n, n->nin - 1), fresh, old) : fresh;
}

/* torch SGD, dampening 0 (optim.c's sgd_update_ref): outputs p', buf'. */
static void sgd_update(Lower *w, const Node *n, int *out)
{
    KirLoop *l = w->l;
    double m = n->fattr[0], wd = n->fattr[1];
    int p = operand(w, n, 0), gr = operand(w, n, 1), buf = operand(w, n, 2), lr = operand(w, n, 3);
    int d = k2(l, KIR_ADD, gr, kmulc(l, wd, p));
    int nbuf = k2(l, KIR_ADD, kmulc(l, m, buf), d);
    if (m != 0)
        d = n->iattr[0] ? k2(l, KIR_ADD, d, kmulc(l, m, nbuf)) : nbuf;
    int np = k2(l, KIR_SUB, p, k2(l, KIR_MUL, lr, d));
    out[0] = applied(w, n, n->nin == 5, np, p);
    out[1] = applied(w, n, n->nin == 5, nbuf, buf);
}

/* torch AdamW (rule 0), Adam (1), timm AdaBelief (3): outputs p', m', v'. */
static void adamw_update(Lower *w, const Node *n, int *out)
{
    KirLoop *l = w->l;
    double b1 = n->fattr[0], b2 = n->fattr[1], eps = n->fattr[2], wd = n->fattr[3];
    int rule = (int)n->iattr[0];
    int p = operand(w, n, 0), gr = operand(w, n, 1), m = operand(w, n, 2), v = operand(w, n, 3);
    int lr = operand(w, n, 4), t = kaddc(l, operand(w, n, 5), 1);
    int bc1 = k2(l, KIR_SUB, k_const(l, 1), k2(l, KIR_POW, k_const(l, b1), t));
    int bc2 = k2(l, KIR_SUB, k_const(l, 1), k2(l, KIR_POW, k_const(l, b2), t));
    int pp = p, g1 = gr;
    if (rule == 0 || rule == 3)
        pp = k2(l, KIR_MUL, p, k2(l, KIR_SUB, k_const(l, 1), kmulc(l, wd, lr)));
    else
        g1 = k2(l, KIR_ADD, gr, kmulc(l, wd, p));
    int nm = k2(l, KIR_ADD, kmulc(l, b1, m), kmulc(l, 1 - b1, g1)), nv;
    if (rule == 3) {
        int r = k2(l, KIR_SUB, g1, nm);
        nv = kaddc(l, k2(l, KIR_ADD, kmulc(l, b2, v), kmulc(l, 1 - b2, k2(l, KIR_MUL, r, r))), eps);
    } else {
        nv = k2(l, KIR_ADD, kmulc(l, b2, v), kmulc(l, 1 - b2, k2(l, KIR_MUL, g1, g1)));
    }
    int den = kaddc(l, k2(l, KIR_DIV, k1(l, KIR_SQRT, nv), k1(l, KIR_SQRT, bc2)), eps);
    int step = k2(l, KIR_DIV, k2(l, KIR_MUL, k2(l, KIR_DIV, lr, bc1), nm), den);
    int has_apply = n->nin == 7;
    out[0] = applied(w, n, has_apply, k2(l, KIR_SUB, pp, step), p);
    out[1] = applied(w, n, has_apply, nm, m);
    out[2] = applied(w, n, has_apply, nv, v);
}

/* The node's outputs into out[]. */
static void lower_node(Lower *w, const Node *n, int *out)
{
    KirLoop *l = w->l;
    switch (n->op) {
    case CT_OP_relu: case CT_OP_gelu: case CT_OP_silu: case CT_OP_sigmoid: case CT_OP_hard_swish:
    case CT_OP_hard_sigmoid: case CT_OP_rsqrt:
        out[0] = act(l, n->op, n->op == CT_OP_gelu && n->iattr[0], operand(w, n, 0));
        break;
    case CT_OP_act_grad:
        out[0] = act_grad(l, (CtOp)n->iattr[0], (int)n->iattr[1], operand(w, n, 0), operand(w, n, 1));
        break;
    case CT_OP_add: out[0] = k2(l, KIR_ADD, operand(w, n, 0), operand(w, n, 1)); break;
    case CT_OP_mul: out[0] = k2(l, KIR_MUL, operand(w, n, 0), operand(w, n, 1)); break;
    case CT_OP_div: out[0] = k2(l, KIR_DIV, operand(w, n, 0), operand(w, n, 1)); break;
    case CT_OP_scale_shift: out[0] = kaddc(l, kmulc(l, n->fattr[0], operand(w, n, 0)), n->fattr[1]); break;
    case CT_OP_clamp: {
        int x = operand(w, n, 0), lo = k_const(l, n->fattr[0]), hi = k_const(l, n->fattr[1]);
        out[0] = ksel(l, k2(l, KIR_LT, x, lo), lo, ksel(l, k2(l, KIR_LT, hi, x), hi, x));
        break;
    }
    case CT_OP_clip_coef: out[0] = clip_coef(w, n); break;
    case CT_OP_cast: case CT_OP_expand: case CT_OP_reshape: out[0] = operand(w, n, 0); break;
    case CT_OP_sgd_update: sgd_update(w, n, out); break;
    case CT_OP_adamw_update: adamw_update(w, n, out); break;
    default: CT_ASSERT(!"not an elementwise op"); break;
    }
}

static void lower_step(const Graph *g, const FusePlan *p, const FuseStep *st, KirOptions opt, KirKernel *k,
                       KirLoop *l, int *ssa)
{
    Lower w = {g, k, l, ssa, opt.layouts};
    l->numel = st->numel;
    l->compute = opt.precision == KIR_EXACT ? CT_F64 : CT_F32;
    for (int j = 0; j < st->n; j++) {
        const Node *n = &g->nodes[p->nodes[st->first + j]];
        if (n->op == CT_OP_adamw_update) /* bias corrections lose digits in f32 (torch takes them in double) */
            l->compute = CT_F64;
        for (int o = 0; o < n->nout; o++) {
            CtDType t = g->values[n->out[o]].type.dtype;
            if (t == CT_F64 || t == CT_I64 || t == CT_I32)
                l->compute = CT_F64;
        }
    }
    for (int j = 0; j < st->n; j++) {
        const Node *n = &g->nodes[p->nodes[st->first + j]];
        if (n->op == CT_OP_assign)
            continue;
        int out[CT_MAX_OUT];
        lower_node(&w, n, out);
        for (int o = 0; o < n->nout; o++) {
            CtDType t = g->values[n->out[o]].type.dtype;
            ssa[n->out[o]] = t == l->compute ? out[o] : emit_ins(l, (KirInstr){.op = KIR_ROUND, .a = out[o], .dtype = t});
        }
    }
    for (int j = 0; j < st->n; j++) {
        const Node *n = &g->nodes[p->nodes[st->first + j]];
        for (int o = 0; o < n->nout; o++)
            if (p->materialised[n->out[o]]) {
                int b = buf_of(k, g, n->out[o]);
                k->bufs[b].written = 1;
                emit_ins(l, (KirInstr){.op = KIR_STORE, .a = ssa[n->out[o]], .buf = b});
            }
        if (n->op == CT_OP_assign) {
            CT_ASSERT(ssa[n->in[1]] >= 0); /* fuse puts an assign in the step computing its source */
            int b = buf_of(k, g, n->in[0]);
            k->bufs[b].written = 1;
            emit_ins(l, (KirInstr){.op = KIR_STORE, .a = ssa[n->in[1]], .buf = b});
        }
    }
}

int kir_lowerable(const FusePlan *p, int launch)
{
    int any = 0;
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps[s].launch == launch) {
            if (p->steps[s].kind != FUSE_ELEMENTWISE)
                return 0;
            any = 1;
        }
    return any;
}

int kir_lower(const Graph *g, const FusePlan *p, int launch, KirOptions opt, KirKernel *k, CtErr *err)
{
    memset(k, 0, sizeof *k);
    k->launch = launch;
    if (!kir_lowerable(p, launch))
        return ct_fail(err, "launch %d is not an elementwise kernel", launch);
    int *ssa = malloc(sizeof *ssa * (size_t)(g->nvalues + 1));
    CT_ASSERT(ssa != NULL);
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps[s].launch == launch)
            k->nloops++;
    k->loops = calloc((size_t)k->nloops, sizeof *k->loops);
    CT_ASSERT(k->loops != NULL);
    for (int s = 0, at = 0; s < p->nsteps; s++)
        if (p->steps[s].launch == launch) {
            for (ValueId v = 0; v < g->nvalues; v++)
                ssa[v] = -1;
            lower_step(g, p, &p->steps[s], opt, k, &k->loops[at++], ssa);
        }
    free(ssa);
    return 0;
}

void kir_free(KirKernel *k)
{
    for (int j = 0; j < k->nloops; j++) {
        free(k->loops[j].ins);
        free(k->loops[j].views);
    }
    free(k->loops);
    free(k->bufs);
    memset(k, 0, sizeof *k);
}

static size_t value_nbytes(const Value *v) { return (size_t)shape_numel(&v->type.shape) * ct_dtype_size(v->type.dtype); }

static int clash(const Graph *g, const MemPlan *plan, ValueId u, ValueId w, int identity)
{
    size_t ou = plan->offset[u], ow = plan->offset[w];
    if (ou == PLAN_NONE || ow == PLAN_NONE || u == w)
        return 0;
    size_t nu = value_nbytes(&g->values[u]), nw = value_nbytes(&g->values[w]);
    if (ou + nu <= ow || ow + nw <= ou)
        return 0;
    return !(ou == ow && identity && ct_dtype_size(g->values[u].type.dtype) == ct_dtype_size(g->values[w].type.dtype));
}

void kir_mark_clashes(const Graph *g, const MemPlan *plan, const KirKernel *k, char *mark)
{
    for (int j = 0; j < k->nloops; j++) {
        const KirLoop *l = &k->loops[j];
        for (int a = 0; a < l->nins; a++)
            for (int b = 0; l->ins[a].op == KIR_LOAD && b < l->nins; b++)
                if (l->ins[b].op == KIR_STORE && clash(g, plan, k->bufs[l->ins[a].buf].value,
                                                       k->bufs[l->ins[b].buf].value, l->views[l->ins[a].view].ndim == 0))
                    mark[k->bufs[l->ins[b].buf].value] = 1;
    }
}
