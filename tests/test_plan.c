/* Memory planning: the independent checker accepts the plans of every kind
 * of graph (eval, train with each optimizer), reshapes (and channels-last
 * ConvNeXt's permutes) are views, it
 * catches a corrupted plan, outputs nothing reads have their space, and
 * resnet50's training step at batch 256 fits in well under the naive sum. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_graphs.h"
#include "passes/plan.h"

static void test_plans_check(void)
{
    static const char *const models[] = {"test_resnet", "test_vit", "test_efficientnet", "test_convnext"};
    for (int m = 0; m < 4; m++)
        for (int mode = 0; mode < 3; mode++) {
            Graph g;
            MemPlan p;
            CtErr err;
            OptimSpec o = {.kind = mode == 2 ? CT_OPT_ADAMW : CT_OPT_SGD, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999,
                           .eps = 1e-8};
            if (model_graph(models[m], &(GraphSpec){.batch = 4, .training = mode > 0, .opt = &o}, &g))
                continue;
            CHECK(plan_memory(&g, &p, &err) == 0);
            CHECKF(plan_check(&g, &p, &err) == 0, "%s mode %d: %s", models[m], mode, err.msg);
            CHECKF(p.arena_bytes <= p.naive_bytes, "%s: arena %zu > naive %zu", models[m], p.arena_bytes,
                   p.naive_bytes);
            int aliased = 0;
            for (int v = 0; v < g.nvalues; v++)
                aliased += p.alias_of[v] >= 0;
            CHECKF(aliased > 0, "%s mode %d: nothing computed in place", models[m], mode);
            /* a reshape between row-major arena values is a view: its input's
             * address, and the group's space outlives every read of each */
            int views = 0;
            for (int i = 0; i < g.nnodes; i++) {
                const Node *n = &g.nodes[i];
                ValueId x = n->in[0], y = n->out[0];
                if (n->op != CT_OP_reshape || p.offset[x] == PLAN_NONE || p.offset[y] == PLAN_NONE ||
                    (g.values[x].layout != CT_LAYOUT_CONTIG && g.values[x].type.shape.ndim == 4) ||
                    (g.values[y].layout != CT_LAYOUT_CONTIG && g.values[y].type.shape.ndim == 4))
                    continue;
                views++;
                CHECKF(p.offset[y] == p.offset[x] && p.view_of[y] == p.view_of[x] && p.last[x] == p.last[y],
                       "%s mode %d: reshape %%%d -> %%%d is not a view", models[m], mode, x, y);
                for (int j = i + 1; j < g.nnodes; j++)
                    for (int k = 0; k < g.nodes[j].nin; k++)
                        CHECKF(g.nodes[j].in[k] != y || j <= p.last[x], "%s: %%%d read after its view's space died",
                               models[m], y);
            }
            CHECKF(views > 0 || m != 1, "%s mode %d: no views", models[m], mode);
            plan_free(&p);
            graph_free(&g);
        }
}

/* Under channels-last, ConvNeXt's permutes to and from N, H, W, C only
 * relabel memory: views, at their input's address; row-major, those over
 * whole feature maps move data and are not. */
static void test_permute_views(void)
{
    for (int cl = 0; cl < 2; cl++) {
        Graph g;
        MemPlan p;
        CtErr err;
        if (model_graph("test_convnext", &(GraphSpec){.batch = 2, .training = 1, .channels_last = cl}, &g))
            continue;
        CHECK(plan_memory(&g, &p, &err) == 0);
        CHECKF(plan_check(&g, &p, &err) == 0, "channels_last %d: %s", cl, err.msg);
        int permutes = 0, views = 0;
        for (int i = 0; i < g.nnodes; i++) {
            const Node *n = &g.nodes[i];
            const int64_t *d = g.values[n->in[0]].type.shape.d;
            if (n->op != CT_OP_permute || n->iattr[0] != 4 || p.offset[n->in[0]] == PLAN_NONE ||
                p.offset[n->out[0]] == PLAN_NONE || d[1] * d[2] * d[3] == d[1] || d[1] * d[2] * d[3] == d[3])
                continue; /* a head's [N, C, 1, 1] is the same bytes in any order */
            permutes++;
            views += p.view_of[n->out[0]] == p.view_of[n->in[0]] && p.offset[n->out[0]] == p.offset[n->in[0]];
        }
        CHECKF(permutes > 0 && views == (cl ? permutes : 0), "channels_last %d: %d of %d 4-D permutes are views", cl,
               views, permutes);
        plan_free(&p);
        graph_free(&g);
    }
}

