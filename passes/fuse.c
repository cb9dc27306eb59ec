/* Contract: fuse_plan(g) partitions g's nodes into steps (passes/fuse.h)
 * without changing g: greedy in node order, a node joins the latest step it
 * can (an earlier step may never read a later one, so creation order is a
 * valid schedule), adjacent steps over the same elements that load the same
 * input merge, elementwise nodes read only in a later step sink into it,
 * then assigns are taken over by the groups computing their sources and
 * optimizer groups, writes into state, the groups feeding them and groups
 * reading only state are batched into few launches. A value is written to memory iff it is read
 * outside its step or is a graph output. */
#include "passes/fuse.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ir/buf.h"

static int64_t numel_of(const Graph *g, ValueId v) { return shape_numel(&g->values[v].type.shape); }

/* The memory order of a value: its layout when it is 4-D (the only
 * tensors a layout applies to), else row-major. */
static CtLayout order_of(const Graph *g, ValueId v)
{
    return g->values[v].type.shape.ndim == 4 ? g->values[v].layout : CT_LAYOUT_CONTIG;
}

/* Whether element i of v in memory is element i of w in memory. */
static int same_elements(const Graph *g, ValueId v, ValueId w)
{
    return numel_of(g, v) == numel_of(g, w) && order_of(g, v) == order_of(g, w);
}

int fuse_is_elementwise(const Graph *g, const Node *n)
{
    switch (op_def(n->op)->fusion) {
    case OP_ELEMENTWISE: case OP_ACTIVATION:
        return 1;
    case OP_VIEW: /* a view when both sides are row-major */
        return value_row_major(&g->values[n->in[0]]) && value_row_major(&g->values[n->out[0]]);
    default:
        return 0;
    }
}

/* An optimizer update whose launches batch (OpDef.batch_from: the first
 * input the batch must share, after p, g and the state shaped like p). */
static int is_update(CtOp op) { return op_def(op)->batch_from > 0; }
static int is_act(CtOp op) { return op_def(op)->fusion == OP_ACTIVATION; }

typedef struct Builder {
    const Graph *g;
    FuseStep *steps; /* in creation order; at most one per node */
    int nsteps;
    int *tip;        /* per step: the value a library epilogue continues from, -1 */
    int *batch;      /* per step: the node batch_updates batches it by (batch_node), -1 */
    int *pos;        /* per step: where it runs (steps sort by pos, then creation) */
    char *dead;      /* per step: emptied (an assign taken over) */
    int *step_of;    /* per node */
    int *nreaders, **readers; /* per value: the nodes reading it */
} Builder;

static int new_step(Builder *b, FuseKind kind, int node)
{
    const Node *n = &b->g->nodes[node];
    int s = b->nsteps++;
    /* until lay_out, `first` is the node that made the step */
    b->steps[s] = (FuseStep){.kind = kind, .first = node, .numel = n->nout ? numel_of(b->g, n->out[0]) : 0};
    b->tip[s] = kind == FUSE_LIBRARY && n->nout &&
                        (op_def(n->op)->fusion == OP_CONTRACTION || n->op == CT_OP_batch_norm ||
                         n->op == CT_OP_layer_norm_grad)
                    ? n->out[0]
                    : -1;
    b->step_of[node] = s;
    return s;
}

static int producer_step(const Builder *b, ValueId v)
{
    int p = b->g->values[v].producer;
    return p >= 0 ? b->step_of[p] : -1;
}

/* The epilogue part node n would add to library step s, or 0: a bias add
 * (the other operand one value per output channel; a contraction's only, a
 * batch_norm has its own shift), a residual add (the same shape), an
 * activation; in that order, each at most once, each on the step's last
 * value, its other operand from an earlier step. A layer_norm_grad's: the
 * residual add (the residual stream's gradient), then a cast of the sum. */
static int epilogue_part(const Builder *b, int s, const Node *n)
{
    const Graph *g = b->g;
    int epi = b->steps[s].epilogue;
    ValueId t = b->tip[s];
    CtOp host = g->nodes[b->steps[s].first].op;
    if (t < 0 || !same_elements(g, t, n->out[0]) || (epi & FUSE_EPI_CAST))
        return 0;
    if (host == CT_OP_layer_norm_grad && n->op == CT_OP_cast)
        return n->in[0] == t && (epi & FUSE_EPI_RESIDUAL) ? FUSE_EPI_CAST : 0;
    if (is_act(n->op) && n->in[0] == t && !(epi & FUSE_EPI_ACT) && host != CT_OP_layer_norm_grad)
        return FUSE_EPI_ACT;
    if (n->op != CT_OP_add || (n->in[0] != t) == (n->in[1] != t) || (epi & (FUSE_EPI_RESIDUAL | FUSE_EPI_ACT)))
        return 0;
    ValueId other = n->in[0] == t ? n->in[1] : n->in[0];
    if (producer_step(b, other) >= s)
        return 0;
    const CtShape *ts = &g->values[t].type.shape;
    if (same_elements(g, other, t) && shape_equal(&g->values[other].type.shape, ts))
        return FUSE_EPI_RESIDUAL;
    if (op_def(host)->fusion != OP_CONTRACTION)
        return 0;
    /* a bias varies along the channel dim only: conv's dim 1, a GEMM's last */
    int channel = host == CT_OP_conv2d ? 1 : ts->ndim - 1;
    int64_t st[CT_MAX_DIMS];
    shape_broadcast_strides(&g->values[other].type.shape, ts, st);
    for (int d = 0; d < ts->ndim; d++)
        if (st[d] && d != channel)
            return 0;
    return epi & FUSE_EPI_BIAS ? 0 : FUSE_EPI_BIAS;
}

