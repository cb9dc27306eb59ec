/*
 * The cpu backend's node kernels and its table; its context, which runs a
 * program's steps over one arena, is compiled.c. GEMMs and convolutions go
 * through BLAS (gemm_ops.c), or a convolution through oneDNN where it was
 * chosen (conv_choice.h, run by compiled.c); the other
 * ops are plain f32 loops (their files). An op without an f32 kernel, or a
 * node on integer values (the AdamW step count, casts of it), runs its ref
 * kernel through doubles, which is exact for those. f16 and bf16 values (the
 * amp pass's) are stored as such and widened: their nodes run the f32 kernel
 * on f32 copies and round the results to the output's dtype, as the ref
 * backend rounds its doubles. f64 nodes are not supported.
 */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/cpu/compiled.h"
#include "runtime/cpu/cpu.h"

static const CpuKernel kernels[CT_NOPS] = {
#define X(op) [CT_OP_##op] = cpu_##op,
    CPU_KERNELS(X)
#undef X
};

static const CpuRankKernel rank_kernels[CT_NOPS] = {
#define X(op) [CT_OP_##op] = cpu_##op,
    CPU_RANK_KERNELS(X)
#undef X
};

/* Node n's f32 kernel, a rank kernel given coll. */
static void run_kernel(const Graph *g, const Node *n, float *const *in, float *const *out, const CtCollective *coll)
{
    if (rank_kernels[n->op])
        rank_kernels[n->op](g, n, in, out, coll);
    else
        kernels[n->op](g, n, in, out);
}

float *cpu_floats(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    CT_ASSERT(p != NULL);
    return p;
}

typedef struct Scratch {
    float *p[CPU_SCRATCH_SLOTS];
    int64_t n[CPU_SCRATCH_SLOTS];
} Scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *arg)
{
    Scratch *s = arg;
    for (int k = 0; k < CPU_SCRATCH_SLOTS; k++)
        free(s->p[k]);
    free(s);
}

static void scratch_key_create(void) { CT_ASSERT(pthread_key_create(&scratch_key, scratch_free) == 0); }

float *cpu_scratch(int slot, int64_t n)
{
    pthread_once(&scratch_once, scratch_key_create);
    Scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        CT_ASSERT(s != NULL && pthread_setspecific(scratch_key, s) == 0);
    }
    if (s->n[slot] < n) {
        free(s->p[slot]);
        s->p[slot] = cpu_floats(n);
        s->n[slot] = n;
    }
    return s->p[slot];
}

static int storable(CtDType t)
{
    return t == CT_F32 || t == CT_F16 || t == CT_BF16 || t == CT_I64 || t == CT_I32 || t == CT_U8;
}

static int low_float(CtDType t) { return t == CT_F16 || t == CT_BF16; }

static int cpu_supports(const Graph *g, const Node *n)
{
    for (int k = 0; k < n->nin; k++)
        if (!storable(g->values[n->in[k]].type.dtype))
            return 0;
    for (int k = 0; k < n->nout; k++)
        if (!storable(g->values[n->out[k]].type.dtype))
            return 0;
    return 1;
}

/* Whether node n may take its f32 kernel: one exists and every value is f32,
 * f16 or bf16 (widened), except the integer inputs the kernel reads as such. */
static int fast_path(const Graph *g, const Node *n)
{
    if (!kernels[n->op] && !rank_kernels[n->op])
        return 0;
    for (int k = 0; k < n->nin; k++) {
        CtDType t = g->values[n->in[k]].type.dtype;
        int int_ok = (n->op == CT_OP_adamw_update && k == 5) || (n->op == CT_OP_image_normalize && k == 0) ||
                     (n->op == CT_OP_random_erase && k == 1) ||
                     ((n->op == CT_OP_gather || n->op == CT_OP_gather_grad) && k == 1);
        if (t != CT_F32 && !low_float(t) && !int_ok)
            return 0;
    }
    for (int k = 0; k < n->nout; k++) {
        CtDType t = g->values[n->out[k]].type.dtype;
        if (t != CT_F32 && !low_float(t))
            return 0;
    }
    return 1;
}

/* The f32 kernel of n on f32 copies of its f16/bf16 inputs, its f16/bf16
 * outputs rounded from f32 scratch. Inputs are copied before the kernel
 * writes, so an output sharing an input's space is safe. */
