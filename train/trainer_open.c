/*
 * trainer_open: a training run set up from train.py's arguments, in
 * train.py's order (train/trainer.h), and trainer_close.
 */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "models/layer_groups.h"
#include "passes/pipeline.h"
#include "runtime/weights_file.h"
#include "train/dist_sync.h"
#include "train/ema.h"
#include "train/eval_data.h"
#include "train/model_kwargs.h"
#include "train/resume_torch.h"
#include "train/run_dir.h"

/* The data folder: the one given, or the embedded shapes set, made once. */
static int resolve_data(Trainer *t, CtErr *err)
{
    TrainArgs *a = &t->a;
    if (a->data_dir) {
        snprintf(t->root, sizeof t->root, "%s", a->data_dir);
        return 0;
    }
    if (a->dataset && strcmp(a->dataset, "shapes"))
        return ct_fail(err, "--dataset %s needs a data folder (DATA_DIR or --data-dir)", a->dataset);
    int size, made;
    if (eval_embedded_data(t->root, sizeof t->root, &size, &made, err))
        return -1;
    if (made)
        report_log(t->rep, "Generated the embedded shapes dataset in %s\n", t->root);
    a->val_split = "val";
    if (a->img_size <= 0)
        a->img_size = size;
    return 0;
}

/* --layer-decay: timm's param_groups_layer_decay over the training graph's
 * params as opt's lr scales (scale[] holds t->train.nstate), the line that
 * says so, and for the logged lr the mean scale of timm's param groups (one
 * per layer and decay / no decay; frozen params in none). */
static int layer_decay(Trainer *t, OptimSpec *opt, double *scale, CtErr *err)
{
    const TrainArgs *a = &t->a;
    const Graph *g = &t->train;
    int *ids = malloc(sizeof *ids * ((size_t)g->nstate + 1)), n, nlayers;
    CT_ASSERT(ids != NULL);
    if (layer_decay_params(g, model_family(t->m)->group_matcher, t->m->cfg.classifier, a->layer_decay, a->layer_decay_min_scale, ids, scale,
                           &n, &nlayers, err)) {
        free(ids);
        return -1;
    }
    opt->lr_scale = scale;
    opt->n_lr_scale = n;
    opt->no_opt_scale = a->layer_decay_no_opt_scale;
    char *in_group = calloc(2 * (size_t)nlayers + 1, 1);
    CT_ASSERT(in_group != NULL);
    double sum = 0, lo = INFINITY, hi = 0;
    int groups = 0, frozen = 0;
    for (int k = 0, i = 0; k < g->nstate; k++) {
        const Value *v = &g->values[g->state[k]];
        if (v->role != CT_ROLE_PARAM)
            continue;
        double sc = scale[i];
        int group = 2 * ids[i++] + optim_no_decay(v->name, v->type.shape.ndim, opt->no_weight_decay);
        if (opt->no_opt_scale > 0 && sc < opt->no_opt_scale) {
            frozen++;
            continue;
        }
        lo = fmin(lo, sc), hi = fmax(hi, sc);
        if (!in_group[group])
            in_group[group] = 1, sum += sc, groups++;
    }
    t->lr_log_scale = groups ? sum / groups : 1;
    char note[96] = "";
    if (frozen)
        snprintf(note, sizeof note, "; %d params below %g not optimized", frozen, opt->no_opt_scale);
    report_log(t->rep, "Layer decay %g: %d layer groups, lr scales %.4g to %.4g%s\n", a->layer_decay, nlayers, lo, hi,
               note);
    free(in_group);
    free(ids);
    return 0;
}

/* The training step (forward, loss, backward, clipping, update, EMA; the
 * gradients averaged over the ranks) and the eval graph, both over the one
 * training state, through the pass pipeline. */
