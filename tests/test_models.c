/*
 * Every model recorded from timm in tests/data/models/<name>.json is built
 * here and compared with the record: state_dict names, shapes, dtypes and
 * param/buffer roles in order, param_count, the output shape of every
 * parameterised leaf layer (Conv2d, Conv2dSame, Linear, LayerNorm, LayerNorm2d,
 * BatchNorm2d, GroupNorm and their norm + act forms) matched to the node with the same module scope, and the
 * logits shape. The
 * training-mode graph (batch 2) must verify and keep the same state_dict.
 * The registry's cfg is the record's pretrained_cfg: the default tag, its
 * input size, mean, std, crop_pct, interpolation, first_conv and
 * classifier, and the test-time size and crop_pct validate.py uses.
 * Built for 1-channel images (ModelArgs.in_chans), each model's state_dict
 * and param_count are timm's create_model(name, in_chans=1)'s, recorded in
 * tests/data/models_in_chans1.json as the entries it changes.
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
        {"LayerNorm2d", "layer_norm"}, {"BatchNorm2d", "batch_norm"}, {"GroupNorm", "group_norm"},
        /* LeViT's over the flattened tokens */
        {"BatchNorm1d", "batch_norm"},
        /* timm's Conv2dSame (TF's SAME: a pad, then the conv) */
        {"Conv2dSame", "conv2d"},
        /* timm's norm + act modules: the output is the act's, the same
         * shape as the norm node with their scope. */
        {"BatchNormAct2d", "batch_norm"}, {"GroupNormAct", "group_norm"}, {"LayerNormAct2d", "layer_norm"},
        /* weight-standardised convs: the conv node beside their weight's group_norm */
        {"StdConv2d", "conv2d"}, {"ScaledStdConv2d", "conv2d"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(cls, map[i][0]) == 0)
            return map[i][1];
    return NULL;
}

static int check_state(const char *model, const Graph *g, const cJSON *sd)
{
    int nsd = cJSON_GetArraySize(sd), bad = 0;
    char b1[96], b2[96];
    /* the params and buffers; the build-time constants (timm's non-persistent buffers) are outside the state_dict */
    int nmodel = 0;
    while (nmodel < g->nstate && graph_value(g, g->state[nmodel])->role != CT_ROLE_CONST &&
           graph_value(g, g->state[nmodel])->role != CT_ROLE_STATE)
        nmodel++;
    for (int k = nmodel; k < g->nstate; k++)
        CHECKF(graph_value(g, g->state[k])->role == CT_ROLE_CONST || graph_value(g, g->state[k])->role == CT_ROLE_STATE,
               "%s: state entry %d is a %s after the state_dict", model, k, ct_role_name(graph_value(g, g->state[k])->role));
    CHECKF(nmodel == nsd, "%s: graph has %d state_dict entries, timm's state_dict %d", model, nmodel, nsd);
    int n = nmodel < nsd ? nmodel : nsd;
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
        /* a module timm's forward never calls (EVA's qkv Linear, whose weight F.linear reads) has no output */
        if (!op || cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(l, "out")) == 0)
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
        if ((strcmp(cls, "LayerNorm2d") == 0 || strcmp(cls, "LayerNormAct2d") == 0) && want.ndim == 4)
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
    /* the same state but for the RNG counter of a net that draws in training (RelPosMlp's dropout) */
    int ntrain = g.nstate;
    if (ntrain > 0 && graph_value(&g, g.state[ntrain - 1])->role == CT_ROLE_STATE)
        ntrain--;
    CHECKF(ntrain == eval->nstate, "%s: training graph has %d state entries, eval graph %d", model, ntrain,
           eval->nstate);
    int n = ntrain < eval->nstate ? ntrain : eval->nstate;
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
    /* a distilled model's classifier is the list of its two heads */
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(pc, "classifier");
    const char *cls = cJSON_GetStringValue(cJSON_IsArray(cl) ? cJSON_GetArrayItem(cl, 0) : cl);
    const char *cls_dist = cJSON_IsArray(cl) ? cJSON_GetStringValue(cJSON_GetArrayItem(cl, 1)) : NULL;
    const cJSON *crop = cJSON_GetObjectItemCaseSensitive(pc, "crop_pct");
    CHECKF(tag && c->tag && !strcmp(tag, c->tag), "%s: tag %s, timm's default %s", model, c->tag ? c->tag : "none",
           tag ? tag : "none");
    CHECKF(interp && !strcmp(interp, c->interpolation), "%s: interpolation %s", model, c->interpolation);
    CHECKF(cls && !strcmp(cls, c->classifier), "%s: classifier %s", model, c->classifier);
    CHECKF(cJSON_IsArray(cl) ? cJSON_GetArraySize(cl) == 2 && cls_dist && c->classifier_dist &&
                                   !strcmp(cls_dist, c->classifier_dist)
                             : !c->classifier_dist,
           "%s: second classifier %s", model, c->classifier_dist ? c->classifier_dist : "none");
    const char *first = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pc, "first_conv"));
    CHECKF(first && !strcmp(first, c->first_conv), "%s: first_conv %s, timm's %s", model, c->first_conv,
           first ? first : "none");
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

