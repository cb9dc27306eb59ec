/* Every optimizer's update op against timm: for each case, the op that
 * optim_defaults + opt_kwargs_apply + optim_op (what train_step_build emits
 * for --opt and --opt-kwargs) make is run on test_resnet's parameters and
 * timm's gradients (times a scale per step) for ten steps, the state fed
 * back between them, and must
 * give the parameters timm's create_optimizer_v2 optimizer had after steps
 * 1 and 10 (tests/data/opt_refs.safetensors, tools/make_opt_refs.py) within
 * 1e-5 relative per tensor, on the ref and the cpu backend. Then
 * opt_kwargs_apply's refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"
#include "train/opt_kwargs.h"

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
    const char *name; /* the key in the file: the --opt name, then {kwargs} */
    double lr, wd, momentum; /* momentum < 0: the optimizer's default */
    const char *kwargs[3];
} Case;

enum { STEPS = 10 };
/* step k's gradients are timm's times scales[k - 1] (tools/make_opt_refs.py's SCALES) */
static const double scales[STEPS] = {1, -0.5, 2, 0.25, -1, 1.5, 0.75, -2, 0.5, 1};

/* STEPS steps of case c on one param; worst[0..1]: parameter errors after
 * steps 1 and STEPS, worst[2]: errors of the change from the start. */
static void run_param(const StFile *ref, const StFile *vec, const Case *c, const char *pname, const ModelEntry *m,
                      double clip_sq, int legacy, const CtBackend *be, double *worst)
{
    char key[600], opt[32];
    snprintf(key, sizeof key, "state.%s", pname);
    const StTensor *p = st_find(vec, key);
    snprintf(key, sizeof key, "grad.%s", pname);
    const StTensor *gr = st_find(vec, key);
    CHECKF(p && gr, "%s: missing", pname);
    if (!p || !gr)
        return;
    snprintf(opt, sizeof opt, "%.*s", (int)strcspn(c->name, "{"), c->name);
    OptimSpec o;
    CtErr kerr;
    int nkw = 0;
    while (nkw < 3 && c->kwargs[nkw])
        nkw++;
    CHECK(optim_defaults(opt, &o) == 0);
    CHECKF(opt_kwargs_apply(opt, c->kwargs, nkw, 0, 0, &o, &kerr) == 0, "%s: %s", c->name, kerr.msg);
    o.weight_decay = c->wd;
    o.nadam_legacy = legacy && !strcmp(opt, "nadam"); /* timm's nadamlegacy has torch 2's rule */
    if (c->momentum >= 0)
        o.momentum = c->momentum;
    OptimOp u;
    optim_op(&o, optim_no_decay(pname, p->ndim, m->no_weight_decay) ? 0 : c->wd, &u);
    float *p0 = malloc(sizeof(float) * (size_t)st_numel(p));
    memcpy(p0, p->data, sizeof(float) * (size_t)st_numel(p));
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
    /* LaProp's running average of lr, as train_step_build's nodes update it */
    float lr_avg = 0;
    if (u.lr_avg) {
        in[nin] = graph_add_value(&g, (CtType){{0}, CT_F32}, CT_ROLE_INPUT, "exp_avg_lr_1");
        tin[nin++] = (CtTensor){{{0}, CT_F32}, &lr_avg};
    }
    emit(&e, u.op, nin, in, u.iattr, u.niattr, u.fattr, u.nfattr, 0);
    CHECKF(!e.failed, "%s: %s", c->name, e.err.msg);
    if (e.failed)
        goto done;
    int nret = u.nslot - u.grad_slot, nout = 1 + nret + u.nscalar;
    Node node = *emit_last(&e);
    for (int k = 0; k < nout; k++)
        graph_mark_output(&g, node.out[k]);
    CtRunner run;
    CtErr err;
    CtState none = {0};
    if (backend_open(&run, be, &g, &none, NULL, &err)) {
        CHECKF(0, "%s: %s", c->name, err.msg);
        goto done;
    }
    for (int st = 1; st <= STEPS; st++) {
        CtTensor res[CT_MAX_OUT];
        lr_avg = (float)(lr_avg * u.fattr[0] + (float)(1 - u.fattr[0]) * lr);
        for (int64_t i = 0; i < n; i++)
            buf[1][i] = (float)(((float *)gr->data)[i] * scales[st - 1]);
        clip = (float)(clip_sq * scales[st - 1] * scales[st - 1]);
        if (backend_step(&run, tin, nin, res, &err)) {
            CHECKF(0, "%s: %s", c->name, err.msg);
            break;
        }
        snprintf(key, sizeof key, "%s.step%d.%s", c->name, st, pname);
        const StTensor *want = st == 1 || st == STEPS ? st_find(ref, key) : NULL;
        CHECKF(want != NULL || (st != 1 && st != STEPS), "no %s", key);
        if (want) {
            double r = rel_err(res[0].data, want->data, n), d = step_err(res[0].data, want->data, p0, n);
            worst[st == 1 ? 0 : 1] = fmax(worst[st == 1 ? 0 : 1], r);
            worst[2] = fmax(worst[2], d);
        }
        /* outputs become the next step's inputs: p, slots, scalars; Adan's
         * previous gradient takes this one */
        for (int k = 0; k < nout; k++) {
            int slot = k == 0 ? 0 : k <= nret ? k + 1 : k + 1 + u.grad_slot;
            memcpy(buf[slot], res[k].data, sizeof(float) * (size_t)(k <= nret ? n : 1));
        }
        if (u.grad_slot)
            memcpy(buf[1 + u.nslot], buf[1], sizeof(float) * (size_t)n);
        for (int k = 0; k < nout; k++)
            tensor_free(&res[k]);
        step++;
    }
    backend_close(&run);
done:
    for (int k = 0; k < CT_MAX_IN; k++)
        free(buf[k]);
    free(p0);
    graph_free(&g);
}

