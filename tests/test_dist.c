/* Data-parallel training: the gradient buckets of the training graph
 * (passes/bucket.c), allreduce_mean as a copy in a world of one, the
 * collective of each program its own (ProgramOptions), and, run
 * under `mpirun -np 2`, the communicator (runtime/dist.h) and the step
 * itself: two ranks with half a batch each average to the gradients and
 * update of one rank with the whole batch, with synchronised batch norm
 * (--sync-bn) too, whose ops the ref and cpu backends compute alike. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"
#include "runtime/dist.h"

enum { H = 32, CLASSES = 10, CAP = 64 << 10 };

static void build(const char *model, int batch, int64_t cap, int sync_bn, Graph *g, TrainStep *ts)
{
    ModelSpec spec = {.batch_size = batch, .training = 1, .args = {.num_classes = CLASSES, .img_size = H}};
    OptimSpec opt = {
        .kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4, .allreduce_bucket_bytes = cap, .sync_bn = sync_bn,
        .grads_out = 1};
    CtErr err = {{0}};
    CHECKF(model_build(model_find(model), &spec, g, &err) == 0, "%s", err.msg);
    CHECKF(train_step_build(g, g->outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1}, &opt, ts, &err) == 0,
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
    build("test_vit", 4, CAP, 0, &g, &ts);
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
 * of them) over the ranks of coll; the outputs in out (graph outputs), the
 * state after it in s. */
static void step(Graph *g, CtState *s, int batch, int first, int stride, const CtCollective *coll, CtTensor *out)
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
    CHECKF(backend_run_once(&ct_backend_ref, g, s, in, 4, out, &(ProgramOptions){.collective = coll}, &err) == 0, "%s",
           err.msg);
    free(x);
    free(y);
}

/* ||a - b|| / ||b|| of two f32 arrays. */
/* The graph of `world` ranks with batch b against one rank with world * b:
 * in a world of one, the buckets are copies (the same outputs bit for bit);
 * in a larger world, the averaged gradients and the updated state (BN's
 * running statistics too, with sync_bn) equal the whole batch's within 1e-5. */