/* The elementwise step node n can join (the latest one that computes an
 * input n reads element for element, in n's iteration space, when every
 * other input comes from an earlier step), or -1. */
static int elementwise_target(const Builder *b, const Node *n)
{
    const Graph *g = b->g;
    int best = -1;
    for (int k = 0; k < n->nin; k++) {
        int s = producer_step(b, n->in[k]);
        if (s > best && b->steps[s].kind == FUSE_ELEMENTWISE && same_elements(g, n->in[k], n->out[0]))
            best = s;
    }
    if (best < 0)
        return -1;
    for (int k = 0; k < n->nin; k++) {
        int s = producer_step(b, n->in[k]);
        if (s > best || (s == best && !same_elements(g, n->in[k], n->out[0])))
            return -1;
    }
    return best;
}

static void place_node(Builder *b, int i)
{
    const Graph *g = b->g;
    const Node *n = &g->nodes[i];
    if (n->op == CT_OP_assign) {
        new_step(b, FUSE_COPY, i);
        return;
    }
    if (!fuse_is_elementwise(g, n)) {
        new_step(b, FUSE_LIBRARY, i);
        return;
    }
    for (int k = 0; k < n->nin; k++) {
        int s = producer_step(b, n->in[k]);
        int part = s >= 0 && b->steps[s].kind == FUSE_LIBRARY ? epilogue_part(b, s, n) : 0;
        if (part) {
            b->steps[s].epilogue |= part;
            b->tip[s] = n->out[0];
            b->step_of[i] = s;
            return;
        }
    }
    int s = elementwise_target(b, n);
    if (s < 0)
        s = new_step(b, FUSE_ELEMENTWISE, i);
    b->step_of[i] = s;
}

/* The reader lists of every value. */
static void index_readers(Builder *b)
{
    const Graph *g = b->g;
    int total = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            b->nreaders[g->nodes[i].in[k]]++, total++;
    int *flat = malloc(sizeof *flat * (size_t)(total ? total : 1));
    CT_ASSERT(flat != NULL);
    for (ValueId v = 0, at = 0; v < g->nvalues; v++) {
        b->readers[v] = flat + at;
        at += b->nreaders[v];
        b->nreaders[v] = 0;
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            ValueId v = g->nodes[i].in[k];
            b->readers[v][b->nreaders[v]++] = i;
        }
}

/* Whether nodes a and c are one op with the same attributes and the same
 * inputs from input `from` on. */
static int same_node(const Node *a, const Node *c, int from)
{
    if (a->op != c->op || a->nin != c->nin || memcmp(a->iattr, c->iattr, sizeof a->iattr) ||
        memcmp(a->fattr, c->fattr, sizeof a->fattr))
        return 0;
    for (int k = from; k < a->nin; k++)
        if (a->in[k] != c->in[k])
            return 0;
    return 1;
}

/* The first position at which another step reads what step s computes
 * (INT_MAX when none does): s may run anywhere before it. */
static int first_reader(const Builder *b, int s)
{
    const Graph *g = b->g;
    int first = INT_MAX;
    for (int i = 0; i < g->nnodes; i++) {
        if (b->step_of[i] != s)
            continue;
        for (int o = 0; o < g->nodes[i].nout; o++) {
            ValueId v = g->nodes[i].out[o];
            for (int r = 0; r < b->nreaders[v]; r++) {
                int t = b->step_of[b->readers[v][r]];
                if (t != s && b->pos[t] < first)
                    first = b->pos[t];
            }
        }
    }
    return first;
}

/* Steps group[0..n) as one launch, at the position of the last of them. */
static void close_batch(Builder *b, const int *group, int n, int *launch_of)
{
    for (int k = 0; n > 1 && k < n; k++) {
        b->pos[group[k]] = b->pos[group[n - 1]];
        launch_of[group[k]] = group[0];
    }
}

/* The node elementwise step s batches by: its first update, else its one
 * other node when all the step computes goes into state (its assigns
 * taken, nothing else reading it); -1 for none. */
static int batch_node(const Builder *b, int s)
{
    const Graph *g = b->g;
    if (b->steps[s].kind != FUSE_ELEMENTWISE || b->dead[s])
        return -1;
    int node = -1, nodes = 0, writes = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (b->step_of[i] != s)
            continue;
        if (is_update(g->nodes[i].op))
            return i;
        if (g->nodes[i].op == CT_OP_assign)
            writes = 1;
        else if (nodes++ == 0)
            node = i;
    }
    return nodes == 1 && writes && g->nodes[node].nin && first_reader(b, s) == INT_MAX ? node : -1;
}

/* Whether batch nodes a and c batch together: updates of one kind (the
 * inputs from OpDef.batch_from on shared), or the same write into their
 * state (in[0]; batch_norm's num_batches_tracked + 1). */
