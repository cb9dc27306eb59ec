/* Model state: timm's init scheme per tensor (statistics of each draw),
 * determinism, and loading by name with every mismatch refused by name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "frontend/builder.h"
#include "models/registry.h"
#include "runtime/backend.h"
#include "runtime/state.h"

static void moments(const CtState *s, const char *name, double *mean, double *std, double *maxabs)
{
    int i = state_find(s, name);
    CHECKF(i >= 0, "no %s", name);
    if (i < 0)
        return;
    const float *p = state_data(s, i);
    int64_t n = shape_numel(&s->e[i].type.shape);
    double sum = 0, sq = 0, mx = 0;
    for (int64_t k = 0; k < n; k++) {
        sum += p[k];
        sq += (double)p[k] * p[k];
        mx = fabs(p[k]) > mx ? fabs(p[k]) : mx;
    }
    *mean = sum / (double)n;
    *std = sqrt(sq / (double)n - *mean * *mean);
    *maxabs = mx;
}

static void build(const char *model, Graph *g)
{
    ModelSpec spec = {.batch_size = 1, .args = model_args_default()};
    CtErr err;
    CHECKF(model_build(model_find(model), &spec, g, &err) == 0, "%s", err.msg);
}

static void test_resnet_init(void)
{
    Graph g;
    CtState s;
    double mean, std, mx;
    build("resnet18", &g);
    state_create(&s, &g);
    state_init(&s, 42);
    /* conv1 [64,3,7,7]: kaiming_normal fan_out = 64*49 */
    moments(&s, "conv1.weight", &mean, &std, &mx);
    CHECKF(fabs(std - sqrt(2.0 / (64 * 49))) < 0.05 * sqrt(2.0 / (64 * 49)), "conv1 std %g", std);
    CHECK(fabs(mean) < 0.01);
    /* zero_init_last: the residual branch's last BN weight is 0, the others 1 */
    moments(&s, "layer1.0.bn2.weight", &mean, &std, &mx);
    CHECK(mx == 0);
    moments(&s, "layer1.0.bn1.weight", &mean, &std, &mx);
    CHECK(mean == 1 && std == 0);
    moments(&s, "layer1.0.bn1.running_var", &mean, &std, &mx);
    CHECK(mean == 1);
    /* fc: nn.Linear default, U(-1/sqrt(512), 1/sqrt(512)) */
    moments(&s, "fc.weight", &mean, &std, &mx);
    CHECKF(mx <= 1 / sqrt(512.0) && mx > 0.95 / sqrt(512.0), "fc max %g", mx);
    CHECKF(fabs(std - 1 / sqrt(3 * 512.0)) < 0.02 / sqrt(512.0), "fc std %g", std);

    CtState s2;
    state_create(&s2, &g);
    state_init(&s2, 42);
    CHECK(memcmp(s.data, s2.data, s.nbytes) == 0);
    state_init(&s2, 43);
    CHECK(memcmp(s.data, s2.data, s.nbytes) != 0);
    state_free(&s2);
    state_free(&s);
    graph_free(&g);
}

static void test_vit_init(void)
{
    Graph g;
    CtState s;
    double mean, std, mx;
    build("vit_tiny_patch16_224", &g);
    state_create(&s, &g);
    state_init(&s, 7);
    moments(&s, "blocks.0.attn.qkv.weight", &mean, &std, &mx);
    CHECKF(fabs(std - 0.02) < 0.001, "qkv std %g", std);
    moments(&s, "blocks.0.attn.qkv.bias", &mean, &std, &mx);
    CHECK(mx == 0);
    moments(&s, "pos_embed", &mean, &std, &mx);
    CHECKF(fabs(std - 0.02) < 0.002, "pos_embed std %g", std);
    moments(&s, "cls_token", &mean, &std, &mx);
    CHECK(mx > 0 && mx < 1e-5);
    moments(&s, "patch_embed.proj.weight", &mean, &std, &mx);
    CHECKF(mx <= 1 / sqrt(768.0), "patch conv bound %g", mx);
    state_free(&s);
    graph_free(&g);

    /* ConvNeXt's layer scale starts at ls_init_value = 1e-6 */
    build("test_convnext", &g);
    state_create(&s, &g);
    state_init(&s, 7);
    moments(&s, "stages.0.blocks.0.gamma", &mean, &std, &mx);
    CHECKF(mean == (float)1e-6 && std < 1e-12, "gamma mean %g std %g", mean, std);
    state_free(&s);
    graph_free(&g);
}

/* splitmix64 and the draws as runtime/state.c makes them (one stream a
 * tensor, from FNV-1a of its name with the seed in the offset basis), drawn
 * in order: state_init,
 * which draws tensors in parallel chunks (skipping ahead in the stream),
 * gives the same values, across chunk edges and for a tensor whose draws
 * vary (rejection), in f32 and in f16 storage. */
