/*
 * ctimm-run: runs a model on a reference-vector file and writes its outputs
 * under the same tensor names, or compares two such files.
 *
 *   ctimm-run --model NAME [--num-classes N] [--img-size N] [--backend ref] [--weights CKPT] --vectors FILE --out OUT
 *   ctimm-run --compare A B [--tol T] [--tol-for NAME_PREFIX T]...
 *
 * The run reads `state.<name>` (weights and buffers; or, with --weights, a
 * plain timm/ctimm checkpoint of state_dict names), `input` and `target`,
 * and writes what timm's reference generator writes, from the same start:
 *   logits.eval              eval forward
 *   logits.train, loss.train train forward, LabelSmoothingCrossEntropy(--smoothing)
 *   grad.<param>             its backward
 *   state_after_fwd.<buffer> BN running stats after that train forward
 *   sgd.<param>              one timm 'sgd' step (nesterov, --momentum, lr 0.1, wd 1e-4)
 *   adamw.<param>            one timm 'adamw' step (lr 1e-3, wd 0.05), from the same start
 * Each step is one compiled graph: forward, loss, backward and update.
 */
#include <cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/common.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"

static const char *const prog = "ctimm-run";
static const char *const usage =
    "usage: ctimm-run --model NAME [--num-classes N] [--img-size N] [--backend ref] [--weights CKPT] [--channels-last]\n"
    "                 [--smoothing 0.1] [--sgd-lr 0.1] [--momentum 0.9] [--sgd-wd 1e-4] [--adamw-lr 1e-3]\n"
    "                 [--adamw-wd 0.05] --vectors FILE --out OUT\n"
    "       ctimm-run --compare A B [--tol T] [--tol-for NAME_PREFIX T]...\n";

typedef struct Outputs {
    StTensor t[1024];
    int n;
} Outputs;

/* The reference files' settings (their __metadata__ spells them out). */
typedef struct RunSettings {
    double smoothing, sgd_lr, momentum, sgd_wd, adamw_lr, adamw_wd;
    int channels_last;
} RunSettings;

static void add_output(Outputs *o, const char *name, CtType type, void *data)
{
    StTensor *t = &o->t[o->n++];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->dtype = type.dtype;
    t->ndim = type.shape.ndim;
    for (int i = 0; i < type.shape.ndim; i++)
        t->shape[i] = type.shape.d[i];
    t->nbytes = (size_t)shape_numel(&type.shape) * ct_dtype_size(type.dtype);
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    memcpy(t->data, data, t->nbytes);
}

/* Loads params and buffers into `state` from --weights or the vectors' state.*. */
static int load_state(CtState *state, const char *weights, const StFile *vectors, CtErr *err);

/* The eval forward: logits.eval. */
static int eval_forward(const ModelEntry *m, ModelSpec spec, const CtBackend *be, const char *weights,
                        const StFile *f, const CtTensor *input, int channels_last, Outputs *out, CtErr *err)
{
    Graph g;
    CtState state;
    CtTensor logits;
    spec.training = 0;
    if (model_build(m, &spec, &g, err) ||
        pipeline_run(&(Pipeline){.channels_last = channels_last, .verify = PIPELINE_VERIFY}, &g, NULL, err))
        return -1;
    state_create(&state, &g);
    int rc = load_state(&state, weights, f, err);
    if (rc == 0)
        rc = cli_run_once(be, &g, &state, input, 1, &logits, err);
    if (rc == 0) {
        add_output(out, "logits.eval", logits.type, logits.data);
        tensor_free(&logits);
    }
    state_free(&state);
    graph_free(&g);
    return rc;
}

/* One training step with optimizer `opt` from the loaded state. With
 * `report`, also writes logits.train, loss.train, grad.* and
 * state_after_fwd.*; always writes <prefix>.<param> after the update. */
