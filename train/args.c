#include "train/args.h"

#include <stdio.h>
#include <string.h>

#include <cJSON.h>

#include "runtime/data/augment.h"
#include "runtime/data/transforms.h"
#include "train/eval_data.h"

TrainArgs train_args_default(void)
{
    return (TrainArgs){.train_split = "train", .val_split = "validation", .model = "test_resnet", .opt = "sgd",
                       .sched = "cosine", .device = "auto", .num_classes = -1, .batch_size = 32, .epochs = 5,
                       .workers = 2, .log_interval = 50, .lr = -1, .drop_path = -1, .lr_base = 0.1, .lr_base_size = 256,
                       .momentum = 0.9, .weight_decay = 2e-5, .smoothing = 0.1, .warmup_lr = 1e-5, .opt_eps = -1,
                       .seed = 42, .checkpoint_hist = 10, .eval_metric = "top1", .clip_grad = -1, .layer_decay = -1,
                       .grad_accum_steps = 1, .clip_mode = "norm", .model_ema_decay = 0.9998, .sch = sched_args_default(),
                       .mixup_prob = 1, .mixup_switch_prob = 0.5, .mixup_mode = "batch", .remode = "pixel",
                       .recount = 1, .train_interpolation = "random", .scale = {0.08, 1.0},
                       .ratio = {3.0 / 4.0, 4.0 / 3.0}, .hflip = 0.5, .color_jitter = 0.4, .crop_pct = -1,
                       .color_jitter_prob = -1,
                       .amp_dtype = "float16", .bce_target_thresh = -1, .start_epoch = -1, .bucket_cap_mb = 25,
                       .dist_bn = "reduce", .dist_timeout = 1800, .val_interval = 1};
}

