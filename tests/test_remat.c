/* The remat pass (passes/remat.c): --grad-checkpointing's units (timm's
 * checkpoint_seq over each block) and --memory-budget recompute activations
 * in the backward; the planned peak falls, the plan stays sound, and three
 * training steps give every state value (params, momentum, BN running
 * stats) bit for bit as without it, on the cpu backend (and one step on
 * ref and on cuda-sim): test_resnet (batch norm, relu, residual adds) and test_vit with drop
 * path (its masks drawn again in the recompute), channels-last too. The
 * cheap recomputation the tools run by default likewise, and its share: the
 * fewest it takes to reach a planned peak, all where nothing reaches it;
 * the batch norms it runs again with their relu placed where their
 * gradients are (passes/schedule.h's schedule_bn_reruns). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/ops.h"
#include "models/registry.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "passes/plan.h"
#include "runtime/backend.h"
#include "train_setup.h"

enum { B = 4, H = 64, CLASSES = 10, STEPS = 3 };
static float images[B * 3 * H * H];
static int64_t labels[B];

typedef struct Case {
    const char *model;
    int channels_last;
    double drop_path;
    int shrinks; /* checkpointing lowers the plain step's peak (test_resnet's is its stem's, which no block holds) */
    int frees;   /* cheap candidates fused into elementwise readers (test_convnext's layer scale's reshape) */
} Case;

/* c's training graph under remat spec rs (NULL: none); the report in *rep. */
static int build(const Case *c, const RematSpec *rs, Graph *g, RematReport *rep, CtErr *err)
{
    ModelSpec spec = {.batch_size = B, .training = 1,
                      .args = {.num_classes = CLASSES, .img_size = H, .drop_path_rate = c->drop_path}};
    Pipeline p = {.training = 1,
                  .loss = {.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1},
                  .opt = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4},
                  .channels_last = c->channels_last, .verify = 1};
    if (rs)
        p.remat = *rs;
    PipelineResult r;
    if (model_build(model_find(c->model), &spec, g, err) || pipeline_run(&p, g, &r, err))
        return -1;
    if (rep)
        *rep = r.remat;
    train_step_free(&r.ts);
    return 0;
}

/* The planned peak (the arena's part in *arena), the plan checked. */
static size_t peak_of(const Graph *g, size_t *arena)
{
    MemPlan p;
    CtErr err;
    CT_ASSERT(plan_memory(g, &p, &err) == 0);
    CHECKF(plan_check(g, &p, &err) == 0, "%s", err.msg);
    size_t total = plan_peak_bytes(&p);
    *arena = p.arena_bytes;
    plan_free(&p);
    return total;
}

/* `steps` steps of g on be from seed's init; the state in *s (the caller frees it). */
static int run_steps(const CtBackend *be, const Graph *g, int steps, CtState *s)
{
    state_create(s, g);
    state_init(s, 11);
    CtRunner run;
    CtErr err = {{0}};
    if (backend_open(&run, be, g, s, NULL, &err)) {
        CHECKF(0, "%s: %s", be->name, err.msg);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < steps && !rc; i++) {
        float lr = 0.05f, scale = 1;
        CtTensor in[4] = {{{{4, {B, 3, H, H}}, CT_F32}, images},
                          {{{1, {B}}, CT_I64}, labels},
                          {{{0}, CT_F32}, &lr},
                          {{{0}, CT_F32}, &scale}};
        CtTensor *out = calloc((size_t)g->noutputs + 1, sizeof *out);
        CT_ASSERT(out != NULL);
        rc = backend_step(&run, in, 4, out, &err);
        CHECKF(rc == 0, "%s step %d: %s", be->name, i, err.msg);
        for (int k = 0; k < g->noutputs && !rc; k++)
            tensor_free(&out[k]);
        free(out);
    }
    if (!rc && run.be->state_to_host(run.exec, &err))
        rc = -1;
    backend_close(&run);
    return rc;
}

/* Every entry of a bit for bit in b (by name): the count that differ. */
static int differ(const CtState *a, const CtState *b, const char *what)
{
    int bad = 0;
    for (int i = 0; i < a->n; i++) {
        int j = state_find(b, a->e[i].name);
        size_t bytes = (size_t)shape_numel(&a->e[i].type.shape) * ct_dtype_size(a->e[i].type.dtype);
        if (j < 0 || memcmp(state_data(a, i), state_data(b, j), bytes)) {
            if (bad++ < 3)
                fprintf(stderr, "%s: %s differs\n", what, a->e[i].name);
        }
    }
    return bad;
}

