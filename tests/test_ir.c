/* The IR: builder scopes and state_dict order, the verifier's checks (each
 * corruption must be caught and the message must name the node), sticky
 * builder errors, and the dump. */
#include <string.h>

#include "check.h"
#include "frontend/builder.h"
#include "ir/buf.h"

/* x -> conv(stem.conv) -> bn(stem.bn) -> relu -> linear(head) ; plus a root param. */
static int build_small(Graph *g, int training, CtErr *err)
{
    Builder b;
    graph_init(g);
    b_init(&b, g, training);
    ValueId x = b_input(&b, "input", (CtShape){4, {2, 3, 8, 8}}, CT_F32);
    b_push(&b, "stem");
    x = nn_conv2d(&b, "conv", x, 4, 3, (ConvOpts){.stride = 2, .padding = 1});
    x = f_relu(&b, nn_batch_norm(&b, "bn", x, (BNOpts){0}));
    b_pop(&b);
    ValueId scale = b_param(&b, "scale", (CtShape){1, {4}}, init_ones());
    x = f_global_avg_pool(&b, x);
    x = f_mul(&b, x, scale);
    x = nn_linear(&b, "head", x, 5, (LinearOpts){0});
    graph_mark_output(g, x);
    return b_finish(&b, err);
}

static int node_of(const Graph *g, const char *op)
{
    for (int i = 0; i < g->nnodes; i++)
        if (strcmp(op_def(g->nodes[i].op)->name, op) == 0)
            return i;
    return -1;
}

static void expect_verify_fails(Graph *g, const char *needle, const char *what)
{
    CtErr err = {{0}};
    int rc = graph_verify(g, &err);
    CHECKF(rc == -1, "%s: verifier accepted a broken graph", what);
    CHECKF(strstr(err.msg, needle) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, needle);
}

static void test_state_order(void)
{
    Graph g;
    CtErr err;
    CHECKF(build_small(&g, 0, &err) == 0, "%s", err.msg);
    /* the root's own param comes first, then the modules in first-seen order */
    static const char *const want[] = {"scale",           "stem.conv.weight",      "stem.bn.weight",
                                       "stem.bn.bias",    "stem.bn.running_mean",  "stem.bn.running_var",
                                       "stem.bn.num_batches_tracked", "head.weight", "head.bias"};
    CHECK(g.nstate == 9);
    for (int k = 0; k < g.nstate && k < 9; k++)
        CHECKF(strcmp(g.values[g.state[k]].name, want[k]) == 0, "state[%d] = %s, want %s", k,
               g.values[g.state[k]].name, want[k]);
    CHECK(graph_param_count(&g) == 4 * 3 * 9 + 4 + 4 + 4 + 5 * 4 + 5);
    int conv = node_of(&g, "conv2d");
    CHECK(conv >= 0 && strcmp(g.nodes[conv].scope, "stem.conv") == 0);
    graph_free(&g);
}

static void test_train_graph_has_assigns(void)
{
    Graph g;
    CtErr err;
    CHECKF(build_small(&g, 1, &err) == 0, "%s", err.msg);
    int assigns = 0;
    for (int i = 0; i < g.nnodes; i++)
        assigns += g.nodes[i].op == CT_OP_assign;
    CHECK(assigns == 3); /* running_mean, running_var, num_batches_tracked */
    int bn = node_of(&g, "batch_norm");
    CHECK(bn >= 0 && g.nodes[bn].nout == 3);
    graph_free(&g);
}

static void test_verifier_catches(void)
{
    Graph g;
    CtErr err;

    CHECK(build_small(&g, 0, &err) == 0);
    int conv = node_of(&g, "conv2d");
    g.values[g.nodes[conv].out[0]].type.shape.d[2] = 5;
    expect_verify_fails(&g, "conv2d at 'stem.conv'", "wrong output shape");
    graph_free(&g);

    CHECK(build_small(&g, 0, &err) == 0);
    int relu = node_of(&g, "relu");
    g.nodes[relu].in[0] = g.nodes[relu + 1].out[0];
    expect_verify_fails(&g, "written later", "order");
    graph_free(&g);

    CHECK(build_small(&g, 0, &err) == 0);
    relu = node_of(&g, "relu");
    g.nodes[relu].out[0] = g.nodes[conv].out[0];
    expect_verify_fails(&g, "relu", "SSA: a value written twice");
    graph_free(&g);

    CHECK(build_small(&g, 0, &err) == 0);
    ValueId ghost = graph_add_value(&g, (CtType){{4, {2, 4, 4, 4}}, CT_F32}, CT_ROLE_ACTIVATION, NULL);
    g.nodes[node_of(&g, "relu")].in[0] = ghost;
    expect_verify_fails(&g, "dangling", "dangling activation");
    graph_free(&g);

    CHECK(build_small(&g, 0, &err) == 0);
    g.nstate--;
    expect_verify_fails(&g, "misses 1", "state_dict list incomplete");
    graph_free(&g);

    CHECK(build_small(&g, 0, &err) == 0);
    g.nodes[node_of(&g, "linear")].in[1] = g.nodes[conv].in[1];
    expect_verify_fails(&g, "linear at 'head'", "linear with a conv weight");
    graph_free(&g);
}

static void test_builder_errors_are_sticky(void)
{
    Graph g;
    Builder b;
    CtErr err;
    graph_init(&g);
    b_init(&b, &g, 0);
    ValueId x = b_input(&b, "input", (CtShape){4, {1, 3, 8, 8}}, CT_F32);
    b_push(&b, "blocks");
    ValueId bad = f_reshape(&b, x, 2, (int64_t[]){5, 5});
    b_pop(&b);
    CHECK(bad == -1);
    CHECK(f_relu(&b, bad) == -1);
    CHECK(f_relu(&b, x) == -1); /* nothing more is built after a failure */
    CHECK(b_finish(&b, &err) == -1);
    CHECKF(strstr(err.msg, "blocks") && strstr(err.msg, "reshape") && strstr(err.msg, "[1,3,8,8]"), "%s", err.msg);
    graph_free(&g);

    graph_init(&g);
    b_init(&b, &g, 0);
    x = b_input(&b, "input", (CtShape){2, {2, 3}}, CT_F32);
    b_node(&b, CT_OP_assign, 2, (ValueId[]){f_relu(&b, x), x}, NULL, 0, NULL, 0, 0);
    CHECK(b_finish(&b, &err) == -1);
    CHECKF(strstr(err.msg, "only params, buffers and state can be assigned"), "%s", err.msg);
    graph_free(&g);
}

static void test_dump(void)
{
    Graph g;
    CtErr err;
    CtBuf out = {0};
    CHECK(build_small(&g, 0, &err) == 0);
    graph_dump(&g, &out);
    CHECKF(strstr(out.s, "= conv2d(%0, %1) stride_h=2 stride_w=2 pad_h=1 pad_w=1 dil_h=1 dil_w=1 groups=1 : "
                         "[2,4,4,4] f32 contig  # stem.conv\n") != NULL, "%s", out.s);
    CHECKF(strstr(out.s, "= reshape(") && strstr(out.s, "shape=[2,4] : [2,4] f32"), "%s", out.s);
    CHECK(strstr(out.s, "outputs: %") != NULL);
    buf_free(&out);
    graph_free(&g);
}

int main(void)
{
    test_state_order();
    test_train_graph_has_assigns();
    test_verifier_catches();
    test_builder_errors_are_sticky();
    test_dump();
    return check_done("test_ir");
}
