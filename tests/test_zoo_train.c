/* The zoo in training mode against the real timm: one model per family
 * (tests/data/zoo_train_refs/<model>.json, tools/make_zoo_train_refs.py,
 * whose docstring says what is recorded and why), its weights and input
 * filled by zoo_fill (tests/zoo_fill.h), batch 2 at 64 px (convnext_nano,
 * without batch norm, at 32; eva02_tiny_patch14_224 at 28) in training mode: the loss and logits, every
 * parameter's gradient, every batch norm's running statistics after the
 * step (and its count, 1), and each parameter's change by one step of SGD
 * (nesterov, momentum 0.9, weight decay 2e-5) and, from the same start,
 * one of AdamW (weight decay 0.05: the tool says why).
 *
 * Each within 1e-4, on two backends: ref with every f32 value of the
 * training graph retyped to f64 (the same ops, gradients and updates, in
 * the reference's precision), and cpu in float32 (its only float type).
 * 1e-4 of: the loss; the logits' rms; per tensor its rms (an element: the
 * larger of that and itself; the sum n times it, the norm sqrt(n) times).
 * What float32 cannot hold is allowed besides, derived rather than
 * widened: a step is the difference of two float32 params, so 2 ulps of
 * the param (an SGD step of 1e-6 on a weight of 0.05 is exact to ~0.4%);
 * AdamW's first step is lr * g / (|g| + eps), about lr * sign(g) per
 * element, so an element as much as the gradient's own tolerance moves it
 * (the slope), the sum and norm 4 lr (two elements whose gradient is below
 * float32's error, flipped), and a gradient the file lists as structurally
 * zero (float64 noise there: a shift a training-mode batch norm removes)
 * anything within lr; such a gradient's elements are within 1e-4 of the
 * largest rms of their group. The cpu backend's worst is ~0.7 of that
 * (mixnet_s's depthwise gradients), ref's ~0.005 (the file's 7 digits).
 * test_resnet.splits3 is train.py's --aug-splits 3 --split-bn --jsd-loss
 * at batch 6 (three splits of 2): SplitBatchNorm2d's aux_bn gradients,
 * statistics and steps, and JsdCrossEntropy's loss; on the input the file
 * names, chosen by the tool with its ReLU inputs clear of float32's error
 * (on the default one a ReLU input sat nearer zero than that: a float32
 * run could take either side, and did, by the machine's BLAS kernels).
 * The sanitizer build checks the first model. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "check.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"
#include "zoo_fill.h"

#define TOL 1e-4

/* mixnet_s first: the cheapest, the sanitizer build's. cpu: whether the
 * float32 backend is held to the tolerance too. Not where float32 cannot
 * follow the float64 step at this point (the tool prints torch's own
 * float32 error in tolerance units): mobilenetv4_conv_small's batch norms
 * over 8 values of its expanded 1x1 convs (torch 34x, ctimm 40x),
 * poolformer_s12's GroupNorm1 weights deep in stage 2 (torch 7.5x, ctimm
 * 5.4x), resnetv2_50x1_bit's weight-standardised stage-1 convs (torch
 * 502x) and seresnext26t_32x4d's stem, upstream of a ReLU input nearer
 * zero than float32's error (torch 20x; ctimm's float32 step lands on
 * either side by the machine's convolution kernels: 20.6x with oneDNN's on
 * an AMD EPYC of AVX2, with CTIMM_CONV=auto on an Intel Xeon, within 0.22
 * elsewhere); their float64 steps equal timm's. */
static const struct {
    const char *name;
    int cpu;
} models[] = {{"mixnet_s", 1},      {"seresnext26t_32x4d", 0},     {"regnety_016", 1}, {"convnext_nano", 1},
              {"test_nfnet", 1},    {"test_byobnet", 1},           {"mobilenetv4_conv_small", 0},
              {"poolformer_s12", 0}, {"resnetv2_50x1_bit", 0}, {"eva02_tiny_patch14_224", 1},
              {"swin_tiny_patch4_window7_224", 0}, {"levit_128s", 0}, {"test_maxvit", 0},
              {"swinv2_tiny_window8_256", 1}, {"test_resnet.splits3", 1}};

static const cJSON *item(const cJSON *o, const char *key) { return cJSON_GetObjectItem(o, key); }
static double num(const cJSON *a, int k) { return cJSON_GetArrayItem(a, k)->valuedouble; }

