/* Contract: plan_memory(g) assigns arena offsets to g's activations and
 * gradients without changing g; plan_check verifies any plan independently. */
#include "passes/plan.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static size_t aligned_bytes(const Value *v) { return (value_bytes(v) + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN; }

static int in_arena(const Graph *g, ValueId v, const char *is_output)
{
    CtRole r = g->values[v].role;
    return (r == CT_ROLE_ACTIVATION || r == CT_ROLE_GRAD) && !is_output[v];
}

/* Free space of the arena: sorted, coalesced [offset, offset + size) runs. */
typedef struct FreeList {
    size_t *off, *size;
    int n, cap;
    size_t end; /* the arena's current size */
} FreeList;

static void free_insert(FreeList *f, size_t off, size_t size)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->off = realloc(f->off, sizeof *f->off * (size_t)f->cap);
        f->size = realloc(f->size, sizeof *f->size * (size_t)f->cap);
        CT_ASSERT(f->off && f->size);
    }
    int i = 0;
    while (i < f->n && f->off[i] < off)
        i++;
    memmove(f->off + i + 1, f->off + i, sizeof *f->off * (size_t)(f->n - i));
    memmove(f->size + i + 1, f->size + i, sizeof *f->size * (size_t)(f->n - i));
    f->off[i] = off;
    f->size[i] = size;
    f->n++;
    if (i + 1 < f->n && f->off[i] + f->size[i] == f->off[i + 1]) { /* merge right */
        f->size[i] += f->size[i + 1];
        memmove(f->off + i + 1, f->off + i + 2, sizeof *f->off * (size_t)(f->n - i - 2));
        memmove(f->size + i + 1, f->size + i + 2, sizeof *f->size * (size_t)(f->n - i - 2));
        f->n--;
    }
    if (i > 0 && f->off[i - 1] + f->size[i - 1] == f->off[i]) { /* merge left */
        f->size[i - 1] += f->size[i];
        memmove(f->off + i, f->off + i + 1, sizeof *f->off * (size_t)(f->n - i - 1));
        memmove(f->size + i, f->size + i + 1, sizeof *f->size * (size_t)(f->n - i - 1));
        f->n--;
    }
    if (f->n && f->off[f->n - 1] + f->size[f->n - 1] == f->end) { /* give the tail back */
        f->end = f->off[f->n - 1];
        f->n--;
    }
}

/* Best fit among the free runs, else the end of the arena. */
static size_t free_take(FreeList *f, size_t size)
{
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if (f->size[i] >= size && (best < 0 || f->size[i] < f->size[best]))
            best = i;
    if (best < 0) {
        size_t off = f->end;
        f->end += size;
        return off;
    }
    size_t off = f->off[best];
    f->off[best] += size;
    f->size[best] -= size;
    if (f->size[best] == 0) {
        memmove(f->off + best, f->off + best + 1, sizeof *f->off * (size_t)(f->n - best - 1));
        memmove(f->size + best, f->size + best + 1, sizeof *f->size * (size_t)(f->n - best - 1));
        f->n--;
    }
    return off;
}

/* Whether permute node n only relabels memory: each dim of its output
 * longer than 1 at the stride its input dim has (ConvNeXt's permutes of
 * channels-last values to and from N, H, W, C). */
static int permute_in_place(const Graph *g, const Node *n)
{
    int64_t sx[CT_MAX_DIMS], sy[CT_MAX_DIMS];
    const CtShape *y = &g->values[n->out[0]].type.shape;
    value_strides(&g->values[n->in[0]], sx);
    value_strides(&g->values[n->out[0]], sy);
    for (int d = 0; d < y->ndim; d++)
        if (y->d[d] > 1 && sy[d] != sx[n->iattr[1 + d]])
            return 0;
    return 1;
}

/* Whether node n's output is a view of its input (the same bytes in the
 * same order): a reshape between row-major arena values, or a permute that
 * only relabels memory. */
