/*
 * ctimm-run: runs a model on a reference-vector file and writes its outputs
 * under the same tensor names, or compares two such files.
 *
 *   ctimm-run --model NAME [--num-classes N] [--img-size N] [--backend ref] [--weights CKPT] --vectors FILE --out OUT
 *   ctimm-run --compare A B [--tol T]
 *
 * The run reads `state.<name>` (weights and buffers; or, with --weights, a
 * plain timm/ctimm checkpoint of state_dict names) and `input`, then writes
 * logits.eval (eval forward), logits.train (train forward) and
 * state_after_fwd.<buffer> (BN running stats after that train forward), in
 * the order timm's reference generator produces them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/common.h"
#include "runtime/backend.h"

static const char *const prog = "ctimm-run";
static const char *const usage =
    "usage: ctimm-run --model NAME [--num-classes N] [--img-size N] [--backend ref] [--weights CKPT]\n"
    "                 --vectors FILE --out OUT\n"
    "       ctimm-run --compare A B [--tol T]\n";

typedef struct Outputs {
    StTensor t[1024];
    int n;
} Outputs;

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

/* One forward (eval or train) of the model on `input` with `state`. */
static int forward(const ModelEntry *m, ModelSpec spec, const CtBackend *be, CtState *state, const CtTensor *input,
                   int training, Outputs *out, CtErr *err)
{
    Graph g;
    spec.training = training;
    if (model_build(m, &spec, &g, err))
        return -1;
    CtTensor logits;
    int rc = be->run(&g, state, input, 1, &logits, err);
    if (rc == 0) {
        add_output(out, training ? "logits.train" : "logits.eval", logits.type, logits.data);
        tensor_free(&logits);
    }
    graph_free(&g);
    return rc;
}

/* Loads state from a plain checkpoint (names without a prefix). */
static int load_weights(CtState *state, const char *path, CtErr *err)
{
    StFile f;
    if (st_read(path, &f, err))
        return -1;
    int rc = state_load(state, &f, "", err);
    st_free(&f);
    return rc ? ct_failctx(err, "%s", path) : 0;
}

static int run(const ModelEntry *m, ModelArgs args, const char *backend, const char *weights, const char *vectors,
               const char *out_path)
{
    StFile f;
    CtErr err;
    CtState state = {0};
    Outputs *out = calloc(1, sizeof *out);
    int rc = 1;
    const CtBackend *be = backend_find(backend);
    if (!be) {
        fprintf(stderr, "%s: unknown backend '%s' (available: ref)\n", prog, backend);
        free(out);
        return 2;
    }
    if (st_read(vectors, &f, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        free(out);
        return 1;
    }
    const StTensor *in = st_find(&f, "input");
    if (!in || in->dtype != CT_F32 || in->ndim != 4 || in->shape[2] != in->shape[3]) {
        fprintf(stderr, "%s: %s: needs a tensor 'input', F32 [B,C,H,W] with H == W\n", prog, vectors);
        goto free_file;
    }
    if (args.num_classes < 0 && st_meta(&f, "num_classes"))
        args.num_classes = atoi(st_meta(&f, "num_classes"));
    if (args.img_size <= 0)
        args.img_size = (int)in->shape[2];
    ModelSpec spec = {.batch_size = (int)in->shape[0], .args = args};
    Graph g;
    if (model_build(m, &spec, &g, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        goto free_file;
    }
    state_create(&state, &g);
    graph_free(&g);
    if (weights ? load_weights(&state, weights, &err) : state_load(&state, &f, "state.", &err)) {
        fprintf(stderr, "%s: %s%s%s\n", prog, weights ? "" : vectors, weights ? "" : ": ", err.msg);
        goto free_state;
    }
    CtTensor input = {{shape_make(in->ndim, in->shape), CT_F32}, in->data};
    if (forward(m, spec, be, &state, &input, 0, out, &err) || forward(m, spec, be, &state, &input, 1, out, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        goto free_state;
    }
    char name[600];
    for (int i = 0; i < state.n; i++)
        if (state.e[i].role == CT_ROLE_BUFFER) {
            snprintf(name, sizeof name, "state_after_fwd.%s", state.e[i].name);
            add_output(out, name, state.e[i].type, state_data(&state, i));
        }
    const char *keys[] = {"model", "backend", "vectors"}, *vals[] = {m->name, be->name, vectors};
    if (st_write(out_path, out->t, out->n, keys, vals, 3, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        goto free_state;
    }
    printf("%s: wrote %d tensors to %s\n", m->name, out->n, out_path);
    rc = 0;
free_state:
    state_free(&state);
    for (int i = 0; i < out->n; i++) {
        free(out->t[i].name);
        free(out->t[i].data);
    }
free_file:
    free(out);
    st_free(&f);
    return rc;
}

/* ||a-b|| / ||b|| per tensor present in both files (||a-b|| when b is 0). */
static int compare(const char *pa, const char *pb, double tol)
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
            int ok = rel <= tol;
            bad += !ok;
            printf("%-56s %12.3e %12.3e%s\n", ta->name, rel, maxabs, ok ? "" : "  FAIL");
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
    printf("%d tensors compared, %d over tolerance %.1e\n", compared, bad, tol);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *vectors = NULL, *out = NULL, *backend = "ref", *weights = NULL, *ca = NULL, *cb = NULL;
    ModelArgs args = model_args_default();
    double tol = 1e-4;
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
        } else if (!strcmp(a, "--compare")) {
            if (i + 2 >= argc) {
                fprintf(stderr, "%s: --compare needs two files\n", prog);
                return 2;
            }
            ca = argv[++i];
            cb = argv[++i];
        } else if (!strcmp(a, "--tol")) {
            const char *v = cli_value(prog, argc, argv, &i);
            char *end;
            if (!v || (tol = strtod(v, &end), *end || !(tol >= 0))) {
                fprintf(stderr, "%s: --tol expects a non-negative number\n", prog);
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
        return compare(ca, cb, tol);
    if (!model || !vectors || !out) {
        fprintf(stderr, "%s: --model, --vectors and --out are required\n%s", prog, usage);
        return 2;
    }
    const ModelEntry *m = cli_model(prog, model);
    return m ? run(m, args, backend, weights, vectors, out) : 2;
}
