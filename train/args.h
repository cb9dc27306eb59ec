/*
 * timm train.py's arguments as values: what ctimm-train's command line and
 * -c/--config fill in and the trainer (train/trainer.h) runs by. Strings
 * point into the caller's memory (argv, the config's words) and must
 * outlive the trainer. The defaults are train.py's but --epochs 5 and
 * --warmup-epochs 0, so a bare run stays short.
 */
#ifndef CTIMM_TRAIN_ARGS_H
#define CTIMM_TRAIN_ARGS_H

#include "ir/status.h"
#include "runtime/sched.h"
#include "train/model_kwargs.h"
#include "train/opt_kwargs.h"

typedef struct TrainArgs {
    const char *data_dir, *dataset, *train_split, *val_split, *model, *opt, *sched, *device, *output;
    const char *resume, *initial_checkpoint, *eval_metric;
    /* --pretrained: the model's weights from the Hugging Face cache; --pretrained-path: from this file
     * (train/pretrained.h); --in-chans: 1 (gray 'L' images) or 3, 0 when not given (--input-size's, else 3) */
    int pretrained, in_chans;
    const char *pretrained_path;
    int num_classes, img_size, batch_size, val_batch_size, epochs, workers, log_interval, channels_last;
    int no_resume_opt, checkpoint_hist;
    /* drop_path < 0: not given (train.py's None), the model's default rate */
    double lr, lr_base, lr_base_size, momentum, weight_decay, smoothing, warmup_lr, min_lr, warmup_epochs, drop,
        drop_path, opt_eps, opt_betas[2];
    int n_betas; /* --opt-betas given: 1 or 2 values, else 0 */
    int seed;
    double clip_grad, model_ema_decay; /* clip_grad < 0: no clipping */
    /* --layer-decay (< 0: not given, train.py's None), its min scale and
     * no-opt scale (0: none) */
    double layer_decay, layer_decay_min_scale, layer_decay_no_opt_scale;
    int grad_accum_steps; /* >= 1: the optimizer steps once per this many batches, on their summed gradients */
    /* train.py's --grad-checkpointing (each block's activations recomputed
     * in the backward) and ctimm's --memory-budget (bytes the step's plan
     * must fit, recomputing the cheapest first): passes/passes.h remat;
     * --keep-activations (ctimm's): not even the cheap recomputation that
     * is on by default (RematSpec.cheap) */
    int grad_checkpointing;
    size_t memory_budget;
    int keep_activations;
    /* --gp (NULL: the model's) and --model-kwargs KEY=VALUE words (train/model_kwargs.h) */
    const char *gp;
    const char *model_kwargs[CT_MAX_MODEL_KWARGS];
    int n_model_kwargs;
    /* --opt-kwargs KEY=VALUE words (train/opt_kwargs.h) */
    const char *opt_kwargs[CT_MAX_OPT_KWARGS];
    int n_opt_kwargs;
    const char *clip_mode;
    int model_ema, model_ema_warmup;
    /* timm's mixup / cutmix and random erasing flags */
    double mixup, cutmix, cutmix_minmax[2], mixup_prob, mixup_switch_prob, reprob;
    int n_minmax, mixup_off_epoch, recount;
    const char *mixup_mode, *remode, *config;
    /* data and augmentation: timm's train.py defaults; n_* = 0 means the model's */
    const char *class_map, *interpolation, *train_interpolation, *aa, *experiment, *lr_base_scale;
    double scale[2], ratio[2], hflip, vflip, color_jitter, crop_pct, mean[4], std[4], input_size[3], epoch_repeats;
    int n_scale, n_ratio, n_mean, n_std, n_input_size, no_aug;
    double color_jitter_prob; /* < 0: not given (train.py's None: jitter always) */
    const char *train_crop_mode; /* rrc (NULL), rkrc, rkrr */
    double aug_repeats;          /* timm's RepeatAugSampler num_repeats; 0: off */
    double grayscale_prob, gaussian_blur_prob;
    SchedArgs sch; /* the other scheduler flags; kind, epochs and the three above are filled in by the trainer */
    int amp, bce_loss, recovery_interval, start_epoch; /* start_epoch < 0: not given */
    const char *amp_dtype;
    double bce_target_thresh; /* < 0: none */
    /* --bce-sum: the BCE loss summed over classes, averaged over the batch;
     * --bce-pos-weight: its positive-class weight (0: none) */
    int bce_sum;
    double bce_pos_weight;
    /* AugMix split training: --aug-splits (0: none, else >= 2 images a
     * sample, the clean one first), --jsd-loss, --split-bn, --resplit */
    int aug_splits, jsd_loss, split_bn, resplit;
    /* --bn-momentum, --bn-eps: the bn_momentum, bn_eps model kwargs (0: not given, train.py's None) */
    double bn_momentum, bn_eps;
    /* --head-init-scale, --head-init-bias (train.py's None when has_* is 0) */
    int has_head_init_scale, has_head_init_bias;
    double head_init_scale, head_init_bias;
    /* data-parallel training: ranks on this machine (0: as launched), DDP's
     * bucket size, timm's --dist-bn and --sync-bn, the per-step cross-rank
     * check */
    int nproc_per_node, dist_check_params, sync_bn;
    double bucket_cap_mb, dist_timeout;
    const char *dist_bn;
    /* --train-num-samples / --val-num-samples (0: not given; wds only, as in timm), --input-img-mode (NULL: 'L'
     * for --in-chans 1, else 'RGB'), --val-interval (validate and save every N epochs, and after the last) */
    int train_num_samples, val_num_samples, val_interval;
    int tta; /* --tta: validation averages each this many consecutive outputs (0, 1: none) */
    const char *input_img_mode;
    const char *input_key, *target_key; /* --input-key / --target-key (runtime/data/dataset.h), NULL: not given */
} TrainArgs;

TrainArgs train_args_default(void);

/* The values no run could use and the names no run knows, refused by name
 * (the flag, the value, what it must be) before anything starts: torch's
 * optimizers and torchvision's transforms raise on most of them; the rest
 * would fail image by image or train on nonsense. */
int train_args_check(const TrainArgs *a, CtErr *err);

/* The arguments as a JSON object (malloc'd), the checkpoint's "ctimm.args". */
char *train_args_json(const TrainArgs *a);

#endif
