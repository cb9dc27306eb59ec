/*
 * Pretrained weights (train/pretrained.h): the Hugging Face cache's layout
 * (train/hub_cache.h) in a hand-made cache, config.json's data config, the
 * adaptations on load (a new classifier, a resampled ViT pos_embed, no
 * num_batches_tracked) on test_resnet and test_vit, and the resampling
 * against torch's own numbers.
 *
 * With a folder argument (tools/make_pretrained_cache.py's output; CTest
 * pretrained_timm) it also compares with timm: the eval logits of the
 * cached weights, and the state timm's create_model(pretrained=True,
 * num_classes=K, img_size=I) loads, tensor by tensor.
 */
#include <stdarg.h>
#include <sys/time.h>

#include "models/registry.h"
#include "runtime/backend.h"
#include "runtime/safetensors.h"
#include "runtime/state.h"
#include "runtime/tensor.h"
#include "tests/check.h"
#include "train/eval_data.h"
#include "train/hub_cache.h"
#include "train/pos_embed.h"
#include "train/pretrained.h"

/* torch 1.13: timm.layers.resample_abs_pos_embed(pe, new_size, num_prefix_tokens=1) (its defaults:
 * bicubic, antialias=True) of pe [1, 17, 3], pe[0, t, c] = ((t*3 + c)*7 % 11)/5 - 1 + 0.1c: the grid
 * tokens of the result (its class token is pe's). Plain bicubic (antialias=False) differs by up to
 * 0.11 (6x6), 0.26 (3x5) and 0.38 (2x2); align_corners=True by up to 0.31, 0.51, 0.97. */
static const float torch_6x6[] = {
    1.0657893, 0.36578935, -0.47894719, 0.97027862, 0.27027854, -0.57445806, 0.81929821, 0.12097333, -0.75257683,
    0.68596476, -0.0056592873, -0.99446237, 0.53498447, -0.24164084, 0.23157899, 0.43947357, -0.41478515, 1.3937328,
    0.68374616, -0.14566566, 0.31904021, 0.58823538, -0.24117647, 0.22352946, 0.43875277, -0.40563741, 0.059068508,
    0.31141067, -0.59289211, -0.12818623, 0.084429078, -0.059861585, 0.40484434, -0.08049538, 0.46934998,
    0.93405592, 0.054361362, -0.35536069, 1.0071396, -0.041149464, -0.4508715, 0.91312671, -0.19548959,
    -0.62572366, 0.75905693, -0.3422617, -0.85454267, 0.6122846, -0.32276699, 0.20574634, 0.38197157, -0.26257917,
    1.2165148, 0.21966961, -0.58082354, 0.78167653, 0.37195393, -0.67633438, 0.68616563, 0.28393221, -0.85118651,
    0.5318256, 0.11043254, -1.0800054, 0.38505355, -0.11838684, -0.019716673, 0.4045479, -0.30713508, 0.99105173,
    0.46473539, -0.40881449, 0.10727552, 0.57198149, -0.2574304, 0.011764708, 0.47647059, -0.42145336, -0.15269625,
    0.32698807, -0.36372554, -0.33995089, 0.19964592, 0.38725501, 0.19307961, -0.027335636, 0.44498277, 0.72229117,
    -0.19226009, 0.28095976, 0.9052633, 0.060526211, -0.63947386, 0.80975258, -0.034984596, -0.87291038, 0.6604473,
    -0.185965, -0.60372818, 0.53381467, -0.31929839, 1.0432022, 0.29783285, -0.47027877, 1.3123841, 0.12468824,
    -0.56578958, 1.0789475};
static const float torch_3x5[] = {
    0.85670877, 0.030850668, 0.00041581746, 0.71843785, -0.10742026, -0.1378551, 0.55592108, -0.31965101,
    -0.41175628, 0.34234881, -0.26026651, -0.01376714, 0.10809717, 0.11207973, 1.1110678, -0.26878873, 0.20865381,
    0.68609637, -0.40705964, 0.070382923, 0.55334359, -0.65103269, -0.17359017, 0.34356144, -0.4173654, 0.060077131,
    0.10236394, 0.34229323, 0.81973571, -0.089447267, 0.41689196, 0.38645688, -0.43940106, 0.27862102, 0.24818596,
    -0.69569182, 0.066390321, 0.085669138, 0.080091678, 0.12577471, -0.12790304, 0.85587519, 0.49812081,
    -0.36215451, 0.59958434};
static const float torch_2x2[] = {0.32160029, -0.14248686, 0.15984222,  0.087039821, -0.0074004522, 0.2266341,
                                  -0.076371185, 0.26044324, -0.079676956, 0.05871525, 0.025882803, 0.35676184};

/* torch's float32 kernel sums in another order than pos_embed.c's double: 2e-6 apart at most. */
#define RESAMPLE_TOL 1e-5

static void test_resample_vs_torch(void)
{
    enum { D = 3, N = 17 };
    float pe[N * D];
    for (int t = 0; t < N; t++)
        for (int c = 0; c < D; c++)
            pe[t * D + c] = (float)(((t * D + c) * 7 % 11) / 5.0 - 1.0 + 0.1 * c);
    const struct { int h, w; const float *want; } cases[] = {{6, 6, torch_6x6}, {3, 5, torch_3x5}, {2, 2, torch_2x2}};
    for (int k = 0; k < 3; k++) {
        int h = cases[k].h, w = cases[k].w;
        float out[(1 + 36) * D];
        pos_embed_resample(pe, 1, 4, 4, h, w, D, out);
        for (int c = 0; c < D; c++)
            CHECKF(out[c] == pe[c], "%dx%d: the class token is kept", h, w);
        double worst = 0;
        for (int i = 0; i < h * w * D; i++)
            worst = fmax(worst, fabs(out[D + i] - cases[k].want[i]));
        CHECKF(worst <= RESAMPLE_TOL, "4x4 -> %dx%d: %.3g from torch's", h, w, worst);
    }
    /* the same grid comes back unchanged */
    float same[N * D];
    pos_embed_resample(pe, 1, 4, 4, 4, 4, D, same);
    CHECK(memcmp(same, pe, sizeof pe) == 0);
}