static uint64_t sm_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double sm_uniform(uint64_t *x) { return ((double)(sm_next(x) >> 11) + 0.5) * 0x1.0p-53; }

static double sm_normal(uint64_t *x)
{
    double u = sm_uniform(x), v = sm_uniform(x);
    return sqrt(-2 * log(u)) * cos(2 * 3.14159265358979323846 * v);
}

static void test_init_streams(void)
{
    enum { N = 3 * 65536 + 7 };
    static const CtInit inits[] = {{.kind = CT_INIT_NORMAL, .a = 0.5}, {.kind = CT_INIT_UNIFORM, .a = 2},
                                   {.kind = CT_INIT_TRUNC_NORMAL, .a = 1.5}, {.kind = CT_INIT_CONSTANT, .a = 3}};
    static const char *const names[] = {"normal", "uniform", "trunc", "constant"};
    Graph g;
    Builder b;
    graph_init(&g);
    b_init(&b, &g, 0);
    ValueId x = b_input(&b, "x", shape_make(1, (int64_t[]){N}), CT_F32), y = x;
    for (int k = 0; k < 4; k++)
        y = f_add(&b, y, b_param(&b, names[k], shape_make(1, (int64_t[]){N}), inits[k]));
    graph_mark_output(&g, y);
    graph_mark_output(&g, b_buffer(&b, "half", shape_make(1, (int64_t[]){N}), CT_F16, init_normal(1)));
    CtErr err;
    CHECKF(b_finish(&b, &err) == 0, "%s", err.msg);
    CtState s;
    state_create(&s, &g);
    state_init(&s, 99);
    double *want = malloc(sizeof *want * N);
    float *got = malloc(sizeof *got * N);
    CT_ASSERT(want && got);
    for (int k = 0; k < 5; k++) {
        const char *name = k < 4 ? names[k] : "half";
        int i = state_find(&s, name);
        CHECKF(i >= 0, "no %s", name);
        if (i < 0)
            continue;
        uint64_t x = 1469598103934665603ull ^ 99;
        for (const char *c = name; *c; c++)
            x = (x ^ (unsigned char)*c) * 1099511628211ull;
        for (int64_t j = 0; j < N; j++) {
            double v;
            switch (k) {
            case 0: v = 0.5 * sm_normal(&x); break;
            case 1: v = 2 * (2 * sm_uniform(&x) - 1); break;
            case 2:
                do
                    v = 1.5 * sm_normal(&x);
                while (v < -2 || v > 2); /* about 18% of draws rejected */
                break;
            case 3: v = 3; break;
            default: v = sm_normal(&x);
            }
            want[j] = v;
        }
        elems_round(want, s.e[i].type.dtype, N);
        elems_to_f32(state_data(&s, i), s.e[i].type.dtype, N, got);
        int64_t bad = 0;
        for (int64_t j = 0; j < N; j++)
            bad += got[j] != (float)want[j];
        CHECKF(bad == 0, "%s: %lld of %d values not the stream's", name, (long long)bad, N);
    }
    free(want);
    free(got);
    state_free(&s);
    graph_free(&g);
}

static void expect_load_fails(CtState *s, StTensor *t, int n, const char *needle)
{
    StFile f = {.tensors = t, .ntensors = n};
    CtErr err = {{0}};
    CHECKF(state_load(s, &f, "state.", &err) == -1, "load accepted: %s", needle);
    CHECKF(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg, needle);
}

static void test_load_errors(void)
{
    Graph g;
    CtState s;
    build("test_vit", &g);
    state_create(&s, &g);
    StTensor *t = calloc((size_t)s.n + 1, sizeof *t);
    char names[100][80];
    for (int i = 0; i < s.n; i++) {
        snprintf(names[i], sizeof names[i], "state.%s", s.e[i].name);
        t[i].name = names[i];
        t[i].dtype = s.e[i].type.dtype;
        t[i].ndim = s.e[i].type.shape.ndim;
        memcpy(t[i].shape, s.e[i].type.shape.d, sizeof(int64_t) * (size_t)t[i].ndim);
        t[i].nbytes = (size_t)shape_numel(&s.e[i].type.shape) * 4;
        t[i].data = state_data(&s, i);
    }
    StFile ok = {.tensors = t, .ntensors = s.n};
    CtErr err;
    CHECKF(state_load(&s, &ok, "state.", &err) == 0, "%s", err.msg);

    t[3].name = "state.blocks.9.norm1.weight";
    expect_load_fails(&s, t, s.n, names[3]);
    t[3].name = names[3];

    t[s.n].name = "state.extra.weight";
    t[s.n].dtype = CT_F32;
    expect_load_fails(&s, t, s.n + 1, "'state.extra.weight' in the file is not part of the model");

    t[1].shape[1] = 50;
    expect_load_fails(&s, t, s.n, "'state.pos_embed' has shape [1,50,64] in the file but the model needs [1,101,64]");
    t[1].shape[1] = 101;
    t[1].dtype = CT_F64;
    expect_load_fails(&s, t, s.n, "'state.pos_embed' is F64");
    free(t);
    state_free(&s);
    graph_free(&g);
}

