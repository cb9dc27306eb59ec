/* Every optimizer's update op against timm: for each name, the op that
 * optim_defaults + optim_op (what train_step_build emits) make is run on
 * test_resnet's parameters and timm's gradients for two steps, the state
 * fed back between them, and must give the parameters timm's
 * create_optimizer_v2 optimizer had after each step
 * (tests/data/opt_refs.safetensors, tools/make_opt_refs.py) within 1e-5
 * relative per tensor, on the ref and the cpu backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"

static double rel_err(const float *a, const float *b, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* Relative error of the change a - p0 against b - p0 (a stricter view of
 * the same numbers where the step is small beside the weights). */
static double step_err(const float *a, const float *b, const float *p0, int64_t n)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += ((double)b[i] - p0[i]) * ((double)b[i] - p0[i]);
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

typedef struct Case {
    const char *name;
    double lr, wd;
} Case;

/* Two steps of optimizer c on one param; worst[0..1]: parameter errors of
 * steps 1 and 2, worst[2]: step errors. */
static void run_param(const StFile *ref, const StFile *vec, const Case *c, const char *pname, const ModelEntry *m,
                      double clip_sq, int legacy, const CtBackend *be, double *worst)
{
    char key[600];
    snprintf(key, sizeof key, "state.%s", pname);
    const StTensor *p = st_find(vec, key);
    snprintf(key, sizeof key, "grad.%s", pname);
    const StTensor *gr = st_find(vec, key);
    CHECKF(p && gr, "%s: missing", pname);
    if (!p || !gr)
        return;
    OptimSpec o;
    CHECK(optim_defaults(c->name, &o) == 0);
    o.weight_decay = c->wd;
    o.nadam_legacy = legacy;
    OptimOp u;
    optim_op(&o, optim_no_decay(pname, p->ndim, m->no_weight_decay) ? 0 : c->wd, &u);
    CtShape s = shape_make(p->ndim, p->shape);
    int64_t n = st_numel(p);
    Graph g;
    graph_init(&g);
    Emitter e = {.g = &g, .scope = "update"};
    ValueId in[CT_MAX_IN];
    CtTensor tin[CT_MAX_IN];
    float *buf[CT_MAX_IN] = {0}, lr = (float)c->lr, clip = (float)clip_sq;
    int64_t step = 0;
    int nin = 0;
    for (int k = 0; k < 2 + u.nslot; k++) {
        in[nin] = graph_add_value(&g, (CtType){s, CT_F32}, CT_ROLE_INPUT, "t");
        buf[nin] = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            buf[nin][i] = k == 0 ? ((float *)p->data)[i] : k == 1 ? ((float *)gr->data)[i] : (float)u.slot_init[k - 2];
        tin[nin] = (CtTensor){{s, CT_F32}, buf[nin]};
        nin++;
    }
    for (int k = 0; k < u.nscalar; k++) {
        in[nin] = graph_add_value(&g, (CtType){{0}, CT_F32}, CT_ROLE_INPUT, "scalar");
        buf[nin] = malloc(sizeof(float));
        buf[nin][0] = (float)u.scalar_init[k];
        tin[nin] = (CtTensor){{{0}, CT_F32}, buf[nin]};
        nin++;
    }
    in[nin] = graph_add_value(&g, (CtType){{0}, CT_F32}, CT_ROLE_INPUT, "lr");
    tin[nin++] = (CtTensor){{{0}, CT_F32}, &lr};
    if (u.step) {
        in[nin] = graph_add_value(&g, (CtType){{0}, CT_I64}, CT_ROLE_INPUT, "step");
        tin[nin++] = (CtTensor){{{0}, CT_I64}, &step};
    }
    if (u.clip) {
        in[nin] = graph_add_value(&g, (CtType){{0}, CT_F32}, CT_ROLE_INPUT, "clip_sq");
        tin[nin++] = (CtTensor){{{0}, CT_F32}, &clip};
    }
    emit(&e, u.op, nin, in, u.iattr, u.niattr, u.fattr, u.nfattr, 0);
    CHECKF(!e.failed, "%s: %s", c->name, e.err.msg);
    if (e.failed)
        goto done;
    int nout = 1 + u.nslot + u.nscalar;
    Node node = *emit_last(&e);
    for (int k = 0; k < nout; k++)
        graph_mark_output(&g, node.out[k]);
    for (int st = 1; st <= 2; st++) {
        CtTensor res[CT_MAX_OUT];
        CtErr err;
        CtState none = {0};
        if (backend_run_once(be, &g, &none, tin, nin, res, NULL, &err)) {
            CHECKF(0, "%s: %s", c->name, err.msg);
            goto done;
        }
        snprintf(key, sizeof key, "%s.step%d.%s", c->name, st, pname);
        const StTensor *want = st_find(ref, key);
        CHECKF(want != NULL, "no %s", key);
        if (want) {
            double r = rel_err(res[0].data, want->data, n), d = step_err(res[0].data, want->data, buf[0], n);
            worst[st - 1] = fmax(worst[st - 1], r);
            worst[2] = fmax(worst[2], d);
        }
        /* outputs become the next step's inputs: p, slots, scalars */
        for (int k = 0; k < nout; k++) {
            int slot = k == 0 ? 0 : k + 1;
            memcpy(buf[slot], res[k].data, sizeof(float) * (size_t)(k <= u.nslot ? n : 1));
        }
        for (int k = 0; k < nout; k++)
            tensor_free(&res[k]);
        step++;
    }
done:
    for (int k = 0; k < CT_MAX_IN; k++)
        free(buf[k]);
    graph_free(&g);
}