static void same_steps(const Graph *a, const Graph *b, const CtBackend *be, int steps, const char *what)
{
    CtState sa, sb;
    int ra = run_steps(be, a, steps, &sa), rb = run_steps(be, b, steps, &sb);
    if (!ra && !rb) {
        int bad = differ(&sa, &sb, what);
        CHECKF(bad == 0, "%s on %s: %d state entries differ after %d steps", what, be->name, bad, steps);
    }
    state_free(&sa);
    state_free(&sb);
}

/* Nodes of g whose op's fusion class is a contraction (conv, linear, matmul). */
static int contractions(const Graph *g)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += op_def(g->nodes[i].op)->fusion == OP_CONTRACTION;
    return n;
}

/* The batch norms run again with their relu in g (their running mean a
 * forward batch norm's update), each where its gradient is
 * (schedule_bn_reruns): the norm, the relu, the relu's act_grad, the
 * norm's batch_norm_grad in a row and the relu's other readers after them;
 * *apart gets those that are not so (but where the relu's output makes
 * the gradient's dy, through a max pool's gradient: ResNet's stem). */
static int reruns_by_grad(const Graph *g, int *apart)
{
    int n = 0;
    *apart = 0;
    for (int i = 0; i + 1 < g->nnodes; i++) {
        const Node *bn = &g->nodes[i], *relu = &g->nodes[i + 1];
        if (remat_bn_forward(g, bn) < 0)
            continue;
        int r = -1, pooled = 0, last = -1;
        for (int j = i + 1; j < g->nnodes && r < 0; j++)
            r = g->nodes[j].op == CT_OP_relu && g->nodes[j].in[0] == bn->out[0] ? j : -1;
        if (r < 0)
            continue;
        ValueId a = g->nodes[r].out[0];
        for (int j = 0; j < g->nnodes; j++)
            for (int k = 0; k < g->nodes[j].nin; k++)
                if (g->nodes[j].in[k] == a && g->nodes[j].op != CT_OP_act_grad) {
                    pooled |= g->nodes[j].op == CT_OP_max_pool2d_grad;
                    last = j > last ? j : last;
                }
        const Node *ag = i + 2 < g->nnodes ? &g->nodes[i + 2] : NULL, *gr = i + 3 < g->nnodes ? &g->nodes[i + 3] : NULL;
        int by_grad = r == i + 1 && relu->out[0] == a && gr && ag->op == CT_OP_act_grad && ag->in[0] == a &&
                      gr->op == CT_OP_batch_norm_grad && gr->in[0] == bn->in[0] && gr->in[4] == ag->out[0];
        int after = 1;
        for (int j = 0; j < g->nnodes; j++)
            for (int k = 0; k < g->nodes[j].nin; k++)
                after &= g->nodes[j].in[k] != a || j == i + 2 || j > i + 3;
        n += by_grad && after;
        *apart += !(by_grad && after) && !pooled;
    }
    return n;
}

/* RematSpec.cheap (the tools' default): some activations recomputed, no
 * contraction run twice, the peak lower, the steps the same; test_resnet's
 * batch norms run again with their relu where their gradients are. */
static void test_cheap(const Case *c, const Graph *plain, size_t p0, int with_ref, const char *what)
{
    Graph cheap;
    RematReport rep;
    CtErr err = {{0}};
    if (build(c, &(RematSpec){.cheap = 1}, &cheap, &rep, &err)) {
        CHECKF(0, "%s cheap: %s", what, err.msg);
        return;
    }
    size_t a, pc = peak_of(&cheap, &a);
    printf("%s: cheap recomputation: planned peak %.2f MiB (%d values recomputed by %d nodes)\n", what,
           pc / 1048576.0, rep.values, rep.nodes);
    CHECKF(rep.values > 0 && pc < p0 && rep.peak_after == pc, "%s cheap: %d values, peak %zu (without %zu)", what,
           rep.values, pc, p0);
    CHECKF(contractions(&cheap) == contractions(plain), "%s cheap: %d contractions, %d without", what,
           contractions(&cheap), contractions(plain));
    int apart, by_grad = reruns_by_grad(&cheap, &apart);
    CHECKF(apart == 0 && (by_grad > 0 || strcmp(c->model, "test_resnet")),
           "%s cheap: %d batch norms run again where their gradients are, %d apart", what, by_grad, apart);
    same_steps(plain, &cheap, &ct_backend_cpu, STEPS, what);
    if (with_ref) {
        same_steps(plain, &cheap, &ct_backend_ref, 1, what);
        same_steps(plain, &cheap, &ct_backend_cuda_sim, 1, what);
    }
    graph_free(&cheap);
}