int train_args_check(const TrainArgs *a, CtErr *err)
{
    struct {
        const char *flag;
        double v;
        int ok;
        const char *need;
    } c[] = {
        {"lr-base", a->lr_base, a->lr_base > 0, "> 0"},
        {"lr-base-size", a->lr_base_size, a->lr_base_size > 0, "> 0"},
        {"momentum", a->momentum, a->momentum >= 0, ">= 0"},
        {"weight-decay", a->weight_decay, a->weight_decay >= 0, ">= 0"},
        {"warmup-lr", a->warmup_lr, a->warmup_lr >= 0, ">= 0"},
        {"min-lr", a->min_lr, a->min_lr >= 0, ">= 0"},
        {"warmup-epochs", a->warmup_epochs, a->warmup_epochs >= 0, ">= 0"},
        {"decay-epochs", a->sch.decay_epochs, a->sch.decay_epochs > 0, "> 0"},
        {"decay-rate", a->sch.decay_rate, a->sch.decay_rate >= 0, ">= 0"},
        {"lr-noise-pct", a->sch.noise_pct, a->sch.noise_pct >= 0, ">= 0"},
        {"lr-noise-std", a->sch.noise_std, a->sch.noise_std >= 0, ">= 0"},
        {"lr-cycle-mul", a->sch.cycle_mul, a->sch.cycle_mul > 0, "> 0"},
        {"lr-cycle-decay", a->sch.cycle_decay, a->sch.cycle_decay >= 0, ">= 0"},
        {"lr-k-decay", a->sch.k_decay, a->sch.k_decay > 0, "> 0"},
        {"mixup", a->mixup, a->mixup >= 0, ">= 0 (a Beta alpha)"},
        {"cutmix", a->cutmix, a->cutmix >= 0, ">= 0 (a Beta alpha)"},
        {"mixup-prob", a->mixup_prob, a->mixup_prob >= 0 && a->mixup_prob <= 1, "in [0, 1]"},
        {"mixup-switch-prob", a->mixup_switch_prob, a->mixup_switch_prob >= 0 && a->mixup_switch_prob <= 1,
         "in [0, 1]"},
        {"reprob", a->reprob, a->reprob >= 0 && a->reprob <= 1, "in [0, 1]"},
        {"layer-decay-min-scale", a->layer_decay_min_scale, a->layer_decay_min_scale >= 0, ">= 0"},
        {"layer-decay-no-opt-scale", a->layer_decay_no_opt_scale, a->layer_decay_no_opt_scale >= 0, ">= 0"},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++)
        if (!c[k].ok)
            return ct_fail(err, "--%s %g: must be %s", c[k].flag, c[k].v, c[k].need);
    for (int k = 0; k < a->n_betas; k++)
        if (!(a->opt_betas[k] >= 0 && a->opt_betas[k] < 1))
            return ct_fail(err, "--opt-betas %g: each beta must be in [0, 1)", a->opt_betas[k]);
    for (int k = 0; k < a->n_std; k++)
        if (!(a->std[k] > 0))
            return ct_fail(err, "--std %g: must be > 0 (the batch is divided by it)", a->std[k]);
    if ((a->n_scale && a->n_scale != 2) || (a->n_ratio && a->n_ratio != 2))
        return ct_fail(err, "--scale and --ratio take two values, MIN MAX");
    /* the transform's own rule, named by the flag (its messages start with timm's argument name);
     * the size is the model's, checked with it when the loader is made */
    TrainTransform tt = train_transform_default(224);
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
    if (!(a->aug_repeats >= 0 && a->aug_repeats <= 1000))
        return ct_fail(err, "--aug-repeats %g: must be in [0, 1000] (0: off)", a->aug_repeats);
    if (train_transform_check(&tt, err)) {
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "%s", err->msg);
        for (char *c = m; *c && *c != ' '; c++)
            *c = *c == '_' ? '-' : *c;
        return ct_fail(err, "--%s", m);
    }
    AugPolicy policy;
    if (a->aa && *a->aa && aug_parse(a->aa, &policy, err))
        return ct_failctx(err, "--aa %s", a->aa);
    int chans;
    if (data_in_chans(a->in_chans, a->n_input_size, a->input_size, &chans, err) ||
        data_img_mode(a->input_img_mode, chans, &tt.mode, err))
        return -1;
    tt.auto_augment = a->aa;
    if (train_transform_check(&tt, err))
        return ct_failctx(err, "--in-chans %d", chans);
    if (a->lr_base_scale && strcmp(a->lr_base_scale, "sqrt") && strcmp(a->lr_base_scale, "linear"))
        return ct_fail(err, "--lr-base-scale is sqrt or linear, got '%s'", a->lr_base_scale);
    if (a->amp && strcmp(a->amp_dtype, "float16") && strcmp(a->amp_dtype, "bfloat16"))
        return ct_fail(err, "--amp-dtype %s is not one of float16, bfloat16", a->amp_dtype);
    if (sched_kind_parse(a->sched) < 0)
        return ct_fail(err, "--sched %s is not one of cosine, tanh, step, multistep, plateau, poly, none", a->sched);
    if (strcmp(a->eval_metric, "top1") && strcmp(a->eval_metric, "top5") && strcmp(a->eval_metric, "loss"))
        return ct_fail(err, "--eval-metric %s is not one of top1, top5, loss", a->eval_metric);
    if (*a->dist_bn && strcmp(a->dist_bn, "reduce") && strcmp(a->dist_bn, "broadcast") && strcmp(a->dist_bn, "none"))
        return ct_fail(err, "--dist-bn %s is not one of reduce, broadcast, none", a->dist_bn);
    if (a->bn_momentum < 0 || a->bn_momentum > 1)
        return ct_fail(err, "--bn-momentum %g: must be in (0, 1]", a->bn_momentum);
    if (a->bn_eps < 0)
        return ct_fail(err, "--bn-eps %g: must be > 0", a->bn_eps);
    /* train.py's asserts */
    if (a->aug_splits == 1)
        return ct_fail(err, "--aug-splits 1: a split of 1 makes no sense (0 for none, or 2 and more)");
    if (a->aug_splits < 0 || a->aug_splits > CT_JSD_MAX_SPLITS)
        return ct_fail(err, "--aug-splits %d: 2 to %d", a->aug_splits, CT_JSD_MAX_SPLITS);
    if (a->jsd_loss && a->aug_splits < 2)
        return ct_fail(err, "--jsd-loss needs --aug-splits 2 or more (its clean and augmented splits)");
    if (a->split_bn && a->aug_splits < 2 && !a->resplit)
        return ct_fail(err, "--split-bn needs --aug-splits 2 or more, or --resplit");
    return 0;
}

