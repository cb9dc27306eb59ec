/* Contract: remat(g) returns g with some of the activations its backward
 * reads recomputed in the backward instead of kept from the forward (see
 * passes.h); every value keeps its bits, only its lifetime changes. */
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "ir/rewrite.h"
#include "passes/passes.h"
#include "passes/plan.h"
#include "passes/schedule.h"

/* What the pass knows of g's two halves. */
typedef struct Halves {
    const Graph *g;
    int bstart;      /* the backward's first node: the first that reads the seed */
    char *bwd;       /* per node: in the backward (from bstart on, but the assigns) */
    char *bwd_read;  /* per value: a forward activation some backward node reads */
    char *is_out;    /* per value: a graph output */
} Halves;

static void halves_free(Halves *h)
{
    free(h->bwd);
    free(h->bwd_read);
    free(h->is_out);
}

static int halves_find(const Graph *g, Halves *h, CtErr *err)
{
    memset(h, 0, sizeof *h);
    h->g = g;
    ValueId seed = -1;
    for (ValueId v = 0; v < g->nvalues && seed < 0; v++)
        if (g->values[v].role == CT_ROLE_INPUT && g->values[v].name && !strcmp(g->values[v].name, "loss_scale"))
            seed = v;
    if (seed < 0)
        return ct_fail(err, "remat: not a training graph (no loss_scale input, the backward's seed)");
    h->bwd = calloc((size_t)g->nnodes + 1, 1);
    h->bwd_read = calloc((size_t)g->nvalues + 1, 1);
    h->is_out = calloc((size_t)g->nvalues + 1, 1);
    CT_ASSERT(h->bwd && h->bwd_read && h->is_out);
    h->bstart = g->nnodes;
    for (int i = 0; i < g->nnodes && h->bstart == g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            if (g->nodes[i].in[k] == seed)
                h->bstart = i;
    /* from there on, every node but the assigns: the reshapes and transposes
     * of forward values that the backward's GEMMs read depend on no seed */
    for (int i = h->bstart; i < g->nnodes; i++)
        h->bwd[i] = g->nodes[i].op != CT_OP_assign;
    for (int i = h->bstart; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin && h->bwd[i]; k++) {
            ValueId v = g->nodes[i].in[k];
            int p = g->values[v].producer;
            h->bwd_read[v] |= g->values[v].role == CT_ROLE_ACTIVATION && p >= 0 && p < h->bstart;
        }
    for (int k = 0; k < g->noutputs; k++)
        h->is_out[g->outputs[k]] = 1;
    return 0;
}

/* Whether running node n a second time gives the same values and changes
 * nothing else: not the ops that talk to the other ranks. */
static int pure(const Node *n)
{
    return n->op != CT_OP_assign && n->op != CT_OP_allreduce_mean && !(n->op == CT_OP_batch_norm && n->iattr[1]);
}

/* A forward activation that may be recomputed: not a batch_norm's updated
 * running statistics, a vector a channel, which its gradient reads. */
static int eligible(const Halves *h, ValueId v)
{
    const Value *val = &h->g->values[v];
    const Node *p = val->producer >= 0 ? &h->g->nodes[val->producer] : NULL;
    return val->role == CT_ROLE_ACTIVATION && p && val->producer < h->bstart && !h->is_out[v] && pure(p) &&
           (p->op != CT_OP_batch_norm || v == p->out[0]);
}

/* Cheapest to recompute first: elementwise and data movement, then norms,
 * pooling and reductions, then contractions and attention. */
static int cost_class(const Node *n)
{
    switch (op_def(n->op)->fusion) {
    case OP_ELEMENTWISE:
    case OP_ACTIVATION:
    case OP_VIEW:
    case OP_DATA:
        return 0;
    case OP_CONTRACTION:
        return 2;
    default:
        return n->op == CT_OP_sdpa ? 2 : 1;
    }
}

/* Closes the dropped set: a recomputation reads what the backward has
 * anyway (kept values, values it reads itself, state) and recomputes the
 * rest, which must be eligible and cheap (no contraction or attention: a
 * residual stream's add would otherwise recompute every block before it);
 * a value whose recomputation would need another that the backward does
 * not have stays kept. */
static void close_drops(const Halves *h, const char *keep, char *dropped)
{
    const Graph *g = h->g;
    char *kept = calloc((size_t)g->nvalues + 1, 1); /* found not recomputable: never dropped again */
    CT_ASSERT(kept != NULL);
    for (int changed = 1; changed;) {
        changed = 0;
        for (ValueId v = 0; v < g->nvalues; v++) {
            if (!dropped[v])
                continue;
            const Node *p = &g->nodes[g->values[v].producer];
            for (int k = 0; k < p->nin && dropped[v]; k++) {
                ValueId u = p->in[k];
                const Value *uv = &g->values[u];
                if (dropped[u] || uv->role != CT_ROLE_ACTIVATION || keep[u] || h->is_out[u] || h->bwd_read[u])
                    continue;
                if (!kept[u] && eligible(h, u) && cost_class(&g->nodes[uv->producer]) < 2) {
                    dropped[u] = 1;
                } else {
                    dropped[v] = 0;
                    kept[v] = 1;
                }
                changed = 1;
            }
        }
    }
    free(kept);
}

typedef struct Remat {
    Rewriter r;
    const Halves *h;
    const char *dropped;
    ValueId *clone; /* src value -> its recomputation in dst, or -1 */
    RematReport *rep;
} Remat;

/* Emits the recomputation of dropped value v (and of the dropped values it
 * needs) unless it has one. */
static void materialize(Remat *m, ValueId v)
{
    if (m->clone[v] >= 0 || m->r.e.failed)
        return;
    const Graph *g = m->h->g;
    const Node *p = &g->nodes[g->values[v].producer];
    ValueId in[CT_MAX_IN];
    for (int k = 0; k < p->nin; k++) {
        if (m->dropped[p->in[k]])
            materialize(m, p->in[k]);
        in[k] = m->dropped[p->in[k]] ? m->clone[p->in[k]] : rewrite_value(&m->r, p->in[k]);
    }
    /* a training batch_norm run again reads, in place of the state, the
     * running statistics the forward updated (unused, as batch_norm_vjp's):
     * the state stays read by the forward only */
    if (p->op == CT_OP_batch_norm && p->iattr[0])
        for (int k = 3; k < 5; k++)
            in[k] = rewrite_value(&m->r, p->out[k - 2]);
    m->r.e.scope = p->scope;
    if (emit(&m->r.e, p->op, p->nin, in, p->iattr, CT_MAX_IATTR, p->fattr, CT_MAX_FATTR, 0) < 0 && p->nout)
        return;
    const Node *c = &m->r.dst->nodes[m->r.dst->nnodes - 1];
    for (int k = 0; k < p->nout; k++) {
        m->clone[p->out[k]] = c->out[k];
        m->r.dst->values[c->out[k]].layout = g->values[p->out[k]].layout;
    }
    m->rep->nodes++;
    const OpDef *d = op_def(p->op);
    if (d->cost)
        m->rep->extra_macs += (double)d->cost(g, p, 0).macs;
}

/* g with dropped[] recomputed in the backward, into out. */
static int rebuild(const Halves *h, const char *dropped, Graph *out, RematReport *rep, CtErr *err)
{
    const Graph *g = h->g;
    Remat m = {.h = h, .dropped = dropped, .rep = rep};
    m.clone = malloc(sizeof *m.clone * (size_t)(g->nvalues + 1));
    CT_ASSERT(m.clone != NULL);
    for (ValueId v = 0; v < g->nvalues; v++)
        m.clone[v] = -1;
    rep->nodes = 0;
    rep->extra_macs = 0;
    rewrite_begin(&m.r, g, out);
    for (int i = 0; i < g->nnodes && !m.r.e.failed; i++) {
        const Node *n = &g->nodes[i];
        if (n->op == CT_OP_assign) /* after every node, then as early as they can be */
            continue;
        if (!h->bwd[i]) {
            rewrite_copy(&m.r, i);
            continue;
        }
        ValueId saved[CT_MAX_IN];
        for (int k = 0; k < n->nin; k++) {
            saved[k] = rewrite_value(&m.r, n->in[k]);
            if (dropped[n->in[k]]) {
                materialize(&m, n->in[k]);
                rewrite_map(&m.r, n->in[k], m.clone[n->in[k]]);
            }
        }
        rewrite_copy(&m.r, i);
        for (int k = n->nin - 1; k >= 0; k--) /* an input read twice gets its first mapping back */
            rewrite_map(&m.r, n->in[k], saved[k]);
    }
    for (int i = 0; i < g->nnodes && !m.r.e.failed; i++)
        if (g->nodes[i].op == CT_OP_assign)
            rewrite_copy(&m.r, i);
    if (!m.r.e.failed) {
        schedule_bn_reruns(out);
        schedule_assigns(out);
    }
    free(m.clone);
    return rewrite_end(&m.r, err);
}

int remat_bn_forward(const Graph *g, const Node *n)
{
    if (n->op != CT_OP_batch_norm || !n->iattr[0] || n->iattr[1] || n->nin < 5)
        return -1;
    int p = g->values[n->in[3]].producer;
    const Node *o = p >= 0 ? &g->nodes[p] : NULL;
    return o && o->op == CT_OP_batch_norm && o->out[1] == n->in[3] && o->in[1] == n->in[1] && o->in[2] == n->in[2]
               ? p
               : -1;
}

static size_t planned_peak(const Graph *g, CtErr *err)
{
    MemPlan p;
    if (plan_memory(g, &p, err))
        return 0;
    size_t total = plan_peak_bytes(&p);
    plan_free(&p);
    return total;
}

/* Unit of each forward node: the index of the first node whose scope's
 * match (at its start) of one of the units' regexes is the same text, or
 * -1 where none matches. */
static int unit_of_nodes(const Halves *h, const RematSpec *s, int *unit, CtErr *err)
{
    const Graph *g = h->g;
    regex_t *re = calloc((size_t)s->nunits + 1, sizeof *re);
    int *len = calloc((size_t)g->nnodes + 1, sizeof *len), rc = 0, nre = 0;
    CT_ASSERT(re && len);
    for (; nre < s->nunits; nre++)
        if (regcomp(&re[nre], s->units[nre], REG_EXTENDED)) {
            rc = ct_fail(err, "remat: bad unit regex '%s'", s->units[nre]);
            break;
        }
    for (int i = 0; i < g->nnodes && !rc; i++) {
        const char *scope = g->nodes[i].scope ? g->nodes[i].scope : "";
        unit[i] = -1;
        if (i >= h->bstart)
            continue;
        for (int k = 0; k < nre && unit[i] < 0; k++) {
            regmatch_t mt;
            if (regexec(&re[k], scope, 1, &mt, 0) || mt.rm_so != 0 || mt.rm_eo == 0)
                continue;
            len[i] = (int)mt.rm_eo;
            for (int j = 0; j <= i && unit[i] < 0; j++)
                if (j == i || (unit[j] == j && len[j] == len[i] && !strncmp(g->nodes[j].scope, scope, (size_t)len[i])))
                    unit[i] = j;
        }
    }
    for (int k = 0; k < nre; k++)
        regfree(&re[k]);
    free(re);
    free(len);
    return rc;
}

/* --grad-checkpointing: a unit's values that no node outside it reads are
 * recomputed; what crosses its edges is kept. */
static int drop_units(const Halves *h, const RematSpec *s, char *keep, char *dropped, CtErr *err)
{
    const Graph *g = h->g;
    int *unit = malloc(sizeof *unit * (size_t)(g->nnodes + 1));
    CT_ASSERT(unit != NULL);
    if (unit_of_nodes(h, s, unit, err)) {
        free(unit);
        return -1;
    }
    for (int i = 0; i < h->bstart; i++) {
        const Node *n = &g->nodes[i];
        for (int k = 0; k < n->nout; k++)
            dropped[n->out[k]] = unit[i] >= 0 && eligible(h, n->out[k]);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            ValueId v = n->in[k];
            int p = g->values[v].producer;
            if (p < 0 || p >= h->bstart || h->bwd[i])
                continue;
            if (i >= h->bstart || unit[i] != unit[p]) {
                keep[v] = 1;
                dropped[v] = 0;
            }
        }
    }
    free(unit);
    return 0;
}