static int same_batch(const Node *a, const Node *c)
{
    return is_update(a->op) ? same_node(a, c, op_def(a->op)->batch_from) : !is_update(c->op) && same_node(a, c, 1);
}

/* The steps marked in `in` that `same` pairs with the first of them run as
 * one launch, at the position of the last of them. Greedy in step order: a
 * batch takes the next such step while what every step of it computes is
 * read after that step only. */
static void batch_greedy(Builder *b, const char *in, int (*same)(const Builder *, int, int), int *launch_of)
{
    char *done = calloc((size_t)b->nsteps + 1, 1);
    int *group = malloc(sizeof *group * (size_t)(b->nsteps + 1));
    CT_ASSERT(done && group);
    for (int s = 0; s < b->nsteps; s++) {
        if (!in[s] || done[s])
            continue;
        int n = 0, until = INT_MAX; /* the batch may run before `until` */
        for (int t = s; t < b->nsteps; t++) {
            if (!in[t] || done[t] || !same(b, s, t))
                continue;
            done[t] = 1;
            if (b->pos[t] >= until) {
                close_batch(b, group, n, launch_of);
                n = 0, until = INT_MAX;
            }
            int first = first_reader(b, t);
            until = first < until ? first : until;
            group[n++] = t;
        }
        close_batch(b, group, n, launch_of);
    }
    free(group);
    free(done);
}

static int same_batch_step(const Builder *b, int s, int t)
{
    return same_batch(&b->g->nodes[b->batch[s]], &b->g->nodes[b->batch[t]]);
}

/* Elementwise steps with the same kind of update, or of write into state,
 * batch (batch_greedy): an update whose parameter a later step still reads
 * keeps its assign there, which ends its batch before it. */
static void batch_updates(Builder *b, int *launch_of)
{
    char *in = malloc((size_t)b->nsteps + 1);
    CT_ASSERT(in != NULL);
    for (int s = 0; s < b->nsteps; s++)
        in[s] = (char)((b->batch[s] = batch_node(b, s)) >= 0);
    batch_greedy(b, in, same_batch_step, launch_of);
    free(in);
}

/* Step s's nodes in graph order into at[], at most STEP_NODES_MAX of
 * them: their count, or -1 for more. */
#define STEP_NODES_MAX 8
static int step_nodes(const Builder *b, int s, int *at)
{
    int n = 0;
    for (int i = 0; i < b->g->nnodes; i++)
        if (b->step_of[i] == s) {
            if (n == STEP_NODES_MAX)
                return -1;
            at[n++] = i;
        }
    return n;
}

/* Whether steps s and t compute the same thing of other tensors: node for
 * node one op with the same attributes, an input made in the step made by
 * the same node of each, one from another step free, one from state or the
 * inputs the same (the loss scale an unscale divides by). */
static int same_work(const Builder *b, int s, int t)
{
    const Graph *g = b->g;
    int a[STEP_NODES_MAX], c[STEP_NODES_MAX], n = step_nodes(b, s, a);
    if (n < 1 || step_nodes(b, t, c) != n)
        return 0;
    for (int j = 0; j < n; j++) {
        const Node *x = &g->nodes[a[j]], *y = &g->nodes[c[j]];
        if (!same_node(x, y, x->nin))
            return 0;
        for (int k = 0; k < x->nin; k++) {
            int px = g->values[x->in[k]].producer, py = g->values[y->in[k]].producer;
            int ix = px >= 0 && b->step_of[px] == s, iy = py >= 0 && b->step_of[py] == t;
            if (ix != iy || (px < 0) != (py < 0))
                return 0;
            int jx = 0, jy = 0;
            while (ix && a[jx] != px)
                jx++;
            while (iy && c[jy] != py)
                jy++;
            if ((ix && jx != jy) || (px < 0 && x->in[k] != y->in[k]))
                return 0;
        }
    }
    return 1;
}

/* Whether elementwise step s feeds batched launches only: it computes
 * something, takes no assign, and only steps of a batch (launch_of) read
 * what it makes (the unscale of a channels-last weight's gradient, which
 * the optimizer's batch reads in the parameter's layout). */
static int feeds_batches(const Builder *b, const int *launch_of, int s)
{
    const Graph *g = b->g;
    if (b->steps[s].kind != FUSE_ELEMENTWISE || b->dead[s] || b->batch[s] >= 0 || launch_of[s] >= 0)
        return 0;
    int reads = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (b->step_of[i] != s)
            continue;
        if (g->nodes[i].op == CT_OP_assign || op_def(g->nodes[i].op)->fusion == OP_VIEW)
            return 0;
        for (int o = 0; o < g->nodes[i].nout; o++)
            for (int r = 0; r < b->nreaders[g->nodes[i].out[o]]; r++) {
                int t = b->step_of[b->readers[g->nodes[i].out[o]][r]];
                if (t != s && launch_of[t] < 0)
                    return 0;
                reads += t != s;
            }
    }
    return reads > 0;
}

/* Steps feeding batches, the same work of other tensors, batch too
 * (batch_greedy), before the first step reading any of them. Each waits
 * with its input instead of its output (a gradient in bf16 instead of its
 * unscaled f32). */