static int train_step(const ModelEntry *m, ModelSpec spec, const CtBackend *be, const char *weights, const StFile *f,
                      const CtTensor *io, const OptimSpec *opt, double lr, const RunSettings *rs, const char *prefix,
                      int report, Outputs *out, CtErr *err)
{
    Graph g;
    CtState state;
    char name[600];
    spec.training = 1;
    Pipeline p = {.training = 1, .loss = {CT_LOSS_CROSS_ENTROPY, rs->smoothing, -1, 0}, .opt = *opt,
                  .channels_last = rs->channels_last, .verify = PIPELINE_VERIFY};
    p.opt.grads_out = report;
    p.remat.cheap = 1; /* the tools' default step, which the reference vectors check */
    if (model_build(m, &spec, &g, err) || pipeline_run(&p, &g, NULL, err))
        return -1;
    state_create(&state, &g);
    CtTensor *res = calloc((size_t)g.noutputs, sizeof *res);
    float lr32 = (float)lr, scale = 1;
    CtTensor inputs[4] = {io[0], io[1], {{{0}, CT_F32}, &lr32}, {{{0}, CT_F32}, &scale}};
    int rc = load_state(&state, weights, f, err);
    if (rc == 0)
        rc = cli_run_once(be, &g, &state, inputs, 4, res, err);
    if (rc == 0) {
        if (report) {
            add_output(out, "logits.train", res[0].type, res[0].data);
            add_output(out, "loss.train", res[1].type, res[1].data);
            /* grads follow the params in state order (value ids change under passes) */
            for (int i = 0, k = 0; i < state.n; i++)
                if (state.e[i].role == CT_ROLE_PARAM) {
                    snprintf(name, sizeof name, "grad.%s", state.e[i].name);
                    add_output(out, name, res[2 + k].type, res[2 + k].data);
                    k++;
                }
        }
        for (int i = 0; i < state.n; i++) {
            int param = state.e[i].role == CT_ROLE_PARAM;
            if (state.e[i].role == CT_ROLE_STATE || (!param && !report))
                continue;
            snprintf(name, sizeof name, "%s.%s", param ? prefix : "state_after_fwd", state.e[i].name);
            add_output(out, name, state.e[i].type, state_data(&state, i));
        }
        for (int k = 0; k < g.noutputs; k++)
            tensor_free(&res[k]);
    }
    free(res);
    state_free(&state);
    graph_free(&g);
    return rc;
}

static int load_state(CtState *state, const char *weights, const StFile *vectors, CtErr *err)
{
    if (!weights)
        return state_load(state, vectors, "state.", err) ? ct_failctx(err, "vectors") : 0;
    StFile f;
    if (st_read(weights, &f, err))
        return -1;
    int rc = state_load(state, &f, "", err);
    st_free(&f);
    return rc ? ct_failctx(err, "%s", weights) : 0;
}