/* RematSpec.share: a peak between the ones recomputing the free cheap
 * candidates only (share 1: the graph's peak is reached without the others)
 * and every one of them is reached by recomputing some of the others, not
 * all, and the steps stay the same; a share nothing reaches recomputes all. */
static void test_share(const Case *c, const char *what)
{
    Graph all, free_only, part, plain;
    RematReport ra, rf, rp;
    CtErr err = {{0}};
    if (build(c, &(RematSpec){.cheap = 1, .share = 1e-6}, &all, &ra, &err) ||
        build(c, &(RematSpec){.cheap = 1, .share = 1}, &free_only, &rf, &err)) {
        CHECKF(0, "%s share: %s", what, err.msg);
        return;
    }
    graph_free(&all);
    graph_free(&free_only);
    size_t p0 = ra.peak_before, mid = (rf.peak_after + ra.peak_after) / 2;
    double share = (double)mid / (double)p0;
    if (build(c, &(RematSpec){.cheap = 1, .share = share}, &part, &rp, &err)) {
        CHECKF(0, "%s share %.3f: %s", what, share, err.msg);
        return;
    }
    printf("%s: share %.3f: planned peak %.2f MiB, %d values recomputed (the free ones: %.2f MiB, %d; all: %.2f MiB, "
           "%d)\n", what, share, rp.peak_after / 1048576.0, rp.values, rf.peak_after / 1048576.0, rf.values,
           ra.peak_after / 1048576.0, ra.values);
    CHECKF((rf.values > 0) == c->frees, "%s: %d free cheap candidates", what, rf.values);
    CHECKF(rf.peak_after > ra.peak_after && rf.values < rp.values && rp.values < ra.values &&
               rp.peak_after <= (size_t)(share * (double)p0),
           "%s share %.3f: peak %zu (target %zu), %d values (free %d, all %d)", what, share, rp.peak_after, mid,
           rp.values, rf.values, ra.values);
    if (build(c, NULL, &plain, NULL, &err) == 0) {
        same_steps(&plain, &part, &ct_backend_cpu, STEPS, what);
        graph_free(&plain);
    }
    graph_free(&part);
}