static void batch_feeders(Builder *b, int *launch_of)
{
    char *feeds = malloc((size_t)b->nsteps + 1);
    CT_ASSERT(feeds != NULL);
    for (int s = 0; s < b->nsteps; s++)
        feeds[s] = (char)feeds_batches(b, launch_of, s);
    batch_greedy(b, feeds, same_work, launch_of);
    free(feeds);
}

/* The bytes a batch of casts of state may hold early: its outputs, made at
 * the first step of the batch instead of each before its reader. */
#define SOURCE_BATCH_BYTES ((size_t)32 << 20)

/* Levels of steps made from state alone that batch_sources batches. */
#define SOURCE_LEVELS 4

/* The bytes elementwise step s writes when it reads only state (a
 * parameter cast to the AMP dtype before its convolution) or what such
 * steps made of it (level: per step, how many such steps its inputs came
 * through, -1: not one; a batch norm's scale folded into the filter
 * before it, in eval), else 0; *lvl: s's level, *latest: the last batch
 * (src_first: per step, the first of its batch) s reads from, -1: none.
 * The input batch is not state: its cast goes with its layout change. */
static size_t source_bytes(const Builder *b, const int *level, const int *src_first, int s, int *lvl, int *latest)
{
    const Graph *g = b->g;
    if (b->steps[s].kind != FUSE_ELEMENTWISE || b->dead[s])
        return 0;
    size_t bytes = 0;
    int computes = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (b->step_of[i] != s)
            continue;
        const Node *n = &g->nodes[i];
        if (n->op == CT_OP_assign || is_update(n->op))
            return 0;
        for (int k = 0; k < n->nin; k++) {
            int from = producer_step(b, n->in[k]);
            if (from < 0 ? !role_is_state(g->values[n->in[k]].role) : from != s && level[from] < 0)
                return 0;
            if (from >= 0 && from != s) {
                *lvl = level[from] + 1 > *lvl ? level[from] + 1 : *lvl;
                *latest = src_first[from] > *latest ? src_first[from] : *latest;
            }
        }
        computes |= op_def(n->op)->fusion != OP_VIEW;
        for (int o = 0; o < n->nout; o++)
            bytes += value_bytes(&g->values[n->out[o]]);
    }
    return computes ? bytes : 0;
}

/* Elementwise steps that read only state, and those of one level
 * (source_bytes) reading what the ones before made of it, run as one
 * launch at the first of them, greedy in step order, a batch at most
 * SOURCE_BATCH_BYTES of outputs: what they read is there from the start,
 * or from batches that run before the first (a step reading a later one
 * opens a batch of its own), and every write into the state comes after
 * its readers. */
static void batch_sources(Builder *b, int *launch_of)
{
    int first[SOURCE_LEVELS];
    size_t held[SOURCE_LEVELS] = {0};
    for (int l = 0; l < SOURCE_LEVELS; l++)
        first[l] = -1;
    size_t ns = (size_t)b->nsteps + 1;
    int *level = malloc(sizeof *level * ns), *src_first = malloc(sizeof *src_first * ns);
    CT_ASSERT(level && src_first);
    for (int s = 0; s < b->nsteps; s++) {
        int lvl = 0, latest = -1;
        level[s] = src_first[s] = -1;
        size_t bytes = launch_of[s] < 0 ? source_bytes(b, level, src_first, s, &lvl, &latest) : 0;
        if (!bytes || lvl >= SOURCE_LEVELS)
            continue;
        level[s] = lvl;
        int *f = &first[lvl];
        if (*f < 0 || latest >= *f || held[lvl] + bytes > SOURCE_BATCH_BYTES) {
            *f = src_first[s] = s, held[lvl] = bytes;
            continue;
        }
        held[lvl] += bytes;
        src_first[s] = *f;
        b->pos[s] = b->pos[*f];
        launch_of[*f] = launch_of[s] = *f;
    }
    free(level);
    free(src_first);
}

/* Whether node r reads v element for element in its own iteration space. */
static int reads_in_place(const Graph *g, const Node *r, ValueId v)
{
    return r->nout && shape_equal(&g->values[v].type.shape, &g->values[r->out[0]].type.shape) &&
           same_elements(g, v, r->out[0]);
}

/* Whether the step computing src may store it into dst: an elementwise
 * step (element for element), or batch_norm writing the running statistic
 * it read (one channel at a time). */
static int may_store_into(const Builder *b, ValueId dst, ValueId src)
{
    const Graph *g = b->g;
    int s = producer_step(b, src);
    if (s < 0 || order_of(g, dst) != order_of(g, src))
        return 0;
    const Node *n = &g->nodes[g->values[src].producer];
    return b->steps[s].kind == FUSE_ELEMENTWISE ||
           (n->op == CT_OP_batch_norm && ((src == n->out[1] && dst == n->in[3]) || (src == n->out[2] && dst == n->in[4])));
}

/* An assign joins the step computing its source when that step may store
 * into the destination and every other reader of the destination runs
 * before it, or in it reading element for element (loads come before
 * stores, element by element). */