/* Two live values given the same space must be caught. */
static void test_checker_catches_overlap(void)
{
    Graph g;
    MemPlan p;
    CtErr err;
    if (model_graph("test_resnet", &(GraphSpec){.training = 1}, &g))
        return;
    CHECK(plan_memory(&g, &p, &err) == 0);
    int found = 0;
    for (int i = 0; i < g.nnodes && !found; i++) {
        const Node *n = &g.nodes[i];
        if (n->op != CT_OP_conv2d || p.offset[n->in[0]] == PLAN_NONE || p.offset[n->out[0]] == PLAN_NONE)
            continue;
        p.offset[n->out[0]] = p.offset[n->in[0]]; /* conv output over its live input */
        found = 1;
    }
    CHECK(found);
    err.msg[0] = 0;
    CHECKF(plan_check(&g, &p, &err) == -1 && strstr(err.msg, "overlap"), "checker missed it: %s", err.msg);
    plan_free(&p);
    graph_free(&g);
}

/* A node's outputs that nothing reads take space while it runs: the
 * arena's peak counts them before their space comes back. */
static void test_unread_outputs(void)
{
    Graph g;
    MemPlan p;
    CtErr err = {{0}};
    graph_init(&g);
    ValueId x = graph_add_value(&g, (CtType){{1, {64}}, CT_F32}, CT_ROLE_INPUT, NULL);
    Node relu = {.op = CT_OP_relu, .nin = 1, .in = {x}};
    CHECKF(graph_add_node(&g, &relu, "relu", &err) >= 0, "%s", err.msg);
    CHECK(plan_memory(&g, &p, &err) == 0);
    CHECKF(plan_check(&g, &p, &err) == 0, "%s", err.msg);
    CHECKF(p.arena_bytes >= 64 * sizeof(float), "arena %zu bytes", p.arena_bytes);
    plan_free(&p);
    graph_free(&g);
}

/* Lifetimes asked for (PlanHints): a chain of ReLUs, each computed in the
 * space of its input, keeps its first value apart from the later ones when
 * that is asked to live until the chain's last node, and its last value
 * apart from the others when that is born at the first, in two blocks
 * either way (then a sum needs one more: the space the chain leaves is
 * given back); the checker accepts the plan of a training graph with many
 * values asked to live longer, and each lives as long as asked. */
static void test_hints(void)
{
    Graph g;
    MemPlan p;
    CtErr err = {{0}};
    graph_init(&g);
    ValueId v[4] = {graph_add_value(&g, (CtType){{1, {64}}, CT_F32}, CT_ROLE_INPUT, NULL)};
    for (int k = 1; k < 4; k++) {
        Node relu = {.op = CT_OP_relu, .nin = 1, .in = {v[k - 1]}};
        int i = graph_add_node(&g, &relu, "relu", &err);
        CHECKF(i >= 0, "%s", err.msg);
        v[k] = i >= 0 ? g.nodes[i].out[0] : 0;
    }
    Node add = {.op = CT_OP_add, .nin = 2, .in = {v[3], v[0]}};
    int i = graph_add_node(&g, &add, "add", &err);
    CHECKF(i >= 0, "%s", err.msg);
    add.in[0] = i >= 0 ? g.nodes[i].out[0] : 0;
    add.in[1] = v[3];
    CHECKF(graph_add_node(&g, &add, "add", &err) >= 0, "%s", err.msg);
    int born[8], until[8];
    for (int hint = 0; hint < 3; hint++) {
        for (int k = 0; k < g.nvalues; k++)
            born[k] = until[k] = -1;
        if (hint == 1)
            until[v[1]] = 2;
        if (hint == 2)
            born[v[3]] = 0;
        CHECK(plan_memory_hinted(&g, &(PlanHints){born, until}, &p, &err) == 0);
        CHECKF(plan_check(&g, &p, &err) == 0, "hint %d: %s", hint, err.msg);
        int apart = hint == 1 ? v[1] : v[3], others = 0;
        for (int k = 1; k < 4; k++)
            others += v[k] != apart && p.offset[v[k]] == p.offset[apart];
        CHECKF(hint ? others == 0 && p.alias_of[apart] < 0 : p.alias_of[v[2]] == v[1] && p.alias_of[v[3]] == v[2],
               "hint %d: %%%d shares its place with %d others", hint, apart, others);
        CHECKF(hint != 2 || p.first[v[3]] == 0, "born at %d", p.first[v[3]]);
        CHECKF(p.arena_bytes == 2 * PLAN_ALIGN, "hint %d: arena %zu bytes", hint, p.arena_bytes);
        plan_free(&p);
    }
    graph_free(&g);

    if (model_graph("test_resnet", &(GraphSpec){.batch = 4, .training = 1}, &g))
        return;
    int *b = malloc(sizeof *b * (size_t)g.nvalues), *u = malloc(sizeof *u * (size_t)g.nvalues);
    CHECK(plan_memory(&g, &p, &err) == 0);
    for (ValueId k = 0; k < g.nvalues; k++) {
        int producer = g.values[k].producer;
        b[k] = producer > 2 && k % 5 == 0 ? producer - 3 : -1;
        u[k] = producer >= 0 && k % 7 == 0 && p.last[k] + 4 < g.nnodes ? p.last[k] + 4 : -1;
    }
    MemPlan h;
    CHECK(plan_memory_hinted(&g, &(PlanHints){b, u}, &h, &err) == 0);
    CHECKF(plan_check(&g, &h, &err) == 0, "test_resnet with hints: %s", err.msg);
    int kept = 0, placed = 0;
    for (ValueId k = 0; k < g.nvalues; k++) {
        kept += (b[k] >= 0 && h.first[k] <= b[k]) + (u[k] >= 0 && h.last[k] >= u[k]);
        placed += (p.offset[k] != PLAN_NONE) == (h.offset[k] != PLAN_NONE);
    }
    int asked = 0;
    for (ValueId k = 0; k < g.nvalues; k++)
        asked += (b[k] >= 0) + (u[k] >= 0);
    CHECKF(kept == asked && asked > 0 && placed == g.nvalues, "test_resnet: %d of %d lifetimes, %d of %d placed", kept,
           asked, placed, g.nvalues);
    free(b);
    free(u);
    plan_free(&h);
    plan_free(&p);
    graph_free(&g);
}