/* Whether node p reduces: its output a quarter of an activation it reads
 * or less (a global pool's), so that recomputing it reads more than
 * keeping it holds. */
static int reduces(const Graph *g, const Node *p)
{
    for (int k = 0; k < p->nin; k++) {
        const Value *in = &g->values[p->in[k]];
        if (in->role == CT_ROLE_ACTIVATION && 4 * value_bytes(&g->values[p->out[0]]) <= value_bytes(in))
            return 1;
    }
    return 0;
}

/* Whether v's recomputation reads only what the backward keeps anyway:
 * walks its producers (at most *budget of them, cheap classes, no
 * reductions, values no backward node reads) back to values the backward
 * reads and keeps, marking the ones it would recompute in `chain`. */
static int cheap_chain(const Halves *h, const char *keep, const char *dropped, ValueId v, char *chain, int *budget)
{
    const Graph *g = h->g;
    const Node *p = &g->nodes[g->values[v].producer];
    if (--*budget < 0 || keep[v] || !eligible(h, v) || cost_class(p) >= 2 || reduces(g, p))
        return 0;
    chain[v] = 1;
    for (int k = 0; k < p->nin; k++) {
        ValueId u = p->in[k];
        const Value *uv = &g->values[u];
        if (uv->role != CT_ROLE_ACTIVATION || chain[u] || (h->bwd_read[u] && !dropped[u]))
            continue;
        if (h->bwd_read[u] || h->is_out[u] || !cheap_chain(h, keep, dropped, u, chain, budget))
            return 0;
    }
    return 1;
}