/* m built for rec's in_chans against timm's create_model(name, in_chans=N):
 * the record's state_dict sd with the shapes rec changes, rec's param_count
 * and first_conv. 0 when there is no record (a model recorded since the
 * fixture was made: tools/make_in_chans_fixture.py adds it), else 1. */
static int check_in_chans(const char *model, const ModelEntry *m, const cJSON *sd, const cJSON *rec, int in_chans)
{
    const cJSON *changed = cJSON_GetObjectItemCaseSensitive(rec, "changed");
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(rec, "param_count");
    const char *first = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "first_conv"));
    if (!rec) {
        printf("%s: no in_chans=%d record in models_in_chans1.json (tools/make_in_chans_fixture.py)\n", model,
               in_chans);
        return 0;
    }
    if (!cJSON_IsObject(changed) || !cJSON_IsNumber(pc) || !first) {
        MISMATCH("%s: the in_chans=%d record lacks changed, param_count or first_conv", model, in_chans);
        return 1;
    }
    cJSON *want = cJSON_Duplicate(sd, 1), *e;
    int found = 0;
    cJSON_ArrayForEach(e, want)
    {
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(
            changed, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name")));
        if (!shape)
            continue;
        found++;
        cJSON_ReplaceItemInObjectCaseSensitive(e, "shape", cJSON_Duplicate(shape, 1));
    }
    char label[160];
    snprintf(label, sizeof label, "%s in_chans=%d", model, in_chans);
    CHECKF(found == cJSON_GetArraySize(changed), "%s: %d of the changed entries are in its state_dict", label, found);
    CHECKF(!strcmp(first, m->cfg.first_conv), "%s: first_conv %s, timm's %s", label, m->cfg.first_conv, first);
    ModelSpec spec = {.batch_size = 1, .training = 0, .args = model_args_default()};
    spec.args.in_chans = in_chans;
    Graph g;
    CtErr err = {{0}};
    if (model_build(m, &spec, &g, &err) != 0) {
        MISMATCH("%s: build failed: %s", label, err.msg);
    } else {
        check_state(label, &g, want);
        CHECKF(graph_param_count(&g) == (int64_t)pc->valuedouble, "%s: param_count %lld, timm's %lld", label,
               (long long)graph_param_count(&g), (long long)pc->valuedouble);
        graph_free(&g);
    }
    cJSON_Delete(want);
    return 1;
}

/* *in_chans_checked counts the models checked against models_in_chans1.json too. */
static void check_model(const char *path, const char *file, const cJSON *in_chans, int *in_chans_checked)
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
    /* num_classes 0 (image-text and self-supervised weights): the model ends
     * in the features, what timm's Identity head passes on */
    const cJSON *l;
    if (ncls->valuedouble == 0)
        cJSON_ArrayForEach(l, layers)
        {
            const char *lname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(l, "name"));
            if (lname && !strcmp(lname, m->cfg.classifier))
                json_shape(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(l, "out"), 0), &want_out);
        }
    char b1[96], b2[96];
    if (g.noutputs != 1)
        MISMATCH("%s: graph has %d outputs, expected 1", model, g.noutputs);
    else
        CHECKF(shape_equal(&graph_value(&g, g.outputs[0])->type.shape, &want_out), "%s: output %s, expected %s",
               model, sstr(&graph_value(&g, g.outputs[0])->type.shape, b1, sizeof b1),
               sstr(&want_out, b2, sizeof b2));

    check_training(model, m, &g);
    int chans = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(in_chans, "in_chans"));
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(in_chans, "models"), model);
    *in_chans_checked += check_in_chans(model, m, sd, rec, chans);

    if (check_failures == before)
        printf("%s: %d state entries, %lld params, %d layers checked ok\n", model, g.nstate, (long long)got_pc,
               nlayers);
    else
        printf("%s: FAILED (%d state/layer mismatches, %d check(s) failed)\n", model, bad,
               check_failures - before);
    graph_free(&g);
    cJSON_Delete(root);
}

