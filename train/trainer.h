/*
 * timm's train.py as a library. trainer_open sets a run up from its
 * arguments (train/args.h): the datasets, transforms and loaders, mixup and
 * random erasing, the training and eval graphs (the pass pipeline), the LR
 * schedule and loss scaler, the state from pretrained weights
 * (train/pretrained.h), an initial checkpoint or a resume, and last the
 * output folder with summary.csv. trainer_run is train_one_epoch and
 * validate per epoch on the compiled graphs (a CtRunner each, compiled at
 * its first step), with timm's log lines (through
 * train/report.h), summary.csv, the CheckpointSaver's files and recovery
 * checkpoints (train/checkpoint.h), the model EMA (train/ema.h), and the
 * ranks of a data-parallel run kept in step (train/dist_sync.h). On the cpu
 * backend a resumed run equals an uninterrupted one bit for bit, also from
 * a recovery checkpoint in the middle of an epoch.
 *
 * The stop flag (opts->stop, raised by the caller's SIGINT/SIGTERM handler)
 * ends the run after the step under way, with a recovery checkpoint when
 * there is an output folder; trainer_run then returns CT_INTERRUPTED, as
 * it does when the flag ends a kernel compile. Rank 0 alone writes files;
 * every rank stops after the same step.
 */
#ifndef CTIMM_TRAINER_H
#define CTIMM_TRAINER_H

#include <stdio.h>

#include "models/registry.h"
#include "passes/autodiff.h"
#include "runtime/backend.h"
#include "runtime/data/augment.h"
#include "runtime/data/loader.h"
#include "runtime/data/mixup.h"
#include "runtime/dist.h"
#include "runtime/scaler.h"
#include "runtime/sched.h"
#include "train/args.h"
#include "train/checkpoint.h"
#include "train/pretrained.h"
#include "train/report.h"

/* A run. Everything in it is the trainer's but what trainer_open borrows
 * (the model entry, backend, communicator, options, report, and the
 * strings of the arguments), which must outlive it. It points into itself:
 * never copied. */
typedef struct Trainer {
    TrainArgs a; /* as given, then resolved: lr, output (--experiment), splits and size of the embedded data */
    const ModelEntry *m; /* &pre.m: the model with its pretrained weights' cfg */
    Pretrained pre;      /* --pretrained / --pretrained-path's weights, or none */
    const CtBackend *be;
    CtDist *dist; /* the ranks of a data-parallel run (a world of one otherwise) */
    int rank, world;
    /* every compile's: the caller's (the stop flag, the kernel cache's line
     * said once) with the collective of dist's ranks */
    ProgramOptions opts;
    const TrainReport *rep;
    char root[1000]; /* the data folder */
    Graph train, eval;
    TrainStep ts;
    /* train.py logs the mean lr of the optimizer's param groups: the lr
     * times this (--layer-decay's mean group scale, else 1) */
    double lr_log_scale;
    int finite_out; /* --amp f16: the graph output that says the step was applied; else -1 */
    CtState state;
    CtState ema_state; /* --model-ema: the eval graph's state, filled from "ema.*" to validate */
    Dataset *train_ds, *val_ds;
    Loader *train_ld, *val_ld;
    int classes, img, vb;
    /* --aug-splits: images a sample (1 without), so a training step's batch
     * is step_batch = batch_size * splits, split k at [k * B, (k + 1) * B) */
    int splits, step_batch;
    int chans;              /* the images' channels: 3 (RGB), 1 (gray 'L') or 4 (RGBA), the model's in_chans */
    CtImgMode img_mode;     /* train.py's input_img_mode */
    ModelArgs kw;           /* --gp's and --model-kwargs' img_size and options (train/model_kwargs.h) */
    double mean[4], std[4]; /* --mean/--std, else the model's (averaged for 1 or 4 channels, as timm's prefetcher) */
    /* The batch goes to the graph as the loader made it (uint8 NHWC); the
     * graph normalises it, erases (erase_k > 0) and mixes (mixup_active)
     * it, from the numbers drawn for the batch into these: */
    Mixup mix;              /* mixup_active(&mix): params [B, MIX_PARAMS], soft targets [B, classes] */
    float *mix_params, *soft;
    RandomErasing re; /* --reprob > 0: erase_k boxes an image, boxes [B, erase_k, 5] */
    int erase_k;
    int64_t *erase_boxes;
    CtDType amp;      /* --amp: CT_F16 or CT_BF16; else CT_F32 */
    LossScaler scaler; /* --amp f16: the dynamic loss scale */
    LrSched sched;
    int num_epochs, start_epoch; /* the schedule's epoch count; where this run starts */
    size_t first_batch;          /* where the first epoch run starts (a recovery checkpoint's next batch) */
    size_t accum; /* --grad-accum-steps: batches an optimizer update (the last group of an epoch may have fewer) */
    double loss_sum;             /* the epoch's finite losses so far (carried over by a recovery checkpoint) */
    long loss_count;
    long skipped; /* --amp f16: steps skipped for a non-finite gradient */
    int decreasing; /* --eval-metric loss: lower is better */
    int no_eval;    /* --val-split '': no validation (train.py's), the train loss ranks the epochs */
    int bn_mode;    /* --dist-bn after each epoch: 1 reduce, 0 broadcast, -1 none */
    double best;    /* the best metric so far and its epoch (-1: none) */
    int best_epoch;
    char output[1200]; /* --output/--experiment, which a.output then points at */
    /* with --output, on rank 0: the run's folder, summary.csv, the saver */
    char run_dir[1100];
    FILE *summary;
    FILE *sample_log; /* CTIMM_SAMPLE_LOG's file, or NULL */
    Saver saver;
    Saver *saving; /* &saver when there is an output folder, else NULL */
    char *args_json;
    CkptInfo info; /* what checkpoints record beside the tensors: points at the strings below */
    char scaler_str[64], sched_str[SCHED_STATE_LEN];
    /* The graphs compiled and prepared, each at its first step: the training
     * step over state, the eval graph over state and over ema_state. */
    CtRunner train_run, eval_run, ema_run;
} Trainer;

/* Sets the run up, printing timm's opening lines (model, data, resume,
 * ranks, AMP, output folder) through rep. A resume that finds the run
 * already at its last epoch, and every other bad input, fails here; on
 * failure nothing stays open (the output folder may exist when only
 * summary.csv could not be made). */
int trainer_open(Trainer *t, const TrainArgs *a, const ModelEntry *m, const CtBackend *be, CtDist *dist,
                 const ProgramOptions *opts, const TrainReport *rep, CtErr *err);
/* Trains the remaining epochs: 0, -1, or CT_INTERRUPTED when the stop flag
 * ended the run (what was saved, and how to resume, was logged). */
int trainer_run(Trainer *t, CtErr *err);
void trainer_close(Trainer *t);
/* train.py's updates_per_epoch: the epoch's batches over --grad-accum-steps, rounded up. */
size_t trainer_updates_per_epoch(const Trainer *t);

#endif
