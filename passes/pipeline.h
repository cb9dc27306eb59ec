/*
 * The pass pipeline: the one order in which a model's forward graph (as
 * model_build makes it) becomes the graph a backend compiles, for every
 * tool, bench and test, and the table of its stages that `ctimm-compile
 * --passes LIST` and `--dump-ir-after STAGE` read:
 *
 *   build     the forward graph as built: a stage to dump, nothing runs
 *   input     the image input as the loader's uint8 batch, normalised (and
 *             in training erased and mixed) by the graph's first nodes
 *   bn_fold   eval graphs: batch norms folded into their convs and linears
 *   amp       torch.autocast's policy, on the forward
 *   autodiff  training graphs: loss, backward and optimizer update
 *             (train_step_build); the backward follows amp's dtypes
 *   layout    channels_last
 *   remat     training graphs: activations recomputed in the backward
 *             (--grad-checkpointing's units, --memory-budget), last, so
 *             what it recomputes is what the backend would run; autodiff
 *             then steps the optimizer inside the backward
 *             (OptimSpec.step_in_backward)
 *   fuse, plan, stats
 *             analyses the caller runs on the result (stats on the forward
 *             as built); --passes names them, the pipeline runs none
 *
 * bn_fold comes before amp: after amp, the casts between a conv and its
 * batch norm hide the pattern and nothing folds.
 */
#ifndef CTIMM_PIPELINE_H
#define CTIMM_PIPELINE_H

#include "ir/buf.h"
#include "passes/autodiff.h"
#include "passes/passes.h"

/* What a caller wants from the pipeline. */
typedef struct Pipeline {
    InputSpec input; /* input.u8: the "input" stage; else the f32 NCHW input as built */
    int training;  /* append the training step of loss and opt */
    LossSpec loss;
    OptimSpec opt; /* CT_OPT_NONE: loss and gradients, no update */
    int amp;       /* autocast to amp_dtype (CT_F16 or CT_BF16) */
    CtDType amp_dtype;
    int bn_fold;   /* eval graphs (ctimm-train's eval graph shares the training state unfolded) */
    int channels_last;
    RematSpec remat; /* units or a budget: the remat stage runs */
    /* --passes: stage names, comma-separated; a stage named here runs as if
     * its field above asked for it. NULL or "none": the fields alone. */
    const char *passes;
    /* --dump-ir-after: the graph after this stage (when it runs) is dumped
     * into *dump; NULL: none. */
    const char *dump_after;
    CtBuf *dump;
    int verify; /* graph_verify on the input and after every stage that ran */
} Pipeline;

/* What tools set `verify` to: on in debug builds (without NDEBUG); tests
 * always set it. */
#ifdef NDEBUG
#define PIPELINE_VERIFY 0
#else
#define PIPELINE_VERIFY 1
#endif

#define PIPELINE_MAX_STAGES 16

typedef struct PipelineResult {
    /* Training: as train_step_build made it. Its value ids are of the graph
     * autodiff left, which later passes renumber (inputs and outputs keep
     * their order): use the output index below for the graph returned. */
    TrainStep ts;
    int finite_out; /* the output saying the step applied (opt.skip_nonfinite), or -1 */
    RematReport remat; /* what the remat stage did, where it ran */
    const char *ran[PIPELINE_MAX_STAGES]; /* the stages that ran, in order */
    int nran;
} PipelineResult;

/* One stage of the table. */
typedef struct PassDef {
    const char *name;
    /* Replaces *g by its rewrite under p (r collects what callers need);
     * on failure *g holds nothing to free. NULL: nothing to run (build). */
    int (*run)(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err);
    /* Whether p's fields ask for it (else only a name in p->passes does).
     * Neither run nor asked: an analysis, which the pipeline never runs. */
    int (*asked)(const Pipeline *p);
    unsigned flags;
} PassDef;

enum {
    PASS_EVAL_ONLY = 1u << 0,  /* skipped on training graphs */
    PASS_TRAIN_ONLY = 1u << 1, /* skipped on eval graphs */
    PASS_NAMED = 1u << 2,      /* --passes may name it */
    PASS_DUMP = 1u << 3,       /* --dump-ir-after may name it */
};

/* The table's stage called `name`, or NULL. */
const PassDef *pass_find(const char *name);

/* Refuses a `passes` list or `dump_after` that names no stage --passes or
 * --dump-ir-after may name, listing those. */
int pipeline_check(const Pipeline *p, CtErr *err);
/* Whether p->passes names stage `name` (the analyses: whether to run them). */
int pipeline_named(const Pipeline *p, const char *name);

/* Runs the table's stages that apply, in order, on the forward graph *g,
 * which becomes the graph to compile. r may be NULL; else the caller frees
 * r->ts (train_step_free). On failure *g and r hold nothing to free, and
 * err names the stage that failed, or that broke the graph (verify). */
int pipeline_run(const Pipeline *p, Graph *g, PipelineResult *r, CtErr *err);
/* The same over the given stages instead of the table (tests: a stage of
 * their own among the table's). */
int pipeline_run_stages(const PassDef *const *stages, int n, const Pipeline *p, Graph *g, PipelineResult *r,
                        CtErr *err);

#endif
