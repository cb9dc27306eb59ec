/*
 * Reverse-mode autodiff and the training step built on it.
 *
 * autodiff: appends to g the gradient of the scalar `loss` with respect to
 * each of wrt[], by walking the nodes that lead to the loss backwards and
 * calling each op's VJP rule (defined beside the op). Gradients of a value
 * read by several nodes are summed; nothing is built for values no wrt[]
 * depends on, nor for inputs an op declares non-differentiable. The forward's
 * assign nodes move after the backward (schedule_assigns_last), which reads
 * the state the forward read.
 *
 * train_step_build: forward graph + loss + backward + optimizer update, one
 * graph: adds the inputs `target`, `lr` and `loss_scale` (runtime scalars,
 * so a schedule or a scaler never recompiles the graph), the loss op, the
 * gradients of every parameter (of loss * loss_scale, then unscaled), the
 * update ops and their assign nodes (parameters and optimizer state, which
 * joins g->state after the params and buffers). With clipping, the update
 * reads the clipped gradients (timm's dispatch_clip_grad between backward and
 * optimizer.step); with model_ema, after the update every param and buffer
 * has an EMA copy "ema.<name>" (ModelEmaV3) moved towards its new value.
 */
#ifndef CTIMM_AUTODIFF_H
#define CTIMM_AUTODIFF_H

#include "ir/emit.h"
#include "ir/ir.h"

/* grads[k]: the gradient value of wrt[k] (zeros when loss does not depend on
 * it), of loss times `seed`: a scalar value of the loss's dtype (the loss
 * scale of mixed precision), or -1 for 1. */
int autodiff(Graph *g, ValueId loss, ValueId seed, const ValueId *wrt, int nwrt, ValueId *grads, CtErr *err);

typedef enum CtLossKind { CT_LOSS_CROSS_ENTROPY, CT_LOSS_SOFT_TARGET, CT_LOSS_BCE, CT_LOSS_JSD } CtLossKind;

typedef struct LossSpec {
    CtLossKind kind;
    double smoothing;
    double bce_threshold; /* < 0: none */
    int soft;             /* CT_LOSS_BCE: [B, C] probability targets (mixup's) instead of class indices */
    int bce_sum;          /* CT_LOSS_BCE: summed over classes, averaged over the batch (timm's sum_classes) */
    double bce_pos_weight; /* CT_LOSS_BCE: the positive terms' weight (torch's pos_weight), 0: none */
    int num_splits;       /* CT_LOSS_JSD: timm's JsdCrossEntropy over this many splits of the batch, alpha 12 */
} LossSpec;

/* timm's optimizer names: 'sgd' is SGD with nesterov momentum, 'momentum'
 * without; 'lambc' and 'larc' are LAMB and LARS with trust clipping, 'nlars'
 * and 'nlarc' LARS and LARC with nesterov momentum; the '...w' variants
 * (sgdw, adoptw, madgradw, adanw) are their kinds with OptimSpec.decoupled
 * (adanw: no_prox). */
typedef enum CtOptKind {
    CT_OPT_NONE, CT_OPT_SGD, CT_OPT_MOMENTUM, CT_OPT_ADAMW, CT_OPT_ADAM, CT_OPT_NADAM, CT_OPT_RADAM,
    CT_OPT_LAMB, CT_OPT_LARS, CT_OPT_RMSPROP, CT_OPT_RMSPROPTF, CT_OPT_ADABELIEF, CT_OPT_ADAGRAD,
    CT_OPT_LION, CT_OPT_NADAMW, CT_OPT_ADAMAX, CT_OPT_ADOPT, CT_OPT_MADGRAD, CT_OPT_ADAN, CT_OPT_LAPROP,
    CT_OPT_SGDP, CT_OPT_ADAMP, CT_OPT_ADAFACTOR, CT_OPT_ADAFACTORBV, CT_OPT_MUON
} CtOptKind;

/* timm Muon's adjust_lr_fn: the lr scale of an orthogonalized [out, in] update */
typedef enum CtMuonAdjust { CT_MUON_ADJUST_NONE, CT_MUON_ADJUST_ORIGINAL, CT_MUON_ADJUST_MATCH_RMS_ADAMW,
                            CT_MUON_ADJUST_RMS_TO_RMS } CtMuonAdjust;

/* train.py's --clip-mode: torch's clip_grad_norm_ (total L2 norm of every
 * gradient), clip_grad_value_, timm's adaptive_clip_grad (unit-wise, eps
 * 1e-3, every param but the last two: train.py's exclude_head). */
typedef enum CtClipMode { CT_CLIP_NONE, CT_CLIP_NORM, CT_CLIP_VALUE, CT_CLIP_AGC } CtClipMode;