/* torch 1.13: timm.layers.pos_embed_rel.resize_rel_pos_bias_table of src [25 + 3, 1] (a window of
 * 3x3, the 5x5 offsets then BEiT's three class-token rows), src[t] = ((t*2)*7 % 11)/5 - 1, to the
 * window 5x5 ([81 + 3, 1]); and of its first 25 rows as MaxViT's TF table [1, 5, 5] to [1, 9, 7]. */
static const float torch_rel_flat[] = {
    -1, -1, -0.80000025, -0.40000001, 0.2, 0.80000001, -0.26666734, -0.80000001, -0.80000001, -1, -1,
    -0.80000031, -0.40000004, 0.2, 0.80000001, -0.26666737, -0.80000001, -0.80000001, -0.73333371, -0.73333371,
    -0.5333339, -0.13333367, 0.46666631, 0.33333394, -0.24444485, -0.53333366, -0.53333372, -0.2, -0.20000002,
    -2.5166437e-07, 0.40000001, 1, -0.60000002, -0.19999976, 0, 0, 0.60000002, 0.60000002, 0.066667363, -1,
    -0.40000001, 0.2, 0.60000026, 0.80000001, 0.80000001, -0.80000001, -0.80000001, -0.60000026, -0.2,
    0.40000001, 1, -0.066667363, -0.60000002, -0.60000002, -0.26666632, -0.26666632, -0.066666566, 0.33333367,
    -0.5333339, 0.066666067, -0.022222249, -0.066666335, -0.066666327, 0, 0, 0.19999976, 0.60000002, -1,
    -0.40000001, 2.5828695e-07, 0.2, 0.2, 0, 0, 0.19999975, 0.60000002, -1, -0.40000001, 2.516642e-07, 0.2, 0.2,
    0.80000001, -0.80000001, -0.2};
static const float torch_rel_tf[] = {
    -1, -0.80000025, -0.40000001, 0.2, 0.80000001, -0.26666734, -0.80000001, -1, -0.80000031, -0.40000004, 0.2,
    0.80000001, -0.26666737, -0.80000001, -0.73333371, -0.5333339, -0.13333367, 0.46666631, 0.33333394,
    -0.24444485, -0.53333366, -0.20000002, -2.5166437e-07, 0.40000001, 1, -0.60000002, -0.19999976, 0,
    0.60000002, 0.066667363, -1, -0.40000001, 0.2, 0.60000026, 0.80000001, -0.80000001, -0.60000026, -0.2,
    0.40000001, 1, -0.066667363, -0.60000002, -0.26666632, -0.066666566, 0.33333367, -0.5333339, 0.066666067,
    -0.022222249, -0.066666335, 0, 0.19999976, 0.60000002, -1, -0.40000001, 2.5828695e-07, 0.2, 0, 0.19999975,
    0.60000002, -1, -0.40000001, 2.516642e-07, 0.2};

static void test_rel_pos_resize_vs_torch(void)
{
    float src[28], flat[84], tf[63];
    for (int t = 0; t < 28; t++)
        src[t] = (float)((t * 2 * 7 % 11) / 5.0 - 1.0);
    rel_pos_table_resize(src, 5, 5, 1, 1, 3, 9, 9, flat);
    rel_pos_table_resize(src, 5, 5, 1, 0, 0, 9, 7, tf);
    double worst = 0;
    for (int i = 0; i < 84; i++)
        worst = fmax(worst, fabs(flat[i] - torch_rel_flat[i]));
    for (int i = 0; i < 63; i++)
        worst = fmax(worst, fabs(tf[i] - torch_rel_tf[i]));
    /* torch's float32 grid against the double one here: 3e-7 apart */
    CHECKF(worst <= RESAMPLE_TOL, "relative position tables: %.3g from torch's", worst);
}

/* mkdir -p of a printf path; the path in buf. */
static const char *mkdirs(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *mkdirs(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0755);
            *p = '/';
        }
    mkdir(buf, 0755);
    return buf;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* A state of model name (its default classes, size and input channels when <= 0) from seed. */
static const ModelEntry *make_state(const char *name, int classes, int img, int chans, uint64_t seed, CtState *s)
{
    const ModelEntry *m = model_find(name);
    CT_ASSERT(m != NULL);
    ModelSpec spec = {.batch_size = 1, .args = model_args_default()};
    spec.args.num_classes = classes > 0 ? classes : -1;
    spec.args.img_size = img;
    spec.args.in_chans = chans;
    Graph g;
    CtErr err;
    CT_ASSERT(model_build(m, &spec, &g, &err) == 0);
    state_create(s, &g);
    state_init(s, seed);
    graph_free(&g);
    return m;
}

/* s's params and buffers as a hub file does them: without num_batches_tracked
 * and without `drop` (NULL: nothing more). */
static void save_hub_weights(const CtState *s, const char *path, const char *drop)
{
    StTensor *t = calloc((size_t)s->n, sizeof *t);
    CT_ASSERT(t != NULL);
    int n = 0;
    for (int i = 0; i < s->n; i++) {
        const StateEntry *e = &s->e[i];
        /* the hub's files hold no non-persistent buffers (timm's attention_bias_idxs) */
        if (e->role == CT_ROLE_STATE || e->role == CT_ROLE_CONST || strstr(e->name, "num_batches_tracked") ||
            (drop && !strcmp(e->name, drop)))
            continue;
        t[n] = (StTensor){.name = e->name, .dtype = e->type.dtype, .ndim = e->type.shape.ndim,
                          .nbytes = (size_t)shape_numel(&e->type.shape) * ct_dtype_size(e->type.dtype),
                          .data = state_data(s, i)};
        memcpy(t[n].shape, e->type.shape.d, sizeof(int64_t) * (size_t)e->type.shape.ndim);
        n++;
    }
    CtErr err;
    CHECKF(st_write(path, t, n, NULL, NULL, 0, &err) == 0, "%s", err.msg);
    free(t);
}