static int is_view(const Graph *g, const Node *n, const char *is_output)
{
    if (!in_arena(g, n->in[0], is_output) || !in_arena(g, n->out[0], is_output) ||
        g->values[n->in[0]].type.dtype != g->values[n->out[0]].type.dtype)
        return 0;
    if (n->op == CT_OP_permute)
        return permute_in_place(g, n);
    return n->op == CT_OP_reshape && value_row_major(&g->values[n->in[0]]) && value_row_major(&g->values[n->out[0]]);
}

/* The input of node n whose space output 0 may take: an arena value of the
 * same size read for the last time here (its whole view group), by an op
 * that allows it, and that n reads through no other value of its group. */
static int inplace_input(const Graph *g, const MemPlan *p, int i, const char *is_output)
{
    const Node *n = &g->nodes[i];
    if (!op_def(n->op)->inplace || n->nout != 1 || is_view(g, n, is_output) || p->first[n->out[0]] != i)
        return -1;
    size_t want = aligned_bytes(&g->values[n->out[0]]);
    for (int k = 0; k < n->nin; k++) {
        ValueId v = n->in[k];
        int read_twice = 0;
        for (int j = 0; j < n->nin; j++) /* the same value again reads the same elements; a view may not */
            read_twice |= (j < k && n->in[j] == v) || (n->in[j] != v && p->view_of[n->in[j]] == p->view_of[v]);
        if (!read_twice && in_arena(g, v, is_output) && p->last[v] == i && aligned_bytes(&g->values[v]) == want &&
            (op_def(n->op)->inplace >> k & 1))
            return v;
    }
    return -1;
}

/* One block of the arena: a view group, with the groups that took its
 * space in place after it; it lives from its first value's birth to its
 * last value's last read. */
typedef struct Block {
    size_t size, off;
    int first, last;
} Block;

static int by_size(const void *a, const void *b)
{
    const Block *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return x->first - y->first;
}

static int by_off(const void *a, const void *b)
{
    const Block *x = *(Block *const *)a, *y = *(Block *const *)b;
    return (x->off > y->off) - (x->off < y->off);
}

/* The sweep's best fit fragments the arena where lifetimes interleave (a
 * backward that recomputes, an optimizer running inside it). Placed
 * offline instead, the biggest blocks first, each at the lowest offset
 * where no block living at the same time is (TFLite's greedy by size);
 * the plan keeps whichever arena is smaller. */
static void repack(const Graph *g, MemPlan *p, const char *is_output)
{
    int nv = g->nvalues, nb = 0;
    int *block = malloc(sizeof *block * (size_t)(nv + 1));
    Block *b = malloc(sizeof *b * (size_t)(nv + 1));
    CT_ASSERT(block && b);
    for (ValueId v = 0; v < nv; v++) {
        block[v] = -1;
        if (p->offset[v] == PLAN_NONE || p->view_of[v] != v)
            continue;
        if (p->alias_of[v] >= 0) { /* a group that took an input's space: that input's block */
            block[v] = block[p->view_of[p->alias_of[v]]];
            CT_ASSERT(block[v] >= 0);
        } else {
            block[v] = nb;
            b[nb++] = (Block){aligned_bytes(&g->values[v]), 0, p->first[v], p->last[v]};
        }
        if (p->first[v] < b[block[v]].first)
            b[block[v]].first = p->first[v];
        if (p->last[v] > b[block[v]].last)
            b[block[v]].last = p->last[v];
    }
    int *rank = malloc(sizeof *rank * (size_t)(nb + 1));
    Block *sorted = malloc(sizeof *sorted * (size_t)(nb + 1));
    Block **live = malloc(sizeof *live * (size_t)(nb + 1));
    CT_ASSERT(rank && sorted && live);
    for (int k = 0; k < nb; k++)
        sorted[k] = b[k], sorted[k].off = (size_t)k; /* off carries the index until placed */
    qsort(sorted, (size_t)nb, sizeof *sorted, by_size);
    for (int k = 0; k < nb; k++)
        rank[sorted[k].off] = k;
    size_t end = 0;
    for (int k = 0; k < nb; k++) {
        int n = 0;
        for (int j = 0; j < k; j++)
            if (!(sorted[j].last < sorted[k].first || sorted[k].last < sorted[j].first))
                live[n++] = &sorted[j];
        qsort(live, (size_t)n, sizeof *live, by_off);
        size_t off = 0;
        for (int j = 0; j < n && live[j]->off < off + sorted[k].size; j++)
            if (live[j]->off + live[j]->size > off)
                off = live[j]->off + live[j]->size;
        sorted[k].off = off;
        if (off + sorted[k].size > end)
            end = off + sorted[k].size;
    }
    if (end < p->arena_bytes) {
        p->arena_bytes = end;
        for (ValueId v = 0; v < nv; v++)
            if (p->offset[v] != PLAN_NONE)
                p->offset[v] = sorted[rank[block[p->view_of[v]]]].off;
    }
    free(block);
    free(b);
    free(rank);
    free(sorted);
    free(live);
}