static void test_case(const Case *c, int with_ref)
{
    const char *units[8];
    CtErr uerr;
    int nunits = model_ckpt_units(model_find(c->model), units, 8, &uerr);
    CHECKF(nunits > 0, "%s: %s", c->model, uerr.msg);
    Graph plain, ckpt, budget;
    RematReport rc_rep, rb_rep;
    CtErr err = {{0}};
    char what[96];
    snprintf(what, sizeof what, "%s%s%s", c->model, c->channels_last ? " channels_last" : "",
             c->drop_path > 0 ? " drop_path" : "");
    if (build(c, NULL, &plain, NULL, &err)) {
        CHECKF(0, "%s: %s", what, err.msg);
        return;
    }
    if (build(c, &(RematSpec){.units = units, .nunits = nunits}, &ckpt, &rc_rep, &err)) {
        CHECKF(0, "%s checkpointing: %s", what, err.msg);
        graph_free(&plain);
        return;
    }
    size_t a0, a1, ab;
    size_t p0 = peak_of(&plain, &a0), p1 = peak_of(&ckpt, &a1);
    printf("%s: planned peak %.2f MiB (arena %.2f), with checkpointing %.2f MiB (arena %.2f; %d values recomputed "
           "by %d nodes, %.1f MMACs more)\n",
           what, p0 / 1048576.0, a0 / 1048576.0, p1 / 1048576.0, a1 / 1048576.0, rc_rep.values, rc_rep.nodes,
           rc_rep.extra_macs / 1e6);
    CHECKF(rc_rep.peak_after == p1, "%s: the report's peak %zu, the plan's %zu", what, rc_rep.peak_after, p1);
    CHECKF((p1 < p0 || !c->shrinks) && rc_rep.values > 0 && rc_rep.nodes >= rc_rep.values && rc_rep.extra_macs > 0,
           "%s: checkpointing did nothing", what);
    same_steps(&plain, &ckpt, &ct_backend_cpu, STEPS, what);
    if (with_ref) {
        same_steps(&plain, &ckpt, &ct_backend_ref, 1, what);
        same_steps(&plain, &ckpt, &ct_backend_cuda_sim, 1, what);
    }

    /* a budget just under the peak without recomputation (the optimizer
     * inside the backward, as remat runs it): met by recomputing some cheap ones */
    size_t mid = rc_rep.peak_before - 1;
    if (build(c, &(RematSpec){.budget = mid}, &budget, &rb_rep, &err) == 0) {
        size_t pb = peak_of(&budget, &ab);
        printf("%s: budget %.2f MiB: planned peak %.2f MiB (%d values recomputed, %.1f MMACs more)\n", what,
               mid / 1048576.0, pb / 1048576.0, rb_rep.values, rb_rep.extra_macs / 1e6);
        CHECKF(pb <= mid && rb_rep.values > 0, "%s: budget %zu, peak %zu", what, mid, pb);
        same_steps(&plain, &budget, &ct_backend_cpu, STEPS, what);
        graph_free(&budget);
        /* with the tools' cheap recomputation on top: still within the budget */
        if (build(c, &(RematSpec){.budget = mid, .cheap = 1}, &budget, &rb_rep, &err) == 0) {
            size_t pc = peak_of(&budget, &ab);
            CHECKF(pc <= mid, "%s: budget %zu with cheap recomputation, peak %zu", what, mid, pc);
            graph_free(&budget);
        } else {
            CHECKF(0, "%s budget + cheap: %s", what, err.msg);
        }
    } else {
        CHECKF(0, "%s budget: %s", what, err.msg);
    }
    /* one no recomputation reaches: refused, saying the least it can reach */
    Graph none;
    int rc = build(c, &(RematSpec){.budget = p0 / 20}, &none, NULL, &err);
    CHECKF(rc == -1 && strstr(err.msg, "needs at least"), "%s: a budget of 5%%: %s", what,
           rc ? err.msg : "accepted");
    if (rc == 0)
        graph_free(&none);
    test_cheap(c, &plain, p0, with_ref, what);
    test_share(c, what);
    graph_free(&plain);
    graph_free(&ckpt);
}

/* A node in no unit and a unit's value read across its edge are kept: a
 * remat with a regex no scope matches changes nothing. */
static void test_no_units(void)
{
    Graph a, b;
    RematReport rep;
    CtErr err = {{0}};
    const char *none[] = {"^no_such_block"};
    Case c = {"test_resnet", 0, 0, 0, 0};
    CT_ASSERT(build(&c, NULL, &a, NULL, &err) == 0);
    CT_ASSERT(build(&c, &(RematSpec){.units = none, .nunits = 1}, &b, &rep, &err) == 0);
    CHECKF(rep.values == 0 && rep.nodes == 0 && a.nnodes == b.nnodes && rep.peak_after == rep.peak_before,
           "%d values, %d nodes", rep.values, rep.nodes);
    graph_free(&a);
    graph_free(&b);
    CHECK(build(&c, &(RematSpec){.units = (const char *[]){"^layer("}, .nunits = 1}, &b, NULL, &err) == -1 &&
          strstr(err.msg, "bad unit regex"));
}

int main(void)
{
    step_batch(images, sizeof images / sizeof *images, labels, B, CLASSES, 77, 3);
    test_no_units();
    test_case(&(Case){"test_resnet", 0, 0, 0, 0}, 1);
    test_case(&(Case){"test_resnet", 1, 0, 0, 0}, 0);
    test_case(&(Case){"test_vit", 0, 0.1, 1, 0}, 0);
    test_case(&(Case){"test_convnext", 1, 0.1, 1, 1}, 0);
    return check_done("test_remat");
}
