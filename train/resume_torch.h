/*
 * --resume from a timm train.py checkpoint: a torch.save dict as timm's
 * CheckpointSaver writes it (last.pth.tar, checkpoint-N.pth.tar,
 * model_best.pth.tar, recovery-E-B.pth.tar), read as timm's
 * resume_checkpoint and train.py read it:
 *  - 'arch' must name --model (a pretrained tag or hub prefix aside);
 *  - the weights from 'state_dict' ('module.' dropped), the model EMA from
 *    'state_dict_ema' (Resumed.ema_missing when the file has none);
 *  - the epoch: 'epoch', +1 when 'version' > 1 (CheckpointSaver writes 2),
 *    is where training starts;
 *  - unless --no-resume-opt: the optimizer's state_dict() mapped onto
 *    ctimm's "optim.<param>.<slot>" and "optim.step", and the AMP loss
 *    scaler from 'amp_scaler' (GradScaler.state_dict()).
 * torch numbers the params in the order of its param groups, which
 * create_optimizer_v2 builds from the model: ResumeOptim says how the run
 * would build them. A checkpoint whose optimizer does not fit the run's
 * (another optimizer, group layout or param count) is refused naming what
 * differs, as torch's optimizer.load_state_dict would refuse it.
 * The groups' hyperparameters (lr, weight_decay, betas) are the run's, as
 * its command line gives them: ctimm compiles them into the step.
 */
#ifndef CTIMM_TRAIN_RESUME_TORCH_H
#define CTIMM_TRAIN_RESUME_TORCH_H

#include "train/checkpoint.h"

/* The run's optimizer as timm's create_optimizer_v2 would make it. */
typedef struct ResumeOptim {
    const char *opt;                    /* --opt */
    double weight_decay;                /* > 0: no-decay and decay groups (param_groups_weight_decay) */
    const char *const *no_weight_decay; /* model.no_weight_decay()'s patterns (OptimSpec's) */
    const int *layer_ids;               /* --layer-decay: each param's layer id (layer_decay_params), else NULL */
} ResumeOptim;

/* Restores the checkpoint at path into s (a training state of `model`) and
 * says in out what else it holds; opt NULL: the weights only
 * (--no-resume-opt). out->batches_done is -1: timm resumes a recovery
 * checkpoint at the next epoch (resume_torch.c says why). */
int resume_torch(const char *path, CtState *s, const char *model, const ResumeOptim *opt, Resumed *out, CtErr *err);

#endif