static size_t entry_bytes(const CtState *s, int i)
{
    return (size_t)shape_numel(&s->e[i].type.shape) * ct_dtype_size(s->e[i].type.dtype);
}

/* Entry `name` of a and b hold the same bytes. */
static int same_entry(const CtState *a, const CtState *b, const char *name)
{
    int i = state_find(a, name), j = state_find(b, name);
    CT_ASSERT(i >= 0 && j >= 0);
    return entry_bytes(a, i) == entry_bytes(b, j) && !memcmp(state_data(a, i), state_data(b, j), entry_bytes(a, i));
}

static const char *tmp_root;

static void clear_env(void)
{
    const char *vars[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"};
    for (int k = 0; k < 4; k++)
        unsetenv(vars[k]);
}

/* huggingface_hub's choice of cache folder, each variable over the next. */
static void test_cache_folder(void)
{
    char want[1100];
    HubFiles h;
    CtErr err;
    clear_env();
    setenv("HOME", tmp_root, 1);
    const struct { const char *var, *val, *dir, *from; } steps[] = {
        {NULL, NULL, "%s/.cache/huggingface/hub", "the default: $HF_HUB_CACHE or $HF_HOME set another"},
        {"XDG_CACHE_HOME", "%s/xdg", "%s/xdg/huggingface/hub", "$XDG_CACHE_HOME/huggingface/hub"},
        {"HF_HOME", "%s/hf", "%s/hf/hub", "$HF_HOME/hub"},
        {"HUGGINGFACE_HUB_CACHE", "%s/legacy", "%s/legacy", "$HUGGINGFACE_HUB_CACHE"},
        {"HF_HUB_CACHE", "~/hub", "%s/hub", "$HF_HUB_CACHE"},
    };
    for (size_t k = 0; k < sizeof steps / sizeof *steps; k++) {
        char val[1100];
        if (steps[k].var) {
            snprintf(val, sizeof val, steps[k].val, tmp_root);
            setenv(steps[k].var, val, 1);
        }
        snprintf(want, sizeof want, steps[k].dir, tmp_root);
        CHECK(hub_find("timm/test_resnet.r160_in1k", &h, &err) != 0);
        CHECKF(!strcmp(h.cache, want) && !strcmp(h.cache_from, steps[k].from), "%s (%s), wanted %s (%s)", h.cache,
               h.cache_from, want, steps[k].from);
    }
    setenv("HF_HUB_CACHE", "", 1); /* empty is unset */
    snprintf(want, sizeof want, "%s/legacy", tmp_root);
    hub_find("timm/test_resnet.r160_in1k", &h, &err);
    CHECKF(!strcmp(h.cache, want), "%s", h.cache);
    clear_env();
}

/* The repo folder's revision: refs/main's, else the newest snapshot; what
 * is missing said with the download command. */
static void test_snapshots(void)
{
    char hub[1100], repo[1200], dir[1300], path[1400];
    snprintf(hub, sizeof hub, "%s/hub", tmp_root);
    setenv("HF_HUB_CACHE", hub, 1);
    HubFiles h;
    CtErr err = {{0}};
    const char *id = "timm/test_resnet.r160_in1k";
    CHECK(hub_find(id, &h, &err) != 0);
    CHECKF(strstr(err.msg, "it has no models--timm--test_resnet.r160_in1k.") &&
               strstr(err.msg, "`huggingface-cli download timm/test_resnet.r160_in1k`") && strstr(err.msg, hub),
           "%s", err.msg);
    mkdirs(repo, sizeof repo, "%s/models--timm--test_resnet.r160_in1k/snapshots", hub);
    CHECK(hub_find(id, &h, &err) != 0);
    CHECKF(strstr(err.msg, "no snapshot under"), "%s", err.msg);
    mkdirs(dir, sizeof dir, "%s/aaa", repo);
    CHECK(hub_find(id, &h, &err) != 0);
    CHECKF(strstr(err.msg, "no model.safetensors (nor pytorch_model.bin) in its "
                          "models--timm--test_resnet.r160_in1k/snapshots/aaa."),
           "%s", err.msg);
    /* a snapshot's files are links into blobs/, as huggingface_hub makes them */
    mkdirs(path, sizeof path, "%s/../blobs", repo);
    snprintf(path, sizeof path, "%s/../blobs/1234", repo);
    write_text(path, "weights");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(symlink("../../blobs/1234", path) == 0);
    CHECKF(hub_find(id, &h, &err) == 0, "%s", err.msg);
    CHECK(strstr(h.weights, "/snapshots/aaa/model.safetensors") && !h.config[0]);
    /* two snapshots: the newest, unless refs/main names one */
    mkdirs(dir, sizeof dir, "%s/bbb", repo);
    snprintf(path, sizeof path, "%s/pytorch_model.bin", dir);
    write_text(path, "weights");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{}");
    struct timeval old[2] = {{1000000000, 0}, {1000000000, 0}};
    snprintf(path, sizeof path, "%s/aaa", repo);
    utimes(path, old);
    CHECKF(hub_find(id, &h, &err) == 0, "%s", err.msg);
    CHECKF(strstr(h.weights, "/snapshots/bbb/pytorch_model.bin") && strstr(h.config, "/snapshots/bbb/config.json"),
           "%s", h.weights);
    mkdirs(path, sizeof path, "%s/../refs", repo);
    snprintf(path, sizeof path, "%s/../refs/main", repo);
    write_text(path, "aaa\n");
    CHECKF(hub_find(id, &h, &err) == 0 && strstr(h.weights, "/snapshots/aaa/model.safetensors"), "%s", h.weights);
    write_text(path, "ccc");
    CHECK(hub_find(id, &h, &err) != 0);
    CHECKF(strstr(err.msg, "refs/main names revision ccc") && strstr(err.msg, "/snapshots/ccc is missing"), "%s",
           err.msg);
    snprintf(path, sizeof path, "%s/models--timm--test_resnet.r160_in1k", hub);
    test_rm_tree(path);
}

/* A hand-made cache of model's weights (from state s) and config.json, in
 * the snapshot refs/main names; the weights' path in path. */
static void make_cache(const char *model_tag, const CtState *s, const char *config, const char *drop, char *path,
                       size_t n)
{
    char snap[1200], p[1300];
    mkdirs(snap, sizeof snap, "%s/hub/models--timm--%s/snapshots/r1", tmp_root, model_tag);
    snprintf(p, sizeof p, "%s/../../refs", snap);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/../../refs/main", snap);
    write_text(p, "r1");
    snprintf(p, sizeof p, "%s/config.json", snap);
    if (config)
        write_text(p, config);
    else
        unlink(p);
    snprintf(path, n, "%s/model.safetensors", snap);
    save_hub_weights(s, path, drop);
}

#define RESNET_CONFIG(extra)                                                                                    \
    "{\"architecture\": \"test_resnet\", \"num_classes\": 1000, \"pretrained_cfg\": {\"tag\": \"r160_in1k\", " \
    "\"input_size\": [3, 128, 128], \"interpolation\": \"bicubic\", \"crop_pct\": 0.875, \"crop_mode\": "     \
    "\"squash\", \"mean\": [0.1, 0.2, 0.3], \"std\": [0.4, 0.5, 0.6], \"num_classes\": 1000, \"classifier\": " \
    "\"fc\"" extra "}}"

/* Names and tags, and config.json's data config over the registry's. */
static void test_resolve(void)
{
    char hub[1100], weights[1400];
    snprintf(hub, sizeof hub, "%s/hub", tmp_root);
    setenv("HF_HUB_CACHE", hub, 1);
    const ModelEntry *m = model_find("test_resnet");
    CtState src;
    make_state("test_resnet", 0, 0, 0, 1, &src);
    Pretrained p;
    CtErr err = {{0}};
    CHECKF(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_NONE, NULL, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(p.m.cfg.tag, "r160_in1k") && p.m.cfg.crop_pct == m->cfg.crop_pct);
    CHECK(pretrained_resolve(&p, m, "test_resnet.r160_in1k", PRETRAINED_NONE, NULL, &err) == 0);
    CHECK(pretrained_resolve(&p, m, "test_resnet.a1_in1k", PRETRAINED_NONE, NULL, &err) != 0);
    CHECKF(strstr(err.msg, "add --pretrained"), "%s", err.msg);
    CHECK(pretrained_resolve(&p, m, "test_resnet.", PRETRAINED_HUB, NULL, &err) != 0);
    CHECK(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_HUB, NULL, &err) != 0);
    CHECKF(strstr(err.msg, "--pretrained: timm/test_resnet.r160_in1k is not in the Hugging Face cache"), "%s",
           err.msg);
    make_cache("test_resnet.r160_in1k", &src, RESNET_CONFIG(", \"test_input_size\": [3, 144, 144], \"test_crop_pct\": 1.0"),
               NULL, weights, sizeof weights);
    CHECKF(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_HUB, NULL, &err) == 0, "%s", err.msg);
    const ModelCfg *c = &p.m.cfg;
    CHECK(!strcmp(p.weights, weights) && !strcmp(p.repo, "timm/test_resnet.r160_in1k"));
    CHECK(c->input_size[1] == 128 && c->input_size[2] == 128 && c->crop_pct == 0.875);
    CHECK(!strcmp(c->interpolation, "bicubic") && !strcmp(c->crop_mode, "squash") && !strcmp(c->classifier, "fc"));
    CHECK(c->mean[2] == 0.3 && c->std[0] == 0.4 && c->num_classes == 1000);
    CHECK(c->test_input_size == 144 && c->test_crop_pct == 1);
    CHECK(m->cfg.input_size[1] == 160 && !strcmp(m->cfg.interpolation, "bilinear")); /* the registry's as it was */
    /* eval_config takes them as its defaults: flags still win */
    EvalOpts o = {.crop_pct = -1};
    EvalTransform et;
    int img, chans;
    double mean[4], std[4];
    CHECK(eval_config(&p.m, &o, &img, &chans, &et, mean, std, &err) == 0 && img == 128 && et.crop_pct == 0.875 &&
          et.interp == CT_INTERP_BICUBIC && et.crop_mode == CT_CROP_SQUASH && mean[1] == 0.2 && std[2] == 0.6);
    o.img_size = 96;
    o.crop_pct = 1;
    CHECK(eval_config(&p.m, &o, &img, &chans, &et, mean, std, &err) == 0 && img == 96 && et.crop_pct == 1);
    /* validate.py's test-time size and crop (resnet50.a1_in1k's 288 and 1.0), unless flags or
     * --use-train-size say otherwise */
    const ModelEntry *r50 = model_find("resnet50");
    EvalOpts v = {.crop_pct = -1, .use_test_size = 1};
    CHECK(eval_config(r50, &v, &img, &chans, &et, mean, std, &err) == 0 && img == 288 && et.crop_pct == 1);
    v.use_test_size = 0;
    CHECK(eval_config(r50, &v, &img, &chans, &et, mean, std, &err) == 0 && img == 224 && et.crop_pct == 0.95);
    v = (EvalOpts){.crop_pct = 0.9, .img_size = 256, .use_test_size = 1};
    CHECK(eval_config(r50, &v, &img, &chans, &et, mean, std, &err) == 0 && img == 256 && et.crop_pct == 0.9);
    /* --in-chans 1: gray images normalised by the mean of the cfg's three (timm's prefetcher), or by one
     * value; three values for one channel, and the border crop's 3-value fill, are refused */
    o = (EvalOpts){.crop_pct = -1, .in_chans = 1};
    CHECK(eval_config(&p.m, &o, &img, &chans, &et, mean, std, &err) == 0 && chans == 1 && et.mode == CT_IMG_L &&
          mean[0] == (0.1 + 0.2 + 0.3) / 3 && std[0] == (0.4 + 0.5 + 0.6) / 3);
    o.n_mean = 1;
    o.mean[0] = 0.25;
    CHECK(eval_config(&p.m, &o, &img, &chans, &et, mean, std, &err) == 0 && mean[0] == 0.25);
    o.n_mean = 3;
    CHECK(eval_config(&p.m, &o, &img, &chans, &et, mean, std, &err) != 0 &&
          strstr(err.msg, "--mean takes 1 value for 1-channel images, got 3"));
    o = (EvalOpts){.crop_pct = -1, .n_input_size = 3, .input_size = {1, 64, 64}, .crop_mode = "border"};
    CHECKF(eval_config(&p.m, &o, &img, &chans, &et, mean, std, &err) != 0 && strstr(err.msg, "'border' on gray"),
           "%s", err.msg);
    o.crop_mode = NULL;
    CHECK(eval_config(&p.m, &o, &img, &chans, &et, mean, std, &err) == 0 && chans == 1 && img == 64);
    /* config.json refusals name the field */
    const struct { const char *json, *says; } bad[] = {
        {"{\"architecture\": \"test_vit\"}", "is the config of a test_vit, not of test_resnet"},
        {"{\"pretrained_cfg\": {\"input_size\": [1, 128, 128]}}", "input_size is not [3, N, N]"},
        {"{\"pretrained_cfg\": {\"mean\": [0.5]}}", "mean is not 3 numbers"},
        {"{\"pretrained_cfg\": {\"std\": [0.5, 0, 0.5]}}", "std is not 3 numbers above 0"},
        {"{\"pretrained_cfg\": {\"num_classes\": 2.5}}", "num_classes is not a class count"},
        {"{\"pretrained_cfg\": {\"test_input_size\": [3, 10, 12]}}", "test_input_size is not [3, N, N]"},
        {"{\"pretrained_cfg\": {\"interpolation\": 3}}", "interpolation is not a name"},
        {"[1, 2]", "is not a JSON object"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        make_cache("test_resnet.r160_in1k", &src, bad[k].json, NULL, weights, sizeof weights);
        CHECK(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_HUB, NULL, &err) != 0);
        CHECKF(strstr(err.msg, bad[k].says) && strstr(err.msg, "config.json"), "%s", err.msg);
    }
    /* another tag needs its config.json; the default one does not */
    make_cache("test_resnet.r160_in1k", &src, NULL, NULL, weights, sizeof weights);
    CHECKF(pretrained_resolve(&p, m, "test_resnet.r160_in1k", PRETRAINED_HUB, NULL, &err) == 0, "%s", err.msg);
    CHECK(p.m.cfg.input_size[1] == 160 && !p.config[0]);
    make_cache("test_resnet.other_tag", &src, NULL, NULL, weights, sizeof weights);
    CHECK(pretrained_resolve(&p, m, "test_resnet.other_tag", PRETRAINED_HUB, NULL, &err) != 0);
    CHECKF(strstr(err.msg, "has no config.json"), "%s", err.msg);
    CHECK(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_FILE, "/nonexistent/w.pth", &err) != 0);
    CHECKF(strstr(err.msg, "--pretrained-path /nonexistent/w.pth"), "%s", err.msg);
    state_free(&src);
}

