/* The cuda backend against the ref backend on a GPU (CTest label gpu;
 * exits 77, a skip, where --device cuda cannot run, as on CI): for each
 * test model on its reference vectors, eval logits and one whole SGD
 * training step (logits, loss, every gradient, every updated parameter,
 * buffer and momentum buffer), in f32 with TF32 off (NCHW and
 * channels_last) within 1e-3 relative error, and with AMP f16 and bf16
 * (channels_last) within 2e-2; and the step replayed as a CUDA graph gives
 * what its eager run gave. As tests/test_cpu.c explains, an AMP training
 * step of a BatchNorm net on the vectors' tiny batch is chaotic under
 * low-precision rounding, so BN nets are compared in eval under AMP. And
 * one NaN weight in test_resnet's stem gives NaN logits through cuDNN's
 * fused convolution and ReLU (batch norms folded), as in torch and on the
 * other backends (tests/test_nan.c). A program compiled for another
 * compute capability than the device's is refused at prepare, naming both.
 * The training step as ctimm-train compiles it (uint8 input, erasing,
 * mixup, channels-last) agrees with ref and moves in only its inputs.
 *
 *   test_gpu_parity [--sync-each] [all | nan | other_arch | uint8 | uint8_gray
 *                   | MODEL [eval|train [f32|f32_cl|f16|bf16]]]
 *
 * CTest runs each configuration as a test of its own (tests/gpu/CMakeLists.txt),
 * so one failure hides no other; --sync-each synchronises after every step, so
 * that compute-sanitizer's report names the step that faulted.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "../model_vectors.h"
#include "../uint8_step.h"
#include "models/registry.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/safetensors.h"

enum { SKIP = 77 };

typedef struct Run {
    CtState s;
    CtTensor *out;
} Run;

static ProgramOptions options;

static int run(const CtBackend *be, const char *what, const Graph *g, const CtState *init, const CtTensor *in,
               int nin, Run *r)
{
    CtErr err;
    CtRunner rr;
    state_create(&r->s, g);
    memcpy(r->s.data, init->data, init->nbytes);
    r->out = calloc((size_t)g->noutputs + 1, sizeof *r->out);
    int rc = backend_open(&rr, be, g, &r->s, &options, &err);
    if (rc == 0 && (rc = backend_step(&rr, in, nin, r->out, &err)) == 0 && be->state_to_host(rr.exec, &err))
        rc = -1;
    backend_close(&rr);
    CHECKF(rc == 0, "%s on %s: %s", what, be->name, err.msg);
    return rc;
}

/* Two steps of one cuda context from init (the second a captured CUDA
 * graph's replay, the state given back between them) into a and b; a third
 * step moves no state: only the inputs in and the outputs out. */
static int run_twice(const char *what, const Graph *g, const CtState *init, const CtTensor *in, int nin, Run *a,
                     Run *b)
{
    CtErr err;
    CtRunner rr;
    size_t want_in = 0, want_out = 0, moved[3];
    for (int k = 0; k < nin; k++)
        want_in += (size_t)shape_numel(&in[k].type.shape) * ct_dtype_size(in[k].type.dtype);
    for (int k = 0; k < g->noutputs; k++)
        want_out += (size_t)shape_numel(&g->values[g->outputs[k]].type.shape) *
                    ct_dtype_size(g->values[g->outputs[k]].type.dtype);
    state_create(&a->s, g);
    state_create(&b->s, g);
    a->out = calloc((size_t)g->noutputs + 1, sizeof *a->out);
    b->out = calloc((size_t)g->noutputs + 1, sizeof *b->out);
    CtState work;
    state_create(&work, g);
    memcpy(work.data, init->data, init->nbytes);
    int rc = backend_open(&rr, &ct_backend_cuda, g, &work, &options, &err);
    Run *runs[2] = {a, b};
    for (int k = 0; k < 2 && rc == 0; k++) {
        memcpy(work.data, init->data, init->nbytes);
        if ((rc = ct_backend_cuda.state_from_host(rr.exec, &err)) || (rc = backend_step(&rr, in, nin, runs[k]->out, &err)) ||
            (rc = ct_backend_cuda.state_to_host(rr.exec, &err)))
            break;
        memcpy(runs[k]->s.data, work.data, work.nbytes);
    }
    CtTensor *third = calloc((size_t)g->noutputs + 1, sizeof *third);
    if (rc == 0 && (rc = backend_step(&rr, in, nin, third, &err)) == 0) {
        cuda_backend_moved(rr.exec, &moved[0], &moved[1], &moved[2]);
        CHECKF(moved[0] == want_in && moved[1] == want_out && moved[2] == 0,
               "%s: a step moved %zu bytes in (want %zu), %zu out (want %zu), %zu of state (want 0)", what,
               moved[0], want_in, moved[1], want_out, moved[2]);
        for (int k = 0; k < g->noutputs; k++)
            tensor_free(&third[k]);
    }
    free(third);
    backend_close(&rr);
    state_free(&work);
    CHECKF(rc == 0, "%s on cuda: %s", what, err.msg);
    return rc;
}

