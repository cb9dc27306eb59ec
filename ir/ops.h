/*
 * Op definitions: every op kind is one OpDef that holds its name, attribute
 * names, shape/dtype rule, reference kernel, VJP, and every fact a pass or
 * backend needs (fusion class, scalar expression, amp policy, layout rule,
 * cost), in ir/ops/<family>.c. The kinds are listed once in ir/ops.def.
 * Passes read these fields rather than keep op lists of their own; a field
 * left unset fails tests/test_op_facts.c.
 */
#ifndef CTIMM_OPS_H
#define CTIMM_OPS_H

#include <stdint.h>

#include "ir/status.h"

typedef enum CtOp {
/* jsd_cross_entropy's most splits (ir/ops/loss.c; its cuda kernels keep
 * one log-sum-exp a split in an array this long) */
#define CT_JSD_MAX_SPLITS 8

#define OP(name) CT_OP_##name,
#include "ir/ops.def"
#undef OP
    CT_NOPS
} CtOp;

struct Graph;
struct Node;
struct CtType;
struct Emitter;
struct Sx;
struct CtCollective;

/* How fusion (passes/fuse.h) and the backends treat the op. */
typedef enum OpFusion {
    OP_FUSION_UNSET,
    OP_ELEMENTWISE, /* element i of each output from element i of each input (broadcast): a scalar
                     * expression, which joins fused kernels */
    OP_ACTIVATION,  /* elementwise y = f(x) that may also end a convolution or GEMM as its epilogue */
    OP_VIEW,        /* reshape: elementwise (element i reads element i) where both sides are row-major */
    OP_CONTRACTION, /* conv2d, linear, matmul: a library call taking a bias, residual, activation epilogue */
    OP_REDUCTION,   /* sums over dims (reduce_sum, the losses, all_finite): a kernel of its own */
    OP_LIBRARY,     /* any other computation with a kernel of its own: norms, pooling, attention, ... */
    OP_DATA,        /* data movement: permute, slice, concat, to_layout */
    OP_STATE,       /* assign: the in-place write of state */
} OpFusion;

/* torch.autocast's policy, for the op's inputs (passes/amp.c). */
typedef enum OpAmp {
    OP_AMP_UNSET,
    OP_AMP_FOLLOW, /* the widest float input's dtype, kept inputs aside (low when every other float
                    * input is low); backward ops follow their inputs, as autograd runs them in the
                    * forward's dtypes */
    OP_AMP_LOW,    /* the low-precision dtype: convolutions, matmuls, attention */
    OP_AMP_F32,    /* f32: norms, softmax, losses, reductions, rsqrt */
    OP_AMP_DEST,   /* input 0's dtype: state written in its own dtype (assign), batch norm in its input's */
    OP_AMP_F32_IO, /* f32 math over input 0 in any float dtype, as it is; output 0 in iattr[0]'s dtype:
                    * the low dtype where every reader would cast the output there, else f32; the other
                    * inputs as OP_AMP_F32 (layer_norm) */
} OpAmp;

/* What the op does with channels-last values (passes/layout.c). */
typedef enum OpLayout {
    OP_LAYOUT_UNSET,
    OP_LAYOUT_EITHER, /* computes on 4-D values in either layout, element for element or per channel:
                       * its 4-D outputs follow its inputs to NHWC */
    OP_LAYOUT_NHWC,   /* has an NHWC form and takes it: a conv net's channels-last part starts here */
    OP_LAYOUT_NCHW,   /* takes its 4-D inputs row-major (NCHW) */
} OpLayout;

/* What timm's benchmark.py counts for a node (passes/stats.h). */
typedef struct OpCost {
    int64_t macs, activations;
} OpCost;
/* OpDef.cost's flags: sdpa counted as its two matmuls (timm without fused attention). */
#define OP_COST_ATTENTION 1u