static int in_list(const cJSON *list, const char *name)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, list)
        if (!strcmp(s->valuestring, name))
            return 1;
    return 0;
}

/* make_zoo_train_refs.py's fill: the tensors zero_init_last() zeros at last_scale. */
static double fill_scale(const char *name, void *doc)
{
    return in_list(item(doc, "scaled"), name) ? item(doc, "last_scale")->valuedouble : 1;
}

/* The graph in float64: every f32 value (params, buffers, activations,
 * gradients, optimizer state, the scalar inputs) and every cast to f32. */
static void retype_f64(Graph *g)
{
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].type.dtype == CT_F32)
            g->values[v].type.dtype = CT_F64;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op == CT_OP_cast && g->nodes[i].iattr[0] == CT_F32)
            g->nodes[i].iattr[0] = CT_F64;
}

static double at(const void *p, CtDType t, int64_t i)
{
    return t == CT_F64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

typedef struct Tally {
    const char *model, *backend, *opt;
    int checked, bad;
    double worst; /* the largest |got - want| / allowed */
    char where[160];
} Tally;

/* |got - want| within `allowed`. */
static void expect(Tally *t, const char *what, const char *name, double got, double want, double allowed)
{
    t->checked++;
    if (fabs(got - want) > t->worst * allowed) {
        t->worst = fabs(got - want) / allowed;
        snprintf(t->where, sizeof t->where, "%s %s", what, name);
    }
    if (fabs(got - want) <= allowed)
        return;
    if (t->bad++ < 8)
        fprintf(stderr, "%s (%s, %s): %s %s: %.9g, timm %.9g (allowed %.3g)\n", t->model, t->backend, t->opt, what,
                name, got, want, allowed);
}

/* The largest rms of the tensors of a group (rows: [sum, norm, ...] by the names in `names`). */
static double top_rms(const cJSON *rows, const cJSON *names, const CtState *st)
{
    double top = 0;
    for (int k = 0; k < cJSON_GetArraySize(rows); k++) {
        int j = state_find(st, cJSON_GetArrayItem(names, k)->valuestring);
        if (j >= 0)
            top = fmax(top, num(cJSON_GetArrayItem(rows, k), 1) / sqrt((double)shape_numel(&st->e[j].type.shape)));
    }
    return top;
}

/* Tensor x (n values of dtype dt) against its record [sum, norm, elements
 * at i * n / picks...], within the header's tolerances. zero: a
 * structurally zero gradient's (its elements within TOL of top, AdamW's
 * step within lr); adamw_lr > 0: an AdamW step, grad its gradient's
 * record. p: for a step, the param before it (n values of dtype pt), whose
 * precision bounds the step's; else NULL. */
static void expect_tensor(Tally *t, const char *group, const char *name, const void *x, CtDType dt, int64_t n,
                          const cJSON *rec, int zero, double top, double adamw_lr, const cJSON *grad,
                          const void *p, CtDType pt)
{
    /* new - old of params stored in pt: 2 ulps of |p| (the new value's roundings) */
    double ulp = p ? 2 * (pt == CT_F64 ? DBL_EPSILON : FLT_EPSILON) : 0, pabs = 0, psq = 0;
    for (int64_t i = 0; p && i < n; i++)
        pabs += fabs(at(p, pt, i)), psq += at(p, pt, i) * at(p, pt, i);
    int picks = cJSON_GetArraySize(rec) - 2;
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++)
        sum += at(x, dt, i), sq += at(x, dt, i) * at(x, dt, i);
    char what[64];
    if (zero) {
        snprintf(what, sizeof what, "%s element", group);
        for (int e = 0; e < picks; e++)
            expect(t, what, name, at(x, dt, (int64_t)(e * n / picks)), 0,
                   (adamw_lr > 0 ? adamw_lr : TOL * top) + (p ? ulp * fabs(at(p, pt, (int64_t)(e * n / picks))) : 0));
        return;
    }
    double norm = num(rec, 1), rms = norm / sqrt((double)n), flips = adamw_lr > 0 ? 4 * adamw_lr : 0;
    snprintf(what, sizeof what, "%s norm", group);
    expect(t, what, name, sqrt(sq), norm, TOL * norm + flips + ulp * sqrt(psq));
    snprintf(what, sizeof what, "%s sum", group);
    expect(t, what, name, sum, num(rec, 0), TOL * rms * (double)n + flips + ulp * pabs);
    snprintf(what, sizeof what, "%s element", group);
    for (int e = 0; e < picks; e++) {
        double slack = 0;
        if (adamw_lr > 0) { /* element e of 2 is the gradient's element 2 e of 4 */
            double g = fabs(num(grad, 2 + 2 * e)), d = TOL * num(grad, 1) / sqrt((double)n), eps = 1e-8;
            slack = d >= g ? 2 * adamw_lr : fmin(2 * adamw_lr, adamw_lr * eps * d / ((g - d + eps) * (g - d + eps)));
        }
        int64_t i = (int64_t)(e * n / picks);
        expect(t, what, name, at(x, dt, i), num(rec, 2 + e),
               TOL * fmax(rms, fabs(num(rec, 2 + e))) + slack + (p ? ulp * fabs(at(p, pt, i)) : 0));
    }
}

