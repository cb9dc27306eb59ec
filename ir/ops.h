/*
 * Op definitions: every op kind is one OpDef that holds its name, attribute
 * names, shape/dtype rule and reference kernel, in ir/ops/<family>.c. The
 * kinds are listed once in ir/ops.def. Later stages (VJP, codegen) add their
 * rule as a field here, beside the others.
 */
#ifndef CTIMM_OPS_H
#define CTIMM_OPS_H

#include "ir/status.h"

typedef enum CtOp {
#define OP(name) CT_OP_##name,
#include "ir/ops.def"
#undef OP
    CT_NOPS
} CtOp;

struct Graph;
struct Node;
struct CtType;
struct Emitter;

typedef struct OpDef {
    const char *name;
    int min_in, max_in;
    /* Attribute names in Node.iattr / Node.fattr order, NULL-terminated;
     * the dump prints them as name=value. */
    const char *iattr[11];
    const char *fattr[5];
    /* Set for ops whose attributes are one list (reshape's shape, permute's
     * order): iattr[0] is its length and iattr[1..] its items. */
    const char *list_attr;
    /* Shape rule: fills out[] from the inputs and attributes; returns the
     * number of outputs, or -1 with a message (without the node's name). */
    int (*infer)(const struct Graph *g, const struct Node *n, struct CtType *out, CtErr *err);
    /* Reference kernel. Every tensor is a dense row-major array of doubles;
     * the ref backend rounds results to each value's dtype afterwards. */
    void (*ref)(const struct Graph *g, const struct Node *n, double *const *in, double *const *out);
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
} OpDef;

const OpDef *op_def(CtOp op);
/* -1 when no op has this name. */
int op_from_name(const char *name);

#endif
