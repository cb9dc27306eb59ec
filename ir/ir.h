/*
 * The IR: a Graph owns Values (tensors with a static shape) and Nodes (one op
 * each), kept in topological order, SSA style: every activation Value is
 * written by exactly one Node. Parameters, buffers and inputs have no
 * producer; state updates (BN running stats) are explicit assign nodes.
 *
 * Values and nodes are referenced by index (ValueId / node position), so the
 * arrays may grow without invalidating references. Strings live in the
 * graph's arena and die with it.
 */
#ifndef CTIMM_IR_H
#define CTIMM_IR_H

#include <stddef.h>
#include <stdint.h>

#include "ir/arena.h"
#include "ir/dtype.h"
#include "ir/ops.h"
#include "ir/status.h"

#define CT_MAX_DIMS 6
#define CT_MAX_IN 10
#define CT_MAX_OUT 5
#define CT_MAX_IATTR 10
#define CT_MAX_FATTR 8

typedef int ValueId;

typedef enum CtLayout { CT_LAYOUT_CONTIG, CT_LAYOUT_CHANNELS_LAST } CtLayout;

typedef enum CtRole {
    CT_ROLE_INPUT,
    CT_ROLE_PARAM,
    CT_ROLE_BUFFER,
    CT_ROLE_ACTIVATION,
    CT_ROLE_GRAD,
    CT_ROLE_STATE,
    /* A tensor the model computes when it is built: timm's non-persistent
     * buffers (relative position indices, attention masks, RoPE tables).
     * It rides in the state, so every backend binds it as it binds a
     * buffer, but no checkpoint holds it and nothing assigns to it. */
    CT_ROLE_CONST,
} CtRole;

/* Roles that live in the state between steps rather than in a step's arena. */
static inline int role_is_state(CtRole r)
{
    return r == CT_ROLE_PARAM || r == CT_ROLE_BUFFER || r == CT_ROLE_STATE || r == CT_ROLE_CONST;
}

/* How a parameter or buffer is initialised (timm's scheme for each module). */
typedef enum CtInitKind {
    CT_INIT_DEFAULT, /* builder only: the module's PyTorch reset_parameters() default */
    CT_INIT_ZEROS,
    CT_INIT_ONES,
    CT_INIT_NORMAL,       /* N(0, a^2) */
    CT_INIT_TRUNC_NORMAL, /* N(0, a^2) truncated to [-2, 2] absolute, as timm's trunc_normal_ */
    CT_INIT_UNIFORM,      /* U(-a, a) */
    CT_INIT_CONSTANT,     /* a (layer-scale gammas) */
    CT_INIT_TRUNC_NORMAL_TF, /* N(0, a^2) truncated to [-2a, 2a], as timm's trunc_normal_tf_ */
    CT_INIT_DATA,            /* a CT_ROLE_CONST's values: `data`, numel doubles in its graph's arena */
} CtInitKind;

typedef struct CtInit {
    CtInitKind kind;
    double a;
    const double *data;
} CtInit;

typedef struct CtShape {
    int ndim;
    int64_t d[CT_MAX_DIMS];
} CtShape;

/* Type of a tensor: what a shape rule computes for each output. */
typedef struct CtType {
    CtShape shape;
    CtDType dtype;
} CtType;

typedef struct Value {
    CtType type;
    CtLayout layout;
    CtRole role;
    const char *name; /* state_dict name for params/buffers; may be NULL */
    int producer;     /* node index, -1 for inputs/params/buffers */
    CtInit init;      /* params and buffers only */
} Value;

typedef struct Node {
    CtOp op;
    int nin, nout;
    ValueId in[CT_MAX_IN];
    ValueId out[CT_MAX_OUT];
    int64_t iattr[CT_MAX_IATTR];
    double fattr[CT_MAX_FATTR];
    const char *scope; /* module path that created it ("layer1.0.conv1"), for messages */
} Node;

typedef struct Graph {
    CtArena arena;
    Value *values;
    int nvalues, cap_values;
    Node *nodes;
    int nnodes, cap_nodes;
    ValueId *outputs;
    int noutputs, cap_outputs;
    /* Persistent tensors: params and buffers in timm's state_dict order
     * (module tree, depth first, a module's own params then buffers before
     * its children), then optimizer state in a training graph. */
    ValueId *state;
    int nstate;
} Graph;

/* Grows a malloc'd array to hold `need` elements (doubling); aborts when
 * memory runs out. */
void *ct_grow(void *p, int *cap, int need, size_t elem);

void graph_init(Graph *g);
void graph_free(Graph *g);

ValueId graph_add_value(Graph *g, CtType type, CtRole role, const char *name);
/* Appends a node whose outputs are new activation values typed by the op's
 * shape rule. Returns the node index, or -1 with err filled when the rule
 * rejects the inputs or attributes. */
int graph_add_node(Graph *g, const Node *proto, const char *scope, CtErr *err);
void graph_mark_output(Graph *g, ValueId v);
/* How many reads of v g has: its nodes' inputs and its outputs, each once. */
int graph_reads(const Graph *g, ValueId v);

static inline const Value *graph_value(const Graph *g, ValueId v) { return &g->values[v]; }
static inline int64_t shape_numel(const CtShape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->d[i];
    return n;
}
/* The bytes v's elements take, packed. */
static inline size_t value_bytes(const Value *v)
{
    return (size_t)shape_numel(&v->type.shape) * ct_dtype_size(v->type.dtype);
}
int shape_equal(const CtShape *a, const CtShape *b);
/* "[2,3,160,160]" into buf. */
const char *shape_str(const CtShape *s, char *buf, size_t n);
CtShape shape_make(int ndim, const int64_t *d);
/* The element counts before and after dim: s viewed as [outer, d[dim], inner]. */
void shape_split_at_dim(const CtShape *s, int64_t dim, int64_t *outer, int64_t *inner);
/* Strides of `in` read through its broadcast to `out` (0 on broadcast dims). */
void shape_broadcast_strides(const CtShape *in, const CtShape *out, int64_t *strides);

const char *ct_role_name(CtRole r);
/* init as another graph holds it: CT_INIT_DATA's values copied into the
 * arena `a` (n of them), other kinds as they are. */
CtInit init_in_arena(CtArena *a, CtInit init, int64_t n);
const char *ct_layout_name(CtLayout l);
/* The strides of v's logical dims in memory as the backends that keep
 * layouts store it (cpu, cuda; not the ref backend): row-major, or N, H, W,
 * C for a channels-last 4-D value. */
void value_strides(const Value *v, int64_t *st);
/* Whether v's elements lie in memory in row-major order: not channels-last,
 * or channels-last with one channel or one pixel (a [N,C,1,1] pooled or
 * layer scale value), whose two orders are the same bytes. */
int value_row_major(const Value *v);

/* Checks SSA, order, shapes and dtypes (re-running every shape rule), roles
 * and dangling values. Every pass calls it; messages name the node. */
int graph_verify(const Graph *g, CtErr *err);

/* One node a line; stable, for golden tests and debugging passes by eye. */
struct CtBuf;
void graph_dump(const Graph *g, struct CtBuf *out);

/* Number of elements over all parameters (timm's param_count). */
int64_t graph_param_count(const Graph *g);

#endif
