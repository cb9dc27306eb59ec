/* Contract: kir_lower(g, plan, launch) builds the kernel IR of one fused
 * launch: for each of its steps a loop over the step's elements computing
 * its nodes by their scalar expressions (ir/scalar.h: the OpDefs' own, which
 * the ref kernels evaluate), storing what the plan materialises and what
 * its assigns take. */
#include "codegen/kir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/scalar.h"

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

/* The memory strides of v's logical dims (row-major without layouts). */
static void memory_strides(const Graph *g, ValueId v, int layouts, int64_t *st)
{
    Value val = g->values[v];
    if (!layouts)
        val.layout = CT_LAYOUT_CONTIG;
    value_strides(&val, st);
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
    KirView view = op_def(n->op)->fusion == OP_VIEW ? (KirView){0} : broadcast_view(w->g, v, n->out[0], w->layouts);
    KirInstr in = {.op = KIR_LOAD, .buf = buf_of(w->k, w->g, v), .view = view_of(w->l, view)};
    for (int j = 0; j < w->l->nins; j++)
        if (w->l->ins[j].op == KIR_LOAD && w->l->ins[j].buf == in.buf && w->l->ins[j].view == in.view)
            return j;
    return emit_ins(w->l, in);
}

/* Each scalar primitive is one kernel-IR instruction, so a kernel computes
 * the ref kernel's operations in the ref kernel's order. */
static KirOp kir_op(SxOp op)
{
    switch (op) {
    case SX_ADD: return KIR_ADD;
    case SX_SUB: return KIR_SUB;
    case SX_MUL: return KIR_MUL;
    case SX_DIV: return KIR_DIV;
    case SX_POW: return KIR_POW;
    case SX_NEG: return KIR_NEG;
    case SX_EXP: return KIR_EXP;
    case SX_SQRT: return KIR_SQRT;
    case SX_ERF: return KIR_ERF;
    case SX_TANH: return KIR_TANH;
    case SX_LT: return KIR_LT;
    case SX_LE: return KIR_LE;
    case SX_SELECT: return KIR_SELECT;
    case SX_IN: case SX_CONST: case SX_NOPS: break;
    }
    CT_ASSERT(!"not an arithmetic scalar op");
    return KIR_CONST;
}

/* An arithmetic instruction, or the same one computed earlier in the loop:
 * nodes of a step that start from the same loads (an activation and its
 * gradient) share what they compute alike, bit for bit the same. */
static int k_arith(KirLoop *l, KirInstr in)
{
    int unary = in.op == KIR_NEG || in.op == KIR_EXP || in.op == KIR_SQRT || in.op == KIR_ERF || in.op == KIR_TANH;
    if (unary)
        in.b = 0;
    if (in.op != KIR_SELECT) /* operands past the op's own are whatever the expression left there */
        in.c = 0;
    for (int j = 0; j < l->nins; j++) {
        const KirInstr *o = &l->ins[j];
        if (o->op == in.op && o->a == in.a && o->b == in.b && o->c == in.c)
            return j;
    }
    return emit_ins(l, in);
}

/* The node's outputs into out[]: its scalar expression, instruction for
 * instruction, its inputs through operand(). */
static void lower_node(Lower *w, const Node *n, int *out)
{
    Sx s;
    int at[SX_MAX_INS];
    sx_build(n, &s);
    for (int j = 0; j < s.n; j++) {
        const SxIns *in = &s.ins[j];
        if (in->op == SX_IN)
            at[j] = operand(w, n, in->a);
        else if (in->op == SX_CONST)
            at[j] = k_const(w->l, in->imm);
        else
            at[j] = k_arith(w->l, (KirInstr){.op = kir_op(in->op), .a = at[in->a], .b = at[in->b], .c = at[in->c]});
    }
    for (int o = 0; o < n->nout; o++)
        out[o] = at[s.out[o]];
}

static void lower_step(const Graph *g, const FusePlan *p, const FuseStep *st, KirOptions opt, KirKernel *k,
                       KirLoop *l, int *ssa)
{
    Lower w = {g, k, l, ssa, opt.layouts};
    l->numel = st->numel;
    l->compute = opt.precision == KIR_EXACT ? CT_F64 : CT_F32;
    for (int j = 0; j < st->n; j++) {
        const Node *n = &g->nodes[p->nodes[st->first + j]];
        Sx s;
        if (n->op != CT_OP_assign) {
            sx_build(n, &s);
            if (s.f64)
                l->compute = CT_F64;
        }
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


static int clash(const Graph *g, const MemPlan *plan, ValueId u, ValueId w, int identity)
{
    size_t ou = plan->offset[u], ow = plan->offset[w];
    if (ou == PLAN_NONE || ow == PLAN_NONE || u == w)
        return 0;
    size_t nu = value_bytes(&g->values[u]), nw = value_bytes(&g->values[w]);
    if (ou + nu <= ow || ow + nw <= ou)
        return 0;
    return !(ou == ow && identity && ct_dtype_size(g->values[u].type.dtype) == ct_dtype_size(g->values[w].type.dtype));
}

void kir_clashes(const Graph *g, const MemPlan *plan, const KirKernel *k, int concurrent, KirClashFn fn, void *ctx)
{
    for (int j = 0; j < k->nloops; j++)
        for (int js = concurrent ? 0 : j; js < (concurrent ? k->nloops : j + 1); js++) {
            const KirLoop *l = &k->loops[j], *s = &k->loops[js];
            for (int a = 0; a < l->nins; a++)
                for (int b = 0; l->ins[a].op == KIR_LOAD && b < s->nins; b++)
                    if (s->ins[b].op == KIR_STORE &&
                        clash(g, plan, k->bufs[l->ins[a].buf].value, k->bufs[s->ins[b].buf].value,
                              js == j && l->views[l->ins[a].view].ndim == 0))
                        fn(ctx, k->bufs[l->ins[a].buf].value, k->bufs[s->ins[b].buf].value);
        }
}

static void mark_store(void *mark, ValueId load, ValueId store) { ((char *)mark)[store] = 1; }

void kir_mark_clashes(const Graph *g, const MemPlan *plan, const KirKernel *k, int concurrent, char *mark)
{
    kir_clashes(g, plan, k, concurrent, mark_store, mark);
}
