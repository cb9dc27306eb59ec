/*
 * Every model recorded from timm in tests/data/models/<name>.json is built
 * here and compared with the record: state_dict names, shapes, dtypes and
 * param/buffer roles in order, param_count, the output shape of every
 * parameterised leaf layer (Conv2d, Linear, LayerNorm, LayerNorm2d,
 * BatchNorm2d, BatchNormAct2d) matched to the node with the same module scope, and the
 * logits shape. The
 * training-mode graph (batch 2) must verify and keep the same state_dict.
 * The registry's cfg is the record's pretrained_cfg: the default tag, its
 * input size, mean, std, crop_pct, interpolation and classifier, and the
 * test-time size and crop_pct validate.py uses.
 * Only graphs are built; nothing executes.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "models/registry.h"
#include "tests/check.h"

#define MIN_MODEL_FILES 14

/* A failed check whose message says it all (CHECKF would print "0"). */
#define MISMATCH(...) do { check_failures++; fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } while (0)

/* A JSON array of integers into a shape; 0 when it is not one. */
static int json_shape(const cJSON *a, CtShape *s)
{
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > CT_MAX_DIMS)
        return 0;
    s->ndim = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (!cJSON_IsNumber(e))
            return 0;
        s->d[s->ndim++] = (int64_t)e->valuedouble;
    }
    return 1;
}

static const char *sstr(const CtShape *s, char *buf, size_t n) { return shape_str(s, buf, n); }

/* The op a recorded layer class is built with; NULL for classes not checked. */
static const char *layer_op(const char *cls)
{
    static const char *const map[][2] = {
        {"Conv2d", "conv2d"},           {"Linear", "linear"}, {"LayerNorm", "layer_norm"},
        {"LayerNorm2d", "layer_norm"}, {"BatchNorm2d", "batch_norm"},
        /* timm's BatchNormAct2d (norm + act, one module): its output is the
         * act's, the same shape as the batch_norm node with its scope. */
        {"BatchNormAct2d", "batch_norm"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(cls, map[i][0]) == 0)
            return map[i][1];
    return NULL;
}

static int check_state(const char *model, const Graph *g, const cJSON *sd)
{
    int nsd = cJSON_GetArraySize(sd), bad = 0;
    char b1[96], b2[96];
    CHECKF(g->nstate == nsd, "%s: graph has %d state entries, timm's state_dict %d", model, g->nstate, nsd);
    int n = g->nstate < nsd ? g->nstate : nsd;
    for (int k = 0; k < n; k++) {
        const cJSON *e = cJSON_GetArrayItem(sd, k);
        const Value *v = graph_value(g, g->state[k]);
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "dtype"));
        const cJSON *isp = cJSON_GetObjectItemCaseSensitive(e, "is_param");
        CtShape want;
        if (!name || !dt || !cJSON_IsBool(isp) || !json_shape(cJSON_GetObjectItemCaseSensitive(e, "shape"), &want)) {
            MISMATCH("%s: state_dict[%d] is malformed in the JSON", model, k);
            bad++;
            continue;
        }
        const char *got = v->name ? v->name : "(null)";
        if (strcmp(got, name) != 0) {
            MISMATCH("%s: state_dict[%d]: name '%s', expected '%s'", model, k, got, name);
            bad++;
            continue; /* the rest would only repeat the misalignment */
        }
        if (!shape_equal(&v->type.shape, &want)) {
            MISMATCH("%s: state_dict[%d] '%s': shape %s, expected %s", model, k, name,
                   sstr(&v->type.shape, b1, sizeof b1), sstr(&want, b2, sizeof b2));
            bad++;
        }
        int want_dt = strcmp(dt, "float32") == 0 ? CT_F32 : strcmp(dt, "int64") == 0 ? CT_I64 : -1;
        if (want_dt < 0 || (int)v->type.dtype != want_dt) {
            MISMATCH("%s: state_dict[%d] '%s': dtype %s, expected %s", model, k, name,
                   ct_dtype_name(v->type.dtype), dt);
            bad++;
        }
        int want_param = cJSON_IsTrue(isp);
        if ((v->role == CT_ROLE_PARAM) != want_param) {
            MISMATCH("%s: state_dict[%d] '%s': role %s, expected %s", model, k, name, ct_role_name(v->role),
                   want_param ? "param" : "buffer");
            bad++;
        }
    }
    return bad;
}