/* load_pretrained's classifier rule, num_batches_tracked left out, and what
 * a file that lacks a tensor says. */
static void test_load_resnet(void)
{
    char weights[1400];
    CtErr err = {{0}};
    CtState src, dst, fresh;
    const ModelEntry *m = make_state("test_resnet", 0, 0, 0, 1, &src);
    make_cache("test_resnet.r160_in1k", &src, RESNET_CONFIG(""), NULL, weights, sizeof weights);
    Pretrained p;
    for (int classes = 1000; classes >= 10; classes -= 990) {
        CHECK(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_HUB, NULL, &err) == 0);
        make_state("test_resnet", classes, 0, 0, 5, &dst);
        make_state("test_resnet", classes, 0, 0, 5, &fresh);
        int nbt = state_find(&dst, "bn1.num_batches_tracked");
        *(int64_t *)state_data(&dst, nbt) = 3; /* left as it is, as torch's BatchNorm does */
        CHECKF(pretrained_load(&p, &dst, classes, &err) == 0, "%s", err.msg);
        CHECK(*(int64_t *)state_data(&dst, nbt) == 3);
        for (int i = 0; i < dst.n; i++) {
            const char *n = dst.e[i].name;
            if (strstr(n, "num_batches_tracked"))
                continue;
            int head = !strncmp(n, "fc.", 3);
            CHECKF(same_entry(&dst, head && classes != 1000 ? &fresh : &src, n), "%d classes: %s", classes, n);
        }
        CHECKF(p.nlog == (classes == 1000 ? 1 : 2) && strstr(p.log[0], "Loading pretrained weights from Hugging Face "
                                                                         "hub (timm/test_resnet.r160_in1k)"),
               "%s", p.log[0]);
        if (classes != 1000)
            CHECKF(!strcmp(p.log[1], "Re-initialised the classifier (fc.weight, fc.bias) for 10 classes: the "
                                     "pretrained weights are for 1000"), "%s", p.log[1]);
        state_free(&dst);
        state_free(&fresh);
    }
    /* train.py's --pretrained-path: a new classifier whatever the class count */
    CHECK(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_FILE, weights, &err) == 0);
    make_state("test_resnet", 0, 0, 0, 5, &dst);
    make_state("test_resnet", 0, 0, 0, 5, &fresh);
    CHECKF(pretrained_load(&p, &dst, 1000, &err) == 0, "%s", err.msg);
    CHECK(same_entry(&dst, &fresh, "fc.weight") && same_entry(&dst, &src, "layer4.0.conv2.weight"));
    CHECKF(p.nlog == 2 && strstr(p.log[1], "as train.py's --pretrained-path always does"), "%s", p.log[1]);
    /* a tensor missing, or of another shape, is named */
    make_cache("test_resnet.r160_in1k", &src, RESNET_CONFIG(""), "layer2.0.conv1.weight", weights, sizeof weights);
    CHECK(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_HUB, NULL, &err) == 0);
    CHECK(pretrained_load(&p, &dst, 1000, &err) != 0);
    CHECKF(strstr(err.msg, "'layer2.0.conv1.weight' is missing from the file") && strstr(err.msg, weights), "%s",
           err.msg);
    state_free(&dst);
    state_free(&fresh);
    state_free(&src);
}