static int build_graphs(Trainer *t, CtErr *err)
{
    /* train.py: convert_splitbn_model(model, max(num_aug_splits, 2)) */
    ModelSpec spec = {.batch_size = t->step_batch, .training = 1,
                      .split_bn = t->a.split_bn ? (t->splits > 2 ? t->splits : 2) : 0,
                      .args = {.num_classes = t->classes, .img_size = t->img, .in_chans = t->chans,
                               .drop_rate = t->a.drop, .drop_path_rate = t->a.drop_path, .opt = t->kw.opt}};
    /* timm's create_optimizer_v2: the optimizer's own defaults, then the
     * flags train.py passes (momentum where it has one, eps and betas when
     * given, weight decay with timm's grouping) */
    OptimSpec opt;
    if (optim_defaults(t->a.opt, &opt))
        return ct_fail(err, "--opt %s is not implemented (%s)", t->a.opt, optim_names);
    if (opt.momentum != 0)
        opt.momentum = t->a.momentum;
    if (t->a.opt_eps >= 0)
        opt.eps = t->a.opt_eps;
    if (t->a.n_betas > 0)
        opt.beta1 = t->a.opt_betas[0];
    if (t->a.n_betas > 1)
        opt.beta2 = t->a.opt_betas[1];
    if (opt_kwargs_apply(t->a.opt, t->a.opt_kwargs, t->a.n_opt_kwargs, t->a.opt_eps >= 0, t->a.n_betas > 0, &opt, err))
        return -1;
    if (opt.kind == CT_OPT_LARS && opt.nesterov && opt.momentum <= 0) /* timm's Lars raises ValueError */
        return ct_fail(err, "--opt %s: Nesterov momentum requires a momentum (--momentum %g)", t->a.opt, opt.momentum);
    opt.max_lr = t->a.lr; /* create_optimizer_v2's lr: timm's max lr of corrected weight decay */
    if (opt.corrected && !(opt.max_lr > 0)) /* timm's _max_lr_snapshot raises ValueError */
        return ct_fail(err, "--opt %s: corrected weight decay requires a positive max lr, got --lr %g", t->a.opt,
                       opt.max_lr);
    opt.weight_decay = t->a.weight_decay;
    opt.no_weight_decay = t->m->no_weight_decay;
    if (t->a.clip_grad >= 0) { /* train.py: dispatch_clip_grad(value=clip_grad, mode=clip_mode) */
        static const char *const modes[] = {"norm", "value", "agc"};
        for (int k = 0; k < 3; k++)
            if (!strcmp(t->a.clip_mode, modes[k]))
                opt.clip_mode = (CtClipMode)(CT_CLIP_NORM + k);
        if (opt.clip_mode == CT_CLIP_NONE)
            return ct_fail(err, "--clip-mode %s is not one of norm, value, agc", t->a.clip_mode);
        opt.clip_grad = t->a.clip_grad;
    }
    opt.model_ema = t->a.model_ema;
    /* a step with a non-finite gradient is skipped in the graph (GradScaler) */
    opt.skip_nonfinite = t->amp == CT_F16;
    if (t->world > 1) /* DDP: the gradients averaged over the ranks, in buckets */
        opt.allreduce_bucket_bytes = (int64_t)(t->a.bucket_cap_mb * 1024 * 1024);
    opt.sync_bn = t->world > 1 && t->a.sync_bn; /* train.py: convert_sync_batchnorm when distributed */
    opt.grad_accum = (int)t->accum;
    /* train.py: with mixup the smoothing is in the targets, the loss
     * SoftTargetCrossEntropy, or BinaryCrossEntropy without smoothing */
    LossSpec loss = {.kind = CT_LOSS_CROSS_ENTROPY, .smoothing = t->a.smoothing, .bce_threshold = -1};
    int mixing = mixup_active(&t->mix);
    if (t->a.jsd_loss)
        loss = (LossSpec){.kind = CT_LOSS_JSD, .smoothing = t->a.smoothing, .num_splits = t->splits};
    else if (t->a.bce_loss)
        loss = (LossSpec){.kind = CT_LOSS_BCE, .smoothing = mixing ? 0 : t->a.smoothing,
                          .bce_threshold = t->a.bce_target_thresh, .soft = mixing, .bce_sum = t->a.bce_sum,
                          .bce_pos_weight = t->a.bce_pos_weight};
    else if (mixing)
        loss = (LossSpec){.kind = CT_LOSS_SOFT_TARGET, .smoothing = 0, .bce_threshold = -1};
    /* train.py: forward and validation under autocast; the eval graph reads
     * the training state, so its batch norms stay unfolded */
    /* the loader's batch normalised, erased and mixed by the graph */
    InputSpec input = {.u8 = 1, .erase_boxes = t->erase_k, .erase_mode = t->re.mode, .mix = mixing};
    memcpy(input.mean, t->mean, sizeof input.mean);
    memcpy(input.std, t->std, sizeof input.std);
    Pipeline p = {.input = input, .training = 1, .loss = loss, .opt = opt, .amp = t->amp != CT_F32,
                  .amp_dtype = t->amp, .channels_last = t->a.channels_last, .verify = PIPELINE_VERIFY};
    const char *units[8];
    if (t->a.grad_checkpointing && (p.remat.nunits = model_ckpt_units(t->m, units, 8, err)) < 0)
        return -1;
    p.remat.units = units;
    p.remat.budget = t->a.memory_budget;
    p.remat.cheap = !t->a.keep_activations;
    PipelineResult res;
    if (model_build(t->m, &spec, &t->train, err))
        return -1;
    t->lr_log_scale = 1;
    double *scale = malloc(sizeof *scale * ((size_t)t->train.nstate + 1));
    CT_ASSERT(scale != NULL);
    int bad = (t->a.layer_decay >= 0 && layer_decay(t, &p.opt, scale, err)) || pipeline_run(&p, &t->train, &res, err);
    free(scale);
    if (bad)
        return -1;
    t->ts = res.ts;
    t->finite_out = res.finite_out;
    if (res.remat.values)
        report_log(t->rep, "Recomputing %d activations in the backward (%s): %.2f GMACs more a step, the plan's peak "
                   "%.1f -> %.1f MiB\n", res.remat.values,
                   p.remat.nunits   ? "--grad-checkpointing"
                   : p.remat.budget ? "--memory-budget"
                                    : "cheap ones; --keep-activations: none",
                   res.remat.extra_macs / 1e9,
                   res.remat.peak_before / 1048576.0, res.remat.peak_after / 1048576.0);
    spec.training = 0;
    spec.batch_size = t->vb;
    p.training = 0;
    p.input.erase_boxes = p.input.mix = 0;
    if (model_build(t->m, &spec, &t->eval, err) || pipeline_run(&p, &t->eval, NULL, err))
        return -1;
    return backend_check(t->be, &t->train, err) || backend_check(t->be, &t->eval, err) ? -1 : 0;
}