static int run(const ModelEntry *m, ModelArgs args, const RunSettings *rs, const char *backend, const char *weights,
               const char *vectors, const char *out_path)
{
    StFile f;
    CtErr err;
    Outputs *out = calloc(1, sizeof *out);
    int rc = 1;
    const CtBackend *be = backend_find(backend);
    if (!be) {
        fprintf(stderr, "%s: unknown backend '%s' (ref, cpu, cuda, cuda-sim)\n", prog, backend);
        free(out);
        return 2;
    }
    if (st_read(vectors, &f, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        free(out);
        return 1;
    }
    cli_catch_interrupts();
    const StTensor *in = st_find(&f, "input"), *tg = st_find(&f, "target");
    if (!in || in->dtype != CT_F32 || in->ndim != 4 || in->shape[2] != in->shape[3]) {
        fprintf(stderr, "%s: %s: needs a tensor 'input', F32 [B,C,H,W] with H == W\n", prog, vectors);
        goto free_outputs;
    }
    if (args.num_classes < 0 && st_meta(&f, "num_classes"))
        args.num_classes = atoi(st_meta(&f, "num_classes"));
    if (args.img_size <= 0)
        args.img_size = (int)in->shape[2];
    int classes = model_num_classes(m, &args);
    if (!tg || tg->dtype != CT_I64 || tg->ndim != 1 || tg->shape[0] != in->shape[0]) {
        fprintf(stderr, "%s: %s: needs a tensor 'target', I64 [%lld]\n", prog, vectors, (long long)in->shape[0]);
        goto free_outputs;
    }
    for (int64_t b = 0; b < tg->shape[0]; b++)
        if (((const int64_t *)tg->data)[b] < 0 || ((const int64_t *)tg->data)[b] >= classes) {
            fprintf(stderr, "%s: %s: target[%lld] is outside [0, %d)\n", prog, vectors, (long long)b, classes);
            goto free_outputs;
        }
    ModelSpec spec = {.batch_size = (int)in->shape[0], .args = args};
    CtTensor io[2] = {{{shape_make(in->ndim, in->shape), CT_F32}, in->data},
                      {{shape_make(1, tg->shape), CT_I64}, tg->data}};
    OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = rs->momentum, .weight_decay = rs->sgd_wd,
                     .no_weight_decay = m->no_weight_decay};
    OptimSpec adamw = {.kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = rs->adamw_wd,
                       .no_weight_decay = m->no_weight_decay};
    if (eval_forward(m, spec, be, weights, &f, io, rs->channels_last, out, &err) ||
        train_step(m, spec, be, weights, &f, io, &sgd, rs->sgd_lr, rs, "sgd", 1, out, &err) ||
        train_step(m, spec, be, weights, &f, io, &adamw, rs->adamw_lr, rs, "adamw", 0, out, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        rc = cli_interrupted() ? 130 : 1;
        goto free_outputs;
    }
    const char *keys[] = {"model", "backend", "vectors"}, *vals[] = {m->name, be->name, vectors};
    if (st_write(out_path, out->t, out->n, keys, vals, 3, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        goto free_outputs;
    }
    printf("%s: wrote %d tensors to %s\n", m->name, out->n, out_path);
    rc = 0;
free_outputs:
    for (int i = 0; i < out->n; i++) {
        free(out->t[i].name);
        free(out->t[i].data);
    }
    free(out);
    st_free(&f);
    return rc;
}

/* Tolerances by tensor-name prefix (the longest matching prefix wins). */
typedef struct Tolerances {
    double all;
    const char *prefix[8];
    double tol[8];
    int n;
} Tolerances;

static double tolerance_for(const Tolerances *t, const char *name)
{
    double tol = t->all;
    size_t best = 0;
    for (int i = 0; i < t->n; i++) {
        size_t len = strlen(t->prefix[i]);
        if (len > best && strncmp(name, t->prefix[i], len) == 0) {
            best = len;
            tol = t->tol[i];
        }
    }
    return tol;
}

/* Whether `name` is <prefix><param> for a param the reference file lists in
 * its metadata `grad_structurally_zero` (a JSON list): parameters whose true
 * gradient is 0, so their stored gradient is float32 noise (reference README). */
static int structurally_zero(const StFile *ref, const char *prefix, const char *name)
{
    const char *list = st_meta(ref, "grad_structurally_zero");
    size_t plen = strlen(prefix);
    if (!list || strncmp(name, prefix, plen) != 0)
        return 0;
    cJSON *j = cJSON_Parse(list), *it;
    int found = 0;
    cJSON_ArrayForEach(it, j) found |= cJSON_IsString(it) && strcmp(it->valuestring, name + plen) == 0;
    cJSON_Delete(j);
    return found;
}

/* ||a-b|| / ||b|| per tensor present in both files (||a-b|| when b is 0).
 * For the reference's structurally-zero gradients the max absolute error is
 * held to 1e-6 instead, and their AdamW steps (which follow the noise's
 * sign) are skipped, as the reference README prescribes. */
static int compare(const char *pa, const char *pb, const Tolerances *tols)
{
    StFile a, b;
    CtErr err;
    if (st_read(pa, &a, &err) || (st_read(pb, &b, &err) && (st_free(&a), 1))) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 1;
    }
    int compared = 0, bad = 0;
    printf("%-56s %12s %12s\n", "tensor", "rel_err", "max_abs");
    for (int i = 0; i < a.ntensors; i++) {
        const StTensor *ta = &a.tensors[i], *tb = st_find(&b, ta->name);
        if (!tb)
            continue;
        if (structurally_zero(&b, "adamw.", ta->name)) {
            printf("%-56s skipped: its gradient is structurally zero\n", ta->name);
            continue;
        }
        int abs_only = structurally_zero(&b, "grad.", ta->name);
        compared++;
        int64_t n = st_numel(ta);
        CtShape sa = shape_make(ta->ndim, ta->shape), sb = shape_make(tb->ndim, tb->shape);
        double *da = malloc((size_t)(n ? n : 1) * sizeof *da), *db = malloc((size_t)(n ? n : 1) * sizeof *db);
        if (!shape_equal(&sa, &sb) || elems_to_double(ta->data, ta->dtype, n, da) ||
            elems_to_double(tb->data, tb->dtype, n, db)) {
            printf("%-56s shape or dtype differs: FAIL\n", ta->name);
            bad++;
        } else {
            double diff = 0, ref = 0, maxabs = 0;
            for (int64_t k = 0; k < n; k++) {
                double d = da[k] - db[k];
                diff += d * d;
                ref += db[k] * db[k];
                maxabs = fabs(d) > maxabs || isnan(d) ? fabs(d) : maxabs;
            }
            double rel = ref > 0 ? sqrt(diff) / sqrt(ref) : sqrt(diff);
            int ok = abs_only ? maxabs <= 1e-6 : rel <= tolerance_for(tols, ta->name);
            bad += !ok;
            printf("%-56s %12.3e %12.3e%s%s\n", ta->name, rel, maxabs, abs_only ? "  (structurally zero: abs)" : "",
                   ok ? "" : "  FAIL");
        }
        free(da);
        free(db);
    }
    st_free(&a);
    st_free(&b);
    if (!compared) {
        fprintf(stderr, "%s: %s and %s have no tensor name in common\n", prog, pa, pb);
        return 1;
    }
    printf("%d tensors compared, %d over tolerance\n", compared, bad);
    return bad ? 1 : 0;
}

/* The option's destination when `a` is a real-valued option, else NULL. */
static double *real_option(const char *a, Tolerances *tols, RunSettings *rs)
{
    static const struct {
        const char *name;
        size_t offset;
    } opts[] = {
        {"--smoothing", offsetof(RunSettings, smoothing)}, {"--sgd-lr", offsetof(RunSettings, sgd_lr)},
        {"--momentum", offsetof(RunSettings, momentum)},   {"--sgd-wd", offsetof(RunSettings, sgd_wd)},
        {"--adamw-lr", offsetof(RunSettings, adamw_lr)},   {"--adamw-wd", offsetof(RunSettings, adamw_wd)},
    };
    if (!strcmp(a, "--tol"))
        return &tols->all;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (!strcmp(a, opts[i].name))
            return (double *)((char *)rs + opts[i].offset);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *vectors = NULL, *out = NULL, *backend = "ref", *weights = NULL, *ca = NULL, *cb = NULL;
    ModelArgs args = model_args_default();
    RunSettings rs = {.smoothing = 0.1, .sgd_lr = 0.1, .momentum = 0.9, .sgd_wd = 1e-4, .adamw_lr = 1e-3, .adamw_wd = 0.05};
    cli_init_signals(prog);
    Tolerances tols = {.all = 1e-4};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = !strcmp(a, "--model") ? &model : !strcmp(a, "--vectors") ? &vectors
                         : !strcmp(a, "--out") ? &out : !strcmp(a, "--backend") ? &backend
                         : !strcmp(a, "--weights") ? &weights : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (dst) {
            if (!(*dst = cli_value(prog, argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--channels-last")) {
            rs.channels_last = 1;
        } else if (!strcmp(a, "--compare")) {
            if (i + 2 >= argc) {
                fprintf(stderr, "%s: --compare needs two files\n", prog);
                return 2;
            }
            ca = argv[++i];
            cb = argv[++i];
        } else if (!strcmp(a, "--tol-for")) {
            char *end;
            if (i + 2 >= argc || tols.n == 8 || (tols.tol[tols.n] = strtod(argv[i + 2], &end), *end) ||
                !(tols.tol[tols.n] >= 0)) {
                fprintf(stderr, "%s: --tol-for takes a name prefix and a tolerance (at most 8 times)\n", prog);
                return 2;
            }
            tols.prefix[tols.n++] = argv[i + 1];
            i += 2;
        } else if (real_option(a, &tols, &rs)) {
            const char *v = cli_value(prog, argc, argv, &i);
            double *dst = real_option(a, &tols, &rs);
            char *end;
            if (!v || (*dst = strtod(v, &end), *end || !(*dst >= 0))) {
                fprintf(stderr, "%s: %s expects a non-negative number\n", prog, a);
                return 2;
            }
        } else if (!strcmp(a, "--num-classes") || !strcmp(a, "--img-size")) {
            const char *v = cli_value(prog, argc, argv, &i);
            int *d = a[2] == 'n' ? &args.num_classes : &args.img_size;
            if (!v || cli_int(prog, a, v, a[2] == 'n' ? 0 : 1, 1 << 20, d))
                return 2;
        } else {
            fprintf(stderr, "%s: unknown option '%s'\n%s", prog, a, usage);
            return 2;
        }
    }
    if (ca)
        return compare(ca, cb, &tols);
    if (!model || !vectors || !out) {
        fprintf(stderr, "%s: --model, --vectors and --out are required\n%s", prog, usage);
        return 2;
    }
    const ModelEntry *m = cli_model(prog, model);
    return m ? run(m, args, &rs, backend, weights, vectors, out) : 2;
}