/* A distilled model's two heads (timm's classifier tuple): both are new for
 * another class count, the rest is the file's. */
static void test_load_levit(void)
{
    char weights[1400];
    CtErr err = {{0}};
    CtState src, dst, fresh;
    const ModelEntry *m = make_state("levit_128s", 0, 48, 0, 1, &src);
    make_cache("levit_128s.fb_dist_in1k", &src, NULL, NULL, weights, sizeof weights);
    Pretrained p;
    CHECK(pretrained_resolve(&p, m, "levit_128s", PRETRAINED_HUB, NULL, &err) == 0);
    make_state("levit_128s", 10, 48, 0, 5, &dst);
    make_state("levit_128s", 10, 48, 0, 5, &fresh);
    CHECKF(pretrained_load(&p, &dst, 10, &err) == 0, "%s", err.msg);
    for (int i = 0; i < dst.n; i++) {
        const char *n = dst.e[i].name;
        int head = !strncmp(n, "head.linear.", 12) || !strncmp(n, "head_dist.linear.", 17);
        CHECKF(same_entry(&dst, head ? &fresh : &src, n), "%s", n);
    }
    CHECKF(p.nlog == 2 && !strcmp(p.log[1], "Re-initialised the classifier (head.linear.weight, head.linear.bias, "
                                            "head_dist.linear.weight, head_dist.linear.bias) for 10 classes: the "
                                            "pretrained weights are for 1000"),
           "%s", p.log[1]);
    state_free(&dst);
    state_free(&fresh);
    state_free(&src);
}
/* A ViT at another image size: pos_embed resampled from the cfg's grid,
 * the class token's row kept; the rest as in the file. */