/* The loss, logits and gradients of the run (outputs out of g, values of
 * dtype dt), the buffers after it and the batch norms' counts. */
static void check_forward(Tally *t, const cJSON *doc, const Graph *g, const TrainStep *ts, const CtState *st,
                          const CtTensor *out, CtDType dt)
{
    const char *model = t->model;
    int batch = item(doc, "batch")->valueint, classes = (int)out[0].type.shape.d[1];
    const cJSON *names = item(doc, "params"), *grads = item(doc, "grads"), *zero = item(doc, "zero_grads");
    double want = item(doc, "loss")->valuedouble, lnorm = item(doc, "logits_norm")->valuedouble;
    for (int k = 0; k < g->noutputs; k++)
        if (g->outputs[k] == ts->loss)
            expect(t, "loss", "", at(out[k].data, dt, 0), want, TOL * fabs(want));
    const cJSON *pick;
    cJSON_ArrayForEach(pick, item(doc, "logits"))
        expect(t, "logit", "", at(out[0].data, dt, (int64_t)num(pick, 0)), num(pick, 1),
               TOL * lnorm / sqrt((double)batch * classes));
    double top = top_rms(grads, names, st);
    for (int k = 0; k < ts->nparams; k++) {
        const char *name = g->values[ts->params[k]].name;
        int o = -1;
        for (int j = 0; j < g->noutputs; j++)
            if (g->outputs[j] == ts->grads[k])
                o = j;
        CHECKF(!strcmp(name, cJSON_GetArrayItem(names, k)->valuestring) && o >= 0,
               "%s: param %d is %s, timm's %s", model, k, name, cJSON_GetArrayItem(names, k)->valuestring);
        if (o >= 0)
            expect_tensor(t, "grad", name, out[o].data, dt, shape_numel(&out[o].type.shape),
                          cJSON_GetArrayItem(grads, k), in_list(zero, name), top, 0, NULL, NULL, dt);
    }
    int nbuf = 0, counted = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, item(doc, "buffers"))
    {
        const char *name = cJSON_GetArrayItem(b, 0)->valuestring;
        int j = state_find(st, name);
        CHECKF(j >= 0, "%s: no buffer %s", model, name);
        if (j < 0)
            continue;
        nbuf++;
        cJSON *rec = cJSON_Duplicate(b, 1);
        cJSON_DeleteItemFromArray(rec, 0);
        expect_tensor(t, "buffer", name, state_data(st, j), dt, shape_numel(&st->e[j].type.shape), rec,
                      0, 0, 0, NULL, NULL, dt);
        cJSON_Delete(rec);
    }
    for (int j = 0; j < st->n; j++)
        if (ends_with(st->e[j].name, "num_batches_tracked")) {
            counted++;
            CHECKF(*(const int64_t *)state_data(st, j) == 1, "%s: %s is %lld after one step", model,
                   st->e[j].name, (long long)*(const int64_t *)state_data(st, j));
        }
    CHECKF(2 * counted == nbuf, "%s: %d batch norm counts for %d running statistics", model, counted, nbuf);
}

/* Every param's change by the run (st after it, start before: state
 * bytes, values of dtype dt) under optimizer opt. */
