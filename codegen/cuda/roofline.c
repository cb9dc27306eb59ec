/* Contract: roofline_step(s) counts step s's nodes' multiply-accumulates
 * (roofline_macs: the stats pass's rules where the op has one) and the
 * bytes of the values it reads from memory and stores, each once. */
#include "codegen/cuda/roofline.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ops.h"
#include "ir/ops/attention_geom.h"

/* Peaks from the vendors' datasheets (dense, no sparsity); H200 and H100
 * SXM share the processor, the H200 has the faster memory. */
static const RooflineDevice devices[] = {
    {"h200", 4.8e12, 989e12, 494e12, 67e12},
    {"h100", 3.35e12, 989e12, 494e12, 67e12},
};

int roofline_device(const char *name, RooflineDevice *d, CtErr *err)
{
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++)
        if (!strcmp(name, devices[i].name)) {
            *d = devices[i];
            return 0;
        }
    return ct_fail(err, "no roofline for device '%s' (h200, h100)", name);
}

int roofline_device_of(const char *gpu, RooflineDevice *d)
{
    char low[256];
    size_t n = 0;
    for (; gpu[n] && n + 1 < sizeof low; n++)
        low[n] = (char)tolower((unsigned char)gpu[n]);
    low[n] = 0;
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++)
        if (strstr(low, devices[i].name)) {
            *d = devices[i];
            return 0;
        }
    return -1;
}

static const CtShape *shape(const Graph *g, ValueId v) { return &g->values[v].type.shape; }

static double bytes(const Graph *g, ValueId v) { return (double)value_bytes(&g->values[v]); }

int64_t roofline_macs(const Graph *g, const Node *n)
{
    const OpDef *d = op_def(n->op);
    if (d->cost)
        return d->cost(g, n, OP_COST_ATTENTION).macs;
    switch (n->op) {
    case CT_OP_conv2d_grad_input: { /* dy [N, K, P, Q] through w [K, C/g, R, S]: the forward's MACs */
        const CtShape *dy = shape(g, n->in[0]);
        return dy->d[0] * shape_numel(shape(g, n->in[1])) * dy->d[2] * dy->d[3];
    }
    case CT_OP_conv2d_grad_weight: { /* x, dy [N, K, P, Q] into dw: the forward's MACs */
        const CtShape *dy = shape(g, n->in[1]);
        return dy->d[0] * shape_numel(shape(g, n->out[0])) * dy->d[2] * dy->d[3];
    }
    case CT_OP_sdpa_grad: { /* the scores again, then dV, dP, dQ and dK */
        AttnGeom a;
        attn_geom(g, n, &a);
        return 5 * a.B * a.H * a.N * a.M * a.D;
    }
    default:
        return 0;
    }
}

/* Whether step st's work holds fuse step k: a kernel's every fuse step of
 * its launch (a multi-tensor launch is one step), else its own and those
 * it spans. */
static int covers(const LaunchPlan *lp, const LpStep *st, int k)
{
    int launch = lp->fuse.steps[st->fuse_step].launch;
    return (k >= st->fuse_step && k <= st->fuse_step + st->span) ||
           (st->kind == LP_KERNEL && launch >= 0 && lp->fuse.steps[k].launch == launch);
}

/* The peak of step st's arithmetic: tensor cores for its GEMM,
 * convolution or attention in f16/bf16 (TF32 in f32 where allowed). */
static double peak(const Graph *g, const LpStep *st, const Node *attention, const RooflineDevice *d, int allow_tf32)
{
    CtDType t;
    if (st->kind == LP_GEMM)
        t = st->gemm.ab_type;
    else if (st->kind == LP_CONV)
        t = st->conv.w_type;
    else if (attention)
        t = g->values[attention->in[0]].type.dtype;
    else
        return d->f32;
    return t != CT_F32 ? d->tensor16 : allow_tf32 ? d->tf32 : d->f32;
}

/* Per value of g, the node that makes it, or -1: a malloc'd array. */
static int *producers(const Graph *g)
{
    int *producer = malloc(sizeof *producer * (size_t)(g->nvalues + 1));
    CT_ASSERT(producer != NULL);
    for (ValueId v = 0; v < g->nvalues; v++)
        producer[v] = -1;
    for (int i = 0; i < g->nnodes; i++)
        for (int o = 0; o < g->nodes[i].nout; o++)
            if (g->nodes[i].out[o] >= 0)
                producer[g->nodes[i].out[o]] = i;
    return producer;
}