static void test_step_equals_whole_batch(CtDist *d, const char *model, int sync_bn)
{
    int world = dist_world_size(d), rank = dist_rank(d), b = 2;
    Graph whole, part;
    TrainStep tw, tp;
    build(model, b * world, 0, 0, &whole, &tw);
    build(model, b, CAP, sync_bn, &part, &tp);
    int synced = 0;
    for (int i = 0; i < part.nnodes; i++)
        synced += (part.nodes[i].op == CT_OP_batch_norm || part.nodes[i].op == CT_OP_batch_norm_grad) &&
                  part.nodes[i].iattr[1];
    CHECKF(sync_bn ? synced > 0 : synced == 0, "%s: %d synchronised batch norms", model, synced);
    CtState sw, sp;
    state_create(&sw, &whole);
    state_create(&sp, &part);
    state_init(&sw, 7);
    state_init(&sp, 7);
    CtTensor *ow = calloc((size_t)whole.noutputs, sizeof *ow), *op = calloc((size_t)part.noutputs, sizeof *op);
    CHECK(ow && op && whole.noutputs == part.noutputs);
    step(&whole, &sw, b * world, 0, 1, NULL, ow);
    /* DistributedSampler's share: rank, rank + world, ... */
    step(&part, &sp, b, rank, world, dist_collective(d), op);
    double worst = 0;
    for (int k = 1; k < whole.noutputs; k++) /* the gradients; output 0 is the logits, 1 the loss */
        if (ow[k].data && op[k].data && ow[k].type.dtype == CT_F32) {
            int64_t n = shape_numel(&ow[k].type.shape);
            double e = k == 1 ? 0 : test_rel_err(op[k].data, ow[k].data, n);
            worst = e > worst ? e : worst;
            if (world == 1)
                CHECKF(memcmp(op[k].data, ow[k].data, (size_t)n * 4) == 0, "output %d differs", k);
        }
    for (int i = 0; i < sw.n; i++)
        if (sw.e[i].type.dtype == CT_F32) {
            double e = test_rel_err(state_data(&sp, i), state_data(&sw, i), shape_numel(&sw.e[i].type.shape));
            worst = e > worst ? e : worst;
        }
    printf("rank %d of %d, %s%s: gradients and state after one step within %.2g of the whole batch's\n", rank, world,
           model, sync_bn ? " --sync-bn" : "", worst);
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

/* Element i of a [B, C, 5, 3] tensor of global sample s, channel c. */
static float bn_value(int s, int c, int i, int which)
{
    return (float)(sin(0.7 * s + 1.3 * c + 0.37 * i + which) * (1 + c) + 0.5 * c);
}

/* batch_norm and batch_norm_grad in training of samples first, first +
 * stride, ... (batch of them), sync as given over the ranks of coll, on
 * backend be: out[0..6) = y, new running mean, new running var, dx,
 * dweight, dbias. */
static void bn_ops(const CtBackend *be, int batch, int first, int stride, int sync, const CtCollective *coll,
                   CtTensor *out)
{
    enum { C = 4, SP = 15 };
    Graph g;
    CtErr err = {{0}};
    graph_init(&g);
    CtShape xs = {4, {batch, C, 5, 3}}, cs = {1, {C}};
    ValueId v[6];
    CtTensor in[6];
    for (int k = 0; k < 6; k++) {
        int big = k == 0 || k == 5;
        v[k] = graph_add_value(&g, (CtType){big ? xs : cs, CT_F32}, CT_ROLE_INPUT, NULL);
        float *p = malloc(sizeof *p * (size_t)(big ? batch * C * SP : C));
        CHECK(p != NULL);
        for (int j = 0; big && j < batch * C * SP; j++)
            p[j] = bn_value(first + j / (C * SP) * stride, j / SP % C, j % SP, k);
        for (int c = 0; !big && c < C; c++)
            p[c] = k == 4 ? 1.0f + 0.25f * c : 0.1f * (c + k);
        in[k] = (CtTensor){{big ? xs : cs, CT_F32}, p};
    }
    Node fw = {.op = CT_OP_batch_norm, .nin = 5, .in = {v[0], v[1], v[2], v[3], v[4]}, .iattr = {1, sync},
               .fattr = {0.1, 1e-5}};
    Node bw = {.op = CT_OP_batch_norm_grad, .nin = 5, .in = {v[0], v[1], v[3], v[4], v[5]}, .iattr = {1, sync},
               .fattr = {1e-5}};
    int a = graph_add_node(&g, &fw, "bn", &err), b = a >= 0 ? graph_add_node(&g, &bw, "bn", &err) : -1;
    CHECKF(b >= 0, "%s", err.msg);
    for (int k = 0; b >= 0 && k < 6; k++)
        graph_mark_output(&g, k < 3 ? g.nodes[a].out[k] : g.nodes[b].out[k - 3]);
    CHECKF(b >= 0 && backend_run_once(be, &g, NULL, in, 6, out, &(ProgramOptions){.collective = coll}, &err) == 0,
           "%s: %s", be->name, err.msg);
    for (int k = 0; k < 6; k++)
        free(in[k].data);
    graph_free(&g);
}

/* Synchronised batch norm on a rank's share (the ref and the cpu backend)
 * against plain batch norm on the whole batch: y and dx of the rank's
 * samples, the running statistics, and the weight's and bias's gradients
 * summed over the ranks (each rank keeps its own, as SyncBatchNorm). */
static void test_sync_bn_ops(CtDist *d)
{
    int world = dist_world_size(d), rank = dist_rank(d), b = 3, per = 4 * 15;
    CtTensor whole[6];
    bn_ops(&ct_backend_ref, b * world, 0, 1, 0, NULL, whole);
    const CtBackend *bes[2] = {&ct_backend_ref, &ct_backend_cpu};
    for (int e = 0; e < 2; e++) {
        CtTensor part[6];
        bn_ops(bes[e], b, rank, world, 1, dist_collective(d), part);
        CtErr err = {{0}};
        double worst = 0, sums[8];
        for (int k = 0; k < 8; k++)
            sums[k] = ((float *)part[4 + k / 4].data)[k % 4];
        CHECKF(dist_allreduce_sum(d, sums, 8, &err) == 0, "%s", err.msg);
        for (int k = 0; k < 6; k++) {
            const float *w = whole[k].data, *p = part[k].data;
            double e2 = 0, n2 = 0;
            if (k == 0 || k == 3) /* the rank's samples: rank, rank + world, ... of the whole batch */
                for (int i = 0; i < b * per; i++) {
                    double r = w[(i / per * world + rank) * per + i % per];
                    e2 += (p[i] - r) * (p[i] - r);
                    n2 += r * r;
                }
            else
                for (int c = 0; c < 4; c++) {
                    double r = w[c], q = k < 3 ? p[c] : sums[(k - 4) * 4 + c];
                    e2 += (q - r) * (q - r);
                    n2 += r * r;
                }
            worst = fmax(worst, sqrt(e2 / n2));
        }
        printf("rank %d of %d: synchronised batch norm (%s) within %.2g of the whole batch's\n", rank, world,
               bes[e]->name, worst);
        CHECKF(worst <= 1e-5, "%s: %g", bes[e]->name, worst);
        for (int k = 0; k < 6; k++)
            tensor_free(&part[k]);
    }
    for (int k = 0; k < 6; k++)
        tensor_free(&whole[k]);
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

/* A stand-in for a world of two ranks where the other rank holds
 * factor - 1 times this one's values: a sum over the ranks is factor times
 * this rank's. calls counts the sums. */
typedef struct FakeRanks {
    CtCollective coll;
    double factor;
    int calls;
} FakeRanks;

static int fake_sum(void *ctx, double *buf, int64_t n)
{
    FakeRanks *f = ctx;
    f->calls++;
    for (int64_t i = 0; i < n; i++)
        buf[i] *= f->factor;
    return 0;
}

enum { FAKE_N = 2, FAKE_C = 2, FAKE_S = 3, FAKE_V = 5, FAKE_STEPS = 40 };

/* batch_norm synchronised across the ranks (training, momentum 1: its new
 * running variance is the batch's unbiased variance over every rank's
 * values) and allreduce_mean; inputs x [N, C, S], weight, bias, running
 * mean and variance [C], v [V]; outputs the new running variance and the
 * mean of v. */
static void fake_graph(Graph *g)
{
    CtErr err = {{0}};
    graph_init(g);
    CtShape xs = {3, {FAKE_N, FAKE_C, FAKE_S}}, cs = {1, {FAKE_C}}, vs = {1, {FAKE_V}};
    ValueId v[6];
    for (int k = 0; k < 6; k++)
        v[k] = graph_add_value(g, (CtType){k == 0 ? xs : k == 5 ? vs : cs, CT_F32}, CT_ROLE_INPUT, NULL);
    Node bn = {.op = CT_OP_batch_norm, .nin = 5, .in = {v[0], v[1], v[2], v[3], v[4]}, .iattr = {1, 1},
               .fattr = {1, 1e-5}};
    Node mean = {.op = CT_OP_allreduce_mean, .nin = 1, .in = {v[5]}};
    int a = graph_add_node(g, &bn, "bn", &err), b = a >= 0 ? graph_add_node(g, &mean, "mean", &err) : -1;
    CHECKF(b >= 0, "%s", err.msg);
    if (b >= 0) {
        graph_mark_output(g, g->nodes[a].out[2]);
        graph_mark_output(g, g->nodes[b].out[0]);
    }
}

/* A program opened over a collective (NULL: none), the steps it ran and
 * how many of them gave a result other than that collective's world's. */
typedef struct FakeRun {
    CtRunner r;
    const FakeRanks *ranks;
    const CtTensor *in;
    int steps, wrong;
} FakeRun;

static void fake_step(FakeRun *fr)
{
    CtTensor out[2];
    CtErr err = {{0}};
    fr->steps++;
    if (backend_step(&fr->r, fr->in, 6, out, &err)) {
        fprintf(stderr, "test_dist: %s: %s\n", fr->r.be->name, err.msg);
        fr->wrong++;
        return;
    }
    double factor = fr->ranks ? fr->ranks->factor : 1, world = fr->ranks ? 2 : 1, count = factor * FAKE_N * FAKE_S;
    const float *x = fr->in[0].data, *v = fr->in[5].data, *var = out[0].data, *mean = out[1].data;
    int ok = 1;
    for (int c = 0; c < FAKE_C; c++) {
        double sum = 0, sq = 0;
        for (int i = 0; i < FAKE_N * FAKE_S; i++)
            sum += x[(i / FAKE_S * FAKE_C + c) * FAKE_S + i % FAKE_S];
        for (int i = 0; i < FAKE_N * FAKE_S; i++) {
            double d = x[(i / FAKE_S * FAKE_C + c) * FAKE_S + i % FAKE_S] - sum / (FAKE_N * FAKE_S);
            sq += d * d;
        }
        double want = sq / (FAKE_N * FAKE_S) * count / (count - 1);
        ok = ok && fabs(var[c] - want) <= 1e-6 * want;
    }
    for (int i = 0; i < FAKE_V; i++)
        ok = ok && fabs(mean[i] - v[i] * factor / world) <= 1e-6 * fabs(v[i] * factor);
    fr->wrong += !ok;
    tensor_free(&out[0]);
    tensor_free(&out[1]);
}

static void *fake_steps(void *arg)
{
    for (int i = 0; i < FAKE_STEPS; i++)
        fake_step(arg);
    return NULL;
}

/* The collective reaches a program's kernels from the options it was
 * opened with, not from the process: on the ref and the cpu backend,
 * programs opened over two different collectives and one over none (a
 * world of one rank) each compute their own world's result, run in turns
 * and at once on three threads, and each collective sums for its own
 * program's runs alone. */
static void test_collective_per_program(void)
{
    Graph g;
    fake_graph(&g);
    float x[FAKE_N * FAKE_C * FAKE_S], w[FAKE_C], bias[FAKE_C], rm[FAKE_C], rv[FAKE_C], v[FAKE_V];
    for (int i = 0; i < FAKE_N * FAKE_C * FAKE_S; i++)
        x[i] = (float)(sin(0.9 * i) + 0.1 * i);
    for (int c = 0; c < FAKE_C; c++) {
        w[c] = 1;
        bias[c] = rm[c] = 0;
        rv[c] = 1;
    }
    for (int i = 0; i < FAKE_V; i++)
        v[i] = 0.25f * (float)(i + 1);
    CtShape cs = {1, {FAKE_C}};
    CtTensor in[6] = {{{{3, {FAKE_N, FAKE_C, FAKE_S}}, CT_F32}, x}, {{cs, CT_F32}, w}, {{cs, CT_F32}, bias},
                      {{cs, CT_F32}, rm}, {{cs, CT_F32}, rv}, {{{1, {FAKE_V}}, CT_F32}, v}};
    const CtBackend *bes[2] = {&ct_backend_ref, &ct_backend_cpu};
    for (int e = 0; e < 2; e++) {
        FakeRanks ranks[2] = {{.factor = 3}, {.factor = 5}};
        FakeRun run[3] = {{.ranks = &ranks[0]}, {.ranks = &ranks[1]}, {.ranks = NULL}};
        CtErr err = {{0}};
        int opened = 0;
        for (int k = 0; k < 3; k++) {
            if (k < 2)
                ranks[k].coll = (CtCollective){.ctx = &ranks[k], .world_size = 2, .allreduce_sum = fake_sum};
            run[k].in = in;
            ProgramOptions o = {.collective = k < 2 ? &ranks[k].coll : NULL};
            int rc = backend_open(&run[k].r, bes[e], &g, NULL, &o, &err);
            CHECKF(rc == 0, "%s: %s", bes[e]->name, err.msg);
            opened += rc == 0;
        }
        if (opened == 3) {
            for (int turn = 0; turn < 6; turn++)
                fake_step(&run[turn * 2 % 3]);
            pthread_t th[2];
            int started[2];
            for (int k = 0; k < 2; k++)
                started[k] = pthread_create(&th[k], NULL, fake_steps, &run[k]) == 0;
            CHECK(started[0] && started[1]);
            fake_steps(&run[2]);
            for (int k = 0; k < 2; k++)
                if (started[k])
                    pthread_join(th[k], NULL);
            for (int k = 0; k < 3; k++)
                CHECKF(run[k].wrong == 0, "%s, %s: %d of %d steps computed another world's result", bes[e]->name,
                       k == 2 ? "no collective" : k ? "factor 5" : "factor 3", run[k].wrong, run[k].steps);
            /* a step sums three times: the batch statistics twice, the mean once */
            for (int k = 0; k < 2; k++)
                CHECKF(ranks[k].calls == 3 * run[k].steps, "%s: %d sums over %d steps", bes[e]->name, ranks[k].calls,
                       run[k].steps);
        }
        for (int k = 0; k < 3; k++)
            backend_close(&run[k].r);
    }
    graph_free(&g);
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
    if (dist_rank(d) == 0) {
        test_buckets();
        test_collective_per_program();
    }
    test_collectives(d);
    test_sync_bn_ops(d);
    test_step_equals_whole_batch(d, "test_vit", 0);
    test_step_equals_whole_batch(d, "test_resnet", 1);
    /* one verdict for the job: every rank's failures count */
    double failed = check_failures;
    CHECKF(dist_allreduce_sum(d, &failed, 1, &err) == 0, "%s", err.msg);
    if (failed && !check_failures)
        fprintf(stderr, "test_dist: rank %d: another rank failed\n", dist_rank(d));
    dist_finish(d);
    return check_done("test_dist") || failed;
}