/* train.py's Mixup arguments and RandomErasing (re_count is its max_count).
 * Random erasing runs on the normalised batch, then mixup: timm's order
 * (the prefetcher erases as it loads, or --no-prefetcher's transform
 * does, and train_one_epoch mixes what it gets). */
static int setup_augment(Trainer *t, CtErr *err)
{
    const TrainArgs *a = &t->a;
    int mode = mixup_mode_parse(a->mixup_mode);
    if (mode < 0)
        return ct_fail(err, "--mixup-mode %s is not one of batch, pair, elem", a->mixup_mode);
    if (a->n_minmax == 1)
        return ct_fail(err, "--cutmix-minmax takes two values, MIN MAX");
    const double probs[] = {a->mixup_prob, a->mixup_switch_prob, a->reprob};
    const char *pnames[] = {"mixup-prob", "mixup-switch-prob", "reprob"};
    for (int k = 0; k < 3; k++)
        if (!(probs[k] >= 0 && probs[k] <= 1))
            return ct_fail(err, "--%s must be in [0, 1], not %g", pnames[k], probs[k]);
    if (a->mixup < 0 || a->cutmix < 0)
        return ct_fail(err, "--mixup and --cutmix are Beta alphas: >= 0");
    if (a->n_minmax && !(a->cutmix_minmax[0] >= 0 && a->cutmix_minmax[0] < a->cutmix_minmax[1] &&
                         a->cutmix_minmax[1] <= 1))
        return ct_fail(err, "--cutmix-minmax %g %g: needs 0 <= MIN < MAX <= 1", a->cutmix_minmax[0],
                       a->cutmix_minmax[1]);
    t->mix = (Mixup){.mixup_alpha = a->mixup, .cutmix_alpha = a->cutmix, .has_minmax = a->n_minmax == 2,
                     .cutmix_minmax = {a->cutmix_minmax[0], a->cutmix_minmax[1]}, .prob = a->mixup_prob,
                     .switch_prob = a->mixup_switch_prob, .mode = (CtMixupMode)mode, .correct_lam = 1,
                     .label_smoothing = a->smoothing, .num_classes = t->classes, .enabled = 1};
    if (mixup_active(&t->mix) && a->batch_size % 2)
        return ct_fail(err, "mixup/cutmix needs an even --batch-size, not %d (timm asserts it)", a->batch_size);
    if (mixup_active(&t->mix) && t->splits > 1)
        return ct_fail(err, "--aug-splits with mixup/cutmix: their batches do not combine (train.py asserts it)");
    if (a->split_bn && a->sync_bn && t->world > 1)
        return ct_fail(err, "--split-bn with --sync-bn: train.py asserts them apart");
    if (a->split_bn && t->splits == 1 && a->batch_size % 2)
        return ct_fail(err, "--split-bn --resplit splits each batch in two: --batch-size %d is odd", a->batch_size);
    CtEraseMode em = CT_ERASE_PIXEL;
    if (!strcmp(a->remode, "const"))
        em = CT_ERASE_CONST;
    else if (!strcmp(a->remode, "rand"))
        em = CT_ERASE_RAND;
    else if (strcmp(a->remode, "pixel"))
        return ct_fail(err, "--remode %s is not one of pixel, rand, const", a->remode);
    /* --resplit: timm's re_num_splits, num_aug_splits or 2, spares the clean split */
    t->re = (RandomErasing){.prob = a->reprob, .mode = em, .min_count = 1, .max_count = a->recount,
                            .num_splits = a->resplit ? (t->splits > 1 ? t->splits : 2) : 0};
    t->erase_k = random_erasing_boxes(&t->re);
    return 0;
}

/* The splits, the classifier's class count, the image size and mean/std,
 * timm's train transform (or --no-aug's) and eval transform, and the two
 * loaders, each rank on its shard. */