typedef struct OptimSpec {
    CtOptKind kind;
    double momentum, weight_decay;
    double beta1, beta2, eps;
    double alpha;                    /* rmsprop, rmsproptf: smoothing of the square average */
    double trust_coeff;              /* lars */
    int trust_clip, always_adapt;    /* lamb, lars */
    double max_grad_norm;            /* lamb: global gradient-norm clipping, <= 0 none */
    int nadam_legacy;                /* nadam: torch < 2.0's mu_product rule (tests) */
    double beta3;                    /* adan: the third beta */
    /* sgd, momentum (SGDW), adopt, madgrad, rmsproptf: decoupled weight decay
     * (p *= 1 - lr * wd) instead of L2 on the gradient; adan: no_prox */
    int decoupled;
    /* timm's corrected_weight_decay (adamc, sgdc, ...): decoupled decay by
     * lr^2 / max_lr for lr, max_lr the lr the optimizer is built with
     * (train.py's --lr; the caller sets it, > 0) */
    int corrected;
    double max_lr;
    /* timm's caution (cadamw, cnadamw, cadopt(w), clion, csgdw, crmsproptf,
     * the corrected cadamc, cnadamc, cadoptc, clionc, csgdc): the update's
     * direction masked where it disagrees in sign with the gradient, scaled
     * by the mask's whole-tensor mean (optim_caution_mean) */
    int caution;
    double clip_exp;                 /* adopt: the normalized gradient clipped to (step - 1)^clip_exp */
    int no_clip;                     /* adopt: clip_exp None */
    int decoupled_decay;             /* lamb (lambw, lambcw): p decays by lr * wd instead of wd * p in the update */
    int nesterov;                    /* sgdp, adamp, lars (nlars, nlarc) */
    double delta, wd_ratio;          /* sgdp, adamp: the projection's cosine threshold, its weight-decay ratio */
    /* adafactor: clip_threshold of the update's RMS, decay_rate (beta2 of
     * step t: 1 - t^decay_rate), beta1 (0: none), eps added to g^2;
     * adafactorbv: the same with clip_threshold <= 0 none, momentum (0: none),
     * eps 0 for timm's None (1e-30), beta2_cap, decay_offset, unscaled_wd and
     * momentum_f32 (timm's momentum_dtype float32; else bfloat16). Both
     * factor params whose dims reach min_dim_size_to_factor (their rules) */
    double clip_threshold, decay_rate, beta2_cap;
    int min_dim_size_to_factor, decay_offset, unscaled_wd, momentum_f32;
    /* muon: params of >= 2 dims timm finds suitable get Muon's update
     * (momentum, nesterov, weight_decay, eps, ns_steps iterations with the
     * coefficient preset ns_preset: 0 original, 1 quintic, 2 polar_express,
     * 3 polar_express_safer; safety_factor; adjust_lr), the others AdamW
     * (beta1, beta2, eps) at lr * fallback_lr_scale */
    int ns_steps, ns_preset;
    double safety_factor, fallback_lr_scale;
    CtMuonAdjust adjust_lr;
    /* fnmatch patterns exempt from weight decay besides timm's rule
     * (1-D params and names ending ".bias"): model.no_weight_decay() */
    const char *const *no_weight_decay;
    /* --layer-decay (timm's param_groups_layer_decay): param k's lr is
     * lr * lr_scale[k], k over every param in state_dict order (n_lr_scale
     * of them); NULL: 1. A param whose scale is below no_opt_scale (when > 0)
     * is frozen (requires_grad False): no gradient, update or state. */
    const double *lr_scale;
    int n_lr_scale;
    double no_opt_scale;
    /* f16 training: a step whose gradients are not all finite changes
     * nothing (GradScaler's skip); TrainStep.finite says which it was */
    int skip_nonfinite;
    CtClipMode clip_mode;            /* on the unscaled gradients, before the update */
    double clip_grad;                /* max norm, max |value| or AGC's clip factor */
    /* ModelEmaV3: state "ema.<name>" for every param and buffer, updated
     * after the step with the runtime scalar input "ema_decay": float values
     * ema = decay * ema + (1 - decay) * new, integer ones copied. */
    int model_ema;
    /* Each piece of the step's tail (unscale, update, EMA) runs as soon as
     * its gradient is there, inside the backward (schedule_hoist), so the
     * gradients die one by one instead of all living to the optimizer: what
     * remat's --grad-checkpointing and --memory-budget want. Without it the
     * updates run after the backward, in few multi-tensor launches. */
    int step_in_backward;
    /* Data-parallel training (world size > 1): the gradients averaged over
     * the ranks by allreduce_mean buckets of at most this many bytes
     * (DDP's bucket_cap_mb), between the backward and the unscale; 0: none. */
    int64_t allreduce_bucket_bytes;
    /* --sync-bn: every training batch_norm normalises by the statistics of
     * all ranks' batches (SyncBatchNorm; iattr sync, ir/ops/norm.c) */
    int sync_bn;
    /* --grad-accum-steps > 1: gradients accumulate across steps in state
     * "accum.<param>" (grad_accumulate), and only a step whose input
     * `update` is 1 clips, updates and resets them; the gradients are
     * divided by the input `unscale` (loss scale times the group's step
     * count: train.py's loss /= accum_steps) instead of loss_scale. */
    int grad_accum;
    /* The gradients (unscaled) are graph outputs after the loss, in
     * TrainStep.params' order, even with an update: for callers that read
     * them. Without an update (CT_OPT_NONE) they always are; else they are
     * arena values that die once the update has read them, so the memory
     * plan reuses their space and no step allocates them. */
    int grads_out;
} OptimSpec;

