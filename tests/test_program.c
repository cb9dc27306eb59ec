/* The Program and the backends' contexts (codegen/program.h,
 * runtime/backend.h): a program compiled once runs many steps, each equal
 * bit for bit to a fresh compile of the same graph over the same state; it
 * outlives the graph it came from; the state is bound by name once, at
 * prepare, and a missing tensor is named there; --dump-program's lines. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/buf.h"
#include "model_graphs.h"
#include "runtime/backend.h"

enum { STEPS = 3 };

typedef struct Inputs {
    float *x, lr, scale;
    int64_t labels[2];
    CtTensor t[4];
} Inputs;

static void inputs_make(const Graph *g, Inputs *in)
{
    const CtShape *xs = &g->values[0].type.shape;
    int64_t n = shape_numel(xs);
    in->x = malloc(sizeof *in->x * (size_t)n);
    CT_ASSERT(in->x != NULL);
    uint64_t s = 7;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        in->x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
    }
    in->labels[0] = 3;
    in->labels[1] = 7;
    in->lr = 0.05f;
    in->scale = 1;
    in->t[0] = (CtTensor){g->values[0].type, in->x};
    in->t[1] = (CtTensor){{{1, {2}}, CT_I64}, in->labels};
    in->t[2] = (CtTensor){{{0}, CT_F32}, &in->lr};
    in->t[3] = (CtTensor){{{0}, CT_F32}, &in->scale};
}

/* STEPS steps of one prepared program against STEPS fresh compiles. */
static void test_steps(const CtBackend *be, const char *model)
{
    Graph g;
    if (model_graph(model, &(GraphSpec){.training = 1}, &g))
        return;
    Inputs in;
    inputs_make(&g, &in);
    CtState a, b;
    state_create(&a, &g);
    state_init(&a, 1);
    state_create(&b, &g);
    memcpy(b.data, a.data, a.nbytes);
    CtProgram *p;
    CtExec *e;
    CtErr err;
    CHECKF(program_compile(&g, be->target, NULL, &p, &err) == 0, "%s: %s", model, err.msg);
    Graph copy = g; /* the program does not read the graph it came from */
    memset(&g, 0, sizeof g);
    CHECKF(be->prepare(p, &a, &e, &err) == 0, "%s: %s", model, err.msg);
    for (int s = 0; s < STEPS; s++) {
        CtTensor *oa = calloc((size_t)copy.noutputs, sizeof *oa), *ob = calloc((size_t)copy.noutputs, sizeof *ob);
        CT_ASSERT(oa && ob);
        int ra = be->run(e, in.t, 4, oa, &err) == 0;
        CHECKF(ra, "%s step %d: %s", model, s, err.msg);
        int rb = backend_run_once(be, &copy, &b, in.t, 4, ob, NULL, &err) == 0;
        CHECKF(rb, "%s step %d: %s", model, s, err.msg);
        for (int k = 0; ra && rb && k < copy.noutputs; k++) {
            CHECKF(!memcmp(oa[k].data, ob[k].data, tensor_nbytes(&oa[k])), "%s on %s, step %d: output %d differs",
                   model, be->name, s, k);
            tensor_free(&oa[k]);
            tensor_free(&ob[k]);
        }
        free(oa);
        free(ob);
    }
    CHECK(be->state_to_host(e, &err) == 0);
    CHECKF(!memcmp(a.data, b.data, a.nbytes), "%s on %s: the state after %d steps differs", model, be->name, STEPS);
    be->free(e);
    program_free(p);
    graph_free(&copy);
    state_free(&a);
    state_free(&b);
    free(in.x);
}

/* prepare binds by name: another model's state is refused, naming the tensor. */
static void test_bind(void)
{
    Graph g, h;
    if (model_graph("test_resnet", &(GraphSpec){0}, &g) || model_graph("test_vit", &(GraphSpec){0}, &h))
        return;
    CtState other;
    state_create(&other, &h);
    CtProgram *p;
    CtExec *e = NULL;
    CtErr err;
    const CtBackend *bes[2] = {&ct_backend_ref, &ct_backend_cpu};
    for (int k = 0; k < 2; k++) {
        CHECK(program_compile(&g, bes[k]->target, NULL, &p, &err) == 0);
        CHECKF(bes[k]->prepare(p, &other, &e, &err) == -1 && strstr(err.msg, "state has no tensor '"), "%s: %s",
               bes[k]->name, err.msg);
        program_free(p);
    }
    state_free(&other);
    graph_free(&g);
    graph_free(&h);
}

static void test_dump(void)
{
    Graph g;
    if (model_graph("test_resnet", &(GraphSpec){.training = 1}, &g))
        return;
    CtProgram *p;
    CtErr err;
    CHECKF(program_compile(&g, CT_TARGET_CPU, NULL, &p, &err) == 0, "%s", err.msg);
    CtBuf b = {0};
    program_dump(p, &b);
    CHECKF(b.s && strstr(b.s, "program: target cpu") && strstr(b.s, ": state '") && strstr(b.s, ": input") &&
               strstr(b.s, ": arena +") && strstr(b.s, "step 0: "),
           "%s", b.s ? b.s : "(nothing)");
    buf_free(&b);
    program_free(p);
    graph_free(&g);
}

int main(void)
{
    test_steps(&ct_backend_ref, "test_resnet");
    test_steps(&ct_backend_cpu, "test_resnet");
    test_steps(&ct_backend_cpu, "test_vit");
    test_bind();
    test_dump();
    return check_done("test_program");
}
