/*
 * The graph-to-graph passes (passes/pipeline.h runs them in order). Each
 * pass is one file in passes/ with its contract at the top; each takes a
 * verified graph and leaves a verified graph in `out` (the input is not
 * changed).
 */
#ifndef CTIMM_PASSES_H
#define CTIMM_PASSES_H

#include "ir/ir.h"

/* The graph's image input as DESIGN.md has it: the loader's uint8 batch
 * [B, H, W, C] as it arrives, normalised in the graph by mean/std; in
 * training, random erasing and mixup/cutmix there too, each reading the
 * numbers the host drew for the batch as a further input (ir/ops/image.c
 * says what they hold). */
typedef struct InputSpec {
    int u8;                 /* 0: the f32 [B, C, H, W] input as built (ctimm-run, parity tests, benches) */
    double mean[4], std[4]; /* of each of the image's C channels (the first C; C <= 4) */
    int erase_boxes;        /* K > 0: random_erase with an i64 [B, K, 5] input "erase_boxes" */
    int erase_mode;         /* random_erase's mode: 0 const, 1 rand, 2 pixel */
    int mix;                /* mix_images with an f32 [B, 6] input "mix_params" */
} InputSpec;

/* On a forward graph whose input 0 is the image batch: that input becomes
 * the uint8 batch, followed by image_normalize (then random_erase and
 * mix_images where s asks). The added inputs follow the graph's own. */
int input_image(const Graph *g, const InputSpec *s, Graph *out, CtErr *err);
int bn_fold(const Graph *g, Graph *out, CtErr *err);
int layout_channels_last(const Graph *g, Graph *out, CtErr *err);
/* On a forward graph, before autodiff (the backward follows its dtypes). */
int amp_cast(const Graph *g, CtDType low, Graph *out, CtErr *err);


/*
 * Rematerialisation, on a training graph (after autodiff and layout): some
 * activations the backward reads are recomputed there, just before the first
 * backward node that reads them, instead of kept from the forward, so their
 * space comes back in the forward. The backward is every node that depends on
 * the input "loss_scale" (autodiff's seed). Each recomputed value has its
 * bits: the same ops on the same inputs (dropout and drop path draw their
 * masks from a counter, not a stream); ops that talk to the other ranks
 * (allreduce, synchronised batch norm) are never run twice.
 *   units (--grad-checkpointing, timm's checkpoint_seq): a forward node whose
 *     scope matches one of these POSIX EREs at its start belongs to the
 *     unit the matched text names (timm's "layer1.0", "blocks.3"); a unit's
 *     values that no node outside it reads are recomputed, so what a block
 *     keeps is what crosses its edges;
 *   budget > 0 (--memory-budget): the fewest candidates such that the
 *     graph's planned peak (plan_memory's arena + params + state + inputs +
 *     outputs) fits in `budget` bytes, taken in cheap's order (below), then
 *     the other elementwise, data movement, norm, pooling and reduction
 *     outputs (that class order, the biggest first; never a contraction or
 *     attention); fails, with the least it can reach, where nothing does;
 *   cheap (the tools' default; --keep-activations turns it off): among the
 *     activations whose recomputation is at most REMAT_CHEAP_NODES
 *     elementwise, norm or pooling nodes reading only values the backward
 *     keeps anyway (a GELU's output from the linear's output its gradient
 *     reads; a conv's batch norm + ReLU from the conv output the norm's
 *     gradient reads), every one that costs no bytes (fused into elementwise
 *     readers), then the fewest bytes moved per byte saved first until the
 *     planned peak is `share` of the graph's (0: REMAT_CHEAP_SHARE; all of
 *     them where that is out of reach),
 *     kept only where that does not raise the planned peak. torch.compile's
 *     partitioner recomputes such fusible chains by default too.
 */
#define REMAT_CHEAP_NODES 4
/* 3/4 of keeping everything, which is about what torch's eager training
 * holds (autograd keeps the same tensors): issue 22's peak of at most 0.8x
 * eager's, with room for the libraries' workspace. */
#define REMAT_CHEAP_SHARE 0.75
typedef struct RematSpec {
    const char *const *units;
    int nunits;
    size_t budget;
    int cheap;
    double share;
} RematSpec;

typedef struct RematReport {
    int values;        /* activations the backward read that it now recomputes */
    int nodes;         /* nodes run a second time */
    double extra_macs; /* their multiply-adds (fvcore's count, as stats) */
    size_t peak_before, peak_after; /* planned peaks, bytes */
} RematReport;

int remat(const Graph *g, const RematSpec *s, Graph *out, RematReport *rep, CtErr *err);
/* The forward batch norm that training batch_norm node n runs again, as
 * remat wires a rerun (its running mean input that norm's update, the same
 * weight and bias), or -1 where n is no rerun. */
int remat_bn_forward(const Graph *g, const Node *n);

#endif