static int open_data(Trainer *t, CtErr *err)
{
    DatasetConfig dc = {.kind = CT_DS_AUTO, .root = t->root, .split = t->a.train_split, .class_map = t->a.class_map,
                        .input_key = t->a.input_key, .target_key = t->a.target_key};
    if (t->a.dataset && !strcmp(t->a.dataset, "tar"))
        dc.kind = CT_DS_TAR;
    else if (t->a.dataset && !strcmp(t->a.dataset, "folder"))
        dc.kind = CT_DS_FOLDER;
    else if (t->a.dataset && !strncasecmp(t->a.dataset, "wds/", 4)) /* timm's reader prefix; the name is unused */
        dc.kind = CT_DS_WDS;
    else if (t->a.dataset && strcmp(t->a.dataset, "shapes"))
        return ct_fail(err, "--dataset %s is not one of folder, tar, shapes, wds/NAME", t->a.dataset);
    /* timm passes num_samples to its iterable datasets only */
    dc.num_samples = (size_t)t->a.train_num_samples;
    if (dataset_open(&t->train_ds, &dc, err))
        return -1;
    dc.split = t->a.val_split;
    dc.num_samples = (size_t)t->a.val_num_samples;
    /* train.py: no --val-split, no eval loader; its metric is then the train loss */
    t->no_eval = !t->a.val_split || !*t->a.val_split;
    if (t->no_eval)
        t->decreasing = 1;
    else if (dataset_open(&t->val_ds, &dc, err))
        return -1;
    t->classes = t->a.num_classes > 0 ? t->a.num_classes : dataset_num_classes(t->train_ds);
    /* timm's loss raises on a label past the classifier; refuse before the first step */
    const Dataset *sets[2] = {t->train_ds, t->val_ds};
    for (int k = 0; k < 2 - t->no_eval; k++)
        if (dataset_num_classes(sets[k]) > t->classes)
            return ct_fail(err, "%s has %d classes but --num-classes is %d: its labels would fall outside the "
                           "classifier (give --num-classes %d or more, or leave it out)",
                           dataset_root(sets[k]), dataset_num_classes(sets[k]), t->classes,
                           dataset_num_classes(sets[k]));
    const TrainArgs *a = &t->a;
    if (a->n_input_size && (a->n_input_size != 3 || a->input_size[1] != a->input_size[2]))
        return ct_fail(err, "--input-size takes C H W with H == W (square inputs only)");
    t->img = a->n_input_size ? (int)a->input_size[1] : a->img_size > 0 ? a->img_size : t->m->cfg.input_size[1];
    if (data_norm_stat("mean", a->mean, a->n_mean, t->m->cfg.mean, t->chans, t->mean, err) ||
        data_norm_stat("std", a->std, a->n_std, t->m->cfg.std, t->chans, t->std, err))
        return -1;
    const char *interp = a->interpolation ? a->interpolation : t->m->cfg.interpolation;
    CtInterp eval_interp = (CtInterp)eval_interp_parse(interp);
    if ((int)eval_interp < 0)
        return ct_fail(err, "--interpolation %s is not one of bilinear, bicubic, nearest", interp);
    TrainTransform tt = train_transform_default(t->img);
    EvalTransform et = eval_transform_default(t->img), noaug = et;
    if (!strcmp(a->train_interpolation, "random"))
        tt.random_interp = 1;
    else if (!strcmp(a->train_interpolation, "bilinear") || !strcmp(a->train_interpolation, "bicubic") ||
             !strcmp(a->train_interpolation, "nearest"))
        tt.interp = a->train_interpolation[2] == 'c' ? CT_INTERP_BICUBIC
                  : a->train_interpolation[0] == 'n' ? CT_INTERP_NEAREST : CT_INTERP_BILINEAR;
    else
        return ct_fail(err, "--train-interpolation %s is not one of random, bilinear, bicubic, nearest",
                       a->train_interpolation);
    if ((a->n_scale && a->n_scale != 2) || (a->n_ratio && a->n_ratio != 2))
        return ct_fail(err, "--scale and --ratio take two values");
    for (int k = 0; k < 2; k++) {
        tt.scale[k] = a->scale[k];
        tt.ratio[k] = a->ratio[k];
    }
    tt.hflip = a->hflip;
    tt.vflip = a->vflip;
    tt.color_jitter = a->color_jitter;
    tt.color_jitter_prob = a->color_jitter_prob;
    tt.grayscale_prob = a->grayscale_prob;
    tt.gaussian_blur_prob = a->gaussian_blur_prob;
    if (train_crop_mode_parse(a->train_crop_mode, &tt.crop_mode, err))
        return -1;
    tt.auto_augment = a->aa;
    et.crop_pct = a->crop_pct > 0 ? a->crop_pct : t->m->cfg.crop_pct;
    et.interp = eval_interp;
    /* --no-aug: timm's transforms_noaug_train, a resize and a center crop */
    noaug.crop_pct = 1.0;
    noaug.interp = eval_interp;
    for (int c = 0; c < 3; c++)
        tt.mean[c] = et.mean[c] = noaug.mean[c] = t->mean[c];
    if (data_img_mode(a->input_img_mode, t->chans, &t->img_mode, err))
        return -1;
    tt.mode = et.mode = noaug.mode = t->img_mode;
    if (a->epoch_repeats < 0 || a->epoch_repeats != floor(a->epoch_repeats))
        return ct_fail(err, "--epoch-repeats %g: whole numbers only", a->epoch_repeats);
    LoaderConfig lc = {.batch_size = a->batch_size, .num_workers = a->workers, .train = a->no_aug ? NULL : &tt,
                       .eval = a->no_aug ? &noaug : NULL, .seed = (uint64_t)a->seed, .shuffle = 1, .drop_last = 1,
                       .rank = t->rank, .world_size = t->world, .repeats = (int)a->epoch_repeats,
                       .aug_repeats = a->aug_repeats, .aug_splits = t->splits > 1 ? t->splits : 0};
    /* timm's create_loader asserts it off without distributed training */
    if (a->aug_repeats > 0 && t->world == 1)
        return ct_fail(err, "--aug-repeats %g: timm's RepeatAugSampler needs distributed training (--nproc-per-node "
                       "2 or more), as train.py's", a->aug_repeats);
    if (loader_create(&t->train_ld, t->train_ds, &lc, err))
        return -1;
    /* train.py: distributed wds validation reads with at most 2 workers a rank */
    int eval_workers = dc.kind == CT_DS_WDS && t->world > 1 && t->a.workers > 2 ? 2 : t->a.workers;
    lc = (LoaderConfig){.batch_size = t->vb, .num_workers = eval_workers, .eval = &et, .seed = (uint64_t)t->a.seed,
                        .rank = t->rank, .world_size = t->world};
    if (!t->no_eval && loader_create(&t->val_ld, t->val_ds, &lc, err))
        return -1;
    if (a->tta > 1 && t->vb % a->tta)
        return ct_fail(err, "--tta %d: the validation batch size %d is not a multiple of it (timm's loss would fail "
                       "on the first batch)", a->tta, t->vb);
    if (loader_epoch_batches(t->train_ld) == 0)
        return ct_fail(err, "%s: %zu training images make no batch of %d", t->root, dataset_len(t->train_ds),
                       t->a.batch_size);
    return 0;
}

