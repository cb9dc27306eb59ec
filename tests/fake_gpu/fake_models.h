/* What the tests on the fake GPU share: the fake as the driver and
 * cuBLASLt the cuda backend opens, a kernel cache of its own for each
 * scenario's library choices, and timm's test models built, loaded with
 * their vectors' weights and compiled for the fake (the device the cuda
 * backend finds). */
#ifndef CTIMM_FAKE_MODELS_H
#define CTIMM_FAKE_MODELS_H

#include <stdlib.h>
#include <string.h>

#include "frontend/builder.h"
#include "passes/pipeline.h"
#include "runtime/backend.h"
#include "tests/fake_gpu/fake_gpu.h"
#include "tests/model_vectors.h"

static char cache_root[256], *compile_cache;

/* A kernel cache of its own for the libraries' choices of one scenario;
 * the programs compile into the one the environment names, as every
 * test's. */
static void choices_in(const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", cache_root, name);
    setenv("CTIMM_CACHE_DIR", dir, 1);
}

static void compile_in_default_cache(void)
{
    if (compile_cache)
        setenv("CTIMM_CACHE_DIR", compile_cache, 1);
    else
        unsetenv("CTIMM_CACHE_DIR");
}

static void check_clean(const char *what)
{
    const char *v = fake_gpu_violation();
    CHECKF(v == NULL, "%s: the fake GPU refused a call: %s", what, v);
    fake_gpu_reset_violation();
}


/* The fake as the driver and cuBLASLt, and the choices' caches' root. */
static void fake_tests_begin(const char *name)
{
    setenv("CTIMM_LIBCUDA", FAKE_GPU_LIB, 1);
    setenv("CTIMM_LIBCUBLASLT", FAKE_GPU_LIB, 1);
    const char *tmp = getenv("TMPDIR");
    snprintf(cache_root, sizeof cache_root, "%s/ctimm-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    CT_ASSERT(mkdtemp(cache_root) != NULL);
    const char *env = getenv("CTIMM_CACHE_DIR");
    compile_cache = env && *env ? strdup(env) : NULL;
}

static void fake_tests_end(void)
{
    test_rm_tree(cache_root);
    free(compile_cache);
}

typedef struct Model {
    Vectors v;
    Graph g;
    CtState init;
    CtProgram *p;
} Model;

static void model_close(Model *m)
{
    if (m->p)
        program_free(m->p);
    state_free(&m->init);
    graph_free(&m->g);
    st_free(&m->v.f);
}

typedef struct Variant {
    CtDType low; /* CT_F32: no AMP */
    int channels_last;
    int bench;     /* as ctimm-bench runs it: inputs uploaded once, outputs left on the device */
    int eval;      /* inference, batch norms folded into their convolutions (ctimm-compile's) */
    int sync_each; /* a synchronisation after every step, no graph (ProgramOptions.sync_each) */
} Variant;

/* The model's SGD step, or its inference, compiled for the device the
 * cuda backend finds: the fake GPU. */
static int model_open(Model *m, const char *name, Variant va)
{
    CtErr err;
    memset(m, 0, sizeof *m);
    if (vectors_open(&m->v, name, 1))
        return -1;
    ModelSpec spec = {.batch_size = m->v.batch, .training = !va.eval, .args = m->v.args};
    Pipeline pl = {.training = !va.eval, .loss = {CT_LOSS_CROSS_ENTROPY, 0.1, -1, 0},
                   .opt = {.kind = CT_OPT_SGD, .momentum = 0.9, .weight_decay = 1e-4,
                           .no_weight_decay = m->v.m->no_weight_decay},
                   .amp = va.low != CT_F32, .amp_dtype = va.low, .channels_last = va.channels_last,
                   .bn_fold = va.eval, .verify = 1};
    if (model_build(m->v.m, &spec, &m->g, &err) || pipeline_run(&pl, &m->g, NULL, &err)) {
        CHECKF(0, "%s: %s", name, err.msg);
        st_free(&m->v.f);
        return -1;
    }
    state_create(&m->init, &m->g);
    CHECKF(state_load(&m->init, &m->v.f, "state.", &err) == 0, "%s: %s", name, err.msg);
    ProgramOptions o = {.outputs_on_device = va.bench, .inputs_fixed = va.bench, .sync_each = va.sync_each};
    compile_in_default_cache();
    int rc = ct_backend_cuda.target_options(&o, &err) || program_compile(&m->g, CT_TARGET_CUDA, &o, &m->p, &err);
    CHECKF(rc == 0, "%s: compiling for the fake GPU: %s", name, err.msg);
    CHECKF(rc || o.cuda_cc == FAKE_GPU_CC, "%s: compiled for sm_%d", name, o.cuda_cc);
    check_clean(name);
    if (rc)
        model_close(m);
    return rc ? -1 : 0;
}

#endif