/* Whether every node of [from, to) that reads v, through reshapes, is
 * elementwise: fusion then pulls v into its readers' kernels. */
static int elementwise_readers(const Halves *h, ValueId v, int from, int to)
{
    for (int i = from; i < to; i++) {
        const Node *n = &h->g->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] != v || n->op == CT_OP_assign)
                continue;
            OpFusion f = op_def(n->op)->fusion;
            if (f == OP_VIEW ? !elementwise_readers(h, n->out[0], from, to) : f != OP_ELEMENTWISE && f != OP_ACTIVATION)
                return 0;
        }
    }
    return 1;
}

/* Bytes a step moves again, per byte v holds, to recompute v from `chain`
 * rather than keep it: the chain's inputs read, and v written again where
 * a backward reader is a kernel of its own (where all fuse the chain, they
 * read its inputs in place of v); less v's write in the forward, which
 * only keeping it costs where its forward readers would fuse it. */
static double cheap_ratio(const Halves *h, const char *chain, ValueId v)
{
    const Graph *g = h->g;
    double moved = 0, held = (double)value_bytes(&g->values[v]);
    for (ValueId u = 0; u < g->nvalues; u++) {
        if (!chain[u])
            continue;
        const Node *p = &g->nodes[g->values[u].producer];
        for (int k = 0; k < p->nin; k++)
            if (!chain[p->in[k]])
                moved += (double)value_bytes(&g->values[p->in[k]]);
    }
    moved += elementwise_readers(h, v, h->bstart, g->nnodes) ? -held : held;
    if (elementwise_readers(h, v, 0, h->bstart))
        moved -= held;
    return moved / held;
}