/* A build-time constant (timm's non-persistent buffer): its values are in
 * the state from state_create on, no init draw or checkpoint touches them,
 * and ref and cpu read them as they read a buffer. */
static void test_consts(void)
{
    Graph g;
    Builder b;
    graph_init(&g);
    b_init(&b, &g, 0);
    static const double table[6] = {0.5, -1, 2, 4, -8, 16}, index[2] = {3, -7};
    ValueId x = b_input(&b, "x", shape_make(2, (int64_t[]){2, 3}), CT_F32);
    b_push(&b, "blocks.0.attn");
    ValueId w = b_param(&b, "weight", shape_make(1, (int64_t[]){3}), init_ones());
    ValueId c = b_const(&b, "bias_table", shape_make(2, (int64_t[]){2, 3}), CT_F32, table);
    b_const(&b, "index", shape_make(1, (int64_t[]){2}), CT_I32, index);
    b_pop(&b);
    graph_mark_output(&g, f_add(&b, f_mul(&b, x, w), c));
    CtErr err;
    CHECKF(b_finish(&b, &err) == 0, "%s", err.msg);
    CHECK(g.values[c].role == CT_ROLE_CONST && g.values[c].init.data != table);

    CtState s;
    state_create(&s, &g);
    state_init(&s, 1);
    int ti = state_find(&s, "blocks.0.attn.bias_table"), ii = state_find(&s, "blocks.0.attn.index");
    CHECK(ti >= 0 && ii >= 0 && s.e[ti].role == CT_ROLE_CONST);
    if (ti < 0 || ii < 0)
        goto free_state;
    CHECK(((float *)state_data(&s, ti))[5] == 16 && ((int32_t *)state_data(&s, ii))[1] == -7);

    /* the state_dict is the param alone: saved alone, and loaded without the consts */
    char path[] = "/tmp/ctimm_consts_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    StFile f;
    CHECKF(state_save(&s, path, NULL, NULL, 0, &err) == 0, "%s", err.msg);
    CHECKF(st_read(path, &f, &err) == 0, "%s", err.msg);
    CHECKF(f.ntensors == 1 && !strcmp(f.tensors[0].name, "blocks.0.attn.weight"), "%d tensors saved", f.ntensors);
    CHECKF(state_load(&s, &f, "", &err) == 0, "%s", err.msg);
    st_free(&f);
    /* a file that still holds a constant (an older timm checkpoint's relative position index) loads, the
     * constant keeping the model's values */
    float wv[3] = {1, 1, 1}, stale[6] = {9, 9, 9, 9, 9, 9};
    StTensor old[2] = {{.name = "blocks.0.attn.weight", .dtype = CT_F32, .ndim = 1, .shape = {3}, .nbytes = 12, .data = wv},
                       {.name = "blocks.0.attn.bias_table", .dtype = CT_F32, .ndim = 2, .shape = {2, 3}, .nbytes = 24,
                        .data = stale}};
    CHECKF(state_load(&s, &(StFile){.tensors = old, .ntensors = 2}, "", &err) == 0, "%s", err.msg);
    CHECK(((float *)state_data(&s, ti))[5] == 16);
    unlink(path);

    const float in[6] = {1, 2, 3, 4, 5, 6};
    CtTensor input = {{shape_make(2, (int64_t[]){2, 3}), CT_F32}, (void *)in};
    static const char *const backends[] = {"ref", "cpu"};
    for (int k = 0; k < 2; k++) {
        CtTensor out = {0};
        const CtBackend *be = backend_find(backends[k]);
        int rc = be ? backend_run_once(be, &g, &s, &input, 1, &out, NULL, &err) : -1;
        CHECKF(rc == 0, "%s: %s", backends[k], be ? err.msg : "no backend");
        if (rc)
            continue;
        const float *y = out.data;
        for (int i = 0; i < 6; i++)
            CHECKF(y[i] == (float)(in[i] + table[i]), "%s: y[%d] = %g", backends[k], i, y[i]);
        tensor_free(&out);
    }
free_state:
    state_free(&s);
    graph_free(&g);
}

int main(void)
{
    test_consts();
    test_resnet_init();
    test_vit_init();
    test_init_streams();
    test_load_errors();
    return check_done("test_state");
}