int main(void)
{
    static const Case cases[] = {
        {"sgd", 0.1, 1e-4},      {"momentum", 0.1, 1e-4},  {"adamw", 1e-3, 0.05},    {"adam", 1e-3, 1e-4},
        {"nadam", 2e-3, 1e-4},   {"radam", 1e-3, 1e-4},    {"lamb", 5e-3, 0.02},     {"lambc", 5e-3, 0.02},
        {"lars", 0.1, 1e-4},     {"larc", 0.1, 1e-4},      {"rmsprop", 1e-3, 1e-5},  {"rmsproptf", 1e-3, 1e-5},
        {"adabelief", 1e-3, 0.05}, {"adagrad", 1e-2, 1e-4},
    };
    static const char *const params[] = {"conv1.0.weight", "conv1.1.weight", "conv1.1.bias", "layer1.0.conv1.weight",
                                         "layer1.0.bn1.weight", "layer1.0.bn1.bias", "layer2.0.downsample.1.weight",
                                         "layer3.0.conv1.weight", "layer3.0.bn3.weight", "layer3.0.bn3.bias",
                                         "layer3.0.downsample.1.weight", "fc.bias"};
    char path[512];
    StFile ref, vec;
    CtErr err;
    snprintf(path, sizeof path, "%s/opt_refs.safetensors", test_data_dir());
    if (st_read(path, &ref, &err)) {
        CHECKF(0, "%s", err.msg);
        return check_done("test_optim");
    }
    snprintf(path, sizeof path, "%s/test_resnet.safetensors", test_data_dir());
    if (st_read(path, &vec, &err)) {
        CHECKF(0, "%s", err.msg);
        st_free(&ref);
        return check_done("test_optim");
    }
    const char *tv = st_meta(&ref, "torch_version");
    int legacy = tv && tv[0] == '1' && tv[1] == '.'; /* torch 1.x NAdam */
    /* Lamb's global gradient norm over all of test_resnet's params */
    double gsq = 0;
    for (int k = 0; k < vec.ntensors; k++)
        if (strncmp(vec.tensors[k].name, "grad.", 5) == 0)
            for (int64_t i = 0; i < st_numel(&vec.tensors[k]); i++)
                gsq += (double)((float *)vec.tensors[k].data)[i] * ((float *)vec.tensors[k].data)[i];
    const StTensor *gn = st_find(&ref, "grad_norm");
    CHECKF(gn && fabs(sqrt(gsq) / *(float *)gn->data - 1) < 1e-6, "global grad norm %.8g", sqrt(gsq));
    const ModelEntry *m = model_find("test_resnet");
    const CtBackend *backends[2] = {&ct_backend_ref, &ct_backend_cpu};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int b = 0; b < 2; b++) {
            double worst[3] = {0, 0, 0};
            for (size_t k = 0; k < sizeof params / sizeof params[0]; k++)
                run_param(&ref, &vec, &cases[c], params[k], m, gsq, legacy, backends[b], worst);
            printf("%-10s %-3s param rel err step1 %.1e step2 %.1e; update rel err %.1e\n", cases[c].name,
                   backends[b]->name, worst[0], worst[1], worst[2]);
            CHECKF(worst[0] < 1e-5 && worst[1] < 1e-5, "%s on %s: %.2e %.2e", cases[c].name, backends[b]->name,
                   worst[0], worst[1]);
            CHECKF(worst[2] < 1e-3, "%s on %s: update rel err %.2e", cases[c].name, backends[b]->name, worst[2]);
        }
    st_free(&vec);
    st_free(&ref);
    return check_done("test_optim");
}
