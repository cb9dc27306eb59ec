/*
 * The trainer's checkpoints, with the behaviour of timm's CheckpointSaver
 * (ckpt_load_weights also loads ctimm-validate's and ctimm-infer's weights).
 *
 * A checkpoint is two safetensors files:
 *   NAME.safetensors        the model's state_dict (params and buffers under
 *                           timm's names, nothing else), so timm loads it with
 *                           model.load_state_dict(safetensors.torch.load_file(p));
 *   NAME.state.safetensors  the training state: "optim.*" tensors, "optim.step",
 *                           "rng.counter", and metadata (epoch, model, classes,
 *                           eval metric, best metric and epoch, the kept
 *                           checkpoint-<epoch> list, the arguments as JSON).
 * Both carry "ctimm.epoch"; a pair whose epochs differ is refused. With
 * --amp f16 the state file also holds the loss scaler ("ctimm.amp_scaler":
 * scale,growth tracker) and every state file the LR schedule's state after
 * the epoch's step ("ctimm.sched"; the plateau schedule resumes from it). A recovery checkpoint, recovery-<epoch>-<batch>
 * (timm's name: the index of the last batch done), is written mid-epoch
 * every --recovery-interval batches and on Ctrl-C; its state file also has
 * "ctimm.batches_done" and "ctimm.loss_sum" (sum,count), so a resume goes on from the
 * next batch of that epoch with the epoch's running loss. A pair is one
 * unit: both files are written under NAME.*.next names and then renamed into
 * place, the state file first; a kill between the two renames is finished by
 * the next reader (ckpt_settle_pair), so no earlier checkpoint is ever
 * half-replaced. checkpoint-<epoch> and model_best are hard links to last,
 * put in place the same way. A non-finite metric is never kept nor the best.
 */
#ifndef CTIMM_TRAIN_CHECKPOINT_H
#define CTIMM_TRAIN_CHECKPOINT_H

#include "runtime/scaler.h"
#include "runtime/sched.h"
#include "runtime/state.h"

typedef struct CkptEntry {
    int epoch;
    double metric;
} CkptEntry;

/* What a checkpoint records beside the tensors. */
typedef struct CkptInfo {
    const char *model, *eval_metric, *args_json;
    const char *amp_scaler; /* "scale,growth_tracker", or NULL without a loss scaler */
    const char *sched;      /* the LR schedule's state for the next step ("ctimm.sched") */
    int num_classes;
} CkptInfo;

/* timm's CheckpointSaver: last, model_best, the best max_hist checkpoint-<epoch>. */
typedef struct Saver {
    char dir[1024];
    int max_hist, decreasing; /* decreasing: lower is better (loss) */
    CkptEntry *files;         /* best first, at most max_hist */
    int nfiles;
    int best_epoch; /* -1: none yet */
    double best;
    char recovery[64]; /* the newest recovery checkpoint's name, "" when none */
} Saver;

/* What --resume found. */
typedef struct Resumed {
    int epoch;
    int batches_done;     /* a recovery checkpoint: batches of `epoch` done; else -1 (the epoch is done) */
    double loss_sum;      /* a recovery checkpoint: the sum of those batches' finite losses */
    long loss_count;      /* and how many they are */
    int ema_missing;      /* the file has no model EMA (the run starts one from the weights) */
    char sched[SCHED_STATE_LEN]; /* "ctimm.sched", or "" */
    int has_scaler;       /* the file has the loss scaler's state: in scaler */
    LossScaler scaler;    /* scaler_default() with that state */
    double opt_lr;        /* a PyTorch checkpoint's optimizer lr (resume_torch.c group_lr), else NAN */
} Resumed;

void saver_init(Saver *sv, const char *dir, int max_hist, int decreasing);
void saver_free(Saver *sv);
/* Saves epoch's state as last, and as checkpoint-<epoch> and model_best as
 * timm would (pruning the worst beyond max_hist). */
int saver_save(Saver *sv, const CtState *s, const CkptInfo *info, int epoch, double metric, CtErr *err);
/* Saves recovery-<epoch>-<batch> (batch: the index of the last batch done)
 * and removes the previous recovery pair, as timm's save_recovery does. */
int saver_save_recovery(Saver *sv, const CtState *s, const CkptInfo *info, int epoch, int batch, double loss_sum,
                        long loss_count, CtErr *err);
/* Whether `a` is a better metric than `b` for this saver. */
int saver_better(const Saver *sv, double a, double b);

/* Finishes the save of pair `name` in dir that a kill interrupted (drops
 * its .next files, or renames the weights' into place): 1 if there was one. */
int ckpt_settle_pair(const char *dir, const char *name);
/* What killed runs leave in a checkpoint folder: interrupted saves finished,
 * temporary files of processes that are gone, state halves without their
 * weights, recovery pairs older than the newest (but `keep`, when not NULL)
 * removed. The count of files fixed or removed. */
int ckpt_clean_dir(const char *dir, const char *keep);
/* A timm or ctimm state_dict file read whole, after finishing a save a kill
 * interrupted: safetensors, or a PyTorch .pth/.pth.tar/.bin (told apart by
 * content, runtime/weights_file.h), whose model EMA use_ema prefers as
 * timm's load_checkpoint(model, path, use_ema) does. */
int ckpt_read_weights(const char *path, int use_ema, StFile *f, CtErr *err);
/* --initial-checkpoint: params and buffers from a timm or ctimm state_dict
 * file, or a PyTorch checkpoint's (its model EMA when it has one, as timm's
 * create_model(checkpoint_path=...) loads it). */
int ckpt_load_weights(const char *path, CtState *s, CtErr *err);
/* --resume: the weights file PATH and PATH's .state file beside it; restores
 * the weights, the rng counter and (when optim) the optimizer state. The
 * checkpoint must be of `model` (the tensors' shapes check num_classes). A
 * PyTorch checkpoint is refused, named as such: train/resume_torch.h reads
 * those. */
int ckpt_resume(const char *path, CtState *s, const char *model, int optim, Resumed *out, CtErr *err);

#endif