static void take_assigns(Builder *b)
{
    const Graph *g = b->g;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *a = &g->nodes[i];
        if (a->op != CT_OP_assign)
            continue;
        ValueId dst = a->in[0], src = a->in[1];
        int s = producer_step(b, src), ok = may_store_into(b, dst, src);
        for (int r = 0; ok && r < b->nreaders[dst]; r++) {
            int j = b->readers[dst][r], t = b->step_of[j];
            ok = j == i || b->pos[t] < b->pos[s] ||
                 (t == s && (b->steps[s].kind == FUSE_LIBRARY || reads_in_place(g, &g->nodes[j], dst)));
        }
        if (!ok)
            continue;
        b->dead[b->step_of[i]] = 1;
        b->step_of[i] = s;
    }
}

/* Whether the elementwise step s may take in step t, the next one made:
 * both compute something (a step of views only runs as no kernel), over the
 * same elements, no update nor assign in either (batch_updates and
 * take_assigns place those), t reads what s computes element for element
 * only, and t loads something s loads too. Node order within the merged
 * step stays the graph's, a valid order. */
static int siblings(const Builder *b, int s, int t)
{
    const Graph *g = b->g;
    const FuseStep *a = &b->steps[s], *c = &b->steps[t];
    if (a->kind != FUSE_ELEMENTWISE || c->kind != FUSE_ELEMENTWISE || a->numel != c->numel ||
        !same_elements(g, g->nodes[a->first].out[0], g->nodes[c->first].out[0]))
        return 0;
    int computes[2] = {0, 0}, shares = 0;
    for (int i = 0; i < g->nnodes; i++) {
        int which = b->step_of[i] == s ? 0 : b->step_of[i] == t ? 1 : -1;
        if (which < 0)
            continue;
        const Node *n = &g->nodes[i];
        if (is_update(n->op) || n->op == CT_OP_assign)
            return 0;
        computes[which] |= op_def(n->op)->fusion != OP_VIEW;
        for (int k = 0; which && k < n->nin; k++) {
            ValueId v = n->in[k];
            if (producer_step(b, v) == s && !same_elements(g, v, n->out[0]))
                return 0;
            for (int r = 0; r < b->nreaders[v] && !shares; r++)
                shares = b->step_of[b->readers[v][r]] == s && producer_step(b, v) != s;
        }
    }
    return computes[0] && computes[1] && shares;
}

/* Adjacent sibling steps as one (an activation's recomputation for the
 * backward beside its gradient, both from the same input): loads and the
 * work they share done once. Adjacent only: a node moved across other
 * steps would keep its output, or its inputs, alive for longer. */
static void merge_siblings(Builder *b)
{
    for (int t = 1, s = 0; t < b->nsteps; t++) {
        if (!siblings(b, s, t)) {
            s = t;
            continue;
        }
        for (int i = 0; i < b->g->nnodes; i++)
            if (b->step_of[i] == t)
                b->step_of[i] = s;
        b->dead[t] = 1;
    }
}

/* Whether node i may sink into step t, the later elementwise step that
 * holds every reader of its output: an elementwise node (no view, update
 * or assign) of one output, not a graph output, that every reader (no view
 * either) reads element for element in t's iteration space; none of its
 * inputs computed in its own step (they would have to be stored), and at
 * most one of them an element-for-element operand t does not load already
 * (each such is a load more in t, against the store and the load of the
 * output saved).
 * Never into an act_grad feeding a batch_norm_grad: alone in its step, the
 * two run as one (fuse_bn_act_grad_steps), which saves more. */
static int sink_target(const Builder *b, int i, const char *is_output)
{
    const Graph *g = b->g;
    const Node *n = &g->nodes[i];
    int s = b->step_of[i], t = -1;
    if (b->steps[s].kind != FUSE_ELEMENTWISE || n->nout != 1 || is_output[n->out[0]] || is_update(n->op) ||
        op_def(n->op)->fusion == OP_VIEW || !fuse_is_elementwise(g, n) || b->nreaders[n->out[0]] == 0)
        return -1;
    ValueId y = n->out[0];
    for (int r = 0; r < b->nreaders[y]; r++) {
        const Node *c = &g->nodes[b->readers[y][r]];
        int u = b->step_of[b->readers[y][r]];
        if ((t >= 0 && u != t) || u <= s || b->steps[u].kind != FUSE_ELEMENTWISE || c->op == CT_OP_assign ||
            op_def(c->op)->fusion == OP_VIEW || !c->nout || !same_elements(g, y, c->out[0]))
            return -1;
        for (int q = 0; c->op == CT_OP_act_grad && q < b->nreaders[c->out[0]]; q++)
            if (g->nodes[b->readers[c->out[0]][q]].op == CT_OP_batch_norm_grad)
                return -1;
        t = u;
    }
    int extra = 0;
    for (int k = 0; k < n->nin; k++) {
        ValueId v = n->in[k];
        if (producer_step(b, v) == s)
            return -1;
        int loaded = 0;
        for (int r = 0; r < b->nreaders[v] && !loaded; r++)
            loaded = b->step_of[b->readers[v][r]] == t;
        extra += same_elements(g, v, y) && !loaded;
    }
    return extra <= 1 ? t : -1;
}