static RooflineStep step_of(const LaunchPlan *lp, const Graph *g, const int *producer, int s, const RooflineDevice *d,
                            int allow_tf32)
{
    const LpStep *st = &lp->steps[s];
    RooflineStep r = {0};
    if (st->kind == LP_LIB && !st->nlib && !st->mirrored) /* a view at its input's address */
        return r;
    char *mine = calloc((size_t)g->nnodes + 1, 1), *seen = calloc((size_t)g->nvalues + 1, 1);
    char *unstored = calloc((size_t)g->nvalues + 1, 1);
    CT_ASSERT(mine && seen && unstored);
    for (int k = 0; k < lp->nsteps; k++)
        if (lp->steps[k].unstored >= 0)
            unstored[lp->steps[k].unstored] = 1;
    for (int k = 0; k < lp->fuse.nsteps; k++)
        for (int j = 0; covers(lp, st, k) && j < lp->fuse.steps[k].n; j++)
            mine[lp->fuse.nodes[lp->fuse.steps[k].first + j]] = 1;
    const Node *attention = NULL;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = &g->nodes[i];
        if (!mine[i]) {
            for (int j = 0; j < n->nin; j++) /* a value this step made and another reads is stored */
                if (n->in[j] >= 0 && producer[n->in[j]] >= 0 && mine[producer[n->in[j]]] && !unstored[n->in[j]])
                    seen[n->in[j]] |= 2;
            continue;
        }
        r.flops += 2.0 * (double)roofline_macs(g, n);
        if (n->op == CT_OP_sdpa || n->op == CT_OP_sdpa_grad)
            attention = n;
        for (int j = 0; j < n->nin; j++) {
            ValueId v = n->in[j];
            if (v >= 0 && unstored[v] && !mine[producer[v]])
                v = g->nodes[producer[v]].in[0]; /* a batch norm's output computed from its x here */
            if (v >= 0 && !(seen[v] & 1) && (producer[v] < 0 || !mine[producer[v]])) {
                seen[v] |= 1;
                r.bytes += bytes(g, v);
            }
        }
        if (n->op == CT_OP_assign) /* into the state */
            r.bytes += bytes(g, n->in[0]);
    }
    for (int k = 0; k < g->noutputs; k++)
        seen[g->outputs[k]] |= 2;
    for (int i = 0; i < g->nnodes; i++)
        for (int o = 0; mine[i] && o < g->nodes[i].nout; o++)
            if (g->nodes[i].out[o] >= 0 && (seen[g->nodes[i].out[o]] & 2) && g->nodes[i].op != CT_OP_assign)
                r.bytes += bytes(g, g->nodes[i].out[o]);
    double compute = r.flops / peak(g, st, attention, d, allow_tf32), memory = r.bytes / d->bytes_per_s;
    r.compute_bound = compute > memory;
    r.floor_s = r.compute_bound ? compute : memory;
    free(mine);
    free(seen);
    free(unstored);
    return r;
}

RooflineStep roofline_step(const LaunchPlan *lp, const Graph *g, int s, const RooflineDevice *d, int allow_tf32)
{
    int *producer = producers(g);
    RooflineStep r = step_of(lp, g, producer, s, d, allow_tf32);
    free(producer);
    return r;
}

void roofline_floors(const LaunchPlan *lp, const Graph *g, const RooflineDevice *d, int allow_tf32, double *floor_s)
{
    int *producer = producers(g);
    for (int s = 0; s < lp->nsteps; s++)
        floor_s[s] = step_of(lp, g, producer, s, d, allow_tf32).floor_s;
    free(producer);
}

typedef struct Ranked {
    int step;
    double floor_s;
} Ranked;

static int by_floor(const void *a, const void *b)
{
    double x = ((const Ranked *)a)->floor_s, y = ((const Ranked *)b)->floor_s;
    return (x < y) - (x > y);
}

void roofline_report(const LaunchPlan *lp, const Graph *g, const RooflineDevice *d, int allow_tf32, CtBuf *out)
{
    Ranked *rank = calloc((size_t)lp->nsteps + 1, sizeof *rank);
    int *producer = producers(g);
    CT_ASSERT(rank != NULL);
    double flops = 0, bytes = 0, floor_c = 0, floor_m = 0;
    buf_printf(out,
               "roofline on %s: %.0f TFLOP/s f16/bf16 tensor cores, %.0f TF32 (%s), %.0f f32, %.2f TB/s memory\n"
               "step  floor_us  bound    GFLOP      MB  what\n",
               d->name, d->tensor16 / 1e12, d->tf32 / 1e12, allow_tf32 ? "allowed" : "not allowed", d->f32 / 1e12,
               d->bytes_per_s / 1e12);
    for (int s = 0; s < lp->nsteps; s++) {
        RooflineStep r = step_of(lp, g, producer, s, d, allow_tf32);
        CtBuf what = {0};
        lp_step_label(lp, g, s, 4, 0, &what);
        buf_printf(out, "%4d %9.2f  %-7s %7.3f %7.2f  %s\n", s, r.floor_s * 1e6, r.compute_bound ? "compute" : "memory",
                   r.flops / 1e9, r.bytes / 1e6, what.s);
        buf_free(&what);
        flops += r.flops;
        bytes += r.bytes;
        *(r.compute_bound ? &floor_c : &floor_m) += r.floor_s;
        rank[s] = (Ranked){s, r.floor_s};
    }
    buf_printf(out,
               "total: %d steps, %.3f GFLOP, %.1f MB: floor %.3f ms (compute-bound steps %.3f, memory-bound %.3f)\n",
               lp->nsteps, flops / 1e9, bytes / 1e6, (floor_c + floor_m) * 1e3, floor_c * 1e3, floor_m * 1e3);
    qsort(rank, (size_t)lp->nsteps, sizeof *rank, by_floor);
    buf_printf(out, "the ten steps of the highest floor:\n");
    for (int i = 0; i < lp->nsteps && i < 10; i++) {
        CtBuf what = {0};
        lp_step_label(lp, g, rank[i].step, 6, 0, &what);
        buf_printf(out, "  step %d: %.2f us, %s\n", rank[i].step, rank[i].floor_s * 1e6, what.s);
        buf_free(&what);
    }
    free(rank);
    free(producer);
}