/* train.py's --bn-momentum/--bn-eps (the bn_momentum, bn_eps model kwargs):
 * every batch norm of the EfficientNet builder's models takes them, as
 * timm's resolve_bn_args gives them to the builder's norm layer; a model
 * whose class takes no such kwarg is refused by name, as timm's TypeError. */
static void test_bn_args(void)
{
    const char *const names[] = {"mixnet_s", "mobilenetv3_small_100", "tf_efficientnet_b0"};
    for (int k = 0; k < 3; k++) {
        const ModelEntry *m = model_find(names[k]);
        CHECKF(m != NULL, "%s not in the registry", names[k]);
        if (!m)
            continue;
        ModelSpec spec = {.training = 1, .args = model_args_default()};
        spec.args.opt.set = MODEL_OPT_BN_MOMENTUM | MODEL_OPT_BN_EPS;
        spec.args.opt.bn_momentum = 0.05;
        spec.args.opt.bn_eps = 0.01;
        Graph g;
        CtErr err;
        if (model_build(m, &spec, &g, &err)) {
            CHECKF(0, "%s: %s", names[k], err.msg);
            continue;
        }
        int bns = 0, off = 0;
        for (int i = 0; i < g.nnodes; i++)
            if (g.nodes[i].op == CT_OP_batch_norm) {
                bns++;
                off += g.nodes[i].fattr[0] != 0.05 || g.nodes[i].fattr[1] != 0.01;
            }
        CHECKF(bns > 10 && off == 0, "%s: %d of %d batch norms without bn_momentum 0.05, bn_eps 0.01", names[k], off,
               bns);
        graph_free(&g);
    }
    ModelSpec spec = {.training = 1, .args = model_args_default()};
    spec.args.opt.set = MODEL_OPT_BN_EPS;
    spec.args.opt.bn_eps = 0.01;
    Graph g;
    CtErr err;
    CHECK(model_build(model_find("resnet18"), &spec, &g, &err) != 0 && strstr(err.msg, "takes no option 'bn_eps'"));
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void)
{
    const char *data = getenv("CTIMM_TEST_DATA");
    if (!data)
        data = "tests/data";
    char dir[1024];
    test_bn_args();
    snprintf(dir, sizeof dir, "%s/models_in_chans1.json", data);
    char *text = test_read_text(dir);
    cJSON *in_chans = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECKF(in_chans != NULL, "cannot read %s as JSON", dir);
    snprintf(dir, sizeof dir, "%s/models", data);
    DIR *d = opendir(dir);
    if (!d) {
        MISMATCH("cannot open %s (set CTIMM_TEST_DATA)", dir);
        cJSON_Delete(in_chans);
        return check_done("test_models");
    }
    char **files = NULL;
    int in_chans_checked = 0;
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
        check_model(path, files[i], in_chans, &in_chans_checked);
        free(files[i]);
    }
    free(files);
    int records = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(in_chans, "models"));
    CHECKF(in_chans_checked == records && records >= MIN_MODEL_FILES,
           "%d models checked against models_in_chans1.json's %d records", in_chans_checked, records);
    cJSON_Delete(in_chans);
    CHECKF(nfiles >= MIN_MODEL_FILES, "walked %d model JSON files in %s, expected at least %d", nfiles, dir,
           MIN_MODEL_FILES);
    printf("test_models: %d model files\n", nfiles);
    return check_done("test_models");
}