/* opt_kwargs_apply on --opt opt with the one word kw: 0 and the spec, or
 * the refusal, which must contain `want`. */
static void kwarg_case(const char *opt, const char *kw, int eps_given, const char *want, OptimSpec *o)
{
    CtErr err = {0};
    CHECK(optim_defaults(opt, o) == 0);
    int rc = opt_kwargs_apply(opt, &kw, 1, eps_given, 0, o, &err);
    if (!want)
        CHECKF(rc == 0, "--opt %s --opt-kwargs %s: %s", opt, kw, err.msg);
    else
        CHECKF(rc != 0 && strstr(err.msg, want), "--opt %s --opt-kwargs %s: '%s', want '%s'", opt, kw,
               rc ? err.msg : "accepted", want);
}

static void test_kwargs(void)
{
    OptimSpec o;
    kwarg_case("lion", "betas=(0.95, 0.98)", 0, NULL, &o);
    CHECK(o.beta1 == 0.95 && o.beta2 == 0.98);
    kwarg_case("adan", "betas=0.9, 0.95, 0.999", 0, NULL, &o); /* a bare tuple */
    CHECK(o.beta1 == 0.9 && o.beta2 == 0.95 && o.beta3 == 0.999);
    kwarg_case("lion", "eps=1e-3", 0, NULL, &o); /* create_optimizer_v2 drops eps where there is none */
    CHECK(o.eps == 0);
    kwarg_case("sgd", "nesterov=False", 0, NULL, &o);
    CHECK(o.kind == CT_OPT_MOMENTUM);
    kwarg_case("adopt", "clip_exp=None", 0, NULL, &o);
    CHECK(o.no_clip == 1);
    kwarg_case("lamb", "max_grad_norm=None", 0, NULL, &o);
    CHECK(o.max_grad_norm == 0);
    kwarg_case("madgrad", "decoupled_decay=True", 0, NULL, &o);
    CHECK(o.decoupled == 1);
    kwarg_case("lion", "no_prox=True", 0, "--opt lion takes no 'no_prox' in ctimm (its keys: betas caution)", &o);
    kwarg_case("adamw", "weight_decay=0.1", 0, "train.py passes weight_decay to create_optimizer_v2 itself", &o);
    kwarg_case("madgrad", "momentum=0.5", 0, "(--momentum)", &o);
    kwarg_case("adamw", "eps=1e-6", 1, "(--opt-eps)", &o);
    kwarg_case("adan", "betas=(0.9, 0.99)", 0, "betas takes a tuple of 3 numbers", &o);
    kwarg_case("lion", "betas=(0.9, 1.5)", 0, "each beta must be in [0, 1)", &o);
    kwarg_case("lion", "caution=True", 0, "ctimm implements --opt lion with caution=0 only", &o);
    kwarg_case("adamw", "eps=small", 0, "eps takes a number", &o);
    kwarg_case("adopt", "decoupled=maybe", 0, "decoupled takes True or False", &o);
    kwarg_case("adamw", "novalue", 0, "expected KEY=VALUE", &o);
}