/* Elementwise nodes whose output only a later step reads run in that step
 * (squeeze-excitation's dy * s, which the add of the pooled branch's
 * gradient reads after a reduction): the output is never stored, at the
 * cost of at most one load more there. Last nodes first, so that a chain
 * of them sinks together; a step left empty is dropped. */
static void sink_single_readers(Builder *b)
{
    const Graph *g = b->g;
    char *is_output = calloc((size_t)g->nvalues + 1, 1);
    int *count = calloc((size_t)b->nsteps + 1, sizeof *count);
    CT_ASSERT(is_output && count);
    for (int k = 0; k < g->noutputs; k++)
        is_output[g->outputs[k]] = 1;
    for (int i = 0; i < g->nnodes; i++)
        count[b->step_of[i]]++;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        int t = sink_target(b, i, is_output);
        if (t < 0)
            continue;
        int s = b->step_of[i];
        b->step_of[i] = t;
        count[t]++;
        b->dead[s] |= --count[s] == 0;
    }
    free(count);
    free(is_output);
}

/* Steps run by position, then by creation. */
static int by_key(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, c = *(const int64_t *)y;
    return (a > c) - (a < c);
}

static void mark_materialised(const Graph *g, FusePlan *p)
{
    char *is_output = calloc((size_t)g->nvalues + 1, 1);
    CT_ASSERT(is_output != NULL);
    for (int k = 0; k < g->noutputs; k++)
        is_output[g->outputs[k]] = 1;
    for (ValueId v = 0; v < g->nvalues; v++)
        p->materialised[v] = g->values[v].producer >= 0 && is_output[v];
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            ValueId v = g->nodes[i].in[k];
            int prod = g->values[v].producer;
            if (prod >= 0 && p->step_of[prod] != p->step_of[i])
                p->materialised[v] = 1;
        }
    free(is_output);
}

/* Lays the steps out in run order with their node lists, views and launch
 * ids, from the builder's per-node steps. */
static void lay_out(Builder *b, const int *launch_of, FusePlan *p)
{
    const Graph *g = b->g;
    int64_t *key = malloc(sizeof *key * (size_t)(b->nsteps + 1));
    int *order = malloc(sizeof *order * (size_t)(b->nsteps + 1));
    int *final = malloc(sizeof *final * (size_t)(b->nsteps + 1));
    int *launch_id = malloc(sizeof *launch_id * (size_t)(b->nsteps + 1));
    CT_ASSERT(key && order && final && launch_id);
    int n = 0;
    for (int s = 0; s < b->nsteps; s++)
        if (!b->dead[s])
            key[n++] = (int64_t)b->pos[s] * b->nsteps + s;
    qsort(key, (size_t)n, sizeof *key, by_key);
    for (int k = 0; k < n; k++)
        order[k] = (int)(key[k] % b->nsteps);
    p->steps = malloc(sizeof *p->steps * (size_t)(n + 1));
    CT_ASSERT(p->steps != NULL);
    p->nsteps = n;
    for (int k = 0; k < n; k++) {
        final[order[k]] = k;
        p->steps[k] = b->steps[order[k]];
        p->steps[k].first = p->steps[k].n = 0;
    }
    for (int i = 0; i < g->nnodes; i++)
        p->steps[p->step_of[i] = final[b->step_of[i]]].n++;
    for (int k = 0, at = 0; k < n; k++) {
        p->steps[k].first = at;
        at += p->steps[k].n;
        p->steps[k].n = 0;
    }
    for (int last = 0; last < 2; last++) /* the assigns a step took after its other nodes */
        for (int i = 0; i < g->nnodes; i++)
            if ((g->nodes[i].op == CT_OP_assign) == last) {
                FuseStep *s = &p->steps[p->step_of[i]];
                p->nodes[s->first + s->n++] = i;
            }
    for (int s = 0; s < b->nsteps; s++)
        launch_id[s] = -1;
    for (int k = 0; k < n; k++) {
        FuseStep *s = &p->steps[k];
        s->view = s->kind == FUSE_ELEMENTWISE;
        for (int j = 0; j < s->n; j++)
            s->view &= op_def(g->nodes[p->nodes[s->first + j]].op)->fusion == OP_VIEW;
        int batch = launch_of[order[k]] >= 0 ? launch_of[order[k]] : order[k];
        if (s->view)
            s->launch = -1;
        else if (launch_id[batch] >= 0)
            s->launch = launch_id[batch];
        else
            s->launch = launch_id[batch] = p->kernels_after++;
    }
    free(key);
    free(order);
    free(final);
    free(launch_id);
}

