/* The cuda target's Program, compiled on the host (codegen/program.h,
 * codegen/cuda/cuda_program.h; no GPU needed): test_resnet's training step
 * for sm_90 holds a launch plan that passes launch_plan_check over the
 * program's own graph (the source graph freed), an image for every
 * translation unit and for the library units of the storage types it
 * launches (f32's alone for an f32 step, f32's and bf16's for bf16 AMP,
 * f32's and f16's for test_vit's f16 AMP step), each a cubin for sm_90
 * that defines every kernel the plan launches from it (a library unit:
 * every kernel of its type, lib_kernel_names', and none of another's:
 * between them the three programs compile all three units), and
 * --dump-program's lines. The prepare check (cuda_program_fits) refuses a
 * program compiled for sm_80 on an sm_90 device, naming both, and accepts
 * one whose SM count differs. The training step as ctimm-train compiles
 * it (the uint8 input, random erasing, mixup, bf16 AMP, channels-last) has a
 * launch for every node, and what a step moves in is the uint8 batch and
 * a few hundred bytes beside it: no state value is an input, every one
 * lives in the resident state block (tests/gpu/test_gpu_parity.c counts
 * the bytes the executor moves on a device). Without NVRTC (a build
 * without the CUDA toolkit) the compile fails saying so. */
#include <string.h>

#include "check.h"
#include "model_graphs.h"
#include "codegen/cuda/roofline.h"
#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"

#ifdef CTIMM_HAVE_NVRTC
/* An image's names: its strings that begin "ct_" after a NUL and end at
 * one (the string tables' symbol names), sorted; looked up by bsearch,
 * since a scan of a 4 MB cubin per name took 30 s under ASan. */
typedef struct Names {
    const char **v;
    size_t n;
} Names;

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static Names image_names(const CudaImage *img)
{
    const char *d = img->data;
    Names s = {malloc(sizeof *s.v * (img->size / 4 + 1)), 0};
    CT_ASSERT(s.v != NULL);
    for (size_t i = 1; i + 3 < img->size; i++)
        if (d[i - 1] == 0 && !memcmp(d + i, "ct_", 3) && memchr(d + i, 0, img->size - i))
            s.v[s.n++] = d + i;
    qsort(s.v, s.n, sizeof *s.v, cmp_str);
    return s;
}

static int has_name(const Names *s, const char *name)
{
    return bsearch(&name, s->v, s->n, sizeof *s->v, cmp_str) != NULL;
}

/* Every kernel the plan launches is in the image it is looked up in; the
 * library images are the units of the storage types `types` (a bit per
 * LibType), no other. */
static void check_images(const CudaProgram *c, unsigned types)
{
    CHECK(c->nunits > 0);
    Names *unit = calloc((size_t)c->nunits, sizeof *unit), lib[LIB_NTYPES] = {{0}};
    CT_ASSERT(unit != NULL);
    for (int j = 0; j < c->nunits; j++) {
        CHECKF(c->units[j].size > 0 && !c->units[j].is_ptx && !strcmp(c->units[j].arch, "sm_90"),
               "unit %d: %zu bytes, %s", j, c->units[j].size, c->units[j].arch);
        unit[j] = image_names(&c->units[j]);
    }
    for (int t = 0; t < LIB_NTYPES; t++) {
        CHECKF((types >> t & 1) ? c->lib[t].size > 0 && !c->lib[t].is_ptx && !strcmp(c->lib[t].arch, "sm_90")
                                : c->lib[t].size == 0 && c->lib[t].data == NULL,
               "library image %d: %zu bytes, %s", t, c->lib[t].size, c->lib[t].arch);
        lib[t] = image_names(&c->lib[t]);
        /* a library image defines every kernel of its storage type, and no other type's */
        for (int u = 0; c->lib[t].size && u < LIB_NTYPES; u++) {
            int n, found = 0;
            const char *const *names = lib_kernel_names((LibType)u, &n);
            for (int k = 0; k < n; k++)
                found += has_name(&lib[t], names[k]);
            CHECKF(found == (u == t ? n : 0), "library image %d: %d of the %d kernels of type %d", t, found, n, u);
        }
    }
    int kernels = 0;
    for (int s = 0; s < c->lp.nsteps; s++) {
        const LpStep *st = &c->lp.steps[s];
        char name[32];
        if (st->kind == LP_KERNEL) {
            snprintf(name, sizeof name, "ct_k%d", c->fn[st->launch]);
            int u = c->unit[st->launch];
            CHECKF(u >= 0 && u < c->nunits && has_name(&unit[u], name), "step %d: %s in unit %d", s, name, u);
            kernels++;
        }
        for (int j = 0; j < st->nlib + (st->mirrored ? 1 : 0); j++) {
            const char *kernel = j < st->nlib ? st->lib[j].kernel : st->mirror.kernel;
            int t = lib_kernel_type(kernel);
            CHECKF(t >= 0 && has_name(&lib[t], kernel), "step %d: %s", s, kernel);
        }
    }
    for (int j = 0; j < c->nunits; j++)
        free(unit[j].v);
    free(unit);
    for (int t = 0; t < LIB_NTYPES; t++)
        free(lib[t].v);
    CHECK(kernels > 0);
}

