/* Contract: grad_allreduce(g, grads, n, cap) replaces each grads[k] by its
 * mean over the ranks of a data-parallel run: the gradients, in the order
 * the backward finishes them, are cut into buckets of at most `cap` bytes
 * (one gradient larger than that is a bucket of its own), each bucket
 * flattened and concatenated, averaged by one allreduce_mean and sliced
 * back. Each bucket's nodes then move to just after the node that finishes
 * its last gradient, so an executor running nodes in order can start the
 * collective there, under the rest of the backward (DDP's bucketed,
 * overlapped all-reduce). The graph stays topologically ordered. */
#include <stdlib.h>

#include "ir/emit.h"
#include "passes/autodiff.h"

typedef struct Item {
    int ready; /* the node that finishes the gradient */
    int k;     /* its index in grads[] */
} Item;

static int by_ready(const void *x, const void *y)
{
    const Item *a = x, *b = y;
    return a->ready != b->ready ? (a->ready > b->ready) - (a->ready < b->ready) : (a->k > b->k) - (a->k < b->k);
}

/* Concatenates parts[0..n) along dim 0, CT_MAX_IN at a time. */
static ValueId concat_all(Emitter *e, ValueId *parts, int n)
{
    while (n > 1) {
        int m = 0;
        for (int i = 0; i < n; i += CT_MAX_IN) {
            int take = n - i < CT_MAX_IN ? n - i : CT_MAX_IN;
            parts[m++] = take == 1 ? parts[i] : emit(e, CT_OP_concat, take, &parts[i], (int64_t[]){0}, 1, NULL, 0, 0);
        }
        n = m;
    }
    return parts[0];
}

/* One bucket: items[0..n) of grads averaged; their new values into grads. */
static void add_bucket(Emitter *e, const Item *items, int n, int bucket, ValueId *grads)
{
    ValueId *parts = malloc(sizeof *parts * (size_t)n);
    CT_ASSERT(parts != NULL);
    for (int j = 0; j < n; j++) {
        CtShape s = emit_shape(e, grads[items[j].k]);
        parts[j] = emit_reshape(e, grads[items[j].k], (CtShape){1, {shape_numel(&s)}});
    }
    ValueId flat = concat_all(e, parts, n);
    ValueId mean = emit(e, CT_OP_allreduce_mean, 1, &flat, (int64_t[]){bucket}, 1, NULL, 0, 0);
    int64_t at = 0;
    for (int j = 0; j < n; j++) {
        ValueId *gk = &grads[items[j].k];
        CtShape s = emit_shape(e, *gk);
        int64_t len = shape_numel(&s);
        ValueId part = n == 1 ? mean : emit(e, CT_OP_slice, 1, &mean, (int64_t[]){0, at, at + len, 1}, 4, NULL, 0, 0);
        *gk = emit_reshape(e, part, s);
        at += len;
    }
    free(parts);
}

/* Moves nodes [first, nnodes) to their key's place: node i of the original
 * graph has key 2i, an added node 2 * key[i - first] + 1; equal keys keep
 * their order. */
static void move_buckets(Graph *g, int first, const int *after)
{
    int n = g->nnodes;
    Node *order = malloc(sizeof *order * (size_t)n);
    CT_ASSERT(order != NULL);
    int k = 0, j = first;
    for (int i = 0; i <= first; i++) {
        while (j < n && after[j - first] == i - 1)
            order[k++] = g->nodes[j++];
        if (i < first)
            order[k++] = g->nodes[i];
    }
    while (j < n)
        order[k++] = g->nodes[j++];
    for (int i = 0; i < n; i++) {
        g->nodes[i] = order[i];
        for (int o = 0; o < order[i].nout; o++)
            g->values[order[i].out[o]].producer = i;
    }
    free(order);
}

int grad_allreduce(Graph *g, ValueId *grads, int n, int64_t cap_bytes, CtErr *err)
{
    if (n == 0)
        return 0;
    Item *items = malloc(sizeof *items * (size_t)n);
    CT_ASSERT(items != NULL);
    for (int k = 0; k < n; k++)
        items[k] = (Item){g->values[grads[k]].producer, k};
    qsort(items, (size_t)n, sizeof *items, by_ready);
    Emitter e = {.g = g, .scope = "allreduce"};
    int first = g->nnodes, cap = 0, *after = NULL;
    for (int b = 0, start = 0; start < n; b++) {
        const Value *v0 = &g->values[grads[items[start].k]];
        int64_t bytes = 0;
        int end = start;
        while (end < n) {
            const Value *v = &g->values[grads[items[end].k]];
            int64_t size = shape_numel(&v->type.shape) * (int64_t)ct_dtype_size(v->type.dtype);
            if (end > start && (bytes + size > cap_bytes || v->type.dtype != v0->type.dtype))
                break; /* concat needs one dtype */
            bytes += size;
            end++;
        }
        int before = g->nnodes;
        add_bucket(&e, items + start, end - start, b, grads);
        after = ct_grow(after, &cap, g->nnodes - first, sizeof *after);
        for (int i = before; i < g->nnodes; i++)
            after[i - first] = items[end - 1].ready;
        start = end;
    }
    free(items);
    if (e.failed) {
        free(after);
        *err = e.err;
        return ct_failctx(err, "gradient all-reduce");
    }
    move_buckets(g, first, after);
    free(after);
    return 0;
}
