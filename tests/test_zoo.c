/* The zoo's full-size models against the real timm, numerically: each
 * model of tests/data/zoo_refs/<family>.json (tools/make_zoo_refs.py) with
 * its weights and input filled by that tool's formula (zoo_fill, the same
 * float32 bits on both sides), one eval-mode forward and backward on the
 * ref backend (in double, as the reference): the loss and logits and every
 * parameter's gradient (sum, norm, 4 elements) as timm's within 1e-4 of
 * their scale, two models at a time. A model's "kwargs" (create_model's,
 * ViT options) go through --model-kwargs' parser as KEY=VALUE words. The sanitizer build checks the first
 * model of each family (the ref backend is slow there). */
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
#include "train/model_kwargs.h"
#include "zoo_fill.h"

static double num(const cJSON *a, int k) { return cJSON_GetArrayItem(a, k)->valuedouble; }

/* |got - want| within 1e-4 of scale (and a little absolute slack for values near 0). */
static int close_to(double got, double want, double scale) { return fabs(got - want) <= 1e-4 * scale + 1e-7; }

typedef struct Tally {
    int checked, bad;
} Tally;

static void expect(Tally *t, const char *model, const char *what, const char *name, double got, double want,
                   double scale)
{
    t->checked++;
    if (close_to(got, want, scale))
        return;
    if (t->bad++ < 8)
        fprintf(stderr, "%s: %s %s: %.9g, timm %.9g (scale %.3g)\n", model, what, name, got, want, scale);
}

/* The entry's "kwargs" into a's options, through the Python literals --model-kwargs reads. */
static int read_kwargs(const cJSON *ref, ModelArgs *a, CtErr *err)
{
    char words[8][64];
    const char *kv[8];
    int n = 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, cJSON_GetObjectItem(ref, "kwargs"))
    {
        CT_ASSERT(n < 8);
        if (cJSON_IsBool(k))
            snprintf(words[n], sizeof words[n], "%s=%s", k->string, cJSON_IsTrue(k) ? "True" : "False");
        else if (cJSON_IsString(k))
            snprintf(words[n], sizeof words[n], "%s='%s'", k->string, k->valuestring);
        else
            snprintf(words[n], sizeof words[n], "%s=%.17g", k->string, k->valuedouble);
        kv[n] = words[n];
        n++;
    }
    int img = a->img_size;
    if (model_kwargs_parse(kv, n, (const ScriptKwarg[]){{NULL, NULL}}, "create_model", a, err))
        return -1;
    a->img_size = img;
    return 0;
}