/* Checks the parameterised leaf layers; returns how many were checked. */
static int check_layers(const char *model, const Graph *g, const cJSON *layers, int *bad)
{
    int checked = 0;
    char b1[96], b2[96];
    const cJSON *l;
    cJSON_ArrayForEach(l, layers)
    {
        const char *cls = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "cls"));
        const char *lname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "name"));
        const char *op = cls ? layer_op(cls) : NULL;
        if (!op)
            continue;
        checked++;
        CtShape want;
        const cJSON *outs = cJSON_GetObjectItemCaseSensitive(l, "out");
        if (!lname || !json_shape(cJSON_GetArrayItem(outs, 0), &want)) {
            MISMATCH("%s: layer %s (%s) is malformed in the JSON", model, lname ? lname : "?", cls);
            (*bad)++;
            continue;
        }
        const Node *found = NULL;
        for (int i = 0; i < g->nnodes && !found; i++) {
            const Node *n = &g->nodes[i];
            if (n->scope && strcmp(n->scope, lname) == 0 && strcmp(op_def(n->op)->name, op) == 0)
                found = n;
        }
        if (!found) {
            MISMATCH("%s: layer %s (%s): no %s node with scope '%s' in the graph", model, lname, cls, op, lname);
            (*bad)++;
            continue;
        }
        /* timm's LayerNorm2d normalises NCHW over C through channels-last: its
         * layer_norm node gives the NHWC form of the recorded NCHW output. */
        if (strcmp(cls, "LayerNorm2d") == 0 && want.ndim == 4)
            want = (CtShape){4, {want.d[0], want.d[2], want.d[3], want.d[1]}};
        const CtShape *got = &graph_value(g, found->out[0])->type.shape;
        if (!shape_equal(got, &want)) {
            MISMATCH("%s: layer %s (%s): output %s, expected %s", model, lname, cls, sstr(got, b1, sizeof b1),
                   sstr(&want, b2, sizeof b2));
            (*bad)++;
        }
    }
    return checked;
}

static void check_training(const char *model, const ModelEntry *m, const Graph *eval)
{
    ModelSpec spec = {.batch_size = 2, .training = 1, .args = model_args_default()};
    Graph g;
    CtErr err = {{0}};
    memset(&g, 0, sizeof g);
    if (model_build(m, &spec, &g, &err) != 0) {
        MISMATCH("%s: training build (batch 2) failed: %s", model, err.msg);
        return;
    }
    CHECKF(g.nstate == eval->nstate, "%s: training graph has %d state entries, eval graph %d", model, g.nstate,
           eval->nstate);
    int n = g.nstate < eval->nstate ? g.nstate : eval->nstate;
    for (int k = 0; k < n; k++) {
        const char *a = graph_value(&g, g.state[k])->name, *b = graph_value(eval, eval->state[k])->name;
        if (!a || !b || strcmp(a, b) != 0) {
            MISMATCH("%s: training state_dict[%d] is '%s', eval '%s'", model, k, a ? a : "(null)",
                   b ? b : "(null)");
            break;
        }
    }
    graph_free(&g);
}

/* m's cfg against timm's pretrained_cfg of its default tag. */
static void check_cfg(const char *model, const ModelEntry *m, const cJSON *pc)
{
    const ModelCfg *c = &m->cfg;
    const char *tag = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pc, "tag"));
    const char *interp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pc, "interpolation"));
    const char *cls = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pc, "classifier"));
    const cJSON *crop = cJSON_GetObjectItemCaseSensitive(pc, "crop_pct");
    CHECKF(tag && c->tag && !strcmp(tag, c->tag), "%s: tag %s, timm's default %s", model, c->tag ? c->tag : "none",
           tag ? tag : "none");
    CHECKF(interp && !strcmp(interp, c->interpolation), "%s: interpolation %s", model, c->interpolation);
    CHECKF(cls && !strcmp(cls, c->classifier), "%s: classifier %s", model, c->classifier);
    CHECKF(cJSON_IsNumber(crop) && crop->valuedouble == c->crop_pct, "%s: crop_pct %g", model, c->crop_pct);
    /* validate.py's test-time size and crop: absent (null) where the weights have none */
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(pc, "test_input_size");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(pc, "test_crop_pct");
    int want_ts = cJSON_IsArray(ts) ? (int)cJSON_GetArrayItem(ts, 1)->valuedouble : 0;
    double want_tc = cJSON_IsNumber(tc) ? tc->valuedouble : 0;
    CHECKF(want_ts == c->test_input_size && want_tc == c->test_crop_pct, "%s: test size %d crop %g, timm's %d %g",
           model, c->test_input_size, c->test_crop_pct, want_ts, want_tc);
    const char *keys[] = {"input_size", "mean", "std"};
    for (int k = 0; k < 3; k++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(pc, keys[k]);
        for (int i = 0; i < 3; i++) {
            const cJSON *v = cJSON_GetArrayItem(a, i);
            double have = k == 0 ? c->input_size[i] : k == 1 ? c->mean[i] : c->std[i];
            CHECKF(cJSON_IsNumber(v) && fabs(v->valuedouble - have) < 1e-9, "%s: %s[%d] %g", model, keys[k], i,
                   have);
        }
    }
}