static void run_free(const Graph *g, Run *r, int ran)
{
    for (int k = 0; ran && k < g->noutputs; k++)
        tensor_free(&r->out[k]);
    free(r->out);
    state_free(&r->s);
}

/* The worst relative error of a's outputs and state against b's. */
static double compare(const char *what, const Graph *g, const Run *a, const Run *b, double tol)
{
    double worst = 0;
    for (int k = 0; k < g->noutputs; k++) {
        const CtType *t = &g->values[g->outputs[k]].type;
        int64_t n = shape_numel(&t->shape);
        if (t->dtype != CT_F32 && t->dtype != CT_F16 && t->dtype != CT_BF16)
            continue;
        float *w[2] = {malloc(sizeof(float) * (size_t)(n + 1)), malloc(sizeof(float) * (size_t)(n + 1))};
        CT_ASSERT(w[0] && w[1]);
        elems_to_f32(a->out[k].data, t->dtype, n, w[0]);
        elems_to_f32(b->out[k].data, t->dtype, n, w[1]);
        double e = rel_err(w[0], w[1], n);
        CHECKF(e <= tol, "%s: output %d: %.3e", what, k, e);
        worst = e > worst ? e : worst;
        free(w[0]);
        free(w[1]);
    }
    for (int i = 0; i < a->s.n; i++) {
        if (a->s.e[i].type.dtype != CT_F32)
            continue;
        double e = rel_err(state_data(&a->s, i), state_data(&b->s, i), shape_numel(&a->s.e[i].type.shape));
        CHECKF(e <= tol, "%s: state '%s': %.3e", what, a->s.e[i].name, e);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* cuda against ref, then a second cuda step (the captured CUDA graph)
 * against the first (eager); a step moves no state (run_twice). */
static void check_graph(const char *what, const Graph *g, const CtState *init, const CtTensor *in, int nin,
                        double tol)
{
    Run ref, cu, replay;
    int r0 = run(&ct_backend_ref, what, g, init, in, nin, &ref) == 0;
    int r1 = run_twice(what, g, init, in, nin, &cu, &replay) == 0;
    if (r0 && r1) {
        double e = compare(what, g, &cu, &ref, tol), er = compare(what, g, &replay, &cu, 1e-6);
        printf("%s: cuda vs ref %.2e, graph replay vs eager %.2e\n", what, e, er);
    }
    run_free(g, &ref, r0);
    run_free(g, &cu, r1);
    run_free(g, &replay, r1);
}

/* The training step as ctimm-train compiles it: the loader's uint8 batch (RGB or gray)
 * normalised, erased ('pixel', a box an image) and mixed in the graph,
 * channels-last; against ref, and a step moving in only that batch and the
 * numbers beside it (run_twice). */
static void check_uint8_step(int chans)
{
    static Uint8Step u;
    if (uint8_step_open(&u, chans))
        return;
    check_graph(chans == 1 ? "test_resnet gray uint8 step (in_chans 1, erase, mix, channels_last)"
                           : "test_resnet uint8 step (erase, mix, channels_last)",
                &u.g, &u.init, u.in, 6, 1e-3);
    uint8_step_free(&u);
}

/* One configuration of a model: precision (f32, f16, bf16), layout, mode. */
static void check_model(const char *model, CtDType low, int channels_last, int training)
{
    Vectors v;
    CtErr err;
    if (vectors_open(&v, model, low == CT_F16 ? 1024 : 1))
        return;
    ModelSpec spec = {.batch_size = v.batch, .training = training, .args = v.args};
    OptimSpec sgd = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4,
                     .no_weight_decay = v.m->no_weight_decay, .skip_nonfinite = low == CT_F16};
    Graph g, a;
    TrainStep ts;
    int rc = model_build(v.m, &spec, &g, &err);
    if (!rc && low != CT_F32) {
        rc = amp_cast(&g, low, &a, &err);
        graph_free(&g);
        g = a;
    }
    if (!rc && training && !(rc = train_step_build(&g, g.outputs[0], &(LossSpec){.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = 0.1, .bce_threshold = -1},
                                                   &sgd, &ts, &err)))
        train_step_free(&ts);
    if (!rc && channels_last) {
        rc = layout_channels_last(&g, &a, &err);
        graph_free(&g);
        g = a;
    }
    CHECKF(rc == 0, "%s: %s", model, err.msg);
    if (rc == 0) {
        CtState init;
        char what[160];
        state_create(&init, &g);
        CHECKF(state_load(&init, &v.f, "state.", &err) == 0, "%s: %s", model, err.msg);
        snprintf(what, sizeof what, "%s %s %s%s", model, training ? "sgd step" : "eval",
                 low == CT_F32 ? "f32" : low == CT_F16 ? "amp f16" : "amp bf16", channels_last ? " channels_last" : "");
        check_graph(what, &g, &init, v.in, training ? 4 : 1, low == CT_F32 ? 1e-3 : 2e-2);
        state_free(&init);
    }
    graph_free(&g);
    st_free(&v.f);
}

/* test_resnet's eval graph as ctimm-validate runs it (batch norms folded,
 * channels last: conv + bias + ReLU in one cuDNN call) with a NaN stem
 * weight: every logit NaN. */
static void check_nan_weight(void)
{
    Vectors v;
    CtErr err;
    Graph g, f, l;
    if (vectors_open(&v, "test_resnet", 1))
        return;
    ModelSpec spec = {.batch_size = v.batch, .args = v.args};
    int rc = model_build(v.m, &spec, &g, &err);
    if (!rc) {
        rc = bn_fold(&g, &f, &err);
        graph_free(&g);
    }
    if (!rc) {
        rc = layout_channels_last(&f, &l, &err);
        graph_free(&f);
    }
    CHECKF(rc == 0, "test_resnet: %s", err.msg);
    if (rc == 0) {
        CtState init;
        Run cu;
        state_create(&init, &l);
        CHECKF(state_load(&init, &v.f, "state.", &err) == 0, "test_resnet: %s", err.msg);
        ((float *)state_data(&init, 0))[0] = NAN; /* the stem convolution's weight, first in the state_dict */
        int ran = run(&ct_backend_cuda, "test_resnet NaN weight", &l, &init, v.in, 1, &cu) == 0;
        if (ran) {
            const float *y = cu.out[0].data;
            int64_t n = shape_numel(&cu.out[0].type.shape), finite = 0;
            for (int64_t i = 0; i < n; i++)
                finite += isfinite(y[i]);
            CHECKF(finite == 0, "test_resnet with a NaN stem weight on cuda: %lld of %lld logits finite",
                   (long long)finite, (long long)n);
        }
        run_free(&l, &cu, ran);
        state_free(&init);
        graph_free(&l);
    }
    st_free(&v.f);
}

/* test_resnet's eval graph compiled for an architecture the device is not:
 * prepare refuses it before loading anything. */
static void check_other_arch(void)
{
    ProgramOptions device = {0};
    CtErr err;
    Graph g;
    CtRunner rr;
    ModelSpec spec = {.batch_size = 1, .args = model_args_default()};
    CHECKF(ct_backend_cuda.target_options(&device, &err) == 0, "%s", err.msg);
    if (model_build(model_find("test_resnet"), &spec, &g, &err)) {
        CHECKF(0, "test_resnet: %s", err.msg);
        return;
    }
    ProgramOptions other = {.cuda_cc = device.cuda_cc == 80 ? 90 : 80};
    CtState st;
    state_create(&st, &g);
    int rc = backend_open(&rr, &ct_backend_cuda, &g, &st, &other, &err);
    CHECKF(rc != 0 && strstr(err.msg, "cannot load on"), "sm_%d on sm_%d: %s", other.cuda_cc, device.cuda_cc,
           rc ? err.msg : "prepared");
    if (rc == 0)
        backend_close(&rr);
    printf("test_gpu_parity: sm_%d program on sm_%d: %s\n", other.cuda_cc, device.cuda_cc, err.msg);
    state_free(&st);
    graph_free(&g);
}

static const char *const precisions[] = {"f32", "f32_cl", "f16", "bf16"};

/* Model m's configuration `prec` in `mode`; 0 where it is not one (an AMP
 * training step of a BatchNorm net: see the top of this file). */
static int check_config(const char *model, const char *mode, const char *prec)
{
    int training = !strcmp(mode, "train"), bn = strcmp(model, "test_vit") != 0;
    int k = 0;
    while (k < 4 && strcmp(prec, precisions[k]))
        k++;
    if (k == 4 || (!training && strcmp(mode, "eval")) || (k >= 2 && bn && training))
        return 0;
    static const CtDType low[] = {CT_F32, CT_F32, CT_F16, CT_BF16};
    check_model(model, low[k], k > 0, training);
    return 1;
}

int main(int argc, char **argv)
{
    char why[512];
    int a = 1;
    if (a < argc && !strcmp(argv[a], "--sync-each")) /* compute-sanitizer: a fault names its step */
        options.sync_each = 1, a++;
    if (!cuda_backend_usable(why, sizeof why)) {
        printf("test_gpu_parity: skipped: --device cuda cannot run here: %s\n", why);
        return SKIP;
    }
    const char *what = a < argc ? argv[a] : "all";
    if (!strcmp(what, "nan"))
        check_nan_weight();
    else if (!strcmp(what, "other_arch"))
        check_other_arch();
    else if (!strcmp(what, "uint8"))
        check_uint8_step(3);
    else if (!strcmp(what, "uint8_gray"))
        check_uint8_step(1);
    else if (strcmp(what, "all")) {
        /* MODEL [eval|train [PRECISION]]: that model's configurations */
        int ran = 0;
        for (int t = 0; t < 2; t++) {
            const char *mode = t ? "train" : "eval";
            if (a + 1 < argc && strcmp(argv[a + 1], mode))
                continue;
            for (int k = 0; k < 4; k++)
                if (a + 2 >= argc || !strcmp(argv[a + 2], precisions[k]))
                    ran += check_config(what, mode, precisions[k]);
        }
        CHECKF(ran > 0, "no configuration of '%s' matches the arguments", what);
    } else {
        static const char *const models[] = {"test_resnet", "test_vit", "test_efficientnet", "test_convnext"};
        for (int m = 0; m < 4; m++)
            for (int t = 0; t < 2; t++)
                for (int k = 0; k < 4; k++)
                    check_config(models[m], t ? "train" : "eval", precisions[k]);
        check_nan_weight();
        check_other_arch();
        check_uint8_step(3);
        check_uint8_step(1);
    }
    return check_done("test_gpu_parity");
}