int plan_memory(const Graph *g, MemPlan *p, CtErr *err) { return plan_memory_hinted(g, NULL, p, err); }

/* The arena values (view group roots) born before their producer, by
 * birth: {birth, value} pairs, ended by {INT_MAX, -1}. */
typedef struct Birth {
    int node;
    ValueId v;
} Birth;

static int by_birth(const void *a, const void *b)
{
    const Birth *x = a, *y = b;
    return x->node != y->node ? (x->node > y->node) - (x->node < y->node) : (x->v > y->v) - (x->v < y->v);
}

static Birth *born_early(const Graph *g, const MemPlan *p, const char *is_output)
{
    Birth *early = malloc(sizeof *early * (size_t)(g->nvalues + 1));
    CT_ASSERT(early != NULL);
    int n = 0;
    for (ValueId v = 0; v < g->nvalues; v++)
        if (p->view_of[v] == v && p->first[v] < g->values[v].producer && in_arena(g, v, is_output))
            early[n++] = (Birth){p->first[v], v};
    qsort(early, (size_t)n, sizeof *early, by_birth);
    early[n] = (Birth){INT_MAX, -1};
    return early;
}

int plan_memory_hinted(const Graph *g, const PlanHints *h, MemPlan *p, CtErr *err)
{
    memset(p, 0, sizeof *p);
    int nv = g->nvalues;
    p->offset = malloc(sizeof *p->offset * (size_t)(nv ? nv : 1));
    p->alias_of = malloc(sizeof *p->alias_of * (size_t)(nv ? nv : 1));
    p->view_of = malloc(sizeof *p->view_of * (size_t)(nv ? nv : 1));
    p->first = malloc(sizeof *p->first * (size_t)(nv ? nv : 1));
    p->last = malloc(sizeof *p->last * (size_t)(nv ? nv : 1));
    char *is_output = calloc((size_t)(nv ? nv : 1), 1);
    char *freed = calloc((size_t)(nv ? nv : 1), 1); /* per view group (its first value) */
    CT_ASSERT(p->offset && p->alias_of && p->view_of && p->first && p->last && is_output && freed);
    for (int k = 0; k < g->noutputs; k++)
        is_output[g->outputs[k]] = 1;
    for (ValueId v = 0; v < nv; v++) {
        const Value *val = &g->values[v];
        p->offset[v] = PLAN_NONE;
        p->alias_of[v] = -1;
        p->view_of[v] = v;
        p->first[v] = val->producer >= 0 ? val->producer : 0;
        p->last[v] = is_output[v] ? g->nnodes : p->first[v];
        size_t bytes = (size_t)shape_numel(&val->type.shape) * ct_dtype_size(val->type.dtype);
        if (val->role == CT_ROLE_INPUT)
            p->input_bytes += bytes;
        else if (val->role == CT_ROLE_PARAM)
            p->param_bytes += bytes;
        else if (role_is_state(val->role))
            p->state_bytes += bytes;
        else if (is_output[v])
            p->output_bytes += bytes;
        else
            p->naive_bytes += aligned_bytes(val);
    }
    for (int i = 0; i < g->nnodes; i++) {
        for (int k = 0; k < g->nodes[i].nin; k++)
            if (p->last[g->nodes[i].in[k]] < i)
                p->last[g->nodes[i].in[k]] = i;
        if (is_view(g, &g->nodes[i], is_output))
            p->view_of[g->nodes[i].out[0]] = p->view_of[g->nodes[i].in[0]];
    }
    for (ValueId v = 0; h && v < nv; v++) {
        ValueId r = p->view_of[v];
        if (h->until[v] > p->last[v])
            p->last[v] = h->until[v];
        if (h->born[v] >= 0 && h->born[v] < p->first[r])
            p->first[r] = h->born[v];
    }
    /* a view group lives from its first value's birth to its last read */
    for (ValueId v = 0; v < nv; v++)
        if (p->last[v] > p->last[p->view_of[v]])
            p->last[p->view_of[v]] = p->last[v];
    for (ValueId v = 0; v < nv; v++) {
        p->last[v] = p->last[p->view_of[v]];
        p->first[v] = p->first[p->view_of[v]];
    }

    FreeList fl = {0};
    Birth *early = born_early(g, p, is_output), *next = early;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        int alias = inplace_input(g, p, i, is_output);
        for (; next->node == i; next++)
            p->offset[next->v] = free_take(&fl, aligned_bytes(&g->values[next->v]));
        for (int k = 0; k < n->nout; k++) {
            ValueId v = n->out[k];
            if (!in_arena(g, v, is_output) || (p->view_of[v] == v && p->first[v] < i))
                continue;
            if (p->view_of[v] != v) {
                p->offset[v] = p->offset[p->view_of[v]];
            } else if (k == 0 && alias >= 0) {
                p->offset[v] = p->offset[alias];
                p->alias_of[v] = alias;
            } else {
                p->offset[v] = free_take(&fl, aligned_bytes(&g->values[v]));
            }
        }
        /* the peak: the node's outputs placed, before any space comes back */
        if (fl.end > p->arena_bytes)
            p->arena_bytes = fl.end;
        /* Groups read for the last time here give their space back, unless
         * an output took it; so do outputs nothing reads. */
        for (int k = 0; k < n->nin + n->nout; k++) {
            ValueId v = k < n->nin ? n->in[k] : n->out[k - n->nin], r = p->view_of[v];
            if (in_arena(g, v, is_output) && p->last[v] == i && !freed[r] && (alias < 0 || r != p->view_of[alias])) {
                free_insert(&fl, p->offset[r], aligned_bytes(&g->values[r]));
                freed[r] = 1;
            }
        }
    }
    free(fl.off);
    free(fl.size);
    free(early);
    repack(g, p, is_output);
    free(is_output);
    free(freed);
    (void)err;
    return 0;
}

