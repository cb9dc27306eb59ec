/* Data-parallel training: the gradient buckets of the training graph
 * (passes/bucket.c), allreduce_mean as a copy in a world of one, and, run
 * under `mpirun -np 2`, the communicator (runtime/dist.h) and the step
 * itself: two ranks with half a batch each average to the gradients and
 * update of one rank with the whole batch. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"
#include "runtime/dist.h"

enum { H = 32, CLASSES = 10, CAP = 64 << 10 };

static void build(int batch, int64_t cap, Graph *g, TrainStep *ts)
{
    ModelSpec spec = {.batch_size = batch, .training = 1, .args = {.num_classes = CLASSES, .img_size = H}};
    OptimSpec opt = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4, .allreduce_bucket_bytes = cap};
    CtErr err = {{0}};
    CHECKF(model_build(model_find("test_vit"), &spec, g, &err) == 0, "%s", err.msg);
    CHECKF(train_step_build(g, g->outputs[0], &(LossSpec){CT_LOSS_CROSS_ENTROPY, 0.1, -1, 0}, &opt, ts, &err) == 0,
           "%s", err.msg);
}

/* The allreduce_mean node a gradient comes from (through its slice and
 * reshapes), or -1. */
static int source_allreduce(const Graph *g, ValueId v)
{
    for (int p = g->values[v].producer; p >= 0; p = g->values[g->nodes[p].in[0]].producer) {
        CtOp op = g->nodes[p].op;
        if (op == CT_OP_allreduce_mean)
            return p;
        if (op != CT_OP_reshape && op != CT_OP_slice && op != CT_OP_div)
            return -1;
    }
    return -1;
}

/* Buckets of at most CAP bytes (one bigger tensor alone) cover every
 * gradient once, are numbered in node order, and the first sits before
 * the end of the backward: an in-order executor can start it early. */
static void test_buckets(void)
{
    Graph g;
    TrainStep ts;
    build(4, CAP, &g, &ts);
    int nbuckets = 0, first = -1, later_backward = 0;
    int64_t covered = 0;
    for (int i = 0; i < g.nnodes; i++) {
        const Node *n = &g.nodes[i];
        if (n->op == CT_OP_allreduce_mean) {
            int64_t numel = shape_numel(&g.values[n->in[0]].type.shape);
            CHECK(n->iattr[0] == nbuckets);
            int single = g.values[n->in[0]].producer < 0 || g.nodes[g.values[n->in[0]].producer].op != CT_OP_concat;
            CHECKF(numel * 4 <= CAP || single, "bucket %d holds %lld bytes", nbuckets, (long long)numel * 4);
            covered += numel;
            first = first < 0 ? i : first;
            nbuckets++;
        }
        later_backward |= first >= 0 && (n->op == CT_OP_layer_norm_grad || n->op == CT_OP_sdpa_grad);
    }
    CHECK(covered == graph_param_count(&g));
    CHECKF(nbuckets >= 3, "%d buckets", nbuckets);
    CHECKF(later_backward, "the first bucket's all-reduce waits for the whole backward");
    for (int k = 0; k < ts.nparams; k++)
        CHECKF(source_allreduce(&g, ts.grads[k]) >= 0, "gradient %d is not averaged", k);
    train_step_free(&ts);
    graph_free(&g);
}

/* A deterministic batch: image sample s of the global batch, its label. */
static void fill_sample(float *img, int64_t *label, int s)
{
    uint32_t r = 2654435761u * (uint32_t)(s + 1);
    *label = s % CLASSES;
    for (int k = 0; k < 3 * H * H; k++) {
        r = r * 1664525u + 1013904223u;
        img[k] = (float)(sin(0.3 * (s % CLASSES + 1) * (k % H)) + 0.2 * ((r >> 8) / 16777216.0 - 0.5));
    }
}

/* One step on the ref backend of samples first, first + stride, ... (batch
 * of them); the outputs in out (graph outputs), the state after it in s. */
static void step(Graph *g, CtState *s, int batch, int first, int stride, CtTensor *out)
{
    float *x = malloc(sizeof *x * (size_t)batch * 3 * H * H), lr = 0.05f, scale = 1;
    int64_t *y = malloc(sizeof *y * (size_t)batch);
    CHECK(x && y);
    for (int i = 0; i < batch; i++)
        fill_sample(x + (size_t)i * 3 * H * H, &y[i], first + i * stride);
    CtTensor in[4] = {{{{4, {batch, 3, H, H}}, CT_F32}, x},
                      {{{1, {batch}}, CT_I64}, y},
                      {{{0}, CT_F32}, &lr},
                      {{{0}, CT_F32}, &scale}};
    CtErr err = {{0}};
    CHECKF(ct_backend_ref.run(g, s, in, 4, out, &err) == 0, "%s", err.msg);
    free(x);
    free(y);
}