/* model's graph as gs says, compiled for sm_90 (the graph freed: the
 * program keeps nothing of it), or NULL with a failed check. */
static CtProgram *compile_sm90(const char *model, const GraphSpec *gs)
{
    Graph g;
    if (model_graph(model, gs, &g))
        return NULL;
    CtProgram *p;
    CtErr err;
    int rc = program_compile(&g, CT_TARGET_CUDA, &(ProgramOptions){.cuda_cc = 90}, &p, &err);
    graph_free(&g);
    CHECKF(rc == 0, "%s: %s", model, err.msg);
    return rc ? NULL : p;
}

static void test_compile(void)
{
    CtProgram *p = compile_sm90("test_resnet", &(GraphSpec){.training = 1});
    CtErr err;
    if (!p)
        return;
    CHECK(p->opt.cuda_cc == 90 && p->opt.cuda_sms == PROGRAM_CUDA_SMS);
    CHECKF(launch_plan_check(&p->g, &p->cuda.lp, &err) == 0, "%s", err.msg);
    check_images(&p->cuda, 1u << LIB_F32); /* an f32 step: the f32 unit alone */
    CtBuf b = {0};
    program_dump(p, &b);
    CHECKF(b.s && strstr(b.s, "program: target cuda") && strstr(b.s, "target: sm_90, 132 SMs") &&
               strstr(b.s, "step 0: ") && strstr(b.s, "kernel ct_k") && strstr(b.s, "cuDNN convolution") &&
               strstr(b.s, "image unit 0: ") && strstr(b.s, "image library f32: ") && strstr(b.s, "sm_90 cubin") &&
               strstr(b.s, ": device +") && strstr(b.s, ": state '"),
           "%s", b.s ? b.s : "(nothing)");
    printf("test_cuda_program: test_resnet train: %d steps, %d units, f32 library image %zu bytes\n",
           p->cuda.lp.nsteps, p->cuda.nunits, p->cuda.lib[LIB_F32].size);
    buf_free(&b);
    CHECKF(cuda_program_fits(p, 90, "NVIDIA H200 (sm_90, 132 SMs, 143 GiB)", &err) == 0, "%s", err.msg);
    /* the profile's floors: the roofline's of each step, on the device the GPU's name gives */
    double *floor_s = calloc((size_t)p->cuda.lp.nsteps, sizeof *floor_s);
    RooflineDevice h100;
    roofline_device("h100", &h100, &err);
    const char *dev = cuda_program_floors(&p->cuda, &p->g, "NVIDIA H100 80GB HBM3", 0, floor_s);
    int same = dev && !strcmp(dev, "h100");
    for (int s = 0; same && s < p->cuda.lp.nsteps; s++)
        same = floor_s[s] == roofline_step(&p->cuda.lp, &p->g, s, &h100, 0).floor_s;
    CHECKF(same, "floors on %s", dev ? dev : "(no device)");
    CHECK(cuda_program_floors(&p->cuda, &p->g, "Tesla T4", 0, floor_s) == NULL);
    free(floor_s);
    program_free(p);
}