/* What runs killed in --resume's folder left behind, but the checkpoint
 * itself (rank 0 alone: the others would race it). */
static void clean_resume_dir(Trainer *t)
{
    char dir[1100], keep[1100];
    const char *path = t->a.resume, *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", !slash ? 1 : slash == path ? 1 : (int)(slash - path), slash ? path : ".");
    snprintf(keep, sizeof keep, "%s", slash ? slash + 1 : path);
    char *ext = strstr(keep, ".");
    if (ext)
        *ext = 0;
    int fixed = ckpt_clean_dir(dir, keep);
    if (fixed)
        report_log(t->rep, "Cleaned %s: %d files left by interrupted runs\n", dir, fixed);
}

/* --resume's timm train.py checkpoint: its optimizer state fitted to the
 * param groups create_optimizer_v2 would make of this run's (with
 * --layer-decay, over the layers layer_decay gave the step). */
static int resume_from_torch(Trainer *t, Resumed *res, CtErr *err)
{
    const TrainArgs *a = &t->a;
    ResumeOptim o = {.opt = a->opt, .weight_decay = a->weight_decay, .no_weight_decay = t->m->no_weight_decay};
    int *ids = NULL, n, nlayers, rc = 0;
    double *scale = NULL;
    if (a->layer_decay >= 0 && !a->no_resume_opt) {
        ids = malloc(sizeof *ids * ((size_t)t->train.nstate + 1));
        scale = malloc(sizeof *scale * ((size_t)t->train.nstate + 1));
        CT_ASSERT(ids != NULL && scale != NULL);
        rc = layer_decay_params(&t->train, model_family(t->m)->group_matcher, t->m->cfg.classifier, a->layer_decay,
                                a->layer_decay_min_scale, ids, scale, &n, &nlayers, err);
        o.layer_ids = ids;
    }
    rc = rc || resume_torch(a->resume, &t->state, t->m->name, a->no_resume_opt ? NULL : &o, res, err);
    free(ids);
    free(scale);
    return rc ? -1 : 0;
}

/* --bn-momentum, --bn-eps: train.py passes them to create_model, where only
 * the EfficientNet builder's models take them (model_args_check refuses
 * them elsewhere by name, as timm's TypeError). Returns 0. */
static int bn_kwargs(const TrainArgs *a, ModelArgs *kw)
{
    if (a->bn_momentum > 0) {
        kw->opt.set |= MODEL_OPT_BN_MOMENTUM;
        kw->opt.bn_momentum = a->bn_momentum;
    }
    if (a->bn_eps > 0) {
        kw->opt.set |= MODEL_OPT_BN_EPS;
        kw->opt.bn_eps = a->bn_eps;
    }
    return 0;
}

/* --split-bn: each aux_bn.K starts as a copy of its batch norm, as timm's
 * convert_splitbn_model copies the pretrained or initial values. */
static void split_bn_copy(CtState *s)
{
    for (int i = 0; i < s->n; i++) {
        const char *name = s->e[i].name, *aux = strstr(name, ".aux_bn.");
        if (!aux)
            continue;
        char main[600];
        const char *leaf = strchr(aux + 8, '.');
        snprintf(main, sizeof main, "%.*s%s", (int)(aux - name), name, leaf ? leaf : "");
        int k = state_find(s, main);
        size_t bytes = (size_t)shape_numel(&s->e[i].type.shape) * ct_dtype_size(s->e[i].type.dtype);
        if (leaf && k >= 0 && s->e[k].type.dtype == s->e[i].type.dtype &&
            shape_numel(&s->e[k].type.shape) == shape_numel(&s->e[i].type.shape))
            memcpy(state_data(s, i), state_data(s, k), bytes);
    }
}

/* --head-init-scale and --head-init-bias on the classifier, as train.py
 * does to model.get_classifier() after create_model. */
static int head_init(Trainer *t, CtErr *err)
{
    const TrainArgs *a = &t->a;
    if (!a->has_head_init_scale && !a->has_head_init_bias)
        return 0;
    const char *cls = t->m->cfg.classifier;
    if (t->m->cfg.classifier_dist) /* timm's get_classifier() is a pair there: train.py fails on .weight */
        return ct_fail(err, "--head-init-scale/--head-init-bias: %s has two classifiers (%s, %s)", t->m->name, cls,
                       t->m->cfg.classifier_dist);
    char name[2][300];
    int idx[2];
    for (int k = 0; k < 2; k++) {
        snprintf(name[k], sizeof name[k], "%s.%s", cls ? cls : "", k ? "bias" : "weight");
        if (!cls || (idx[k] = state_find(&t->state, name[k])) < 0 || t->state.e[idx[k]].type.dtype != CT_F32)
            return ct_fail(err, "--head-init-scale/--head-init-bias: %s has no classifier %s (--num-classes 0?)",
                           t->m->name, name[k]);
    }
    for (int k = 0; k < 2; k++) {
        float *v = state_data(&t->state, idx[k]);
        int64_t n = shape_numel(&t->state.e[idx[k]].type.shape);
        for (int64_t i = 0; i < n; i++) {
            if (a->has_head_init_scale)
                v[i] = (float)(v[i] * a->head_init_scale);
            if (k == 1 && a->has_head_init_bias)
                v[i] = (float)a->head_init_bias;
        }
    }
    return 0;
}