static void test_load_vit(void)
{
    char weights[1400];
    CtErr err = {{0}};
    CtState src, dst, fresh;
    const ModelEntry *m = make_state("test_vit", 0, 0, 0, 2, &src);
    make_cache("test_vit.r160_in1k", &src, NULL, NULL, weights, sizeof weights);
    Pretrained p;
    CHECK(pretrained_resolve(&p, m, "test_vit", PRETRAINED_HUB, NULL, &err) == 0);
    make_state("test_vit", 7, 96, 0, 3, &dst);
    make_state("test_vit", 7, 96, 0, 3, &fresh);
    CHECKF(pretrained_load(&p, &dst, 7, &err) == 0, "%s", err.msg);
    int i = state_find(&dst, "pos_embed"), j = state_find(&src, "pos_embed");
    CHECK(dst.e[i].type.shape.d[1] == 37 && src.e[j].type.shape.d[1] == 101);
    float want[37 * 64];
    pos_embed_resample(state_data(&src, j), 1, 10, 10, 6, 6, 64, want);
    CHECK(!memcmp(want, state_data(&dst, i), sizeof want) && !memcmp(want, state_data(&src, j), 64 * sizeof(float)));
    CHECK(same_entry(&dst, &src, "cls_token") && same_entry(&dst, &src, "blocks.5.mlp.fc2.weight"));
    CHECK(same_entry(&dst, &fresh, "head.weight") && same_entry(&dst, &fresh, "head.bias"));
    CHECKF(p.nlog == 3 && !strcmp(p.log[2], "Resized position embedding: (10, 10) to (6, 6)."), "%d %s", p.nlog,
           p.log[p.nlog - 1]);
    /* the same size loads as it is */
    state_free(&dst);
    make_state("test_vit", 0, 0, 0, 3, &dst);
    CHECK(pretrained_load(&p, &dst, 1000, &err) == 0 && p.nlog == 1 && same_entry(&dst, &src, "pos_embed"));
    state_free(&dst);
    state_free(&fresh);
    state_free(&src);
}

/* test_maxvit at 96 px: its windows of 3 (5x5 offsets) from the file's 5
 * (9x9), every relative position bias table resized as timm's
 * checkpoint_filter_fn does; the rest as in the file. */