int fuse_plan(const Graph *g, FusePlan *p, CtErr *err)
{
    memset(p, 0, sizeof *p);
    if (graph_verify(g, err))
        return ct_failctx(err, "fuse");
    size_t nn = (size_t)g->nnodes + 1, nv = (size_t)g->nvalues + 1;
    Builder b = {.g = g};
    b.step_of = malloc(sizeof *b.step_of * nn);
    b.steps = malloc(sizeof *b.steps * nn);
    b.tip = malloc(sizeof *b.tip * nn);
    b.nreaders = calloc(nv, sizeof *b.nreaders);
    b.readers = calloc(nv, sizeof *b.readers);
    p->nodes = malloc(sizeof *p->nodes * nn);
    p->step_of = malloc(sizeof *p->step_of * nn);
    p->materialised = calloc(nv, 1);
    CT_ASSERT(b.step_of && b.steps && b.tip && b.nreaders && b.readers && p->nodes && p->step_of && p->materialised);
    for (int i = 0; i < g->nnodes; i++)
        place_node(&b, i);
    size_t ns = (size_t)b.nsteps + 1;
    b.batch = malloc(sizeof *b.batch * ns);
    b.pos = malloc(sizeof *b.pos * ns);
    b.dead = calloc(ns, 1);
    int *launch_of = malloc(sizeof *launch_of * ns);
    CT_ASSERT(b.batch && b.pos && b.dead && launch_of);
    for (int s = 0; s < b.nsteps; s++)
        b.batch[s] = launch_of[s] = -1, b.pos[s] = s;
    index_readers(&b);
    merge_siblings(&b);
    sink_single_readers(&b);
    take_assigns(&b);
    batch_updates(&b, launch_of);
    batch_feeders(&b, launch_of);
    batch_sources(&b, launch_of);
    lay_out(&b, launch_of, p);
    p->kernels_before = g->nnodes;
    mark_materialised(g, p);
    free(launch_of);
    free(b.dead);
    free(b.pos);
    free(b.batch);
    free(b.readers[0]);
    free(b.readers);
    free(b.nreaders);
    free(b.step_of);
    free(b.tip);
    free(b.steps);
    return 0;
}

void fuse_free(FusePlan *p)
{
    free(p->steps);
    free(p->nodes);
    free(p->step_of);
    free(p->materialised);
    memset(p, 0, sizeof *p);
}

int fuse_check(const Graph *g, const FusePlan *p, CtErr *err)
{
    int *seen = calloc((size_t)g->nnodes + 1, sizeof *seen);
    char *mat = calloc((size_t)g->nvalues + 1, 1);
    CT_ASSERT(seen && mat);
    int rc = -1;
    for (int s = 0; s < p->nsteps; s++)
        for (int j = 0; j < p->steps[s].n; j++) {
            int i = p->nodes[p->steps[s].first + j];
            if (seen[i]++ || p->step_of[i] != s) {
                ct_fail(err, "node %d is in more than one step, or not where step_of says", i);
                goto done;
            }
        }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        int s = p->step_of[i];
        if (!seen[i]) {
            ct_fail(err, "node %d (%s) is in no step", i, op_def(n->op)->name);
            goto done;
        }
        for (int k = 0; k < n->nin; k++) {
            int prod = g->values[n->in[k]].producer;
            if (prod >= 0 && p->step_of[prod] > s) {
                ct_fail(err, "step %d reads %%%d before step %d computes it", s, n->in[k], p->step_of[prod]);
                goto done;
            }
        }
        const FuseStep *st = &p->steps[s];
        if (st->kind == FUSE_ELEMENTWISE && n->op != CT_OP_assign &&
            (!fuse_is_elementwise(g, n) || numel_of(g, n->out[0]) != st->numel)) {
            ct_fail(err, "node %d (%s) does not belong in elementwise step %d", i, op_def(n->op)->name, s);
            goto done;
        }
        if (n->op == CT_OP_assign && st->kind != FUSE_COPY)
            for (int r = 0; r < g->nnodes; r++)
                for (int k = 0; k < g->nodes[r].nin; k++)
                    if (r != i && g->nodes[r].in[k] == n->in[0] && p->step_of[r] > s) {
                        ct_fail(err, "step %d writes %%%d, which step %d reads later", s, n->in[0], p->step_of[r]);
                        goto done;
                    }
    }
    for (int k = 0; k < g->noutputs; k++)
        mat[g->outputs[k]] = g->values[g->outputs[k]].producer >= 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int prod = g->values[g->nodes[i].in[k]].producer;
            mat[g->nodes[i].in[k]] |= prod >= 0 && p->step_of[prod] != p->step_of[i];
        }
    for (ValueId v = 0; v < g->nvalues; v++)
        if (mat[v] != p->materialised[v]) {
            ct_fail(err, "%%%d is %s, against the materialisation rule", v,
                    p->materialised[v] ? "written" : "not written");
            goto done;
        }
    rc = 0;
done:
    free(seen);
    free(mat);
    return rc;
}

void fuse_dump(const Graph *g, const FusePlan *p, CtBuf *out)
{
    static const char *const kind[] = {"library", "elementwise", "copy"};
    buf_printf(out, "fuse: %d steps, %d kernels (%d before fusion, one per node)\n", p->nsteps, p->kernels_after,
               p->kernels_before);
    for (int s = 0; s < p->nsteps; s++) {
        const FuseStep *st = &p->steps[s];
        if (st->view)
            buf_printf(out, "view  ");
        else
            buf_printf(out, "k%-4d ", st->launch);
        buf_printf(out, "%s", kind[st->kind]);
        if (st->kind == FUSE_ELEMENTWISE && !st->view)
            buf_printf(out, " x%lld", (long long)st->numel);
        buf_printf(out, ":");
        for (int j = 0; j < st->n; j++) {
            const Node *n = &g->nodes[p->nodes[st->first + j]];
            if (n->op == CT_OP_assign)
                buf_printf(out, " assign(%%%d<-%%%d)", n->in[0], n->in[1]);
            else
                buf_printf(out, " %s(%%%d)", op_def(n->op)->name, n->out[0]);
        }
        if (st->epilogue)
            buf_printf(out, " epilogue%s%s%s%s", st->epilogue & FUSE_EPI_BIAS ? " +bias" : "",
                       st->epilogue & FUSE_EPI_RESIDUAL ? " +residual" : "", st->epilogue & FUSE_EPI_ACT ? " +act" : "",
                       st->epilogue & FUSE_EPI_CAST ? " +cast" : "");
        buf_printf(out, " ->");
        for (int j = 0; j < st->n; j++) {
            const Node *n = &g->nodes[p->nodes[st->first + j]];
            for (int o = 0; o < n->nout; o++)
                if (p->materialised[n->out[o]])
                    buf_printf(out, " %%%d", n->out[o]);
        }
        buf_printf(out, "\n");
    }
}