/* The state a run starts from: initialised from the seed, then the
 * pretrained weights (adapted: train/pretrained.h), then
 * --initial-checkpoint's weights, --head-init-scale/-bias, then --resume's checkpoint (its epoch,
 * the place in a recovery checkpoint's epoch, the loss scale), then
 * --start-epoch; shared from rank 0; the schedule moved to where the run
 * starts. */
static int start_state(Trainer *t, Resumed *res, CtErr *err)
{
    TrainArgs *a = &t->a;
    state_create(&t->state, &t->train);
    state_init(&t->state, (uint64_t)a->seed);
    if (t->pre.source != PRETRAINED_NONE) {
        if (pretrained_load(&t->pre, &t->state, t->classes, err))
            return -1;
        for (int k = 0; k < t->pre.nlog; k++)
            report_log(t->rep, "%s\n", t->pre.log[k]);
    }
    if (a->initial_checkpoint && ckpt_load_weights(a->initial_checkpoint, &t->state, err)) {
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        return ct_fail(err, "--initial-checkpoint %s", why);
    }
    if (head_init(t, err))
        return -1;
    split_bn_copy(&t->state);
    ema_from_model(&t->state);
    int torch = a->resume && weights_is_torch(a->resume);
    if (a->resume) {
        if (t->rank == 0)
            clean_resume_dir(t);
        if (torch ? resume_from_torch(t, res, err)
                  : ckpt_resume(a->resume, &t->state, t->m->name, !a->no_resume_opt, res, err))
            return -1;
        if (res->ema_missing) /* timm: an EMA the checkpoint lacks starts from its weights */
            ema_from_model(&t->state);
        t->start_epoch = res->epoch + 1;
        if (res->batches_done >= 0) { /* a recovery checkpoint: the rest of its epoch */
            t->start_epoch = res->epoch;
            t->first_batch = (size_t)res->batches_done;
            t->loss_sum = res->loss_sum;
            t->loss_count = res->loss_count;
        }
        if (res->has_scaler && t->amp == CT_F16)
            t->scaler = res->scaler;
        if (t->start_epoch >= t->num_epochs && a->start_epoch < 0)
            return ct_fail(err, "--resume %s: the checkpoint is of epoch %d, so --epochs %d leaves nothing to train",
                           a->resume, res->epoch, a->epochs);
    }
    if (a->start_epoch >= 0) { /* train.py: --start-epoch wins over the checkpoint's epoch */
        t->start_epoch = a->start_epoch;
        t->first_batch = 0;
        t->loss_sum = 0;
        t->loss_count = 0;
        if (t->start_epoch >= t->num_epochs)
            return ct_fail(err, "--start-epoch %d: the schedule has %d epochs", t->start_epoch, t->num_epochs);
    }
    if (train_share_state(t->dist, &t->state, err))
        return -1;
    int plateau = a->resume && a->start_epoch < 0 && a->sch.kind == CT_SCHED_PLATEAU;
    int plateau_resumed = plateau && !torch;
    if (plateau_resumed && sched_parse(&t->sched, res->sched))
        return ct_fail(err, "--resume %s: its plateau schedule state is missing or malformed", a->resume);
    if ((t->start_epoch > 0 || t->first_batch > 0) && !plateau_resumed) { /* train.py: the schedule moved on */
        if (a->sch.on_updates)
            sched_step_update(&t->sched, (long)t->start_epoch * (long)trainer_updates_per_epoch(t) +
                                             (long)(t->first_batch / t->accum));
        else
            sched_step(&t->sched, t->start_epoch);
    }
    /* timm keeps no schedule state: its plateau schedule starts afresh, past
     * the warmup at the lr the optimizer's param groups kept */
    if (plateau && torch && !isnan(res->opt_lr) && t->start_epoch > t->sched.warmup_t)
        t->sched.lr = res->opt_lr;
    return 0;
}

/* timm's opening lines: the model, the data, where a resumed run starts,
 * the ranks, AMP. */