/* Values to recompute, in the order they are taken: each a group dropped
 * together (a cheap candidate's chain, or one value that close_drops
 * closes). */
typedef struct Cand {
    int first, len; /* its values in Cands.vals */
    double ratio;   /* bytes moved again per byte saved (a chain's; <= 0: none); INFINITY: not counted */
    int cls;        /* cost_class of the value's producer */
    int64_t bytes;
} Cand;

typedef struct Cands {
    Cand *c;
    ValueId *vals;
    int n, nvals;
} Cands;

static int by_order(const void *a, const void *b)
{
    const Cand *x = a, *y = b;
    if (x->ratio != y->ratio)
        return x->ratio < y->ratio ? -1 : 1;
    if (x->cls != y->cls)
        return x->cls - y->cls;
    return x->bytes != y->bytes ? (x->bytes < y->bytes ? 1 : -1) : x->first - y->first;
}

static void cands_add(Cands *cs, const Graph *g, ValueId v, const char *chain, double ratio)
{
    const Value *val = &g->values[v];
    cs->c[cs->n] = (Cand){cs->nvals, 0, ratio, cost_class(&g->nodes[val->producer]), (int64_t)value_bytes(val)};
    if (!chain)
        cs->vals[cs->nvals++] = v;
    for (ValueId u = 0; chain && u < g->nvalues; u++)
        if (chain[u])
            cs->vals[cs->nvals++] = u;
    cs->c[cs->n].len = cs->nvals - cs->c[cs->n].first;
    cs->n++;
}