static void test_resnet50_batch256(void)
{
    Graph g;
    MemPlan p;
    CtErr err;
    if (model_graph("resnet50", &(GraphSpec){.batch = 256, .training = 1}, &g))
        return;
    CHECK(plan_memory(&g, &p, &err) == 0);
    CHECKF(plan_check(&g, &p, &err) == 0, "%s", err.msg);
    const double gib = 1024.0 * 1024 * 1024;
    printf("resnet50 train, batch 256: arena %.2f GiB peak, naive %.2f GiB, params %.0f MiB\n", p.arena_bytes / gib,
           p.naive_bytes / gib, p.param_bytes / (1024.0 * 1024));
    CHECKF(p.arena_bytes < p.naive_bytes / 2, "peak %.2f GiB vs naive %.2f GiB", p.arena_bytes / gib,
           p.naive_bytes / gib);
    plan_free(&p);
    graph_free(&g);
}

/* plan_split: its kinds add up to the live bytes, which fit in the arena
 * (the plan never overlaps live values, so counting a view or an in-place
 * output twice would show); the forward's activations and the backward's
 * gradients both live at a training step's fullest node, an eval graph's
 * are all activations. */
static void test_split(void)
{
    static const char *const models[] = {"test_resnet", "test_vit"};
    for (int m = 0; m < 2; m++)
        for (int train = 0; train < 2; train++) {
            Graph g;
            MemPlan p;
            CtErr err;
            OptimSpec o = {.kind = CT_OPT_SGD, .momentum = 0.9};
            if (model_graph(models[m], &(GraphSpec){.batch = 4, .training = train, .opt = &o}, &g))
                continue;
            CHECK(plan_memory(&g, &p, &err) == 0);
            int loss = g.nnodes;
            for (int i = 0; train && i < g.nnodes; i++)
                if (g.nodes[i].op == CT_OP_cross_entropy && loss == g.nnodes)
                    loss = i;
            CHECKF(loss < g.nnodes || !train, "%s: no loss node", models[m]);
            PlanSplit s;
            plan_split(&g, &p, loss, NULL, &s);
            CHECKF(s.live == s.activations + s.param_grads + s.act_grads + s.temps && s.live <= p.arena_bytes &&
                       s.live > p.arena_bytes / 2,
                   "%s train %d: live %zu (%zu + %zu + %zu + %zu), arena %zu", models[m], train, s.live,
                   s.activations, s.param_grads, s.act_grads, s.temps, p.arena_bytes);
            CHECKF(s.activations > 0 && (train || (s.act_grads == 0 && s.temps == 0)),
                   "%s train %d: activations %zu, gradients %zu, temporaries %zu", models[m], train, s.activations,
                   s.act_grads, s.temps);
            plan_free(&p);
            graph_free(&g);
        }
}

int main(void)
{
    test_split();
    test_plans_check();
    test_permute_views();
    test_checker_catches_overlap();
    test_unread_outputs();
    test_hints();
    test_resnet50_batch256();
    return check_done("test_plan");
}