static void say_setup(const Trainer *t, const Resumed *res)
{
    const TrainArgs *a = &t->a;
    report_log(t->rep, "Model %s created, param count: %lld\n", t->m->name, (long long)graph_param_count(&t->train));
    char threads[32] = "";
    if (t->be->host_threads)
        snprintf(threads, sizeof threads, ", %d threads", t->be->host_threads());
    report_log(t->rep, "Data: %s: %zu train, %zu validation images, %d classes, %dx%d%s; backend %s%s\n", t->root,
               dataset_len(t->train_ds), t->val_ds ? dataset_len(t->val_ds) : 0, t->classes, t->img, t->img,
               t->chans == 1 ? " gray ('L')" : t->chans == 4 ? " RGBA" : "", t->be->name, threads);
    if (t->chans != 3 && (!a->n_mean || !a->n_std)) /* timm's PrefetchLoader warns of it too (adapt_to_chs) */
        report_log(t->rep, "Normalising the %d-channel images by mean %.6g, std %.6g (the model's 3-channel values "
                   "averaged where --mean/--std give none, as timm's PrefetchLoader does)\n", t->chans, t->mean[0],
                   t->std[0]);
    if (a->resume && t->first_batch)
        report_log(t->rep, "Resumed from %s (epoch %d, %zu batches done%s); starting at epoch %d, batch %zu\n",
                   a->resume, res->epoch, t->first_batch, a->no_resume_opt ? ", weights only" : "", t->start_epoch,
                   t->first_batch);
    else if (a->resume)
        report_log(t->rep, "Resumed from %s (epoch %d%s); starting at epoch %d\n", a->resume, res->epoch,
                   a->no_resume_opt ? ", weights only" : "", t->start_epoch);
    if (t->world > 1) {
        int buckets = 0;
        for (int i = 0; i < t->train.nnodes; i++)
            buckets += t->train.nodes[i].op == CT_OP_allreduce_mean;
        report_log(t->rep, "Distributed: %d ranks, global batch %d, gradients averaged in %d buckets of at most %g "
                   "MiB\n", t->world, a->batch_size * t->world, buckets, a->bucket_cap_mb);
        int synced = 0;
        for (int i = 0; i < t->train.nnodes; i++)
            synced += t->train.nodes[i].op == CT_OP_batch_norm && t->train.nodes[i].iattr[1];
        if (a->sync_bn)
            report_log(t->rep, "Synchronized BatchNorm: %d batch norms normalise by the statistics of the global "
                       "batch\n", synced);
    }
    if (t->accum > 1)
        report_log(t->rep, "Gradient accumulation: %zu batches an update, %zu updates an epoch\n", t->accum,
                   trainer_updates_per_epoch(t));
    if (t->amp != CT_F32)
        report_log(t->rep, "AMP: %s autocast%s\n", t->amp == CT_F16 ? "float16" : "bfloat16",
                   t->amp == CT_F16 ? ", dynamic loss scaling" : "");
}

/* The run's folder (rank 0 alone writes, as in timm), summary.csv's
 * header, the saver and the arguments it records. */
static int open_output(Trainer *t, CtErr *err)
{
    char path[1300];
    if (run_dir_new(t->a.output, t->run_dir, sizeof t->run_dir, err))
        return -1;
    if (strcmp(t->run_dir, t->a.output))
        report_log(t->rep, "Output: %s (%s holds an earlier run)\n", t->run_dir, t->a.output);
    else
        report_log(t->rep, "Output: %s\n", t->run_dir);
    snprintf(path, sizeof path, "%s/summary.csv", t->run_dir);
    if (!(t->summary = fopen(path, "w")))
        return ct_fail(err, "cannot write %s: %s", path, strerror(errno));
    fprintf(t->summary, t->no_eval ? "epoch,train_loss,lr\n" : "epoch,train_loss,eval_loss,eval_top1,eval_top5,lr\n");
    saver_init(&t->saver, t->run_dir, t->a.checkpoint_hist, t->decreasing);
    t->saving = &t->saver;
    t->args_json = train_args_json(&t->a);
    return 0;
}

/* The arguments train.py derives before building anything: the output
 * folder of --experiment, the dtypes, the eval batch, the LR from
 * --lr-base and the global batch, the metric's direction, --dist-bn. */
static void resolve_args(Trainer *t)
{
    TrainArgs *a = &t->a;
    if (a->experiment) { /* timm: the run's folder is <output or ./output/train>/<experiment> */
        snprintf(t->output, sizeof t->output, "%s/%s", a->output ? a->output : "./output/train", a->experiment);
        a->output = t->output;
    }
    t->amp = !a->amp ? CT_F32 : !strcmp(a->amp_dtype, "bfloat16") ? CT_BF16 : CT_F16;
    t->scaler = scaler_default();
    t->decreasing = !strcmp(a->eval_metric, "loss");
    t->bn_mode = !strcmp(a->dist_bn, "reduce") ? 1 : !strcmp(a->dist_bn, "broadcast") ? 0 : -1;
    if (a->sync_bn && t->world > 1) /* train.py: sync BN makes the running statistics one already */
        t->bn_mode = -1;
    t->vb = a->val_batch_size > 0 ? a->val_batch_size : a->batch_size;
    t->splits = a->aug_splits > 1 ? a->aug_splits : 1;
    t->step_batch = a->batch_size * t->splits;
    /* train.py's in_chans, checked by train_args_check; the checkpoint's args record it */
    data_in_chans(a->in_chans, a->n_input_size, a->input_size, &t->chans, NULL);
    a->in_chans = t->chans;
    t->accum = a->grad_accum_steps > 1 ? (size_t)a->grad_accum_steps : 1;
    if (a->lr < 0) { /* timm: lr = lr_base * global batch / lr_base_size, sqrt scaling for ada* and lamb */
        double ratio = (double)a->batch_size * t->world * (double)t->accum / a->lr_base_size;
        int use_sqrt = a->lr_base_scale ? !strcmp(a->lr_base_scale, "sqrt")
                                        : strstr(a->opt, "ada") || strstr(a->opt, "lamb");
        a->lr = a->lr_base * (use_sqrt ? sqrt(ratio) : ratio);
    }
}