/* The cheap candidates: the activations the backward reads whose
 * recomputation is a short cheap chain from values it keeps anyway, found
 * in forward order (a value recomputed is no longer a leaf for the ones
 * after it, so any subset of them stays valid); `taken` (dropped's copy)
 * gets their chains. With `others`, then every other value --memory-budget
 * may drop: eligible, no contraction or attention (AOTAutograd's
 * partitioner bans them too: recomputing one costs what the backward
 * saves, and chains of them would recompute the whole forward at the
 * backward's start). Sorted: fewest bytes moved per byte saved, then the
 * cheapest class, then the biggest. */
static void cands_find(const Halves *h, const char *keep, const char *dropped, int others, Cands *cs)
{
    const Graph *g = h->g;
    char *chain = calloc((size_t)g->nvalues + 1, 1), *taken = malloc((size_t)g->nvalues + 1);
    cs->c = malloc(sizeof *cs->c * (size_t)(g->nvalues + 1));
    /* a chain holds at most REMAT_CHEAP_NODES values, and chains may share one (not read by the backward) */
    cs->vals = malloc(sizeof *cs->vals * (size_t)(REMAT_CHEAP_NODES + 1) * (size_t)(g->nvalues + 1));
    CT_ASSERT(chain && taken && cs->c && cs->vals);
    cs->n = cs->nvals = 0;
    memcpy(taken, dropped, (size_t)g->nvalues);
    for (ValueId v = 0; v < g->nvalues; v++) {
        if (!h->bwd_read[v] || taken[v])
            continue;
        memset(chain, 0, (size_t)g->nvalues);
        int budget = REMAT_CHEAP_NODES;
        if (!cheap_chain(h, keep, taken, v, chain, &budget))
            continue;
        cands_add(cs, g, v, chain, cheap_ratio(h, chain, v));
        for (ValueId u = 0; u < g->nvalues; u++)
            taken[u] |= chain[u];
    }
    for (ValueId v = 0; v < g->nvalues && others; v++)
        if (h->bwd_read[v] && !keep[v] && !taken[v] && eligible(h, v) &&
            cost_class(&g->nodes[g->values[v].producer]) < 2)
            cands_add(cs, g, v, NULL, INFINITY);
    qsort(cs->c, (size_t)cs->n, sizeof *cs->c, by_order);
    free(chain);
    free(taken);
}

/* `base` with the first k candidates dropped, closed. */
static void drops_of(const Halves *h, const Cands *cs, int k, const char *base, const char *keep, char *dropped)
{
    memcpy(dropped, base, (size_t)h->g->nvalues);
    for (int j = 0; j < k; j++)
        for (int i = 0; i < cs->c[j].len; i++)
            dropped[cs->vals[cs->c[j].first + i]] = 1;
    close_drops(h, keep, dropped);
}

/* The planned peak with the first k candidates dropped over base. */
static int peak_with(const Halves *h, const Cands *cs, int k, const char *base, const char *keep, char *dropped,
                     size_t *peak, CtErr *err)
{
    Graph t;
    RematReport r = {0};
    drops_of(h, cs, k, base, keep, dropped);
    if (rebuild(h, dropped, &t, &r, err))
        return -1;
    *peak = planned_peak(&t, err);
    graph_free(&t);
    return 0;
}

/* The fewest candidates whose drops over `dropped` bring the planned peak
 * to `target` (all where none do), into dropped, with the peak they
 * reach: binary search, the peak falling (near enough) as more is
 * recomputed. For --memory-budget (budget) every candidate cands_find
 * finds counts; for the cheap recomputation, the cheap ones, the free ones
 * (fused into their readers, reading no more than they held) always. */
