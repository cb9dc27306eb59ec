/*
 * ctimm-train's checkpoints, with the behaviour of timm's CheckpointSaver.
 *
 * A checkpoint is two safetensors files:
 *   NAME.safetensors        the model's state_dict (params and buffers under
 *                           timm's names, nothing else), so timm loads it with
 *                           model.load_state_dict(safetensors.torch.load_file(p));
 *   NAME.state.safetensors  the training state: "optim.*" tensors, "optim.step",
 *                           "rng.counter", and metadata (epoch, model, classes,
 *                           eval metric, best metric and epoch, the kept
 *                           checkpoint-<epoch> list, the arguments as JSON).
 * Both carry "ctimm.epoch"; a pair whose epochs differ is refused. Each file
 * is written atomically (st_write), the state file first and the weights
 * last; checkpoint-<epoch> and model_best are hard links to last, put in
 * place by rename, so no earlier checkpoint is ever half-replaced.
 */
#ifndef CTIMM_TRAIN_CHECKPOINT_H
#define CTIMM_TRAIN_CHECKPOINT_H

#include "runtime/state.h"

typedef struct CkptEntry {
    int epoch;
    double metric;
} CkptEntry;

/* What a checkpoint records beside the tensors. */
typedef struct CkptInfo {
    const char *model, *eval_metric, *args_json;
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
} Saver;

/* What --resume found. */
typedef struct Resumed {
    int epoch, best_epoch;
    double best;
    CkptEntry hist[64];
    int nhist;
    char dir[1200]; /* the checkpoint's folder, resolved (realpath) */
    char eval_metric[16]; /* what best and hist rank by */
} Resumed;

void saver_init(Saver *sv, const char *dir, int max_hist, int decreasing);
void saver_free(Saver *sv);
/* Continues a resumed run's best metric and checkpoint list (the caller
 * checks that the run writes to the folder the checkpoint came from and
 * ranks by the same --eval-metric). */
void saver_restore(Saver *sv, const Resumed *r);
/* Saves epoch's state as last, and as checkpoint-<epoch> and model_best as
 * timm would (pruning the worst beyond max_hist). */
int saver_save(Saver *sv, const CtState *s, const CkptInfo *info, int epoch, double metric, CtErr *err);
/* Whether `a` is a better metric than `b` for this saver. */
int saver_better(const Saver *sv, double a, double b);

/* --initial-checkpoint: params and buffers from a timm or ctimm state_dict file. */
int ckpt_load_weights(const char *path, CtState *s, CtErr *err);
/* --resume: the weights file PATH and PATH's .state file beside it; restores
 * the weights, the rng counter and (when optim) the optimizer state. The
 * checkpoint must be of `model` (the tensors' shapes check num_classes). */
int ckpt_resume(const char *path, CtState *s, const char *model, int optim, Resumed *out, CtErr *err);

#endif