typedef struct OpDef {
    const char *name;
    int min_in, max_in;
    /* Attribute names in Node.iattr / Node.fattr order, NULL-terminated;
     * the dump prints them as name=value. */
    const char *iattr[11];
    const char *fattr[9]; /* CT_MAX_FATTR names and the NULL */
    /* Set for ops whose attributes are one list (reshape's shape, permute's
     * order): iattr[0] is its length and iattr[1..] its items. */
    const char *list_attr;
    /* Shape rule: fills out[] from the inputs and attributes; returns the
     * number of outputs, or -1 with a message (without the node's name). */
    int (*infer)(const struct Graph *g, const struct Node *n, struct CtType *out, CtErr *err);
    /* Reference kernel. Every tensor is a dense row-major array of doubles;
     * the ref backend rounds results to each value's dtype afterwards. */
    void (*ref)(const struct Graph *g, const struct Node *n, double *const *in, double *const *out);
    /* In place of ref, for the ops that reduce over the data-parallel ranks
     * (allreduce_mean, batch norm synchronised across them): the reference
     * kernel given the collective of the program's run (ir/collective.h),
     * NULL for a world of one rank. A field of these few ops rather than an
     * argument of every kernel: the rest never see a rank. */
    void (*ref_ranks)(const struct Graph *g, const struct Node *n, double *const *in, double *const *out,
                      const struct CtCollective *coll);
    /* VJP rule (reverse-mode autodiff): emits into din[k] the gradient of
     * each input k with need[k] set, given dout[j], the gradient of output j
     * (-1 where none flows back). n is a copy: emitting moves the node array.
     * NULL for ops that are not differentiated (backward and update ops). */
    void (*vjp)(struct Emitter *e, const struct Node *n, const int *dout, const int *need, int *din);
    /* Inputs that are never differentiable (integer targets, running
     * statistics, the step count): bit k set for input k. */
    unsigned nondiff;
    /* Inputs whose space output 0 may take when it is their last read
     * (elementwise ops, element for element): bit k for input k. */
    unsigned inplace;
    OpFusion fusion;
    /* Elementwise and view ops: builds node n's scalar expression
     * (ir/scalar.h), its outputs in s->out. */
    void (*scalar)(const struct Node *n, struct Sx *s);
    /* Elementwise optimizer updates of one parameter: the updates with the
     * same op, attributes and inputs from this one on (lr, step, apply)
     * run as one multi-tensor launch; 0 for other ops. */
    int batch_from;
    OpAmp amp;
    unsigned amp_keep; /* inputs amp leaves in their dtype (batch norm's running statistics): bit k */
    /* amp_keep where the kept inputs' indices depend on the node (sdpa_grad's
     * f32 statistics follow its form and operands); NULL: amp_keep. */
    unsigned (*amp_keep_of)(const struct Graph *g, const struct Node *n);
    OpLayout layout;
    unsigned layout_keep;       /* inputs layout leaves in their storage (conv weights): bit k */
    unsigned layout_contig_out; /* weight-shaped outputs that stay row-major: bit k */
    /* Forward ops (and assign): the node's MACs and activations, as fvcore
     * counts the ATen op timm calls there, flags OP_COST_*. NULL for the
     * ops timm's counts do not define (backward and update ops). */
    OpCost (*cost)(const struct Graph *g, const struct Node *n, unsigned flags);
} OpDef;

const OpDef *op_def(CtOp op);
/* Node n's reference kernel: ref, or ref_ranks over coll. */
void op_run_ref(const struct Graph *g, const struct Node *n, double *const *in, double *const *out,
                const struct CtCollective *coll);
/* The inputs of node n that amp leaves in their dtype: bit k for input k. */
unsigned op_amp_keep(const struct Graph *g, const struct Node *n);
/* -1 when no op has this name. */
int op_from_name(const char *name);
/* muon_update's Newton-Schulz coefficients (a, b, c) of iteration `step` under
 * coefficient preset `preset` (ir/ops/optim_norm.c): for its cuda kernels. */
void op_muon_coefficients(int preset, int step, double abc[3]);
/* matmul node n's product op(a) [M, K] x op(b) [K, N] over a's and b's last
 * two dims, op the transpose where trans_a / trans_b say (ir/ops/matmul.c):
 * for the backends' GEMM calls. */
void op_matmul_dims(const struct Graph *g, const struct Node *n, int64_t *M, int64_t *K, int64_t *N);

#endif