static void check_steps(Tally *t, const cJSON *doc, const char *opt, const CtState *st, const unsigned char *start,
                        CtDType dt)
{
    const char *model = t->model;
    const cJSON *names = item(doc, "params"), *grads = item(doc, "grads"), *zero = item(doc, "zero_grads");
    double lr = item(item(item(doc, "optimizers"), opt), "lr")->valuedouble;
    int sgd = !strcmp(opt, "sgd");
    const cJSON *steps = item(doc, opt);
    double top = top_rms(steps, names, st);
    for (int k = 0; k < cJSON_GetArraySize(names); k++) {
        const char *name = cJSON_GetArrayItem(names, k)->valuestring;
        int j = state_find(st, name);
        CHECKF(j >= 0, "%s: no param %s", model, name);
        if (j < 0)
            continue;
        int64_t n = shape_numel(&st->e[j].type.shape);
        double *delta = malloc(sizeof *delta * (size_t)n);
        CT_ASSERT(delta != NULL);
        const void *before = start + st->e[j].offset, *after = state_data(st, j);
        for (int64_t i = 0; i < n; i++)
            delta[i] = at(after, dt, i) - at(before, dt, i);
        expect_tensor(t, opt, name, delta, CT_F64, n, cJSON_GetArrayItem(steps, k), in_list(zero, name), top,
                      sgd ? 0 : lr, cJSON_GetArrayItem(grads, k), before, dt);
        free(delta);
    }
}

/* One training step of the model on `be` (f64: the graph in float64) under
 * optimizer `opt` ("sgd": also the loss, logits, gradients and buffers),
 * checked against the file's. */
static void check_step(const cJSON *doc, const CtBackend *be, int f64, const char *opt)
{
    const char *model = item(doc, "model")->valuestring;
    const ModelEntry *m = model_find(model);
    CHECKF(m != NULL, "%s is not in the registry", model);
    if (!m)
        return;
    int batch = item(doc, "batch")->valueint, img = item(doc, "img_size")->valueint;
    const cJSON *ospec = item(item(doc, "optimizers"), opt);
    OptimSpec os;
    CT_ASSERT(optim_defaults(item(ospec, "opt")->valuestring, &os) == 0);
    os.weight_decay = item(ospec, "weight_decay")->valuedouble;
    os.no_weight_decay = m->no_weight_decay;
    os.grads_out = 1; /* compared with timm's */
    double lr = item(ospec, "lr")->valuedouble;
    if (item(ospec, "momentum"))
        os.momentum = item(ospec, "momentum")->valuedouble;
    /* AugMix split training: --split-bn's SplitBatchNorm2d, --jsd-loss's JsdCrossEntropy */
    ModelSpec spec = {.batch_size = batch, .training = 1, .args = model_args_default(),
                      .split_bn = item(doc, "split_bn") ? item(doc, "split_bn")->valueint : 0};
    spec.args.img_size = img;
    spec.args.drop_path_rate = 0; /* the reference's: none (Swin's default is 0.1) */
    if (item(doc, "num_classes")) /* set where the cfg has none */
        spec.args.num_classes = item(doc, "num_classes")->valueint;
    LossSpec loss = {.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = item(doc, "smoothing")->valuedouble, .bce_threshold = -1};
    if (item(doc, "jsd_splits")) {
        loss.kind = CT_LOSS_JSD;
        loss.num_splits = item(doc, "jsd_splits")->valueint;
    }
    Graph g;
    TrainStep ts;
    CtErr err = {{0}};
    if (model_build(m, &spec, &g, &err) || train_step_build(&g, g.outputs[0], &loss, &os, &ts, &err)) {
        CHECKF(0, "%s: %s", model, err.msg);
        return;
    }
    if (f64)
        retype_f64(&g);
    CtDType dt = f64 ? CT_F64 : CT_F32;
    size_t esize = ct_dtype_size(dt);
    CtState st;
    state_create(&st, &g);
    state_init(&st, 1); /* the optimizer's state: its initial values */
    zoo_fill_state(&st, fill_scale, (void *)doc);
    unsigned char *start = malloc(st.nbytes);
    CT_ASSERT(start != NULL);
    memcpy(start, st.data, st.nbytes);

    int classes = model_num_classes(m, &spec.args);
    int64_t nx = (int64_t)batch * 3 * img * img;
    void *x = malloc((size_t)nx * esize);
    int64_t *target = malloc(sizeof *target * (size_t)batch);
    CT_ASSERT(x && target);
    uint32_t seed = fnv1a(item(doc, "input") ? item(doc, "input")->valuestring : "input");
    for (int64_t k = 0; k < nx; k++) {
        float v = (float)(2 * uniform(seed, k) - 1);
        if (f64)
            ((double *)x)[k] = v;
        else
            ((float *)x)[k] = v;
    }
    for (int i = 0; i < batch; i++)
        target[i] = (i * 7) % classes;
    double lr64 = lr, one64 = 1;
    float lr32 = (float)lr, one32 = 1;
    CtTensor in[4] = {{{{4, {batch, 3, img, img}}, dt}, x},
                      {{{1, {batch}}, CT_I64}, target},
                      {{{0}, dt}, f64 ? (void *)&lr64 : (void *)&lr32},
                      {{{0}, dt}, f64 ? (void *)&one64 : (void *)&one32}};
    CtTensor *out = calloc((size_t)g.noutputs, sizeof *out);
    int rc = backend_run_once(be, &g, &st, in, 4, out, NULL, &err);
    CHECKF(rc == 0, "%s (%s): %s", model, be->name, err.msg);
    Tally t = {model, be->name, opt, 0, 0, 0, ""};
    const cJSON *names = item(doc, "params");
    CHECKF(cJSON_GetArraySize(names) == ts.nparams, "%s: %d params, timm has %d", model, ts.nparams,
           cJSON_GetArraySize(names));
    if (rc == 0 && cJSON_GetArraySize(names) == ts.nparams) {
        if (!strcmp(opt, "sgd"))
            check_forward(&t, doc, &g, &ts, &st, out, dt);
        check_steps(&t, doc, opt, &st, start, dt);
        printf("%s, %s backend, %s: %d values checked against timm, %d off; worst %.3g of the allowed (%s)\n",
               model, be->name, opt, t.checked, t.bad, t.worst, t.where);
        CHECKF(t.bad == 0, "%s (%s, %s): %d of %d values differ from timm's", model, be->name, opt, t.bad,
               t.checked);
    }
    for (int k = 0; k < g.noutputs; k++)
        tensor_free(&out[k]);
    free(out);
    free(x);
    free(target);
    free(start);
    state_free(&st);
    train_step_free(&ts);
    graph_free(&g);
}