static int drop_fewest(const Halves *h, const char *keep, char *dropped, int budget, size_t target, size_t *peak,
                       CtErr *err)
{
    Cands cs;
    char *base = malloc((size_t)h->g->nvalues + 1);
    CT_ASSERT(base != NULL);
    memcpy(base, dropped, (size_t)h->g->nvalues);
    cands_find(h, keep, base, budget, &cs);
    int lo = 0, hi = cs.n, rc = 0;
    while (!budget && lo < cs.n && cs.c[lo].ratio <= 0)
        lo++;
    while (lo < hi && !rc) {
        int mid = lo + (hi - lo) / 2;
        if ((rc = peak_with(h, &cs, mid, base, keep, dropped, peak, err)) == 0 && *peak <= target)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (!rc)
        rc = peak_with(h, &cs, hi, base, keep, dropped, peak, err);
    free(cs.c);
    free(cs.vals);
    free(base);
    return rc;
}

/* --memory-budget: the fewest candidates whose graph's planned peak fits. */
static int drop_to_budget(const Halves *h, const RematSpec *s, const char *keep, char *dropped, CtErr *err)
{
    size_t peak = 0;
    int rc = drop_fewest(h, keep, dropped, 1, s->budget, &peak, err);
    if (!rc && peak > s->budget)
        rc = ct_fail(err, "--memory-budget %.1f MiB: the step needs at least %.1f MiB, recomputing every elementwise, norm and "
                     "pooling output it can (--grad-checkpointing recomputes whole blocks)",
                     s->budget / 1048576.0, peak / 1048576.0);
    return rc;
}

/* out from dropped, with the report's counts and peak. */
static int finish(const Halves *h, const char *dropped, Graph *out, RematReport *rep, CtErr *err)
{
    rep->values = 0;
    for (ValueId v = 0; v < h->g->nvalues; v++)
        rep->values += dropped[v] && h->bwd_read[v];
    if (rebuild(h, dropped, out, rep, err))
        return -1;
    rep->peak_after = planned_peak(out, err);
    return 0;
}

int remat(const Graph *g, const RematSpec *s, Graph *out, RematReport *rep, CtErr *err)
{
    Halves h;
    RematReport own;
    if (!rep)
        rep = &own;
    memset(rep, 0, sizeof *rep);
    if (halves_find(g, &h, err))
        return -1;
    char *keep = calloc((size_t)g->nvalues + 1, 1), *dropped = calloc((size_t)g->nvalues + 1, 1);
    CT_ASSERT(keep && dropped);
    int rc = 0;
    rep->peak_before = planned_peak(g, err);
    if (s->nunits && drop_units(&h, s, keep, dropped, err))
        rc = -1;
    if (!rc)
        close_drops(&h, keep, dropped);
    if (!rc && s->budget && drop_to_budget(&h, s, keep, dropped, err))
        rc = -1;
    char *before = NULL; /* the drops without the cheap ones, where those changed any */
    if (!rc && s->cheap) {
        before = malloc((size_t)g->nvalues + 1);
        CT_ASSERT(before != NULL);
        memcpy(before, dropped, (size_t)g->nvalues);
        size_t reached; /* where the share is out of reach, what all the cheap ones reach */
        double share = s->share > 0 ? s->share : REMAT_CHEAP_SHARE;
        rc = drop_fewest(&h, keep, dropped, 0, (size_t)(share * (double)rep->peak_before), &reached, err);
        if (!rc && !memcmp(before, dropped, (size_t)g->nvalues)) {
            free(before);
            before = NULL;
        }
    }
    size_t limit = rep->peak_before; /* what the cheap drops must not exceed: the peak without them */
    if (!rc && before && (s->nunits || s->budget)) {
        Graph t;
        RematReport r = {0};
        if ((rc = rebuild(&h, before, &t, &r, err)) == 0) {
            limit = planned_peak(&t, err);
            graph_free(&t);
        }
    }
    if (!rc)
        rc = finish(&h, dropped, out, rep, err);
    if (!rc && before && rep->peak_after > limit) { /* the backward's order can still lengthen a leaf's life */
        graph_free(out);
        rc = finish(&h, before, out, rep, err);
    }
    free(before);
    free(keep);
    free(dropped);
    halves_free(&h);
    return rc;
}