int main(void)
{
    test_kwargs();
    static const Case cases[] = {
        {"sgd", 0.1, 1e-4, -1, {0}},        {"momentum", 0.1, 1e-4, -1, {0}},   {"adamw", 1e-3, 0.05, -1, {0}},
        {"adam", 1e-3, 1e-4, -1, {0}},      {"nadam", 2e-3, 1e-4, -1, {0}},     {"radam", 1e-3, 1e-4, -1, {0}},
        {"lamb", 5e-3, 0.02, -1, {0}},      {"lambc", 5e-3, 0.02, -1, {0}},     {"lars", 0.1, 1e-4, -1, {0}},
        {"larc", 0.1, 1e-4, -1, {0}},       {"rmsprop", 1e-3, 1e-5, -1, {0}},   {"rmsproptf", 1e-3, 1e-5, -1, {0}},
        {"adabelief", 1e-3, 0.05, -1, {0}}, {"adagrad", 1e-2, 1e-4, -1, {0}},   {"sgdw", 0.1, 0.05, -1, {0}},
        {"sgdw{nesterov=False}", 0.1, 0.05, -1, {"nesterov=False"}},
        {"adamwlegacy", 1e-3, 0.05, -1, {0}}, {"nadamlegacy", 2e-3, 1e-4, -1, {0}},
        {"nadamw", 1e-3, 0.05, -1, {0}},
        {"nadamw{betas=(0.8, 0.99)}", 1e-3, 0.05, -1, {"betas=(0.8, 0.99)"}},
        {"adamax", 2e-3, 1e-4, -1, {0}},
        {"adamax{eps=0.001}", 2e-3, 1e-4, -1, {"eps=1e-3"}},
        {"adopt", 1e-3, 1e-4, -1, {0}},
        {"adopt{clip_exp=None}", 1e-3, 1e-4, -1, {"clip_exp=None"}},
        {"adoptw", 1e-3, 0.05, -1, {0}},
        {"adoptw{betas=(0.8, 0.99), clip_exp=0.5}", 1e-3, 0.05, -1, {"betas=(0.8, 0.99)", "clip_exp=0.5"}},
        {"lion", 1e-4, 0.05, -1, {0}},
        {"lion{betas=(0.95, 0.98)}", 1e-4, 0.05, -1, {"betas=(0.95, 0.98)"}},
        {"madgrad", 1e-3, 1e-4, -1, {0}},
        {"madgrad{momentum=0}", 1e-3, 1e-4, 0, {0}},
        {"madgradw", 1e-3, 0.05, -1, {0}},
        {"madgrad{decoupled_decay=True, eps=0.0001}", 1e-3, 0.05, -1, {"decoupled_decay=True", "eps=0.0001"}},
        {"adan", 1e-3, 0.02, -1, {0}},
        {"adan{betas=(0.9, 0.95, 0.999)}", 1e-3, 0.02, -1, {"betas=(0.9, 0.95, 0.999)"}},
        {"adanw", 1e-3, 0.02, -1, {0}},
        {"laprop", 4e-4, 0.05, -1, {0}},
        {"laprop{betas=(0.8, 0.99)}", 4e-4, 0.05, -1, {"betas=(0.8, 0.99)"}},
    };
    static const char *const params[] = {"conv1.0.weight",      "conv1.1.weight",      "conv1.1.bias",
                                         "layer2.0.downsample.1.weight", "layer3.0.bn3.weight", "layer3.0.bn3.bias",
                                         "fc.bias"};
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
            printf("%-42s %-3s param rel err step1 %.1e step%d %.1e; change rel err %.1e\n", cases[c].name,
                   backends[b]->name, worst[0], STEPS, worst[1], worst[2]);
            CHECKF(worst[0] < 1e-5 && worst[1] < 1e-5, "%s on %s: %.2e %.2e", cases[c].name, backends[b]->name,
                   worst[0], worst[1]);
            CHECKF(worst[2] < 1e-3, "%s on %s: change rel err %.2e", cases[c].name, backends[b]->name, worst[2]);
        }
    st_free(&vec);
    st_free(&ref);
    return check_done("test_optim");
}