char *train_args_json(const TrainArgs *a)
{
    cJSON *o = cJSON_CreateObject();
    CT_ASSERT(o != NULL);
    const char *str[][2] = {{"data_dir", a->data_dir}, {"dataset", a->dataset}, {"train_split", a->train_split},
                            {"val_split", a->val_split}, {"model", a->model}, {"opt", a->opt},
                            {"sched", a->sched}, {"device", a->device}, {"output", a->output},
                            {"resume", a->resume}, {"initial_checkpoint", a->initial_checkpoint},
                            {"eval_metric", a->eval_metric}, {"clip_mode", a->clip_mode}, {"mixup_mode", a->mixup_mode},
                            {"remode", a->remode}, {"config", a->config}, {"amp_dtype", a->amp_dtype},
                            {"pretrained_path", a->pretrained_path}, {"gp", a->gp},
                            {"input_img_mode", a->input_img_mode}, {"input_key", a->input_key},
                            {"target_key", a->target_key}};
    for (size_t k = 0; k < sizeof str / sizeof *str; k++)
        if (str[k][1])
            cJSON_AddStringToObject(o, str[k][0], str[k][1]);
    const struct { const char *k; double v; } num[] = {
        {"num_classes", a->num_classes}, {"img_size", a->img_size}, {"batch_size", a->batch_size},
        {"validation_batch_size", a->val_batch_size}, {"epochs", a->epochs}, {"workers", a->workers},
        {"channels_last", a->channels_last}, {"no_resume_opt", a->no_resume_opt},
        {"checkpoint_hist", a->checkpoint_hist}, {"seed", a->seed}, {"clip_grad", a->clip_grad},
        {"layer_decay", a->layer_decay}, {"layer_decay_min_scale", a->layer_decay_min_scale},
        {"layer_decay_no_opt_scale", a->layer_decay_no_opt_scale}, {"grad_accum_steps", a->grad_accum_steps},
        {"grad_checkpointing", a->grad_checkpointing}, {"memory_budget", (double)a->memory_budget},
        {"keep_activations", a->keep_activations},
        {"model_ema", a->model_ema}, {"model_ema_decay", a->model_ema_decay},
        {"model_ema_warmup", a->model_ema_warmup}, {"lr", a->lr}, {"lr_base", a->lr_base},
        {"lr_base_size", a->lr_base_size}, {"momentum", a->momentum}, {"weight_decay", a->weight_decay},
        {"smoothing", a->smoothing}, {"warmup_lr", a->warmup_lr}, {"min_lr", a->min_lr},
        {"warmup_epochs", a->warmup_epochs}, {"drop", a->drop}, {"drop_path", a->drop_path},
        {"opt_eps", a->opt_eps}, {"sched_on_updates", a->sch.on_updates},
        {"decay_epochs", a->sch.decay_epochs}, {"decay_rate", a->sch.decay_rate},
        {"patience_epochs", a->sch.patience_epochs}, {"cooldown_epochs", a->sch.cooldown_epochs},
        {"warmup_prefix", a->sch.warmup_prefix}, {"lr_noise_pct", a->sch.noise_pct},
        {"lr_noise_std", a->sch.noise_std}, {"lr_cycle_mul", a->sch.cycle_mul},
        {"lr_cycle_decay", a->sch.cycle_decay}, {"lr_cycle_limit", a->sch.cycle_limit},
        {"lr_k_decay", a->sch.k_decay}, {"mixup", a->mixup}, {"cutmix", a->cutmix},
        {"mixup_prob", a->mixup_prob}, {"mixup_switch_prob", a->mixup_switch_prob},
        {"mixup_off_epoch", a->mixup_off_epoch}, {"reprob", a->reprob}, {"recount", a->recount},
        {"amp", a->amp}, {"bce_loss", a->bce_loss}, {"bce_target_thresh", a->bce_target_thresh},
        {"bce_sum", a->bce_sum}, {"bce_pos_weight", a->bce_pos_weight}, {"aug_splits", a->aug_splits},
        {"jsd_loss", a->jsd_loss}, {"split_bn", a->split_bn}, {"resplit", a->resplit},
        {"recovery_interval", a->recovery_interval}, {"start_epoch", a->start_epoch},
        {"pretrained", a->pretrained}, {"in_chans", a->in_chans ? a->in_chans : 3},
        {"val_interval", a->val_interval}, {"tta", a->tta}};
    for (size_t k = 0; k < sizeof num / sizeof *num; k++)
        cJSON_AddNumberToObject(o, num[k].k, num[k].v);
    if (a->drop_path < 0) /* not given: train.py's None */
        cJSON_ReplaceItemInObject(o, "drop_path", cJSON_CreateNull());
    if (a->bce_pos_weight <= 0)
        cJSON_ReplaceItemInObject(o, "bce_pos_weight", cJSON_CreateNull());
    cJSON_AddItemToObject(o, "bn_momentum", a->bn_momentum > 0 ? cJSON_CreateNumber(a->bn_momentum) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "bn_eps", a->bn_eps > 0 ? cJSON_CreateNumber(a->bn_eps) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "head_init_scale", a->has_head_init_scale ? cJSON_CreateNumber(a->head_init_scale)
                                                                         : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "head_init_bias", a->has_head_init_bias ? cJSON_CreateNumber(a->head_init_bias)
                                                                       : cJSON_CreateNull());
    const struct { const char *k; int v; } opt_num[] = {{"train_num_samples", a->train_num_samples},
                                                        {"val_num_samples", a->val_num_samples}};
    for (size_t k = 0; k < sizeof opt_num / sizeof *opt_num; k++)
        if (opt_num[k].v > 0)
            cJSON_AddNumberToObject(o, opt_num[k].k, opt_num[k].v);
    cJSON *ms = cJSON_AddArrayToObject(o, "decay_milestones");
    for (int k = 0; ms && k < a->sch.n_milestones; k++)
        cJSON_AddItemToArray(ms, cJSON_CreateNumber(a->sch.decay_milestones[k]));
    if (a->n_minmax) {
        cJSON *mm = cJSON_AddArrayToObject(o, "cutmix_minmax");
        for (int k = 0; mm && k < a->n_minmax; k++)
            cJSON_AddItemToArray(mm, cJSON_CreateNumber(a->cutmix_minmax[k]));
    }
    if (a->sch.n_noise) {
        cJSON *nz = cJSON_AddArrayToObject(o, "lr_noise");
        for (int k = 0; nz && k < a->sch.n_noise; k++)
            cJSON_AddItemToArray(nz, cJSON_CreateNumber(a->sch.noise[k]));
    }
    const char *const *words[2] = {a->model_kwargs, a->opt_kwargs};
    int nwords[2] = {a->n_model_kwargs, a->n_opt_kwargs};
    for (int m = 0; m < 2; m++) {
        cJSON *kw = cJSON_AddObjectToObject(o, m ? "opt_kwargs" : "model_kwargs");
        for (int k = 0; kw && k < nwords[m]; k++) {
            const char *eq = strchr(words[m][k], '=');
            char key[64];
            if (eq && eq - words[m][k] < (long)sizeof key) {
                snprintf(key, sizeof key, "%.*s", (int)(eq - words[m][k]), words[m][k]);
                cJSON_AddStringToObject(kw, key, eq + 1);
            }
        }
    }
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    CT_ASSERT(j != NULL);
    return j;
}