static void test_step_traffic(void)
{
    enum { B = 8, K = 1 };
    InputSpec in = {.u8 = 1, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225}, .erase_boxes = K,
                    .erase_mode = 2, .mix = 1};
    OptimSpec adamw = {.kind = CT_OPT_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05};
    CtProgram *p = compile_sm90("test_resnet", &(GraphSpec){.batch = B, .training = 1, .amp = CT_BF16,
                                                           .channels_last = 1, .opt = &adamw, .input = &in});
    if (!p)
        return;
    /* bf16 activations, f32 parameters and loss: the f16 unit is not compiled */
    check_images(&p->cuda, 1u << LIB_F32 | 1u << LIB_BF16);
    size_t image = 0, rest = 0, state_inputs = 0, unplaced = 0;
    int ninputs = 0;
    for (ValueId v = 0; v < p->g.nvalues; v++) {
        const Value *val = &p->g.values[v];
        if (val->role == CT_ROLE_INPUT) {
            size_t bytes = program_value_bytes(p, v);
            if (ninputs++ == 0) {
                CHECK(val->type.dtype == CT_U8 && val->type.shape.ndim == 4 && val->type.shape.d[3] == 3);
                image = bytes;
            } else {
                rest += bytes;
            }
            state_inputs += p->state_name[v] != NULL;
        } else if (p->state_name[v]) {
            unplaced += p->cuda.lp.offset[v] != PLAN_NONE;
        }
    }
    /* boxes B*K*5 i64, mixing B*6 f32, the labels B i64, lr and loss scale */
    CHECKF(rest == B * K * 5 * 8 + B * 6 * 4 + B * 8 + 8 && image > 10 * rest,
           "in per step: the %zu-byte batch and %zu bytes beside it", image, rest);
    CHECKF(state_inputs == 0 && unplaced == 0, "%zu state inputs, %zu state values in the activation block",
           state_inputs, unplaced);
    printf("test_cuda_program: test_resnet train step in: %zu bytes of uint8 batch, %zu beside it\n", image, rest);
    program_free(p);
}

/* test_vit's f16 AMP training step: the f16 unit beside the f32 one (the
 * tensor cores' attention kernels in f16). */
static void test_f16(void)
{
    CtProgram *p = compile_sm90("test_vit", &(GraphSpec){.training = 1, .amp = CT_F16});
    if (!p)
        return;
    check_images(&p->cuda, 1u << LIB_F32 | 1u << LIB_F16);
    printf("test_cuda_program: test_vit f16 train: f16 library image %zu bytes\n", p->cuda.lib[LIB_F16].size);
    program_free(p);
}
#else
static void test_compile(void)
{
    Graph g;
    if (model_graph("test_resnet", &(GraphSpec){.training = 1}, &g))
        return;
    CtProgram *p;
    CtErr err;
    CHECKF(program_compile(&g, CT_TARGET_CUDA, NULL, &p, &err) != 0 && strstr(err.msg, "without NVRTC"), "%s",
           err.msg);
    graph_free(&g);
}
#endif

/* The prepare check, on programs as compiled for other targets. */
static void test_fits(void)
{
    CtErr err;
    CtProgram sm80 = {.target = CT_TARGET_CUDA, .opt = {.cuda_cc = 80, .cuda_sms = 108}};
    CtProgram sm90 = {.target = CT_TARGET_CUDA, .opt = {.cuda_cc = 90, .cuda_sms = 78}};
    CtProgram cpu = {.target = CT_TARGET_CPU};
    const char *h200 = "NVIDIA H200 (sm_90, 132 SMs, 143 GiB)";
    int rc = cuda_program_fits(&sm80, 90, h200, &err);
    CHECKF(rc != 0 && strstr(err.msg, "compiled for sm_80") && strstr(err.msg, h200) &&
               strstr(err.msg, "compile it for sm_90"),
           "%s", rc ? err.msg : "an sm_80 program accepted on sm_90");
    CHECKF(cuda_program_fits(&sm90, 90, h200, &err) == 0, "other SM count: %s", err.msg);
    CHECK(cuda_program_fits(&cpu, 90, h200, &err) != 0 && strstr(err.msg, "not compiled for the cuda target"));
}

int main(void)
{
    test_compile();
#ifdef CTIMM_HAVE_NVRTC
    test_step_traffic();
    test_f16();
#endif
    test_fits();
    return check_done("test_cuda_program");
}