static void test_load_rel_pos_tables(void)
{
    char weights[1400];
    CtErr err = {{0}};
    CtState src, dst;
    const ModelEntry *m = make_state("test_maxvit", 0, 0, 0, 2, &src);
    make_cache("test_maxvit.untrained", &src, NULL, NULL, weights, sizeof weights);
    Pretrained p;
    CHECK(pretrained_resolve(&p, m, "test_maxvit", PRETRAINED_HUB, NULL, &err) == 0);
    make_state("test_maxvit", 0, 96, 0, 3, &dst);
    CHECKF(pretrained_load(&p, &dst, 1000, &err) == 0, "%s", err.msg);
    const char *name = "stages.1.blocks.0.attn_grid.attn.rel_pos.relative_position_bias_table";
    int i = state_find(&dst, name), j = state_find(&src, name);
    CHECK(i >= 0 && j >= 0 && dst.e[i].type.shape.d[0] == 25 && src.e[j].type.shape.d[0] == 81);
    float want[25 * 2];
    if (i >= 0 && j >= 0) {
        rel_pos_table_resize(state_data(&src, j), 9, 9, 2, 1, 0, 5, 5, want);
        CHECK(!memcmp(want, state_data(&dst, i), sizeof want));
    }
    CHECK(same_entry(&dst, &src, "stem.conv1.weight") && same_entry(&dst, &src, "head.fc.weight"));
    CHECKF(p.nlog == 2 && strstr(p.log[1], "relative position bias tables: 9x9 offsets to 5x5."), "%d %s", p.nlog,
           p.log[p.nlog - 1]);
    state_free(&dst);
    state_free(&src);
}

/* adapt_input_conv on test_resnet's stem: the three channels summed in
 * float for 1 channel, repeated and scaled by 3 / C for C; the rest loaded
 * as it is; a stem already of the model's channels loads unchanged. */
static void test_load_in_chans(void)
{
    char weights[1400];
    CtErr err = {{0}};
    CtState src, dst;
    const ModelEntry *m = make_state("test_resnet", 0, 0, 0, 1, &src);
    make_cache("test_resnet.r160_in1k", &src, RESNET_CONFIG(""), NULL, weights, sizeof weights);
    Pretrained p;
    const float *w = state_data(&src, state_find(&src, "conv1.0.weight"));
    enum { O = 16, JK = 9 };
    for (int chans = 1; chans <= 5; chans += 4) {
        CHECK(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_HUB, NULL, &err) == 0);
        make_state("test_resnet", 0, 0, chans, 5, &dst);
        CHECKF(pretrained_load(&p, &dst, 1000, &err) == 0, "%s", err.msg);
        const float *got = state_data(&dst, state_find(&dst, "conv1.0.weight"));
        int bad = 0;
        for (int o = 0; o < O; o++)
            for (int c = 0; c < chans; c++)
                for (int k = 0; k < JK; k++) {
                    const float *in = w + o * 3 * JK + k;
                    float want = chans == 1 ? in[0] + in[JK] + in[2 * JK] : in[c % 3 * JK] * (float)(3.0 / chans);
                    bad += got[(o * chans + c) * JK + k] != want;
                }
        CHECKF(bad == 0, "in_chans %d: %d stem weights differ from adapt_input_conv's", chans, bad);
        CHECK(same_entry(&dst, &src, "conv1.1.weight") && same_entry(&dst, &src, "fc.weight"));
        char line[128];
        snprintf(line, sizeof line, "Converted input conv conv1.0 pretrained weights from 3 to %d channel(s)", chans);
        CHECKF(p.nlog == 2 && !strcmp(p.log[1], line), "%s", p.log[p.nlog - 1]);
        state_free(&dst);
    }
    /* a gray run's own weights: the stem already of the model's shape */
    state_free(&src);
    make_state("test_resnet", 0, 0, 1, 7, &src);
    make_cache("test_resnet.r160_in1k", &src, RESNET_CONFIG(""), NULL, weights, sizeof weights);
    make_state("test_resnet", 0, 0, 1, 6, &dst);
    CHECK(pretrained_resolve(&p, m, "test_resnet", PRETRAINED_HUB, NULL, &err) == 0);
    CHECKF(pretrained_load(&p, &dst, 1000, &err) == 0, "%s", err.msg);
    CHECK(same_entry(&dst, &src, "conv1.0.weight"));
    CHECKF(p.nlog == 2 && !strcmp(p.log[1], "Pretrained conv1.0 weights already match the model, but input_size "
                                            "declares 3 source channels and the model has 1. Loading unchanged."),
           "%s", p.log[p.nlog - 1]);
    state_free(&dst);
    state_free(&src);
}

/* --- against timm (tools/make_pretrained_cache.py's folder) --- */

static const StTensor *ref_tensor(const StFile *f, const char *name)
{
    const StTensor *t = st_find(f, name);
    CHECKF(t != NULL, "the reference has no %s", name);
    return t;
}

/* The stems timm's create_model(pretrained=True, in_chans=C) loads from
 * the .pth (adapt_input_conv), bit for bit. */
static void compare_in_chans_with_timm(const StFile *ref, const char *model, const char *pth)
{
    const char *list = st_meta(ref, "in_chans");
    CHECKF(list != NULL, "%s: the reference has no in_chans (an older make_pretrained_cache.py)", model);
    for (const char *c = list; c && *c; c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL) {
        int chans = atoi(c);
        CtErr err = {{0}};
        Pretrained p;
        CtState s;
        const ModelEntry *m = make_state(model, 0, 0, chans, 0, &s);
        CHECK(pretrained_resolve(&p, m, model, PRETRAINED_FILE, pth, &err) == 0);
        CHECKF(pretrained_load(&p, &s, m->cfg.num_classes, &err) == 0, "%s", err.msg);
        char stem[96], name[160];
        snprintf(stem, sizeof stem, "%s.weight", m->cfg.first_conv);
        snprintf(name, sizeof name, "in%d.%s", chans, stem);
        const StTensor *t = ref_tensor(ref, name);
        int i = state_find(&s, stem);
        CHECKF(t && i >= 0 && t->nbytes == entry_bytes(&s, i) && !memcmp(t->data, state_data(&s, i), t->nbytes),
               "%s: %s differs from timm's", model, name);
        printf("%s: the stem for in_chans=%d as timm's adapt_input_conv makes it\n", model, chans);
        state_free(&s);
    }
}