/* Sets *o to timm's optimizer `name` (lowercase, as --opt) with the
 * defaults create_optimizer_v2 gives it (momentum 0.9 where it has one, the
 * optimizer class's betas, eps, alpha, trust settings, Lamb's
 * max_grad_norm 1.0) and weight_decay 0; -1 for a name not supported. */
int optim_defaults(const char *name, OptimSpec *o);
/* The comma-separated list of names optim_defaults knows. */
extern const char optim_names[];

/* The update op of one parameter under o (weight decay `wd`, already
 * filtered): op, attributes, and its inputs' layout: `nslot` state tensors
 * (named slot[k], starting at slot_init[k]) shaped like the param, or with
 * slot_reduce[k] > 0 its shape with dim slot_reduce[k] - 1 removed (left as
 * 1 with slot_keepdim: Adafactor's row and column second moments; see
 * optim_slot_shape), `nscalar` f32 scalar states (scalar[k], starting at
 * scalar_init[k]), whether it reads the step count and the LAMB clip input;
 * lr_mul: its lr is the step's times this (0: 1; Muon's AdamW fallback).
 * With lr_avg the op's
 * extra input is LaProp's running average of lr, a = beta1 a + (1 - beta1)
 * lr (beta1: fattr[0]), kept in the f32 scalar state "exp_avg_lr_1" and
 * updated before the op reads it. */
typedef struct OptimOp {
    CtOp op;
    int64_t iattr[6];
    double fattr[CT_MAX_FATTR];
    int niattr, nfattr, nslot, nscalar, step, clip, lr_avg;
    const char *slot[4], *scalar[1];
    double slot_init[4], scalar_init[1];
    int slot_reduce[4], slot_keepdim;
    double lr_mul;
    int caution; /* the op reads optim_caution_mean's scalar after its other inputs, before apply */
} OptimOp;
/* optim_param_op for a param whose shape does not matter (which slots and
 * inputs the kind has; Adafactor's as for a param it does not factor). */
void optim_op(const OptimSpec *o, double wd, OptimOp *out);
/* The update op of a param of shape `shape`. */
void optim_param_op(const OptimSpec *o, double wd, const CtShape *shape, OptimOp *out);
/* The shape of slot k of a param of shape p. */
CtShape optim_slot_shape(const OptimOp *u, int k, const CtShape *p);
/* For u with caution: the node of u's mask (u's op with caution 1 on its
 * inputs in[0..nin), no apply) and its mean over the whole tensor clamped
 * to at least 1e-3 (timm's mask.mean().clamp_(min=1e-3)), u's caution
 * input; -1 when emitting fails. */
ValueId optim_caution_mean(Emitter *e, const OptimOp *u, const ValueId *in, int nin);

typedef struct TrainStep {
    ValueId target, lr, loss_scale, loss;
    ValueId finite; /* with skip_nonfinite: a graph output, 1 when the step applied */
    ValueId grad_norm_sq; /* with CT_CLIP_NORM: a graph output, the total squared gradient norm */
    ValueId ema_decay;    /* with model_ema: the input, the decay of this step (0: copy) */
    ValueId update, unscale; /* with grad_accum: the inputs (OptimSpec.grad_accum), else -1 */
    int nparams;
    ValueId *params, *grads; /* parallel, the trained params in state_dict order; owned here */
} TrainStep;

int train_step_build(Graph *g, ValueId logits, const LossSpec *loss, const OptimSpec *opt, TrainStep *out,
                     CtErr *err);
void train_step_free(TrainStep *t);
/* passes/bucket.c: replaces grads[0..n) by their means over the ranks,
 * bucketed by cap_bytes in the order the backward finishes them. */
int grad_allreduce(Graph *g, ValueId *grads, int n, int64_t cap_bytes, CtErr *err);
/* timm's grouping: 1 when param `name` of `ndim` dims gets no weight decay. */
int optim_no_decay(const char *name, int ndim, const char *const *patterns);

#endif