/* CTIMM_SAMPLE_LOG=PREFIX: each rank writes the samples of its training
 * batches to PREFIX.rankN, a line "epoch name" each, to check which
 * samples an epoch saw (the wds tests do). */
static int open_sample_log(Trainer *t, CtErr *err)
{
    const char *prefix = getenv("CTIMM_SAMPLE_LOG");
    if (!prefix || !*prefix)
        return 0;
    char path[1100];
    snprintf(path, sizeof path, "%s.rank%d", prefix, t->rank);
    if (!(t->sample_log = fopen(path, "w")))
        return ct_fail(err, "CTIMM_SAMPLE_LOG: cannot write %s: %s", path, strerror(errno));
    return 0;
}

int trainer_open(Trainer *t, const TrainArgs *a, const ModelEntry *m, const CtBackend *be, CtDist *dist,
                 const ProgramOptions *opts, const TrainReport *rep, CtErr *err)
{
    *t = (Trainer){.a = *a, .m = m, .be = be, .dist = dist, .rank = dist_rank(dist), .world = dist_world_size(dist),
                   .opts = opts ? *opts : (ProgramOptions){0}, .rep = rep, .best = NAN, .best_epoch = -1};
    t->opts.collective = dist_collective(dist);
    Resumed res = {0};
    if (train_args_check(&t->a, err))
        return -1;
    resolve_args(t);
    PretrainedSource src = a->pretrained_path ? PRETRAINED_FILE : a->pretrained ? PRETRAINED_HUB : PRETRAINED_NONE;
    if (pretrained_resolve(&t->pre, m, a->model ? a->model : m->name, src, a->pretrained_path, err))
        goto fail;
    t->m = &t->pre.m;
    if (resolve_data(t, err) || open_data(t, err) || model_kwargs_gp(t->a.gp, &t->kw, err) ||
        model_kwargs_parse(t->a.model_kwargs, t->a.n_model_kwargs, train_py_model_kwargs, "train.py", &t->kw, err) ||
        bn_kwargs(&t->a, &t->kw) ||
        model_kwargs_check(t->m, &t->kw, t->img, err) || setup_augment(t, err) || build_graphs(t, err))
        goto fail;
    /* timm's create_scheduler_v2: the schedule fixes the epoch count (cooldown, a warmup prefix, cycles) */
    SchedArgs *sch = &t->a.sch;
    sch->kind = (CtSchedKind)sched_kind_parse(t->a.sched);
    sch->epochs = t->a.epochs;
    sch->warmup_epochs = t->a.warmup_epochs;
    sch->warmup_lr = t->a.warmup_lr;
    sch->min_lr = t->a.min_lr;
    sch->noise_seed = t->a.seed;
    sch->plateau_min = t->decreasing;
    if (sched_init(&t->sched, sch, t->a.lr, (int)trainer_updates_per_epoch(t), err))
        goto fail;
    t->num_epochs = t->sched.num_epochs;
    if (start_state(t, &res, err))
        goto fail;
    if (mixup_active(&t->mix)) {
        t->soft = malloc(sizeof *t->soft * (size_t)t->a.batch_size * (size_t)t->classes);
        t->mix_params = malloc(sizeof *t->mix_params * (size_t)t->a.batch_size * MIX_PARAMS);
    }
    if (t->erase_k)
        t->erase_boxes = malloc(sizeof *t->erase_boxes * (size_t)t->step_batch * (size_t)t->erase_k * 5);
    if ((mixup_active(&t->mix) && (!t->soft || !t->mix_params)) || (t->erase_k && !t->erase_boxes)) {
        ct_fail(err, "out of memory for the mixup and erasing numbers of a batch of %d; lower --batch-size",
                t->a.batch_size);
        goto fail;
    }
    say_setup(t, &res);
    /* Everything is validated: only now does the output folder appear. */
    if (t->a.output && t->rank == 0 && open_output(t, err))
        goto fail;
    if (open_sample_log(t, err))
        goto fail;
    t->info = (CkptInfo){.model = t->m->name, .eval_metric = t->no_eval ? "loss" : t->a.eval_metric, .args_json = t->args_json,
                         .num_classes = t->classes, .amp_scaler = t->amp == CT_F16 ? t->scaler_str : NULL,
                         .sched = t->sched_str};
    sched_format(&t->sched, t->sched_str, sizeof t->sched_str);
    return 0;
fail:
    trainer_close(t);
    return -1;
}

size_t trainer_updates_per_epoch(const Trainer *t)
{
    return (loader_epoch_batches(t->train_ld) + t->accum - 1) / t->accum;
}

void trainer_close(Trainer *t)
{
    backend_close(&t->train_run);
    backend_close(&t->eval_run);
    backend_close(&t->ema_run);
    loader_destroy(t->train_ld);
    loader_destroy(t->val_ld);
    dataset_close(t->train_ds);
    dataset_close(t->val_ds);
    if (t->state.e)
        state_free(&t->state);
    if (t->ema_state.e)
        state_free(&t->ema_state);
    train_step_free(&t->ts);
    graph_free(&t->train);
    graph_free(&t->eval);
    free(t->mix_params);
    free(t->erase_boxes);
    free(t->soft);
    if (t->summary)
        fclose(t->summary);
    if (t->sample_log)
        fclose(t->sample_log);
    saver_free(&t->saver);
    free(t->args_json);
    memset(t, 0, sizeof *t);
}