/* The cached weights' eval logits against timm's, then the state timm's
 * create_model(pretrained=True, num_classes=K, img_size=I) loaded, from
 * the cache and (as --pretrained-path) from the .pth. */
static void compare_with_timm(const char *dir, const char *model)
{
    char path[1200];
    CtErr err = {{0}};
    StFile ref;
    snprintf(path, sizeof path, "%s/ref_%s.safetensors", dir, model);
    if (st_read(path, &ref, &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    int classes = atoi(st_meta(&ref, "num_classes")), img = atoi(st_meta(&ref, "img_size"));
    const ModelEntry *m = model_find(model);
    Pretrained p;
    CHECKF(pretrained_resolve(&p, m, model, PRETRAINED_HUB, NULL, &err) == 0, "%s", err.msg);
    const StTensor *x = ref_tensor(&ref, "input"), *want = ref_tensor(&ref, "logits");
    Graph g;
    CtState s;
    CHECKF(eval_graph(&p.m, NULL, (int)x->shape[0], p.m.cfg.num_classes, (int)x->shape[2], 3, CT_F32, 0, NULL, NULL,
                      &g, &err) == 0, "%s", err.msg);
    state_create(&s, &g);
    state_init(&s, 0);
    CHECKF(pretrained_load(&p, &s, p.m.cfg.num_classes, &err) == 0, "%s", err.msg);
    CtTensor in = {{shape_make(4, x->shape), CT_F32}, x->data}, out;
    CHECKF(backend_run_once(&ct_backend_ref, &g, &s, &in, 1, &out, NULL, &err) == 0, "%s", err.msg);
    double worst = 0;
    int64_t n = st_numel(want);
    for (int64_t k = 0; k < n; k++)
        worst = fmax(worst, fabs(((float *)out.data)[k] - ((const float *)want->data)[k]));
    CHECKF(worst <= 1e-4, "%s: logits %.3g from timm's", model, worst);
    printf("%s: eval logits of the cached weights within %.2g of timm's\n", model, worst);
    tensor_free(&out);
    state_free(&s);
    graph_free(&g);
    for (int file = 0; file <= 1; file++) {
        snprintf(path, sizeof path, "%s/%s.pth.tar", dir, model);
        CHECK(pretrained_resolve(&p, m, model, file ? PRETRAINED_FILE : PRETRAINED_HUB, path, &err) == 0);
        make_state(model, classes, img, 0, 0, &s);
        CHECKF(pretrained_load(&p, &s, classes, &err) == 0, "%s", err.msg);
        int compared = 0;
        double pos_err = 0;
        for (int i = 0; i < s.n; i++) {
            char name[300];
            if (s.e[i].role == CT_ROLE_CONST) /* not in timm's state_dict */
                continue;
            snprintf(name, sizeof name, "adapted.%s", s.e[i].name);
            const StTensor *t = ref_tensor(&ref, name);
            if (!t || s.e[i].role == CT_ROLE_STATE)
                continue;
            CtShape ts = shape_make(t->ndim, t->shape);
            CHECKF(shape_equal(&ts, &s.e[i].type.shape) && t->nbytes == entry_bytes(&s, i), "%s: shape", name);
            if (!shape_equal(&ts, &s.e[i].type.shape) || !strncmp(s.e[i].name, p.m.cfg.classifier,
                                                                  strlen(p.m.cfg.classifier)))
                continue; /* the new classifier: each its own init */
            size_t len = strlen(s.e[i].name), tl = strlen("relative_position_bias_table");
            if (!strcmp(s.e[i].name, "pos_embed") ||
                (len >= tl && !strcmp(s.e[i].name + len - tl, "relative_position_bias_table"))) {
                for (int64_t k = 0; k < st_numel(t); k++)
                    pos_err = fmax(pos_err, fabs(((float *)state_data(&s, i))[k] - ((const float *)t->data)[k]));
                CHECKF(pos_err <= RESAMPLE_TOL, "%s: %s %.3g from timm's", model, s.e[i].name, pos_err);
            } else {
                CHECKF(!memcmp(t->data, state_data(&s, i), t->nbytes), "%s: %s differs from timm's", model, name);
            }
            compared++;
        }
        printf("%s (%s): %d tensors as timm's create_model(pretrained=True, num_classes=%d, img_size=%d) loads "
               "them (resampled position embeddings or bias tables within %.2g)\n", model, file ? "--pretrained-path .pth.tar" : "hub cache",
               compared, classes, img, pos_err);
        state_free(&s);
    }
    compare_in_chans_with_timm(&ref, model, path);
    st_free(&ref);
}

int main(int argc, char **argv)
{
    char root[] = "/tmp/ctimm_pretrained_XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    tmp_root = root;
    test_resample_vs_torch();
    test_rel_pos_resize_vs_torch();
    test_cache_folder();
    test_snapshots();
    test_resolve();
    test_load_resnet();
    test_load_vit();
    test_load_rel_pos_tables();
    test_load_levit();
    test_load_in_chans();
    test_rm_tree(root);
    if (argc > 1) {
        char hub[1100];
        snprintf(hub, sizeof hub, "%s/hub", argv[1]);
        setenv("HF_HUB_CACHE", hub, 1);
        compare_with_timm(argv[1], "test_resnet");
        compare_with_timm(argv[1], "test_vit");
        compare_with_timm(argv[1], "test_maxvit");
    }
    return check_done("test_pretrained");
}