/* The bytes of arena value v's own space live at node i: a view group's
 * are its first value's, and an in-place output's are its input's up to
 * the node that writes it. */
static size_t live_bytes(const Graph *g, const MemPlan *p, ValueId v, int i)
{
    if (p->offset[v] == PLAN_NONE || p->view_of[v] != v || i > p->last[v] || i < p->first[v] ||
        (p->alias_of[v] >= 0 && i == p->first[v]))
        return 0;
    return aligned_bytes(&g->values[v]);
}

/* One value's bytes into the PlanSplit kind it belongs to. */
static void split_add(const Graph *g, ValueId v, size_t bytes, int fwd_end, const char *is_param_grad, PlanSplit *s)
{
    const Value *val = &g->values[v];
    if (is_param_grad && is_param_grad[v])
        s->param_grads += bytes;
    else if (val->role == CT_ROLE_GRAD)
        s->act_grads += bytes;
    else if (val->producer < fwd_end)
        s->activations += bytes;
    else
        s->temps += bytes;
    s->live += bytes;
}

void plan_split(const Graph *g, const MemPlan *p, int fwd_end, const char *is_param_grad, PlanSplit *out)
{
    memset(out, 0, sizeof *out);
    size_t best = 0;
    for (int i = 0; i < g->nnodes; i++) {
        size_t live = 0;
        for (ValueId v = 0; v < g->nvalues; v++)
            live += live_bytes(g, p, v, i);
        if (live > best) {
            best = live;
            out->node = i;
        }
    }
    for (ValueId v = 0; v < g->nvalues; v++)
        split_add(g, v, live_bytes(g, p, v, out->node), fwd_end, is_param_grad, out);
}