/* The ref backend's runs (single-threaded each, and sharing nothing) two at
 * a time; the cpu backend's after them, one at a time (each uses every core). */
typedef struct Jobs {
    cJSON *const *docs;
    int n, next;
    pthread_mutex_t lock;
} Jobs;

static void *ref_worker(void *arg)
{
    Jobs *js = arg;
    for (;;) {
        pthread_mutex_lock(&js->lock);
        int k = js->next++;
        pthread_mutex_unlock(&js->lock);
        if (k >= 2 * js->n)
            return NULL;
        if (js->docs[k / 2])
            check_step(js->docs[k / 2], &ct_backend_ref, 1, k % 2 ? "adamw" : "sgd");
    }
}

/* [--cpu] [model]: only the cpu backend's runs (ctest runs them once per
 * kind of convolution kernel); only that model. */
int main(int argc, char **argv)
{
    enum { NMODELS = sizeof models / sizeof *models };
    int cpu_only = argc > 1 && !strcmp(argv[1], "--cpu");
    const char *only = argc > 1 + cpu_only ? argv[1 + cpu_only] : NULL;
    cJSON *docs[NMODELS];
    int n = 0, cpu[NMODELS];
    for (int i = 0; i < NMODELS; i++) {
        if ((only && strcmp(only, models[i].name)) || (cpu_only && !models[i].cpu))
            continue;
        cpu[n] = models[i].cpu;
        docs[n++] = zoo_read_refs("zoo_train_refs", models[i].name);
#ifdef __SANITIZE_ADDRESS__
        break; /* the first model */
#endif
    }
    CHECKF(n > 0, "no model %s", only ? only : "");
    Jobs js = {docs, cpu_only ? 0 : n, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        CT_ASSERT(pthread_create(&th[t], NULL, ref_worker, &js) == 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < 2 && docs[i] && cpu[i]; o++)
            check_step(docs[i], &ct_backend_cpu, 0, o ? "adamw" : "sgd");
    for (int i = 0; i < n; i++)
        cJSON_Delete(docs[i]);
    return check_done("test_zoo_train");
}