static void check_model(const char *model, const cJSON *ref, int batch, int img)
{
    const ModelEntry *m = model_find(model);
    CHECKF(m != NULL, "%s is not in the registry", model);
    if (!m)
        return;
    Graph g;
    TrainStep ts;
    CtErr err = {{0}};
    ModelSpec spec = {.batch_size = batch, .training = 0, .args = model_args_default()};
    spec.args.img_size = img;
    const cJSON *ncls = cJSON_GetObjectItem(ref, "num_classes"); /* set where the cfg has none */
    if (cJSON_IsNumber(ncls))
        spec.args.num_classes = (int)ncls->valuedouble;
    OptimSpec none = {.kind = CT_OPT_NONE};
    if (read_kwargs(ref, &spec.args, &err) || model_build(m, &spec, &g, &err) ||
        train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0, .bce_threshold = -1}, &none, &ts, &err)) {
        CHECKF(0, "%s: %s", model, err.msg);
        return;
    }
    CtState st;
    state_create(&st, &g);
    zoo_fill_state(&st, NULL, NULL);
    int classes = model_num_classes(m, &spec.args);
    float *x = malloc(sizeof *x * (size_t)batch * 3 * (size_t)img * img);
    int64_t *target = malloc(sizeof *target * (size_t)batch);
    CT_ASSERT(x && target);
    uint32_t seed = fnv1a("input");
    for (int64_t k = 0; k < (int64_t)batch * 3 * img * img; k++)
        x[k] = (float)(2 * uniform(seed, k) - 1);
    for (int i = 0; i < batch; i++)
        target[i] = (i * 7) % classes;
    float lr = 0, scale = 1;
    CtTensor in[4] = {{{{4, {batch, 3, img, img}}, CT_F32}, x},
                      {{{1, {batch}}, CT_I64}, target},
                      {{{0}, CT_F32}, &lr},
                      {{{0}, CT_F32}, &scale}};
    CtTensor *out = calloc((size_t)g.noutputs, sizeof *out);
    int rc = backend_run_once(&ct_backend_ref, &g, &st, in, 4, out, NULL, &err);
    CHECKF(rc == 0, "%s: %s", model, err.msg);
    Tally t = {0};
    if (rc == 0) {
        const float *logits = out[0].data, *loss = NULL;
        for (int k = 0; k < g.noutputs; k++)
            if (g.outputs[k] == ts.loss)
                loss = out[k].data;
        double lnorm = cJSON_GetObjectItem(ref, "logits_norm")->valuedouble;
        expect(&t, model, "loss", "", loss ? *loss : NAN, cJSON_GetObjectItem(ref, "loss")->valuedouble,
               fabs(cJSON_GetObjectItem(ref, "loss")->valuedouble));
        const cJSON *pick;
        cJSON_ArrayForEach(pick, cJSON_GetObjectItem(ref, "logits"))
            expect(&t, model, "logit", "", logits[(int)num(pick, 0)], num(pick, 1),
                   lnorm / sqrt((double)batch * classes));
        const cJSON *grads = cJSON_GetObjectItem(ref, "grads");
        CHECKF(cJSON_GetArraySize(grads) == ts.nparams, "%s: %d gradients, timm has %d", model, ts.nparams,
               cJSON_GetArraySize(grads));
        for (int k = 0; k < ts.nparams; k++) {
            const char *name = g.values[ts.params[k]].name;
            const cJSON *r = cJSON_GetObjectItem(grads, name);
            int o = -1;
            for (int j = 0; j < g.noutputs; j++)
                if (g.outputs[j] == ts.grads[k])
                    o = j;
            if (!r || o < 0) {
                CHECKF(0, "%s: no gradient of %s on one side", model, name);
                continue;
            }
            const float *gr = out[o].data;
            int64_t n = shape_numel(&out[o].type.shape);
            double sum = 0, sq = 0;
            for (int64_t i = 0; i < n; i++)
                sum += gr[i], sq += (double)gr[i] * gr[i];
            double norm = num(r, 1), rms = norm / sqrt((double)n);
            expect(&t, model, "grad norm", name, sqrt(sq), norm, norm);
            expect(&t, model, "grad sum", name, sum, num(r, 0), norm * sqrt((double)n));
            for (int s = 0; s < 4; s++)
                expect(&t, model, "grad element", name, gr[(int64_t)(s * n / 4)], num(r, 2 + s), rms);
        }
        printf("%s: loss %.6f, %d values checked against timm, %d off\n", model, loss ? *loss : NAN, t.checked,
               t.bad);
        CHECKF(t.bad == 0, "%s: %d of %d values differ from timm's", model, t.bad, t.checked);
    }
    for (int k = 0; k < g.noutputs; k++)
        tensor_free(&out[k]);
    free(out);
    free(x);
    free(target);
    state_free(&st);
    train_step_free(&ts);
    graph_free(&g);
}

/* The models of the families' files, checked on two threads (the ref
 * backend keeps no shared state; each model has its own graph and state). */
typedef struct Job {
    const char *model;
    const cJSON *ref;
    int batch, img;
} Job;

typedef struct Jobs {
    Job *job;
    int n, next;
    pthread_mutex_t lock;
} Jobs;

static void *worker(void *arg)
{
    Jobs *js = arg;
    for (;;) {
        pthread_mutex_lock(&js->lock);
        int k = js->next++;
        pthread_mutex_unlock(&js->lock);
        if (k >= js->n)
            return NULL;
        check_model(js->job[k].model, js->job[k].ref, js->job[k].batch, js->job[k].img);
    }
}

/* The family's file, parsed (NULL with a failed check), its models added to js. */
static cJSON *add_family(Jobs *js, const char *family)
{
    cJSON *doc = zoo_read_refs("zoo_refs", family);
    if (!doc)
        return NULL;
    int batch = cJSON_GetObjectItem(doc, "batch")->valueint, img = cJSON_GetObjectItem(doc, "img_size")->valueint;
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(doc, "models"))
    {
        js->job = realloc(js->job, sizeof *js->job * (size_t)(js->n + 1));
        CT_ASSERT(js->job != NULL);
        js->job[js->n++] = (Job){m->string, m, batch, img};
#ifdef __SANITIZE_ADDRESS__
        break; /* the first model of each family */
#endif
    }
    return doc;
}

int main(void)
{
    static const char *const families[] = {"resnet", "regnet",   "convnext", "efficientnet", "mobilenetv3",
                                           "metaformer", "vit", "vit14",   "resnetv2",     "nfnet",
                                           "vit_kwargs", "byobnet", "hgnet", "eva", "eva_kwargs",
                                           "swin",   "beit",  "vit_relpos", "levit", "swinv2", "swinv2_cr",
                                           "maxxvit"};
    enum { NFAM = sizeof families / sizeof *families };
    Jobs js = {.lock = PTHREAD_MUTEX_INITIALIZER};
    cJSON *docs[NFAM];
    for (int f = 0; f < NFAM; f++)
        docs[f] = add_family(&js, families[f]);
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        CT_ASSERT(pthread_create(&th[t], NULL, worker, &js) == 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    for (int f = 0; f < NFAM; f++)
        cJSON_Delete(docs[f]);
    free(js.job);
    return check_done("test_zoo");
}