void plan_free(MemPlan *p)
{
    free(p->offset);
    free(p->alias_of);
    free(p->view_of);
    free(p->first);
    free(p->last);
    memset(p, 0, sizeof *p);
}

/* Sorting by offset keeps the check near linear: only values whose arena
 * ranges overlap are compared for liveness. The offsets travel with the
 * values, so the comparison needs no state outside its arguments. */
typedef struct ByOffset {
    size_t offset;
    ValueId v;
} ByOffset;

static int by_offset(const void *a, const void *b)
{
    const ByOffset *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : (x->v > y->v) - (x->v < y->v);
}

int plan_check(const Graph *g, const MemPlan *p, CtErr *err)
{
    ByOffset *sorted = malloc(sizeof *sorted * (size_t)(g->nvalues ? g->nvalues : 1));
    int *vs = malloc(sizeof *vs * (size_t)(g->nvalues ? g->nvalues : 1)), n = 0, rc = 0;
    CT_ASSERT(vs != NULL && sorted != NULL);
    for (ValueId v = 0; v < g->nvalues; v++)
        if (p->offset[v] != PLAN_NONE) {
            if (p->offset[v] + aligned_bytes(&g->values[v]) > p->arena_bytes) {
                free(vs);
                free(sorted);
                return ct_fail(err, "plan: value %%%d ends past the arena", v);
            }
            sorted[n++] = (ByOffset){p->offset[v], v};
        }
    qsort(sorted, (size_t)n, sizeof *sorted, by_offset);
    for (int k = 0; k < n; k++)
        vs[k] = sorted[k].v;
    free(sorted);
    for (int a = 0; a < n && rc == 0; a++) {
        ValueId va = vs[a];
        size_t end_a = p->offset[va] + aligned_bytes(&g->values[va]);
        for (int b = a + 1; b < n && p->offset[vs[b]] < end_a && rc == 0; b++) {
            ValueId vb = vs[b];
            int disjoint_time = p->last[va] < p->first[vb] || p->last[vb] < p->first[va];
            /* an in-place output (or a view of it) over the group of the input it took */
            int ra = p->view_of[va], rb = p->view_of[vb];
            int in_place = (p->alias_of[rb] >= 0 && p->view_of[p->alias_of[rb]] == ra && p->last[va] == p->first[vb]) ||
                           (p->alias_of[ra] >= 0 && p->view_of[p->alias_of[ra]] == rb && p->last[vb] == p->first[va]);
            int one_view = p->view_of[va] == p->view_of[vb] && p->offset[va] == p->offset[vb];
            if (!disjoint_time && !in_place && !one_view)
                rc = ct_fail(err, "plan: values %%%d and %%%d are live together (nodes %d-%d and %d-%d) and overlap",
                             va, vb, p->first[va], p->last[va], p->first[vb], p->last[vb]);
        }
    }
    free(vs);
    return rc;
}