/* ||a - b|| / ||b|| of two f32 arrays. */
static double rel_err(const float *a, const float *b, int64_t n)
{
    double d = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        ref += (double)b[i] * b[i];
    }
    return ref > 0 ? sqrt(d / ref) : sqrt(d);
}

/* The graph of `world` ranks with batch b against one rank with world * b:
 * in a world of one, the buckets are copies (the same outputs bit for bit);
 * in a larger world, the averaged gradients and the updated state equal
 * the whole batch's within 1e-5. */
static void test_step_equals_whole_batch(CtDist *d)
{
    int world = dist_world_size(d), rank = dist_rank(d), b = 2;
    Graph whole, part;
    TrainStep tw, tp;
    build(b * world, 0, &whole, &tw);
    build(b, CAP, &part, &tp);
    CtState sw, sp;
    state_create(&sw, &whole);
    state_create(&sp, &part);
    state_init(&sw, 7);
    state_init(&sp, 7);
    CtTensor *ow = calloc((size_t)whole.noutputs, sizeof *ow), *op = calloc((size_t)part.noutputs, sizeof *op);
    CHECK(ow && op && whole.noutputs == part.noutputs);
    step(&whole, &sw, b * world, 0, 1, ow);
    step(&part, &sp, b, rank, world, op); /* DistributedSampler's share: rank, rank + world, ... */
    double worst = 0;
    for (int k = 1; k < whole.noutputs; k++) /* the gradients; output 0 is the logits, 1 the loss */
        if (ow[k].data && op[k].data && ow[k].type.dtype == CT_F32) {
            int64_t n = shape_numel(&ow[k].type.shape);
            double e = k == 1 ? 0 : rel_err(op[k].data, ow[k].data, n);
            worst = e > worst ? e : worst;
            if (world == 1)
                CHECKF(memcmp(op[k].data, ow[k].data, (size_t)n * 4) == 0, "output %d differs", k);
        }
    for (int i = 0; i < sw.n; i++)
        if (sw.e[i].type.dtype == CT_F32) {
            double e = rel_err(state_data(&sp, i), state_data(&sw, i), shape_numel(&sw.e[i].type.shape));
            worst = e > worst ? e : worst;
        }
    printf("rank %d of %d: gradients and state after one step within %.2g of the whole batch's\n", rank, world, worst);
    CHECKF(worst <= 1e-5, "%g", worst);
    for (int k = 0; k < whole.noutputs; k++) {
        tensor_free(&ow[k]);
        tensor_free(&op[k]);
    }
    free(ow);
    free(op);
    state_free(&sw);
    state_free(&sp);
    train_step_free(&tw);
    train_step_free(&tp);
    graph_free(&whole);
    graph_free(&part);
}

/* The collectives, and a difference across ranks caught by name. */
static void test_collectives(CtDist *d)
{
    int world = dist_world_size(d), rank = dist_rank(d);
    CtErr err = {{0}};
    double v[3] = {rank + 1, 2 * rank, 1};
    CHECKF(dist_allreduce_sum(d, v, 3, &err) == 0, "%s", err.msg);
    CHECK(v[0] == world * (world + 1) / 2.0 && v[1] == world * (world - 1) && v[2] == world);
    int64_t word = rank == 0 ? 1234567 : -1;
    CHECKF(dist_broadcast(d, &word, sizeof word, 0, &err) == 0, "%s", err.msg);
    CHECK(word == 1234567);
    CHECKF(dist_barrier(d, &err) == 0, "%s", err.msg);
    float same[4] = {1, 2, 3, 4}, mine[4] = {1, 2, 3, (float)rank};
    CHECKF(dist_check_identical(d, (const void *[]){same, same}, (size_t[]){sizeof same, 8}, 2, "params", &err) == 0,
           "%s", err.msg);
    int rc = dist_check_identical(d, (const void *[]){mine}, (size_t[]){sizeof mine}, 1, "params", &err);
    if (world > 1) {
        CHECK(rc == -1 && strstr(err.msg, "params differ across ranks: rank 0 has XXH3") &&
              strstr(err.msg, "1 other rank does not: 1 ("));
        printf("rank %d: %s\n", rank, err.msg);
    } else {
        CHECK(rc == 0);
    }
}

int main(void)
{
    CtDist *d;
    CtErr err = {{0}};
    if (dist_init(&d, &err)) {
        fprintf(stderr, "test_dist: %s\n", err.msg);
        if (d)
            dist_abort(d, 1);
        return 1;
    }
    dist_install(d);
    if (dist_rank(d) == 0)
        test_buckets();
    test_collectives(d);
    test_step_equals_whole_batch(d);
    /* one verdict for the job: every rank's failures count */
    double failed = check_failures;
    CHECKF(dist_allreduce_sum(d, &failed, 1, &err) == 0, "%s", err.msg);
    if (failed && !check_failures)
        fprintf(stderr, "test_dist: rank %d: another rank failed\n", dist_rank(d));
    dist_finish(d);
    return check_done("test_dist") || failed;
}