static void check_model(const char *path, const char *file)
{
    int before = check_failures;
    char *text = test_read_text(path);
    if (!text) {
        MISMATCH("%s: cannot read", path);
        return;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) {
        MISMATCH("%s: not valid JSON", path);
        return;
    }
    const char *model = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "model"));
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(root, "state_dict");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(root, "param_count");
    const cJSON *ncls =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "cfg"), "num_classes");
    if (!model || !cJSON_IsArray(sd) || !cJSON_IsArray(layers) || !cJSON_IsNumber(pc) || !cJSON_IsNumber(ncls)) {
        MISMATCH("%s: missing model, state_dict, layers, param_count or cfg.num_classes", file);
        cJSON_Delete(root);
        return;
    }
    const ModelEntry *m = model_find(model);
    if (!m) {
        MISMATCH("%s (%s): model not registered", model, file);
        cJSON_Delete(root);
        return;
    }
    check_cfg(model, m, cJSON_GetObjectItemCaseSensitive(root, "pretrained_cfg"));

    ModelSpec spec = {.batch_size = 1, .training = 0, .args = model_args_default()};
    Graph g;
    CtErr err = {{0}};
    memset(&g, 0, sizeof g);
    if (model_build(m, &spec, &g, &err) != 0) {
        MISMATCH("%s: build failed: %s", model, err.msg);
        cJSON_Delete(root);
        return;
    }

    int bad = check_state(model, &g, sd);
    int64_t want_pc = (int64_t)pc->valuedouble, got_pc = graph_param_count(&g);
    CHECKF(got_pc == want_pc, "%s: param_count %lld, expected %lld", model, (long long)got_pc, (long long)want_pc);
    int nlayers = check_layers(model, &g, layers, &bad);

    CtShape want_out = {2, {1, (int64_t)ncls->valuedouble}};
    char b1[96], b2[96];
    if (g.noutputs != 1)
        MISMATCH("%s: graph has %d outputs, expected 1", model, g.noutputs);
    else
        CHECKF(shape_equal(&graph_value(&g, g.outputs[0])->type.shape, &want_out), "%s: output %s, expected %s",
               model, sstr(&graph_value(&g, g.outputs[0])->type.shape, b1, sizeof b1),
               sstr(&want_out, b2, sizeof b2));

    check_training(model, m, &g);

    if (check_failures == before)
        printf("%s: %d state entries, %lld params, %d layers checked ok\n", model, g.nstate, (long long)got_pc,
               nlayers);
    else
        printf("%s: FAILED (%d state/layer mismatches, %d check(s) failed)\n", model, bad,
               check_failures - before);
    graph_free(&g);
    cJSON_Delete(root);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void)
{
    const char *data = getenv("CTIMM_TEST_DATA");
    if (!data)
        data = "tests/data";
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models", data);
    DIR *d = opendir(dir);
    if (!d) {
        MISMATCH("cannot open %s (set CTIMM_TEST_DATA)", dir);
        return check_done("test_models");
    }
    char **files = NULL;
    int nfiles = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        if (nfiles == cap) {
            cap = cap ? cap * 2 : 16;
            char **nf = realloc(files, (size_t)cap * sizeof *files);
            if (!nf)
                abort();
            files = nf;
        }
        files[nfiles++] = strdup(e->d_name);
    }
    closedir(d);
    if (nfiles)
        qsort(files, (size_t)nfiles, sizeof *files, cmp_str);

    for (int i = 0; i < nfiles; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        check_model(path, files[i]);
        free(files[i]);
    }
    free(files);
    CHECKF(nfiles >= MIN_MODEL_FILES, "walked %d model JSON files in %s, expected at least %d", nfiles, dir,
           MIN_MODEL_FILES);
    printf("test_models: %d model files\n", nfiles);
    return check_done("test_models");
}
