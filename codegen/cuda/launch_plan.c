/* Contract: launch_plan(g) decides every launch, library call and copy of
 * a run of g on the cuda backend, and where each value lives, without
 * touching a device; launch_plan_check verifies it independently. */
#include "codegen/cuda/launch_plan.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/buf.h"
#include "ir/ops.h"
#include "passes/passes.h"



int launch_plan_supports(const Graph *g, const Node *n)
{
    switch (n->op) {
    case CT_OP_conv2d: case CT_OP_conv2d_grad_input: case CT_OP_conv2d_grad_weight: case CT_OP_linear:
    case CT_OP_matmul: case CT_OP_assign:
        return 1;
    default:
        return lib_supports(n->op) || fuse_is_elementwise(g, n);
    }
}

unsigned lp_grid(long long items, int sms)
{
    long long blocks = (items + LP_BLOCK - 1) / LP_BLOCK, cap = (long long)(sms > 0 ? sms : 1) * LP_BLOCKS_PER_SM;
    return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

/* CTIMM_CUDA_STEPS=plain: no library step runs another fusion step's
 * nodes or an epilogue the fusion plan left to other kernels, and no
 * batch norm keeps its coefficients; each of those fusions is checked on
 * the host by the cuda-sim, but a parity test failing on a device is then
 * told apart from the kernels themselves without a rebuild
 * (bench/gpu_check.sh does so). */
static int plain_steps(void)
{
    const char *s = getenv("CTIMM_CUDA_STEPS");
    return s && strcmp(s, "plain") == 0;
}

/* Whether values a and b, placed at `offset` (PLAN_NONE: elsewhere), share a byte. */
static int overlap_at(const Graph *g, const size_t *offset, ValueId a, ValueId b)
{
    size_t oa = offset[a], ob = offset[b];
    return oa != PLAN_NONE && ob != PLAN_NONE && oa < ob + value_bytes(&g->values[b]) &&
           ob < oa + value_bytes(&g->values[a]);
}

/* The lifetimes launch_plan's rounds ask of the memory plan, and how
 * many this round has asked. */
typedef struct LpAsks {
    PlanHints h;
    int n;
} LpAsks;

/* Asks the memory plan to keep values a and b apart, where the plan has
 * one dead before the other is born: the smaller lives longer, born when
 * the other is last read or read until the other is born. 0 where they are
 * live together (apart already, unless one took the other's place in
 * place) or either is outside the arena. */
static int ask_apart(const Graph *g, const LaunchPlan *lp, ValueId a, ValueId b)
{
    const MemPlan *m = &lp->mem;
    ValueId early = m->last[a] < m->first[b] ? a : m->last[b] < m->first[a] ? b : -1, late = early == a ? b : a;
    if (early < 0 || m->offset[a] == PLAN_NONE || m->offset[b] == PLAN_NONE)
        return 0;
    PlanHints *h = &lp->asks->h;
    if (value_bytes(&g->values[late]) <= value_bytes(&g->values[early]))
        h->born[late] = h->born[late] < 0 || m->last[early] < h->born[late] ? m->last[early] : h->born[late];
    else
        h->until[early] = m->first[late] > h->until[early] ? m->first[late] : h->until[early];
    lp->asks->n++;
    return 1;
}

typedef struct Clashes {
    const Graph *g;
    const LaunchPlan *lp;
    char *spill;
} Clashes;

/* A generated kernel stores `store` over memory the memory plan gives to
 * `load`, which the kernel reads at other elements: spilled in this
 * round (a place of its own after the arena), and, where the round may
 * ask, the two asked apart, so that the next round's plan keeps both in
 * the arena, where space is reused. (Where the plan has them live
 * together, the store took the load's place in place: spilled in every
 * round; no model here does that.) */
static void on_clash(void *vctx, ValueId load, ValueId store)
{
    const Clashes *c = vctx;
    c->spill[store] = 1;
    if (c->lp->asks)
        ask_apart(c->g, c->lp, store, load);
}

/* A weight gradient's GEMM stores its bias gradient (gemm_bias_grad_step)
 * at the reduction's step, after the GEMM node, where the memory plan may
 * have put it over what the GEMM reads, freed after it: such a gradient
 * (a vector) goes to the spill area, and the two steps still run as one. */
static void spill_bias_grads(const Graph *g, const LaunchPlan *lp, char *spill)
{
    for (int s = 0; s + 1 < lp->fuse.nsteps; s++) {
        const FuseStep *fs = &lp->fuse.steps[s];
        GemmDesc d;
        CtErr err;
        if (fs->kind != FUSE_LIBRARY || g->nodes[lp->fuse.nodes[fs->first]].op != CT_OP_matmul ||
            gemm_desc(g, &lp->fuse, fs, &d, &err))
            continue;
        ValueId bg = gemm_bias_grad(g, &lp->fuse, fs, &lp->fuse.steps[s + 1], &d);
        const ValueId used[3] = {d.a, d.b, d.epi.d};
        for (int k = 0; bg >= 0 && k < 3; k++)
            spill[bg] |= overlap_at(g, lp->mem.offset, bg, used[k]);
    }
}

static int place_values(const Graph *g, LaunchPlan *lp)
{
    char *spill = calloc((size_t)g->nvalues + 1, 1);
    CT_ASSERT(spill != NULL);
    Clashes c = {g, lp, spill};
    for (int l = 0; l < lp->nk; l++)
        kir_clashes(g, &lp->mem, &lp->k[l], 1, on_clash, &c);
    spill_bias_grads(g, lp, spill);
    size_t end = lp->mem.arena_bytes;
    for (ValueId v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        lp->offset[v] = PLAN_NONE;
        if (val->role == CT_ROLE_INPUT || role_is_state(val->role))
            continue;
        if (lp->mem.offset[v] != PLAN_NONE && !spill[v]) {
            lp->offset[v] = lp->mem.offset[v];
            continue;
        }
        lp->offset[v] = end;
        end += (value_bytes(val) + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
    }
    lp->device_bytes = end;
    free(spill);
    return 0;
}

/* Whether every node of step fs (reshapes, permutes) has its input's address. */
static int same_address(const LaunchPlan *lp, const Graph *g, const FuseStep *fs)
{
    for (int j = 0; j < fs->n; j++) {
        const Node *n = &g->nodes[lp->fuse.nodes[fs->first + j]];
        if (lp->offset[n->out[0]] == PLAN_NONE || lp->offset[n->out[0]] != lp->offset[n->in[0]])
            return 0;
    }
    return 1;
}

/* Whether plan step st runs fusion step s: a kernel all the steps of its
 * launch, a library step its step and those it spans. */
static int runs(const LaunchPlan *lp, const LpStep *st, int s)
{
    const FuseStep *fs = &lp->fuse.steps[s];
    return st->kind == LP_KERNEL ? fs->launch == st->launch && fs->kind == FUSE_ELEMENTWISE && !fs->view
                                 : s >= st->fuse_step && s <= st->fuse_step + st->span;
}

/* Per fusion step, the plan step that runs it (a multi-tensor launch runs
 * all of its steps at its first). */
static int *runs_at(const LaunchPlan *lp)
{
    int *at = malloc(sizeof *at * (size_t)(lp->fuse.nsteps + 1));
    CT_ASSERT(at != NULL);
    for (int s = 0; s < lp->fuse.nsteps; s++)
        at[s] = INT_MAX;
    for (int i = 0; i < lp->nsteps; i++)
        for (int s = 0; s < lp->fuse.nsteps; s++)
            if (at[s] == INT_MAX && runs(lp, &lp->steps[i], s))
                at[s] = i;
    return at;
}

/* A reshape of state copies nothing where every reader of it runs before
 * the step of the state's assign, which writes it (the optimizer's update
 * stored in place, or a copy): its readers take the state's address
 * (`alias`). ConvNeXt's layer scale, a parameter reshaped for its multiply
 * in the forward and in its gradient. */
static void view_state(const Graph *g, LaunchPlan *lp)
{
    int *at = runs_at(lp);
    for (int i = 0; i < lp->nsteps; i++) {
        LpStep *st = &lp->steps[i];
        const FuseStep *fs = &lp->fuse.steps[st->fuse_step];
        const Node *n = &g->nodes[lp->fuse.nodes[fs->first]];
        ValueId x = n->in[0], y = n->out[0];
        if (st->kind != LP_LIB || !fs->view || fs->n != 1 || st->span || !st->nlib || n->op != CT_OP_reshape ||
            !role_is_state(g->values[x].role) || g->values[x].type.dtype != g->values[y].type.dtype ||
            !value_row_major(&g->values[x]) || !value_row_major(&g->values[y]))
            continue;
        int last_read = -1, first_write = INT_MAX;
        for (int j = 0; j < g->nnodes; j++) {
            const Node *m = &g->nodes[j];
            int when = at[lp->fuse.step_of[j]]; /* INT_MAX where no step runs it: read last, written first */
            for (int k = 0; k < m->nin; k++)
                if (m->in[k] == y && when > last_read)
                    last_read = when;
            if (m->op == CT_OP_assign && m->in[0] == x)
                first_write = when == INT_MAX ? -1 : when < first_write ? when : first_write;
        }
        for (int k = 0; k < g->noutputs; k++)
            last_read = g->outputs[k] == y ? INT_MAX : last_read;
        if (last_read < first_write) {
            lp->alias[y] = x;
            free(st->lib);
            st->lib = NULL;
            st->nlib = 0;
        }
    }
    free(at);
}

static LpStep *add_step(LaunchPlan *lp, LpKind kind, int s)
{
    LpStep *st = &lp->steps[lp->nsteps++];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->fuse_step = s;
    st->launch = -1;
    st->copy_src = st->copy_dst = st->unstored = -1;
    return st;
}

/* A library step from fusion step s over the `span` steps after it, its
 * launch list allocated for the caller to fill. */
static LpStep *span_step(LaunchPlan *lp, int s, int span)
{
    LpStep *st = add_step(lp, LP_LIB, s);
    st->span = span;
    st->lib = malloc(sizeof *st->lib * LIB_MAX_LAUNCHES);
    CT_ASSERT(st->lib != NULL);
    return st;
}

/* Whether fusion step s's kernel is its alone (no other step shares its launch). */
static int own_launch(const LaunchPlan *lp, int s)
{
    for (int k = 0; k < lp->fuse.nsteps; k++)
        if (k != s && lp->fuse.steps[k].launch == lp->fuse.steps[s].launch)
            return 0;
    return 1;
}

/* Whether values a and b share a byte of the device block (inputs and
 * state have blocks of their own). */
static int overlap(const Graph *g, const LaunchPlan *lp, ValueId a, ValueId b)
{
    return overlap_at(g, lp->offset, a, b);
}

/* What a fused step's kernels store in place of the nodes' own must not
 * be where they read later, which the memory plan allows (it frees a value
 * after its last reader node): a stored value of `out` may only take a
 * read value's place exactly, element for element (`same`, or -1). Where
 * launch_plan's round may ask, a stored value over another read is asked
 * apart (ask_apart), and clear for that round. */
static int clear_of(const Graph *g, const LaunchPlan *lp, ValueId out, const ValueId *reads, int n, ValueId same)
{
    int clear = 1;
    for (int k = 0; k < n; k++) {
        if (reads[k] == same && lp->offset[out] == lp->offset[same])
            continue;
        if (overlap(g, lp, out, reads[k]))
            clear &= reads[k] != same && lp->asks && ask_apart(g, lp, out, reads[k]);
    }
    return clear;
}

/* The launches of nodes [from, st.n) of fuse step fs into step s (their
 * kernels exist), or s becomes LP_UNSUPPORTED naming the first op that
 * has none. An assign of a value the step computes stores it in place. */
static int add_launches(const Graph *g, LaunchPlan *lp, const FuseStep *fs, int from, LpStep *s, CtErr *err)
{
    for (int j = from; j < fs->n; j++) {
        const Node *n = &g->nodes[lp->fuse.nodes[fs->first + j]];
        if (n->op != CT_OP_assign && !lib_supports(n->op)) {
            s->kind = LP_UNSUPPORTED;
            s->op = op_def(n->op)->name;
            free(s->lib);
            s->lib = NULL;
            s->nlib = 0;
            lp->unsupported++;
            return 0;
        }
        if (n->op == CT_OP_assign) {
            lp->alias[n->in[1]] = n->in[0];
            continue;
        }
        s->lib = realloc(s->lib, sizeof *s->lib * (size_t)(s->nlib + LIB_MAX_LAUNCHES));
        CT_ASSERT(s->lib != NULL);
        int count;
        size_t scratch;
        if (lib_launches(g, lp->sms, n, s->lib + s->nlib, &count, &scratch, err))
            return ct_failctx(err, "node %d (%s)", lp->fuse.nodes[fs->first + j], op_def(n->op)->name);
        s->nlib += count;
        lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
    }
    return 0;
}

/* The filter of an NHWC convolution as an NHWC copy in scratch: read
 * there by forward and backward-data, written there by backward-filter
 * and copied back. */
static void mirror_filter(const Graph *g, LaunchPlan *lp, LpStep *st)
{
    const Value *w = &g->values[st->conv.wt];
    const CtShape *s = &w->type.shape;
    int64_t kcrs[4], krsc[4] = {s->d[2] * s->d[3] * s->d[1], 1, s->d[3] * s->d[1], s->d[1]};
    int back = st->conv.dir == CONV_BWD_FILTER;
    LibLaunch *l = &st->mirror;
    value_strides(w, kcrs);
    memset(l, 0, sizeof *l);
    snprintf(l->kernel, sizeof l->kernel, "ct_copy_%s", ct_dtype_name(w->type.dtype));
    l->items = shape_numel(s);
    l->nargs = 3;
    l->arg[back].kind = LA_VALUE; /* ct_copy(x, y): the weight is x before the call, y after it */
    l->arg[back].v = st->conv.wt;
    l->arg[!back].kind = LA_SCRATCH;
    l->arg[2].kind = LA_INDEX;
    CtIndex *ix = &l->arg[2].ix;
    ix->n = l->items;
    ix->nd = 4;
    for (int d = 0; d < 4; d++) {
        ix->dim[d] = s->d[d];
        ix->st0[d] = back ? krsc[d] : kcrs[d];
        ix->st1[d] = back ? kcrs[d] : krsc[d];
    }
    st->mirrored = 1;
    st->conv.w_nhwc = 1;
    size_t bytes = (size_t)l->items * ct_dtype_size(w->type.dtype);
    lp->scratch_bytes = bytes > lp->scratch_bytes ? bytes : lp->scratch_bytes;
}

/* Convolution step st (LP_CONV) of fusion step fs: cuDNN's call, the
 * filter's NHWC copy where it needs one, the epilogue's rest as launches. */
static int conv_step(const Graph *g, LaunchPlan *lp, const FuseStep *fs, LpStep *st, CtErr *err)
{
    if (conv_desc(g, &lp->fuse, fs, &st->conv, err))
        return -1;
    if (st->conv.x_nhwc && !st->conv.w_nhwc)
        mirror_filter(g, lp, st);
    return add_launches(g, lp, fs, st->conv.epi.tail, st, err);
}

/* The training batch norm whose statistics the convolution of fusion
 * step s makes in its step (lib_bn_conv_sums_fits), or -1: a forward
 * convolution alone in its step, not depthwise, whose output is x of the
 * batch norm first in the next step, which keeps its coefficients and
 * would compute its statistics there. */
static int conv_stats_bn(const Graph *g, const LaunchPlan *lp, int s)
{
    const FusePlan *p = &lp->fuse;
    if (lp->plain || s + 1 >= p->nsteps || p->steps[s].kind != FUSE_LIBRARY || p->steps[s].n != 1 ||
        p->steps[s + 1].kind != FUSE_LIBRARY)
        return -1;
    const Node *conv = &g->nodes[p->nodes[p->steps[s].first]];
    int bn = p->nodes[p->steps[s + 1].first];
    const Node *n = &g->nodes[bn];
    if (conv->op != CT_OP_conv2d || lib_dw_conv_fits(g, conv) || n->op != CT_OP_batch_norm ||
        n->in[0] != conv->out[0] || !lib_bn_conv_sums_fits(g, n) || lp->bn_coef[bn].at < 0 || lp->bn_coef[bn].ready)
        return -1;
    return bn;
}

/* Each batch norm's sums that its convolution's step makes, a place in
 * the kept region (2 C floats) from that step to the norm's. */
static void keep_bn_sums(const Graph *g, LaunchPlan *lp)
{
    for (int s = 0; s < lp->fuse.nsteps; s++) {
        int bn = conv_stats_bn(g, lp, s);
        if (bn < 0)
            continue;
        lp->bn_coef[bn].sums = (long long)lp->kept_bytes;
        lp->kept_bytes += 2 * sizeof(float) * (size_t)g->values[g->nodes[bn].in[0]].type.shape.d[1];
    }
}

/* The convolution step just added for fusion step s making its batch
 * norm's sums where keep_bn_sums placed them: cuDNN's call where it can
 * (conv.stats), else the statistics pass after the plain call (the
 * step's fallback launches, which the executor then runs). */
static int conv_stats(const Graph *g, LaunchPlan *lp, int s, CtErr *err)
{
    int bn = conv_stats_bn(g, lp, s);
    if (bn < 0)
        return 0;
    LpStep *st = &lp->steps[lp->nsteps - 1];
    size_t scratch;
    st->fallback = malloc(sizeof *st->fallback * LIB_MAX_LAUNCHES);
    CT_ASSERT(st->fallback != NULL);
    if (lib_bn_conv_sums(g, lp->sms, &g->nodes[bn], lp->bn_coef[bn], st->fallback, &st->nfallback, &scratch, err))
        return ct_failctx(err, "node %d (batch_norm)", bn);
    lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
    st->conv.stats = lp->bn_coef[bn].sums;
    return 0;
}

/* The cuDNN twin of depthwise step st, made from fusion step s (and the
 * bias gradient's step after it where st spans that): the step conv_step
 * makes of s, its launches then the spanned step's in `fallback`. In node
 * order, so the memory plan made for st holds for it too. */
static int dw_twin(const Graph *g, LaunchPlan *lp, int s, LpStep *st, CtErr *err)
{
    const FuseStep *fs = &lp->fuse.steps[s];
    LpStep call = {.kind = LP_CONV};
    if (conv_step(g, lp, fs, &call, err) || (st->span && add_launches(g, lp, fs + 1, 0, &call, err))) {
        free(call.lib);
        return -1;
    }
    CT_ASSERT(call.kind == LP_CONV); /* the library step ran these nodes and more */
    st->conv = call.conv;
    st->mirrored = call.mirrored;
    st->mirror = call.mirror;
    st->fallback = call.lib;
    st->nfallback = call.nlib;
    st->twin = 1;
    return 0;
}

/* A library step: GEMM, convolution, or library kernels. */
static int library_step(const Graph *g, LaunchPlan *lp, int s, CtErr *err)
{
    const FuseStep *fs = &lp->fuse.steps[s];
    const Node *first = &g->nodes[lp->fuse.nodes[fs->first]];
    CtOp op = first->op;
    if (op == CT_OP_linear || op == CT_OP_matmul) {
        LpStep *st = add_step(lp, LP_GEMM, s);
        return gemm_desc(g, &lp->fuse, fs, &st->gemm, err) || add_launches(g, lp, fs, st->gemm.epi.tail, st, err);
    }
    int conv = op == CT_OP_conv2d || op == CT_OP_conv2d_grad_input || op == CT_OP_conv2d_grad_weight;
    if (conv && lib_dw_conv_fits(g, first)) {
        /* a forward's activation in its store, which the memory plan may have put over x, read to the end; a
         * filter gradient's bias gradient, the next step (dy's sum), in its passes over dy: that step spanned */
        const FuseStep *ns = s + 1 < lp->fuse.nsteps ? fs + 1 : NULL;
        const Node *act = fs->n > 1 ? &g->nodes[lp->fuse.nodes[fs->first + 1]] : NULL;
        const Node *db = ns && ns->kind == FUSE_LIBRARY && ns->n == 1 ? &g->nodes[lp->fuse.nodes[ns->first]] : NULL;
        if (act && (lp->plain || lp->fuse.materialised[first->out[0]] || !lib_dw_conv_next_fits(g, first, act) ||
                    !clear_of(g, lp, act->out[0], first->in, 1, -1)))
            act = NULL;
        if (db && (lp->plain || op != CT_OP_conv2d_grad_weight || !lib_dw_conv_next_fits(g, first, db)))
            db = NULL;
        LpStep *st = add_step(lp, LP_LIB, s);
        size_t scratch;
        st->lib = malloc(sizeof *st->lib * LIB_MAX_LAUNCHES);
        CT_ASSERT(st->lib != NULL);
        if (lib_dw_conv(g, lp->sms, first, act ? act : db, st->lib, &st->nlib, &scratch, err))
            return ct_failctx(err, "node %d (%s)", lp->fuse.nodes[fs->first], op_def(op)->name);
        lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
        st->span = db != NULL;
        if (add_launches(g, lp, fs, act ? 2 : 1, st, err))
            return -1;
        return act || st->kind != LP_LIB ? 0 : dw_twin(g, lp, s, st, err);
    }
    if (conv)
        return conv_step(g, lp, fs, add_step(lp, LP_CONV, s), err) || conv_stats(g, lp, s, err);
    LpStep *st = add_step(lp, LP_LIB, s);
    /* a permute that only relabels memory, to which the memory plan gave
     * its input's address (passes/plan.c's views): nothing to move */
    if (op == CT_OP_permute && fs->n == 1 && same_address(lp, g, fs))
        return 0;
    if (op != CT_OP_batch_norm && op != CT_OP_layer_norm_grad)
        return add_launches(g, lp, fs, 0, st, err);
    int tail;
    size_t scratch;
    st->lib = malloc(sizeof *st->lib * LIB_MAX_LAUNCHES);
    CT_ASSERT(st->lib != NULL);
    int rc;
    if (op == CT_OP_batch_norm) {
        LibBnCoef kc = lp->bn_coef[lp->fuse.nodes[fs->first]];
        int from = lp->bn_res[s];
        LibBnRes res = {-1, -1};
        if (from >= 0) {
            int a = lp->fuse.nodes[lp->fuse.steps[from].first];
            res = (LibBnRes){g->nodes[a].in[0], lp->bn_coef[a].at};
        }
        rc = lib_batch_norm_step(g, lp->sms, &lp->fuse, fs, kc, NULL, res, from == -2, st->lib, &st->nlib, &scratch,
                                 &tail, err);
        if (from == -2)
            st->unstored = first->out[0];
    } else { /* the sum and its cast are stored before the weight's kernels read x and dy */
        const Node *n = first;
        ValueId reads[4] = {n->in[0], n->in[2], -1, -1};
        int most = 0;
        if (fs->n > 1 && !lp->plain) {
            const Node *add = &g->nodes[lp->fuse.nodes[fs->first + 1]];
            reads[2] = add->in[0] == n->out[0] ? add->in[1] : add->in[0];
            reads[3] = add->out[0];
            most = clear_of(g, lp, add->out[0], reads, 3, reads[2]);
            if (most && fs->n > 2)
                most += clear_of(g, lp, g->nodes[lp->fuse.nodes[fs->first + 2]].out[0], reads, 4, -1);
        }
        rc = lib_layer_norm_grad_step(g, lp->sms, &lp->fuse, fs, most, st->lib, &st->nlib, &scratch, &tail, err);
    }
    if (rc)
        return ct_failctx(err, "node %d (%s)", lp->fuse.nodes[fs->first], op_def(op)->name);
    lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
    return add_launches(g, lp, fs, tail, st, err);
}

/* The GEMM just added for fusion step s taking step s + 1, its bias
 * gradient, into its epilogue: 1 when it does, 0 when not, -1 on failure.
 * The gradient is clear of the GEMM's operands (spill_bias_grads). */
static int gemm_bias_grad_step(const Graph *g, LaunchPlan *lp, int s, CtErr *err)
{
    LpStep *st = &lp->steps[lp->nsteps - 1];
    if (st->kind != LP_GEMM || s + 1 >= lp->fuse.nsteps)
        return 0;
    const FuseStep *next = &lp->fuse.steps[s + 1];
    ValueId bg = gemm_bias_grad(g, &lp->fuse, &lp->fuse.steps[s], next, &st->gemm);
    const ValueId reads[3] = {st->gemm.a, st->gemm.b, st->gemm.epi.d};
    if (bg < 0 || !clear_of(g, lp, bg, reads, 3, -1))
        return 0;
    size_t scratch;
    st->fallback = malloc(sizeof *st->fallback * LIB_MAX_LAUNCHES);
    CT_ASSERT(st->fallback != NULL);
    if (lib_launches(g, lp->sms, &g->nodes[lp->fuse.nodes[next->first]], st->fallback, &st->nfallback, &scratch, err))
        return ct_failctx(err, "node %d (reduce_sum)", lp->fuse.nodes[next->first]);
    lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
    st->gemm.epi.bgrad = bg;
    st->gemm.bias_type = g->values[bg].type.dtype;
    st->span = 1;
    return 1;
}

/* Whether fusion step s is an elementwise kernel (no view) of one or two
 * nodes, *first and *second (NULL: one), and step s + 1 a library call of
 * one node, *lib: the pairs a library step may run as one. */
static int kernel_then_library(const Graph *g, const LaunchPlan *lp, int s, const Node **first, const Node **second,
                               const Node **lib)
{
    const FuseStep *fs = &lp->fuse.steps[s], *ns = fs + 1;
    if (s + 1 >= lp->fuse.nsteps || fs->kind != FUSE_ELEMENTWISE || fs->view || fs->n > 2 ||
        ns->kind != FUSE_LIBRARY || ns->n != 1)
        return 0;
    *first = &g->nodes[lp->fuse.nodes[fs->first]];
    *second = fs->n == 2 ? &g->nodes[lp->fuse.nodes[fs->first + 1]] : NULL;
    *lib = &g->nodes[lp->fuse.nodes[ns->first]];
    return 1;
}

/* Fusion step s, an elementwise kernel of its own adding two values (one
 * perhaps a cast's, read nowhere else), and step s + 1, a layer_norm of
 * that sum alone, as one (lib_layer_norm_fused): 1 when they run so, 0 when
 * not, -1 on failure. The kernel stores the sum where it is read
 * elsewhere, and the norm's output, after it loaded the element: a stored
 * value may take the place of the operand of its own element size only
 * (the memory plan may have freed either operand at the add). */
static int layer_norm_res_step(const Graph *g, LaunchPlan *lp, int s, CtErr *err)
{
    const Node *cast, *add, *ln;
    if (!kernel_then_library(g, lp, s, &cast, &add, &ln))
        return 0;
    if (!add) { /* the add alone */
        add = cast;
        cast = NULL;
    }
    if (ln->op != CT_OP_layer_norm || add->op != CT_OP_add || add->out[0] != ln->in[0])
        return 0;
    if (!own_launch(lp, s))
        return 0;
    int c = 0; /* the add's operand the cast makes (1 or 2), or 0 */
    if (cast) {
        if (cast->op != CT_OP_cast || lp->fuse.materialised[cast->out[0]])
            return 0;
        c = add->in[0] == cast->out[0] ? 1 : add->in[1] == cast->out[0] ? 2 : 0;
        if (!c)
            return 0;
    }
    ValueId x = add->in[c == 1], res = c ? cast->in[0] : add->in[1];
    ValueId sum = lp->fuse.materialised[add->out[0]] ? add->out[0] : -1, y = ln->out[0];
    if (!lib_layer_norm_res_fits(g, ln, x, res))
        return 0;
    const ValueId reads[2] = {x, res};
    int res_sized = ct_dtype_size(g->values[res].type.dtype) == ct_dtype_size(g->values[y].type.dtype) &&
                    g->values[res].layout == g->values[y].layout;
    if ((sum >= 0 && !clear_of(g, lp, sum, reads, 2, x)) || !clear_of(g, lp, y, reads, 2, res_sized ? res : -1))
        return 0;
    LpStep *st = span_step(lp, s, 1);
    if (lib_layer_norm_fused(g, ln, x, res, sum, -1, st->lib, &st->nlib, err))
        return ct_failctx(err, "node %d (layer_norm)", lp->fuse.nodes[lp->fuse.steps[s + 1].first]);
    return 1;
}

/* Fusion step s, a layer_norm alone whose output is f32 (autocast's),
 * the steps after it that view its output (a permute of channels-last:
 * the same bytes), then an elementwise kernel of its own casting the view
 * in its layout, as one (lib_layer_norm_fused): the norm stores its output
 * and the cast's, the cast reading nothing. The steps it spans (the step
 * added), 0 when they do not fit it, -1 on failure. */
static int layer_norm_low_step(const Graph *g, LaunchPlan *lp, int s, CtErr *err)
{
    const FuseStep *fs = &lp->fuse.steps[s];
    const Node *ln = &g->nodes[lp->fuse.nodes[fs->first]];
    if (fs->kind != FUSE_LIBRARY || fs->n != 1 || ln->op != CT_OP_layer_norm)
        return 0;
    ValueId y = ln->out[0];
    int span = 1;
    for (; s + span < lp->fuse.nsteps; span++) { /* reshapes (views), permutes (library steps) */
        const FuseStep *vs = &lp->fuse.steps[s + span];
        const Node *v = &g->nodes[lp->fuse.nodes[vs->first]];
        if (vs->n != 1 || v->in[0] != y || (!vs->view && v->op != CT_OP_permute) || !same_address(lp, g, vs))
            break;
        y = v->out[0];
    }
    if (s + span >= lp->fuse.nsteps)
        return 0;
    const FuseStep *cs = &lp->fuse.steps[s + span];
    const Node *cast = &g->nodes[lp->fuse.nodes[cs->first]];
    if (cs->kind != FUSE_ELEMENTWISE || cs->n != 1 || cast->op != CT_OP_cast ||
        cast->in[0] != y || g->values[cast->out[0]].layout != g->values[y].layout || !own_launch(lp, s + span))
        return 0;
    /* the cast's output, stored where the norm reads x, may take x's place only element for element */
    ValueId low = cast->out[0], x = ln->in[0];
    int x_sized = value_bytes(&g->values[x]) == value_bytes(&g->values[low]) &&
                  g->values[x].layout == g->values[ln->out[0]].layout;
    if (!lib_layer_norm_low_fits(g, ln, low) || !clear_of(g, lp, low, &x, 1, x_sized ? x : -1))
        return 0;
    LpStep *st = span_step(lp, s, span);
    if (lib_layer_norm_fused(g, ln, x, -1, -1, low, st->lib, &st->nlib, err))
        return ct_failctx(err, "node %d (layer_norm)", lp->fuse.nodes[fs->first]);
    return span;
}

/* Fusion step s and the one or two after it as one (lib_bn_act_grad),
 * batch_norm node bn's forward run again: the steps it spans (the step
 * added), 0 when they do not fit it (they run as they are), -1 on failure.
 * Where step s is bn run again with its relu (remat's, which
 * schedule_bn_reruns puts here) and the relu's output is read elsewhere
 * (a convolution's weight gradient, after), the apply pass stores it. */
static int bn_act_grad_step(const Graph *g, LaunchPlan *lp, int s, int bn, CtErr *err)
{
    const FuseStep *fs = &lp->fuse.steps[s];
    int span = lp->fuse.nodes[fs->first] == bn ? 2 : 1;
    const Node *act = &g->nodes[lp->fuse.nodes[lp->fuse.steps[s + span - 1].first]];
    const Node *n = &g->nodes[lp->fuse.nodes[lp->fuse.steps[s + span].first]];
    ValueId store = -1;
    if (span == 2 && fs->n == 2) {
        const Node *relu = &g->nodes[lp->fuse.nodes[fs->first + 1]];
        if (fs->kind != FUSE_LIBRARY || relu->op != CT_OP_relu || act->in[0] != relu->out[0])
            return 0;
        store = relu->out[0];
    }
    if (!lib_bn_act_grad_fits(g, &g->nodes[bn], act, n, store))
        return 0;
    /* the gradient's outputs and the stored activation come after dy's
     * last reader, the act_grad, and x's, while the apply pass reads both */
    const ValueId reads[2] = {n->in[0], act->in[1]};
    for (int k = 0; k < n->nout; k++)
        if (!clear_of(g, lp, n->out[k], reads, 2, k == 0 ? act->in[1] : -1))
            return 0;
    if (store >= 0 && (!clear_of(g, lp, store, reads, 2, -1) || overlap(g, lp, store, n->out[0])))
        return 0;
    LpStep *st = span_step(lp, s, span);
    size_t scratch;
    if (lib_bn_act_grad(g, lp->sms, &g->nodes[bn], act, n, store, lp->bn_coef[bn], st->lib, &st->nlib, &scratch,
                        err))
        return ct_failctx(err, "node %d (batch_norm_grad)", lp->fuse.nodes[lp->fuse.steps[s + span].first]);
    lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
    return span;
}

/* The batch norm that fusion step s runs again with its relu (its
 * forward's coefficients kept, ready), where the act_grad and
 * batch_norm_grad after it run as one with it (bn_act's step s + 1 naming
 * it), else -1. */
static int bn_rerun_of(const LaunchPlan *lp, int s, const int *bn_act)
{
    const FuseStep *fs = &lp->fuse.steps[s];
    int bn = s + 1 < lp->fuse.nsteps ? bn_act[s + 1] : -1;
    return bn >= 0 && fs->n == 2 && lp->fuse.nodes[fs->first] == bn && lp->bn_coef[bn].ready ? bn : -1;
}

/* Fusion step s, an elementwise kernel of its own computing a residual
 * block's gradient g = a + b (then act_grad of it, the sum read nowhere
 * else), and step s + 1, a batch_norm_grad of dy = g, as one
 * (lib_bn_sum_grad): the statistics kernel computes g and stores it for
 * the gradient's apply pass and g's other readers, so that g is not read
 * back for the statistics. 1 when they run so, 0 when not, -1 on failure. */
static int bn_sum_grad_step(const Graph *g, LaunchPlan *lp, int s, CtErr *err)
{
    const Node *add, *act, *n;
    if (!kernel_then_library(g, lp, s, &add, &act, &n))
        return 0;
    if (add->op != CT_OP_add || n->op != CT_OP_batch_norm_grad || n->iattr[1] ||
        n->in[4] != (act ? act->out[0] : add->out[0]))
        return 0;
    if (act && (act->op != CT_OP_act_grad || act->in[1] != add->out[0] || act->in[0] == add->out[0] ||
                lp->fuse.materialised[add->out[0]]))
        return 0;
    if (!own_launch(lp, s) || !lib_bn_sum_grad_fits(g, n, add, act))
        return 0;
    /* the statistics kernel stores g, then dw and db, while it reads the
     * sum's operands (g element for element: it may take one's place) */
    const ValueId reads[4] = {add->in[0], add->in[1], act ? act->in[0] : add->in[0], n->in[0]};
    ValueId same = -1;
    for (int k = 0; k < 3; k++)
        same = lp->offset[reads[k]] == lp->offset[n->in[4]] ? reads[k] : same;
    for (int k = 0; k < n->nout; k++)
        if (!clear_of(g, lp, k ? n->out[k] : n->in[4], reads, 4, k ? -1 : same))
            return 0;
    LpStep *st = span_step(lp, s, 1);
    size_t scratch;
    if (lib_bn_sum_grad(g, lp->sms, n, add, act, st->lib, &st->nlib, &scratch, err))
        return ct_failctx(err, "node %d (batch_norm_grad)", lp->fuse.nodes[lp->fuse.steps[s + 1].first]);
    lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
    return 1;
}

/* Fusion step s, an elementwise kernel of its own computing a
 * squeeze-excitation's gradient dy s + global_avg_pool2d_grad(p) (mul,
 * the pool's gradient, add; or the pool's gradient alone, a head's global
 * pool), which only the act_grad of the steps after it that run as one
 * (bn_act: lib_bn_act_grad) reads, as one with them (lib_bn_excite_grad):
 * each pass computes dy where it read the act_grad's. The steps it spans
 * (the step added), 0 when they do not fit it, -1 on failure. */
static int bn_excite_grad_step(const Graph *g, LaunchPlan *lp, int s, const int *bn_act, CtErr *err)
{
    const FuseStep *fs = &lp->fuse.steps[s];
    if (s + 1 >= lp->fuse.nsteps || bn_act[s + 1] < 0 || fs->kind != FUSE_ELEMENTWISE || fs->view ||
        (fs->n != 1 && fs->n != 3))
        return 0;
    int bn = bn_act[s + 1], span = lp->fuse.nodes[lp->fuse.steps[s + 1].first] == bn ? 3 : 2;
    const Node *act = &g->nodes[lp->fuse.nodes[lp->fuse.steps[s + span - 1].first]];
    const Node *n = &g->nodes[lp->fuse.nodes[lp->fuse.steps[s + span].first]];
    const Node *mul = fs->n == 3 ? &g->nodes[lp->fuse.nodes[fs->first]] : NULL;
    const Node *gap = &g->nodes[lp->fuse.nodes[fs->first + (mul != NULL)]];
    const Node *add = mul ? &g->nodes[lp->fuse.nodes[fs->first + 2]] : NULL;
    ValueId out = add ? add->out[0] : gap->out[0];
    if (gap->op != CT_OP_global_avg_pool2d_grad || act->in[1] != out)
        return 0;
    if (mul && (mul->op != CT_OP_mul || add->op != CT_OP_add || lp->fuse.materialised[mul->out[0]] ||
                lp->fuse.materialised[gap->out[0]] ||
                !((add->in[0] == mul->out[0] && add->in[1] == gap->out[0]) ||
                  (add->in[1] == mul->out[0] && add->in[0] == gap->out[0]))))
        return 0;
    if (graph_reads(g, out) != 1 || !own_launch(lp, s) || !lib_bn_excite_grad_fits(g, &g->nodes[bn], act, mul, gap))
        return 0;
    /* dw and db, stored by the statistics, and dx, by the apply pass,
     * while they read what dy is computed from (dx may take the place of
     * dy, element for element) */
    const ValueId reads[4] = {n->in[0], gap->in[0], mul ? mul->in[0] : gap->in[0], mul ? mul->in[1] : gap->in[0]};
    int big = mul && g->values[mul->in[1]].type.shape.d[2] != 1;
    for (int k = 0; k < n->nout; k++)
        if (!clear_of(g, lp, n->out[k], reads, 4, mul && !k ? mul->in[big] : -1))
            return 0;
    LpStep *st = span_step(lp, s, span);
    size_t scratch;
    if (lib_bn_excite_grad(g, lp->sms, &g->nodes[bn], act, n, lp->bn_coef[bn], mul, gap, st->lib, &st->nlib,
                           &scratch, err))
        return ct_failctx(err, "node %d (batch_norm_grad)", lp->fuse.nodes[lp->fuse.steps[s + span].first]);
    lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
    return span;
}

/* Fusion step s, an elementwise kernel of its own computing
 * side = x * scale (then perhaps cast, the product read nowhere else), and
 * step s + 1, a reduce_sum of x alone whose output has scale's shape
 * (layer scale's backward: dy * gamma beside gamma's gradient, the sum of
 * dy * x), as one (lib_reduce_sum_side), which reads x once: 1 when they
 * run so, 0 when not, -1 on failure. */
static int reduce_side_step(const Graph *g, LaunchPlan *lp, int s, CtErr *err)
{
    const Node *m, *c, *r;
    if (!kernel_then_library(g, lp, s, &m, &c, &r))
        return 0;
    if (r->op != CT_OP_reduce_sum || m->op != CT_OP_mul || (m->in[0] != r->in[0]) == (m->in[1] != r->in[0]))
        return 0;
    if (c && (c->op != CT_OP_cast || c->in[0] != m->out[0] || lp->fuse.materialised[m->out[0]]))
        return 0;
    if (!own_launch(lp, s))
        return 0;
    ValueId scale = m->in[0] == r->in[0] ? m->in[1] : m->in[0], side = c ? c->out[0] : m->out[0];
    const ValueId reads[3] = {r->in[0], scale, r->nin > 1 ? r->in[1] : scale};
    if (!lp->fuse.materialised[side] || reads[2] == side || reads[2] == m->out[0] ||
        !lib_reduce_sum_side_fits(g, r, side, scale) || !clear_of(g, lp, side, reads, 3, -1))
        return 0;
    LpStep *st = span_step(lp, s, 1);
    size_t scratch;
    if (lib_reduce_sum_side(g, lp->sms, r, side, scale, st->lib, &st->nlib, &scratch, err))
        return ct_failctx(err, "node %d (reduce_sum)", lp->fuse.nodes[lp->fuse.steps[s + 1].first]);
    lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
    return 1;
}

/* Fusion step s, an elementwise kernel of its own casting x alone, and step
 * s + 1, a to_layout or permute that copies the cast's output, its only
 * reader, as one converting copy (lib_cast_copy): the input batch cast to
 * the AMP dtype and laid out channels-last in one pass. 1 when they run
 * so, 0 when not, -1 on failure. */
static int cast_copy_step(const Graph *g, LaunchPlan *lp, int s, CtErr *err)
{
    const Node *c, *second, *n;
    if (!kernel_then_library(g, lp, s, &c, &second, &n) || second)
        return 0;
    if (!lib_cast_copy_fits(g, c, n) || (n->op == CT_OP_permute && same_address(lp, g, &lp->fuse.steps[s + 1])))
        return 0;
    if (!own_launch(lp, s))
        return 0;
    if (graph_reads(g, c->out[0]) != 1 || !clear_of(g, lp, n->out[0], &c->in[0], 1, -1))
        return 0;
    LpStep *st = span_step(lp, s, 1);
    if (lib_cast_copy(g, c, n, st->lib, &st->nlib, err))
        return ct_failctx(err, "node %d (%s)", lp->fuse.nodes[lp->fuse.steps[s + 1].first], op_def(n->op)->name);
    return 1;
}

/* Fusion step s, a batch norm and its activation, and step s + 1, a
 * global average pool of the norm's output (a squeeze-excitation's), as
 * one (lib_bn_pool_fits): the elementwise pass stores the output and sums
 * it, so that the pool does not read it back. 1 when they run so, 0 when
 * not, -1 on failure. */
static int bn_pool_step(const Graph *g, LaunchPlan *lp, int s, CtErr *err)
{
    const FuseStep *fs = &lp->fuse.steps[s];
    if (s + 1 >= lp->fuse.nsteps || fs->kind != FUSE_LIBRARY || fs[1].kind != FUSE_LIBRARY || fs[1].n != 1)
        return 0;
    const Node *gap = &g->nodes[lp->fuse.nodes[fs[1].first]];
    int bn = lp->fuse.nodes[fs->first];
    if (!lib_bn_pool_fits(g, &lp->fuse, fs, gap))
        return 0;
    /* the pool's means are stored while the pass still reads x (the output
     * may take x's place, element for element, as in the pass alone) */
    if (!clear_of(g, lp, gap->out[0], &g->nodes[bn].in[0], 1, -1))
        return 0;
    LpStep *st = span_step(lp, s, 1);
    int tail;
    size_t scratch;
    if (lib_batch_norm_step(g, lp->sms, &lp->fuse, fs, lp->bn_coef[bn], gap, (LibBnRes){-1, -1}, 0, st->lib,
                            &st->nlib, &scratch, &tail, err))
        return ct_failctx(err, "node %d (batch_norm)", bn);
    lp->scratch_bytes = scratch > lp->scratch_bytes ? scratch : lp->scratch_bytes;
    return add_launches(g, lp, fs, tail, st, err) ? -1 : 1;
}

/* Where each training batch norm keeps its coefficients: a place of its
 * own in the kept region, or, run again by remat (its running mean input
 * the updated one of a batch norm of the same weight and bias, which comes
 * before it), that one's place, ready. */
static void keep_bn_coefs(const Graph *g, LaunchPlan *lp)
{
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        lp->bn_coef[i] = (LibBnCoef){-1, 0, -1};
        if (lp->plain || n->op != CT_OP_batch_norm || !n->iattr[0] || n->iattr[1] || n->nout < 3)
            continue;
        int p = remat_bn_forward(g, n);
        if (p >= 0 && lp->bn_coef[p].at >= 0) {
            lp->bn_coef[i] = (LibBnCoef){lp->bn_coef[p].at, 1, -1};
        } else if (role_is_state(g->values[n->in[3]].role)) {
            lp->bn_coef[i].at = (long long)lp->kept_bytes;
            lp->kept_bytes += 2 * sizeof(double) * (size_t)g->values[n->in[0]].type.shape.d[1];
        }
    }
}

/* lp->bn_res (launch_plan.h) for this round's memory plan: library step
 * t, a batch norm whose step adds the output of a training batch norm
 * alone in an earlier library step s (but its assigns), read nowhere
 * else, whose coefficients are kept (a downsampling shortcut's, in a
 * residual block's last norm; and the two run again by remat), takes that
 * output from the other norm's x where lib_bn_res_fits and x outlives
 * step t (the memory plan's: nothing stored meanwhile lies over it);
 * step s then computes its statistics alone, or nothing where they are
 * kept already, and its output is never stored. */
static void bn_res_steps(const Graph *g, LaunchPlan *lp)
{
    const FusePlan *p = &lp->fuse;
    int *step_of = malloc(sizeof *step_of * (size_t)(g->nnodes + 1));
    CT_ASSERT(step_of != NULL);
    for (int t = 0; t < p->nsteps; t++) {
        lp->bn_res[t] = -1;
        for (int j = 0; j < p->steps[t].n; j++)
            step_of[p->nodes[p->steps[t].first + j]] = t;
    }
    for (int t = 0; t < p->nsteps && !lp->plain; t++) {
        const FuseStep *ft = &p->steps[t];
        if (ft->kind != FUSE_LIBRARY || g->nodes[p->nodes[ft->first]].op != CT_OP_batch_norm)
            continue;
        for (int j = 1; j < ft->n; j++) {
            const Node *add = &g->nodes[p->nodes[ft->first + j]];
            for (int k = 0; add->op == CT_OP_add && k < 2; k++) {
                int a = g->values[add->in[k]].producer, s = a >= 0 ? step_of[a] : -1;
                if (s < 0 || s >= t || lp->bn_res[s] != -1 || p->nodes[p->steps[s].first] != a ||
                    p->steps[s].kind != FUSE_LIBRARY || graph_reads(g, add->in[k]) != 1 ||
                    !lib_bn_res_fits(g, p, ft, &g->nodes[a], lp->bn_coef[a]))
                    continue;
                int body = 1;
                while (body < p->steps[s].n && g->nodes[p->nodes[p->steps[s].first + body]].op == CT_OP_assign)
                    body++;
                ValueId x = g->nodes[a].in[0];
                if (body != p->steps[s].n || lp->mem.offset[x] == PLAN_NONE ||
                    lp->mem.last[x] < ft->first + ft->n)
                    continue;
                lp->bn_res[t] = s;
                lp->bn_res[s] = -2;
            }
        }
    }
    free(step_of);
}

/* A library step from fusion step s taking the steps after it, where
 * one fits: how many it spans (0: none fits, -1: failed). */
static int spanning_step(const Graph *g, LaunchPlan *lp, int s, const int *bn_act, CtErr *err)
{
    if (lp->bn_res[s] != -1) /* a pair of batch norms' steps (bn_res_steps) */
        return 0;
    int rerun = bn_rerun_of(lp, s, bn_act);
    int span = rerun >= 0      ? bn_act_grad_step(g, lp, s, rerun, err)
               : bn_act[s] >= 0 ? bn_act_grad_step(g, lp, s, bn_act[s], err)
                                : layer_norm_res_step(g, lp, s, err);
    if (span == 0)
        span = bn_pool_step(g, lp, s, err);
    if (span == 0)
        span = bn_excite_grad_step(g, lp, s, bn_act, err);
    if (span == 0)
        span = bn_sum_grad_step(g, lp, s, err);
    if (span == 0)
        span = reduce_side_step(g, lp, s, err);
    if (span == 0)
        span = cast_copy_step(g, lp, s, err);
    if (span == 0)
        span = layer_norm_low_step(g, lp, s, err);
    return span;
}

/* What launch_plan's rounds share: the fusion plan, the graph in its
 * step order, each launch's kernel, where each batch norm keeps its
 * coefficients. */
static int plan_kernels(const Graph *g, int sms, LaunchPlan *lp, CtErr *err)
{
    memset(lp, 0, sizeof *lp);
    lp->sms = sms;
    lp->plain = plain_steps();
    if (fuse_plan(g, &lp->fuse, err))
        return -1;
    fuse_ordered_graph(g, &lp->fuse, &lp->og);
    lp->nk = lp->fuse.kernels_after;
    lp->k = calloc((size_t)lp->nk + 1, sizeof *lp->k);
    lp->bn_coef = malloc(sizeof *lp->bn_coef * (size_t)(g->nnodes + 1));
    CT_ASSERT(lp->k && lp->bn_coef);
    keep_bn_coefs(g, lp);
    keep_bn_sums(g, lp);
    for (int l = 0; l < lp->nk; l++)
        if (kir_lowerable(&lp->fuse, l) && kir_lower(g, &lp->fuse, l, (KirOptions){KIR_F32, 1}, &lp->k[l], err))
            return -1;
    return 0;
}

/* What a round of launch_plan makes: the memory plan, where each value
 * lives, the steps. */
static void free_round(LaunchPlan *lp)
{
    for (int s = 0; s < lp->nsteps; s++) {
        free(lp->steps[s].lib);
        free(lp->steps[s].fallback);
    }
    free(lp->steps);
    free(lp->offset);
    free(lp->alias);
    plan_free(&lp->mem);
    lp->steps = NULL;
    lp->offset = NULL;
    lp->alias = NULL;
    lp->nsteps = lp->unsupported = 0;
    lp->device_bytes = lp->scratch_bytes = lp->counters = 0;
}

/* One round of launch_plan over plan_kernels' lp (bn_act: the fusion
 * plan's fuse_bn_act_grad_steps): its memory plan given the lifetimes
 * asked before, asking for more where `asks` is not NULL. */
static int plan_round(const Graph *g, const int *bn_act, const PlanHints *given, LpAsks *asks, LaunchPlan *lp,
                      CtErr *err)
{
    lp->asks = asks;
    lp->steps = calloc((size_t)lp->fuse.nsteps + 1, sizeof *lp->steps);
    lp->offset = calloc((size_t)g->nvalues + 1, sizeof *lp->offset);
    lp->alias = malloc(sizeof *lp->alias * (size_t)(g->nvalues + 1));
    CT_ASSERT(lp->steps && lp->offset && lp->alias);
    for (ValueId v = 0; v < g->nvalues; v++)
        lp->alias[v] = -1;
    if (plan_memory_hinted(&lp->og, given, &lp->mem, err))
        goto fail;
    place_values(g, lp);
    lp->bn_res = malloc(sizeof *lp->bn_res * (size_t)(lp->fuse.nsteps + 1));
    CT_ASSERT(lp->bn_res != NULL);
    bn_res_steps(g, lp);
    for (int s = 0, last_launch = -1; s < lp->fuse.nsteps; s++) {
        const FuseStep *fs = &lp->fuse.steps[s];
        int span = lp->plain ? 0 : spanning_step(g, lp, s, bn_act, err);
        if (span < 0)
            goto fail;
        if (span) {
            s += span;
            continue;
        }
        if (fs->kind == FUSE_COPY) {
            const Node *n = &g->nodes[lp->fuse.nodes[fs->first]];
            LpStep *st = add_step(lp, LP_COPY, s);
            st->copy_dst = n->in[0];
            st->copy_src = n->in[1];
        } else if (fs->kind == FUSE_LIBRARY) {
            if (library_step(g, lp, s, err) || (lp->plain ? 0 : gemm_bias_grad_step(g, lp, s, err)) < 0)
                goto fail;
            s += lp->steps[lp->nsteps - 1].span;
        } else if (fs->view) { /* a copy, unless the memory plan gave it its input's address */
            LpStep *st = add_step(lp, LP_LIB, s);
            if (!same_address(lp, g, fs) && add_launches(g, lp, fs, 0, st, err))
                goto fail;
        } else if (!kir_lowerable(&lp->fuse, fs->launch)) {
            LpStep *st = add_step(lp, LP_UNSUPPORTED, s);
            st->op = op_def(g->nodes[lp->fuse.nodes[fs->first]].op)->name;
            lp->unsupported++;
        } else if (fs->launch != last_launch) { /* a multi-tensor launch runs once for all its steps */
            LpStep *st = add_step(lp, LP_KERNEL, s);
            const KirKernel *k = &lp->k[fs->launch];
            long long most = 0;
            for (int j = 0; j < k->nloops; j++)
                most = k->loops[j].numel > most ? k->loops[j].numel : most;
            st->launch = fs->launch;
            st->block = LP_BLOCK;
            st->grid = lp_grid(most, lp->sms);
            last_launch = fs->launch;
        }
    }
    view_state(g, lp);
    for (int s = 0; s < lp->nsteps; s++) {
        const LpStep *st = &lp->steps[s];
        for (int j = 0; j < st->nlib + st->nfallback; j++) {
            const LibLaunch *l = j < st->nlib ? &st->lib[j] : &st->fallback[j - st->nlib];
            for (int a = 0; a < l->nargs; a++)
                if (l->arg[a].kind == LA_COUNTERS && (size_t)l->arg[a].i > lp->counters)
                    lp->counters = (size_t)l->arg[a].i;
        }
    }
    lp->asks = NULL;
    free(lp->bn_res);
    lp->bn_res = NULL;
    return 0;
fail:
    lp->asks = NULL;
    free(lp->bn_res);
    lp->bn_res = NULL;
    return -1;
}

/* Rounds while the fused steps ask for lifetimes (a stored value the
 * memory plan put over one the step still reads, which would split the
 * step), each planned with all asked before; a last one asks nothing. */
int launch_plan(const Graph *g, int sms, LaunchPlan *lp, CtErr *err)
{
    LpAsks asks = {{malloc(sizeof(int) * (size_t)(g->nvalues + 1)), malloc(sizeof(int) * (size_t)(g->nvalues + 1))}, 0};
    CT_ASSERT(asks.h.born && asks.h.until);
    for (ValueId v = 0; v < g->nvalues; v++)
        asks.h.born[v] = asks.h.until[v] = -1;
    int rc = plan_kernels(g, sms, lp, err), *bn_act = rc ? NULL : fuse_bn_act_grad_steps(g, &lp->fuse, 0);
    for (int round = 0; rc == 0 && round < LP_ROUNDS; round++) {
        if (round)
            free_round(lp);
        asks.n = 0;
        rc = plan_round(g, bn_act, round ? &asks.h : NULL, round < LP_ROUNDS - 1 ? &asks : NULL, lp, err);
        if (!asks.n)
            break;
    }
    if (rc)
        launch_plan_free(lp);
    free(bn_act);
    free(asks.h.born);
    free(asks.h.until);
    return rc;
}

void launch_plan_free(LaunchPlan *lp)
{
    free_round(lp);
    for (int l = 0; l < lp->nk; l++)
        kir_free(&lp->k[l]);
    free(lp->k);
    free(lp->bn_coef);
    graph_free(&lp->og);
    fuse_free(&lp->fuse);
    memset(lp, 0, sizeof *lp);
}

/* Value v is placed: in the input or state blocks, inside the device
 * block, or stored into a state value of its type. */
static int placed(const Graph *g, const LaunchPlan *lp, ValueId v, CtErr *err)
{
    const Value *val = &g->values[v];
    if (lp->alias[v] >= 0)
        return role_is_state(g->values[lp->alias[v]].role) && value_bytes(&g->values[lp->alias[v]]) == value_bytes(val)
                   ? 0
                   : ct_fail(err, "%%%d is stored into %%%d, not a state value of its size", v, lp->alias[v]);
    if (val->role == CT_ROLE_INPUT || role_is_state(val->role))
        return lp->offset[v] == PLAN_NONE ? 0 : ct_fail(err, "input or state %%%d has a device-block offset", v);
    if (lp->offset[v] == PLAN_NONE || lp->offset[v] + value_bytes(val) > lp->device_bytes)
        return ct_fail(err, "%%%d is not inside the %zu-byte device block", v, lp->device_bytes);
    return 0;
}

int launch_plan_check(const Graph *g, const LaunchPlan *lp, CtErr *err)
{
    int *seen = calloc((size_t)g->nnodes + 1, sizeof *seen), rc = -1;
    CT_ASSERT(seen != NULL);
    for (int i = 0; i < lp->nsteps; i++) {
        const LpStep *st = &lp->steps[i];
        for (int s = 0; s < lp->fuse.nsteps; s++) {
            const FuseStep *fs = &lp->fuse.steps[s];
            int mine = runs(lp, st, s);
            if (mine && st->kind == LP_KERNEL && !lp->k[st->launch].nloops) {
                ct_fail(err, "step %d: kernel ct_k%d has no loops", i, st->launch);
                goto done;
            }
            for (int j = 0; mine && j < fs->n; j++)
                seen[lp->fuse.nodes[fs->first + j]]++;
        }
        int tail = st->kind == LP_GEMM ? st->gemm.epi.tail : st->kind == LP_CONV ? st->conv.epi.tail : 0;
        const FuseStep *fs = &lp->fuse.steps[st->fuse_step];
        if ((st->kind == LP_GEMM || st->kind == LP_CONV) && st->nlib < fs->n - tail) {
            ct_fail(err, "step %d: %d epilogue nodes but %d launches", i, fs->n - tail, st->nlib);
            goto done;
        }
        if (st->twin && (st->kind != LP_LIB || st->conv.groups != st->conv.c || st->span > 1 ||
                         st->nfallback < fs->n - st->conv.epi.tail + st->span)) {
            ct_fail(err, "step %d: its twin is not a depthwise convolution's call with a launch per node after it", i);
            goto done;
        }
        if (st->span && st->kind == LP_GEMM &&
            (st->span != 1 || st->gemm.epi.bgrad < 0 || st->nfallback < 1 ||
             st->gemm.epi.bgrad != g->nodes[lp->fuse.nodes[lp->fuse.steps[st->fuse_step + 1].first]].out[0])) {
            ct_fail(err, "step %d: a GEMM spans a step other than its bias gradient", i);
            goto done;
        }
        for (int l = 0; l <= st->nlib + st->nfallback; l++) {
            const LibLaunch *ll = l < st->nlib                  ? &st->lib[l]
                                  : l < st->nlib + st->nfallback ? &st->fallback[l - st->nlib]
                                  : st->mirrored                 ? &st->mirror
                                                                 : NULL;
            for (int a = 0; ll && a < ll->nargs; a++)
                if (ll->arg[a].kind == LA_VALUE && placed(g, lp, ll->arg[a].v, err))
                    goto done;
        }
        if (st->mirrored && (!st->conv.w_nhwc || !st->conv.x_nhwc ||
                             value_bytes(&g->values[st->conv.wt]) > lp->scratch_bytes)) {
            ct_fail(err, "step %d: the filter's NHWC copy does not match the activations or fit the scratch", i);
            goto done;
        }
    }
    for (int n = 0; n < g->nnodes; n++) {
        if (seen[n] != 1) {
            ct_fail(err, "node %d (%s) is in %d steps' work", n, op_def(g->nodes[n].op)->name, seen[n]);
            goto done;
        }
        const Node *node = &g->nodes[n];
        for (int i = 0; i < node->nin; i++)
            if (placed(g, lp, node->in[i], err))
                goto done;
        for (int o = 0; o < node->nout; o++)
            if (placed(g, lp, node->out[o], err))
                goto done;
    }
    /* the arena by the memory plan's own check; the spill area holds values one after another */
    if (plan_check(&lp->og, &lp->mem, err))
        goto done;
    for (ValueId u = 0; u < g->nvalues; u++)
        for (ValueId w = u + 1; lp->offset[u] != PLAN_NONE && lp->offset[u] >= lp->mem.arena_bytes && w < g->nvalues;
             w++)
            if (lp->offset[w] != PLAN_NONE && lp->offset[w] >= lp->mem.arena_bytes &&
                lp->offset[u] < lp->offset[w] + value_bytes(&g->values[w]) &&
                lp->offset[w] < lp->offset[u] + value_bytes(&g->values[u])) {
                ct_fail(err, "spilled values %%%d and %%%d overlap", u, w);
                goto done;
            }
    rc = 0;
done:
    free(seen);
    return rc;
}

void lp_step_label(const LaunchPlan *lp, const Graph *g, int s, int nops, int twin, CtBuf *out)
{
    static const char *const dirs[] = {"fwd", "bwd-data", "bwd-filter"};
    const LpStep *st = &lp->steps[s];
    const FuseStep *fs = &lp->fuse.steps[st->fuse_step];
    twin = twin && st->twin;
    switch (twin ? LP_CONV : st->kind) {
    case LP_KERNEL: buf_printf(out, "kernel"); break;
    case LP_GEMM: buf_printf(out, "cuBLASLt GEMM"); break;
    case LP_CONV:
        buf_printf(out, "cuDNN conv %s%s%s", dirs[st->conv.dir], st->conv.stats >= 0 ? "+stats" : "",
                   twin ? " twin" : "");
        break;
    case LP_LIB: buf_printf(out, "library"); break;
    case LP_COPY: buf_printf(out, "copy"); break;
    case LP_UNSUPPORTED: buf_printf(out, "unsupported"); break;
    }
    const LibLaunch *l = twin ? st->fallback : st->lib;
    for (int j = 0; j < (twin ? st->nfallback : st->nlib); j++)
        buf_printf(out, " %s", l[j].kernel);
    buf_printf(out, " (");
    int shown = 0, ops = 0;
    for (int k = 0; k <= st->span; k++)
        for (int j = 0; j < fs[k].n; j++, ops++)
            if (shown < nops)
                buf_printf(out, "%s%s", shown++ ? " " : "", op_def(g->nodes[lp->fuse.nodes[fs[k].first + j]].op)->name);
    buf_printf(out, "%s)", ops > nops ? " ..." : "");
}