void fuse_ordered_graph(const Graph *g, const FusePlan *p, Graph *og)
{
    memset(og, 0, sizeof *og);
    og->nnodes = g->nnodes;
    og->nvalues = g->nvalues;
    og->noutputs = g->noutputs;
    og->nodes = malloc(sizeof *og->nodes * (size_t)(g->nnodes + 1));
    og->values = malloc(sizeof *og->values * (size_t)(g->nvalues + 1));
    og->outputs = malloc(sizeof *og->outputs * (size_t)(g->noutputs + 1));
    CT_ASSERT(og->nodes && og->values && og->outputs);
    memcpy(og->values, g->values, sizeof *og->values * (size_t)g->nvalues);
    memcpy(og->outputs, g->outputs, sizeof *og->outputs * (size_t)g->noutputs);
    for (ValueId v = 0; v < g->nvalues; v++)
        og->values[v].name = NULL;
    for (int k = 0; k < g->nnodes; k++) {
        og->nodes[k] = g->nodes[p->nodes[k]];
        og->nodes[k].scope = "";
        for (int o = 0; o < og->nodes[k].nout; o++)
            og->values[og->nodes[k].out[o]].producer = k;
    }
}

/* Whether n is a batch_norm_grad through batch_norm bn's statistics. */
static int bn_grad_of(const Node *n, const Node *bn)
{
    return bn->op == CT_OP_batch_norm && n->op == CT_OP_batch_norm_grad && bn->iattr[0] && !bn->iattr[1] &&
           n->iattr[0] && !n->iattr[1] && n->in[0] == bn->in[0] && n->in[1] == bn->in[1];
}

int *fuse_bn_act_grad_steps(const Graph *g, const FusePlan *p, int ordered)
{
    int *bn_of = malloc(sizeof *bn_of * (size_t)(p->nsteps + 1));
    int *readers = calloc((size_t)g->nvalues + 1, sizeof *readers), nlaunch = 0;
    for (int s = 0; s < p->nsteps; s++)
        nlaunch = p->steps[s].launch >= nlaunch ? p->steps[s].launch + 1 : nlaunch;
    int *launch_steps = calloc((size_t)nlaunch + 1, sizeof *launch_steps);
    CT_ASSERT(bn_of && readers && launch_steps);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            readers[g->nodes[i].in[k]]++;
    for (int k = 0; k < g->noutputs; k++)
        readers[g->outputs[k]] += 2;
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps[s].launch >= 0)
            launch_steps[p->steps[s].launch]++;
    for (int s = 0; s < p->nsteps; s++) {
        const FuseStep *st = &p->steps[s];
        const Node *m[3] = {NULL, NULL, NULL};
        for (int k = 0; k < 3 && s + k < p->nsteps && st[k].n == 1; k++)
            m[k] = &g->nodes[ordered ? st[k].first : p->nodes[st[k].first]];
        bn_of[s] = -1;
        /* the act_grad (m[a]): alone in its launch, read by the batch_norm_grad (m[a + 1]) only */
        int a = m[0] && m[0]->op == CT_OP_act_grad ? 0 : 1;
        if (!m[a] || !m[a + 1] || m[a]->op != CT_OP_act_grad || m[a + 1]->op != CT_OP_batch_norm_grad ||
            (st[a].launch >= 0 && launch_steps[st[a].launch] != 1) || m[a + 1]->in[4] != m[a]->out[0] ||
            readers[m[a]->out[0]] != 1)
            continue;
        if (a == 1) {
            if (bn_grad_of(m[2], m[0]) && m[1]->in[0] == m[0]->out[0] && readers[m[0]->out[0]] == 1 &&
                !readers[m[0]->out[1]] && !readers[m[0]->out[2]])
                bn_of[s] = (int)(m[0] - g->nodes);
            continue;
        }
        int r = g->values[m[0]->in[0]].producer;
        int bn = r >= 0 && g->nodes[r].op == CT_OP_relu ? g->values[g->nodes[r].in[0]].producer : -1;
        if (m[0]->iattr[0] == CT_OP_relu && bn >= 0 && g->nodes[r].in[0] == g->nodes[bn].out[0] &&
            bn_grad_of(m[1], &g->nodes[bn]))
            bn_of[s] = bn;
    }
    free(readers);
    free(launch_steps);
    return bn_of;
}