static void run_widened(const Graph *g, const Node *n, void *const *in, void *const *out, const CtCollective *coll)
{
    float *fin[CT_MAX_IN], *fout[CT_MAX_OUT];
    for (int k = 0; k < n->nin; k++) {
        const Value *v = &g->values[n->in[k]];
        fin[k] = in[k];
        if (low_float(v->type.dtype)) {
            int64_t cnt = shape_numel(&v->type.shape);
            fin[k] = cpu_floats(cnt);
            elems_to_f32(in[k], v->type.dtype, cnt, fin[k]);
        }
    }
    for (int k = 0; k < n->nout; k++)
        fout[k] = low_float(g->values[n->out[k]].type.dtype) ? cpu_floats(shape_numel(&g->values[n->out[k]].type.shape))
                                                            : out[k];
    run_kernel(g, n, fin, fout, coll);
    for (int k = 0; k < n->nout; k++) {
        const Value *v = &g->values[n->out[k]];
        if (fout[k] != out[k]) {
            elems_from_f32(fout[k], v->type.dtype, shape_numel(&v->type.shape), out[k]);
            free(fout[k]);
        }
    }
    for (int k = 0; k < n->nin; k++)
        if (fin[k] != in[k])
            free(fin[k]);
}

static int any_low(const Graph *g, const Node *n)
{
    for (int k = 0; k < n->nin; k++)
        if (low_float(g->values[n->in[k]].type.dtype))
            return 1;
    for (int k = 0; k < n->nout; k++)
        if (low_float(g->values[n->out[k]].type.dtype))
            return 1;
    return 0;
}

/* The op's ref kernel on doubles converted from and back to the storage. */
static void run_via_ref(const Graph *g, const Node *n, void *const *in, void *const *out, const CtCollective *coll)
{
    double *din[CT_MAX_IN] = {0}, *dout[CT_MAX_OUT] = {0};
    for (int k = 0; k < n->nin; k++) {
        const Value *v = &g->values[n->in[k]];
        int64_t cnt = shape_numel(&v->type.shape);
        din[k] = malloc((size_t)(cnt ? cnt : 1) * sizeof(double));
        CT_ASSERT(din[k] != NULL);
        elems_to_double(in[k], v->type.dtype, cnt, din[k]);
    }
    for (int k = 0; k < n->nout; k++) {
        int64_t cnt = shape_numel(&g->values[n->out[k]].type.shape);
        dout[k] = malloc((size_t)(cnt ? cnt : 1) * sizeof(double));
        CT_ASSERT(dout[k] != NULL);
    }
    op_run_ref(g, n, din, dout, coll);
    for (int k = 0; k < n->nout; k++) {
        const Value *v = &g->values[n->out[k]];
        int64_t cnt = shape_numel(&v->type.shape);
        elems_round(dout[k], v->type.dtype, cnt);
        elems_from_double(dout[k], v->type.dtype, cnt, out[k]);
        free(dout[k]);
    }
    for (int k = 0; k < n->nin; k++)
        free(din[k]);
}


static void run_node(const Graph *g, const Node *n, void *const *in, void *const *out, const CtCollective *coll)
{
    if (n->op == CT_OP_assign) {
        if (in[0] != in[1])
            memmove(in[0], in[1], value_bytes(&g->values[n->in[1]]));
    } else if (fast_path(g, n) && any_low(g, n)) {
        run_widened(g, n, in, out, coll);
    } else if (fast_path(g, n)) {
        run_kernel(g, n, (float *const *)in, (float *const *)out, coll);
    } else {
        run_via_ref(g, n, in, out, coll);
    }
}

void cpu_run_node(const Graph *g, const Node *n, void *const *in, void *const *out, const CtCollective *coll)
{
    if (cpu_node_row_major(g, n))
        cpu_run_row_major(g, n, in, out, coll, run_node);
    else
        run_node(g, n, in, out, coll);
}

static int cpu_sync(CtExec *e, CtErr *err) { return 0; }

static int cpu_threads(void) { return omp_get_max_threads(); }

const CtBackend ct_backend_cpu = {.name = "cpu", .target = CT_TARGET_CPU, .supports = cpu_supports,
                                  .prepare = cpu_exec_prepare, .run = cpu_exec_run, .state_to_host = cpu_sync,
                                  .state_from_host = cpu_sync, .free = cpu_exec_free, .host_threads = cpu_threads,
                                  .note = cpu_exec_note};
