/*
 * trainer_run: timm's train_one_epoch and validate per epoch, the
 * checkpoints between them and the ways a run stops (train/trainer.h).
 */
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/dist_sync.h"
#include "train/ema.h"
#include "train/eval_data.h"
#include "train/meter.h"

/* Monotonic seconds, for the log's timings. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int stop_raised(const Trainer *t) { return t->opts.stop && *t->opts.stop != 0; }

/* The training state on the host, before the host reads it (checkpoints,
 * validation, the EMA, cross-rank checks): free on ref and cpu. */
static int state_to_host(Trainer *t, CtErr *err)
{
    return t->train_run.exec ? t->train_run.be->state_to_host(t->train_run.exec, err) : 0;
}

/* After the host changed the training state (BN statistics shared by the ranks). */
static int state_from_host(Trainer *t, CtErr *err)
{
    return t->train_run.exec ? t->train_run.be->state_from_host(t->train_run.exec, err) : 0;
}

/* A recovery checkpoint of `epoch` up to batch index `batch`, the state
 * brought to the host first. */
static int save_recovery(Trainer *t, int epoch, int batch, double loss_sum, long loss_count, CtErr *err)
{
    scaler_format(&t->scaler, t->scaler_str, sizeof t->scaler_str);
    return state_to_host(t, err) ||
           saver_save_recovery(t->saving, &t->state, &t->info, epoch, batch, loss_sum, loss_count, err) ? -1 : 0;
}

/* After a step: the ranks' mean loss in *loss (timm's reduce_tensor), and
 * in *stop whether any rank was asked to stop, so that all stop after the
 * same step; with --dist-check-params, the ranks' parameters compared. */
static int sync_step(Trainer *t, double *loss, int *stop, CtErr *err)
{
    *stop = stop_raised(t);
    if (t->world == 1)
        return 0;
    double v[2] = {*loss, *stop};
    if (dist_allreduce_sum(t->dist, v, 2, err))
        return -1;
    *loss = v[0] / t->world;
    *stop = v[1] > 0;
    return t->a.dist_check_params ? state_to_host(t, err) || train_check_params(t->dist, &t->state, err) : 0;
}

/* Whether any rank was asked to stop (1), agreed by all; -1 on error. */
static int stop_agreed(Trainer *t, CtErr *err)
{
    double v = stop_raised(t);
    if (t->world > 1 && dist_allreduce_sum(t->dist, &v, 1, err))
        return -1;
    return v > 0;
}

/* Ctrl-C while the eval graph's kernels compiled, at the run's first
 * validation: the epoch's training is done, so with an output folder a
 * recovery checkpoint of all its batches keeps it (resumed, the run
 * validates the epoch). mean, the epoch's mean loss, is saved as a sum over
 * one batch, which gives it back to the bit. CT_INTERRUPTED, or -1 when
 * the checkpoint cannot be written. */
static int stop_in_validation(Trainer *t, int epoch, double mean, CtErr *err)
{
    if (!t->saving) {
        report_log(t->rep, "Interrupted in epoch %d's validation; nothing saved (no --output)\n", epoch);
        return CT_INTERRUPTED;
    }
    if (save_recovery(t, epoch, (int)loader_epoch_batches(t->train_ld) - 1, mean, !isnan(mean), err))
        return -1;
    report_log(t->rep, "Interrupted in epoch %d's validation; resume with --resume %s/%s.safetensors\n", epoch,
               t->saver.dir, t->saver.recovery);
    return CT_INTERRUPTED;
}

/* The step's inputs beyond the batch and its targets. */
typedef struct StepScalars {
    float lr, scale, decay;
    float update, unscale; /* --grad-accum-steps: 1 on a group's last batch; scale times the group's batches */
} StepScalars;

/* The numbers batch i of epoch is erased and mixed by (the graph does the
 * pixel work), and its soft targets: one generator per (seed, epoch,
 * batch) and rank (timm seeds each rank with seed + rank). */
static int prepare_batch(Trainer *t, int epoch, size_t i, const Batch *bt, CtErr *err)
{
    CtRng rng = rng_for((uint64_t)t->a.seed ^ 0x6d69787570ull ^ ((uint64_t)t->rank << 32), (uint64_t)epoch, i);
    random_erasing_draw(&t->re, t->step_batch, t->img, t->img, t->erase_boxes, &rng);
    if (!mixup_active(&t->mix))
        return 0;
    t->mix.enabled = !(t->a.mixup_off_epoch && epoch >= t->a.mixup_off_epoch);
    return mixup_draw(&t->mix, t->a.batch_size, t->img, t->img, bt->labels, t->mix_params, t->soft, NULL, &rng, err);
}

/* The compiled step (compiled at the run's first) on the prepared batch
 * with bt's labels: 0 with the step's loss and whether it was applied, -1,
 * or CT_INTERRUPTED when the stop flag ended the compile. */
static int train_step(Trainer *t, const Batch *bt, StepScalars *sc, double *loss, int *applied, CtErr *err)
{
    int B = t->step_batch, mixing = mixup_active(&t->mix), nin = 0;
    /* the graph's inputs in order: the pipeline's input stage's, then the training step's */
    CtTensor in[9];
    in[nin++] = (CtTensor){{{4, {B, t->img, t->img, t->chans}}, CT_U8}, bt->images};
    if (t->erase_k)
        in[nin++] = (CtTensor){{{3, {B, t->erase_k, 5}}, CT_I64}, t->erase_boxes};
    if (mixing)
        in[nin++] = (CtTensor){{{2, {B, MIX_PARAMS}}, CT_F32}, t->mix_params};
    in[nin++] = mixing ? (CtTensor){{{2, {B, t->classes}}, CT_F32}, t->soft}
                       : (CtTensor){{{1, {B}}, CT_I64}, bt->labels};
    in[nin++] = (CtTensor){{{0}, CT_F32}, &sc->lr};
    in[nin++] = (CtTensor){{{0}, CT_F32}, &sc->scale};
    if (t->ts.ema_decay >= 0)
        in[nin++] = (CtTensor){{{0}, CT_F32}, &sc->decay};
    if (t->ts.update >= 0) {
        in[nin++] = (CtTensor){{{0}, CT_F32}, &sc->update};
        in[nin++] = (CtTensor){{{0}, CT_F32}, &sc->unscale};
    }
    if (!t->train_run.prog) {
        int rc = backend_open(&t->train_run, t->be, &t->train, &t->state, &t->opts, err);
        if (rc)
            return rc;
        const char *note = t->be->note ? t->be->note(t->train_run.exec) : NULL;
        if (note && t->rank == 0)
            report_log(t->rep, "%s\n", note);
    }
    int ran;
    CtTensor *out = calloc((size_t)t->train.noutputs, sizeof *out);
    CT_ASSERT(out != NULL);
    if ((ran = backend_step(&t->train_run, in, nin, out, err)) == 0) {
        *loss = *(float *)out[1].data;
        *applied = t->finite_out < 0 || *(float *)out[t->finite_out].data != 0;
        for (int k = 0; k < t->train.noutputs; k++)
            tensor_free(&out[k]);
    }
    free(out);
    return ran;
}

/* One epoch of train_one_epoch, from batch `first` (0, or a recovery
 * checkpoint's next batch): 0 and the mean of the finite losses in *mean,
 * CT_INTERRUPTED when stopped (after the recovery checkpoint, with an
 * output folder), -1 on error. The LR is the schedule's, stepped after
 * every update with --sched-on-updates. With --amp f16 the loss is scaled,
 * a step whose gradient is not finite is skipped in the graph and the
 * scale follows GradScaler's rules; without it a non-finite loss stops the
 * run. With --grad-accum-steps k, batches go in groups of k (the epoch's
 * last group has the rest), the update, the schedule's step, the EMA, the
 * log and the recovery checkpoint at each group's end, as train.py. */
static int train_epoch(Trainer *t, int epoch, size_t first, double *mean, CtErr *err)
{
    size_t nb = loader_epoch_batches(t->train_ld), k = t->accum, upe = trainer_updates_per_epoch(t);
    size_t last_group_from = nb - nb % k; /* nb when k divides it */
    double t0 = now(), data_time = 0;
    long num_updates = (long)epoch * (long)upe + (long)(first / k);
    long skipped_here = 0;
    int rc = -1;
    char label[32];
    snprintf(label, sizeof label, "Train %d", epoch);
    report_pass_begin(t->rep, label, nb);
    report_pass_update(t->rep, first);
    if (loader_start_epoch_at(t->train_ld, (uint64_t)epoch, first, err))
        goto done;
    for (size_t i = first; i < nb; i++) {
        const Batch *bt = NULL;
        double td = now();
        if (loader_next(t->train_ld, &bt, err) != 1) {
            if (bt == NULL && !err->msg[0])
                ct_fail(err, "epoch %d ended after %zu of %zu batches", epoch, i, nb);
            goto done;
        }
        if (prepare_batch(t, epoch, i, bt, err))
            goto done;
        for (int j = 0; t->sample_log && j < bt->n; j++) {
            char name[1200];
            dataset_sample_name(t->train_ds, (size_t)bt->samples[j], name, sizeof name);
            fprintf(t->sample_log, "%d %s\n", epoch, name);
        }
        data_time += now() - td;
        int last = i + 1 == nb, update = last || (i + 1) % k == 0;
        size_t update_idx = i / k, group = i >= last_group_from ? nb % k : k;
        double lr = sched_lr(&t->sched), loss = 0;
        float scale = t->finite_out >= 0 ? (float)t->scaler.scale : 1;
        /* between updates the EMA stays (decay 1), as train.py updates it after each update only */
        StepScalars sc = {(float)lr, scale,
                          update ? (float)ema_decay(t->a.model_ema_decay, t->a.model_ema_warmup, num_updates + 1) : 1,
                          (float)update, scale * (float)group};
        int applied = 1, stop;
        int ran = train_step(t, bt, &sc, &loss, &applied, err);
        if (ran == CT_INTERRUPTED) { /* Ctrl-C while the step compiled: the run's first step, nothing trained */
            report_pass_end(t->rep);
            report_log(t->rep, "Interrupted at epoch %d, batch %zu of %zu, compiling the training step; nothing "
                       "trained in this run\n", epoch, i, nb);
            rc = CT_INTERRUPTED;
            goto done;
        }
        if (ran)
            goto done;
        if (sync_step(t, &loss, &stop, err)) {
            ct_failctx(err, "epoch %d, batch %zu", epoch, i);
            goto done;
        }
        if (t->finite_out >= 0 && update) {
            scaler_update(&t->scaler, applied);
            t->skipped += !applied;
            skipped_here += !applied;
            if (scaler_exhausted(&t->scaler)) {
                ct_fail(err, "epoch %d, batch %zu: %ld steps skipped for non-finite gradients and the loss scale is "
                        "down to %g: no scale makes them finite; stopping (the last checkpoint is kept)",
                        epoch, i, skipped_here, t->scaler.scale);
                goto done;
            }
        } else if (!isfinite(loss)) {
            ct_fail(err, "epoch %d, batch %zu: the loss is %g; stopping (the last checkpoint is kept)", epoch, i,
                    loss);
            goto done;
        }
        if (isfinite(loss)) {
            t->loss_sum += loss;
            t->loss_count++;
        }
        if (update)
            sched_step_update(&t->sched, ++num_updates);
        double avg = t->loss_count ? t->loss_sum / (double)t->loss_count : NAN;
        report_pass_update(t->rep, i + 1);
        if (update && (update_idx % (size_t)t->a.log_interval == 0 || last)) {
            double el = now() - t0;
            size_t done_here = i + 1 - first, ups = update_idx + 1 > first / k ? update_idx + 1 - first / k : 1;
            char scale_note[64] = "";
            if (t->finite_out >= 0)
                snprintf(scale_note, sizeof scale_note, "  Scale: %g%s", t->scaler.scale,
                         applied ? "" : " (step skipped)");
            report_log(t->rep,
                       "Train: %d [%4zu/%zu (%3.0f%%)]  Loss: %#.4g (%#.4g)  Time: %.3fs, %7.2f/s  LR: %.3e  "
                       "Data: %.3f%s\n",
                       epoch, update_idx + 1, upe, 100.0 * (double)(update_idx + 1) / (double)upe, loss, avg,
                       el / (double)ups, (double)(done_here * (size_t)t->step_batch * (size_t)t->world) / el,
                       lr * t->lr_log_scale, data_time / (double)ups, scale_note);
        }
        /* timm's recovery checkpoint: every --recovery-interval updates and at
         * the epoch's last; and on Ctrl-C (accumulated gradients included) */
        int every = t->a.recovery_interval && update &&
                    ((update_idx + 1) % (size_t)t->a.recovery_interval == 0 || last);
        if (t->saving && (every || stop) && save_recovery(t, epoch, (int)i, t->loss_sum, t->loss_count, err))
            goto done;
        if (stop) {
            report_pass_end(t->rep);
            if (t->saving)
                report_log(t->rep, "Interrupted at epoch %d, batch %zu of %zu; resume with --resume "
                           "%s/%s.safetensors\n", epoch, i + 1, nb, t->saver.dir, t->saver.recovery);
            else
                report_log(t->rep, "Interrupted at epoch %d, batch %zu of %zu; nothing saved (no --output)\n", epoch,
                           i + 1, nb);
            rc = CT_INTERRUPTED;
            goto done;
        }
    }
    *mean = t->loss_count ? t->loss_sum / (double)t->loss_count : NAN;
    if (skipped_here) /* the epoch's mean loss is over the applied steps only: say so */
        report_log(t->rep, "Train: %d: %ld of %zu steps skipped for a non-finite gradient (loss scale now %g); "
                   "the mean loss is over the other steps\n", epoch, skipped_here, upe - first / k, t->scaler.scale);
    rc = 0;
done:
    report_pass_end(t->rep);
    return rc;
}

/* validate(): loss, top-1 and top-5 over the whole split (every rank's
 * share) of the eval graph on run over st. 0, -1, or CT_INTERRUPTED when
 * the stop flag ended the eval graph's compile. */
static int validate(Trainer *t, CtRunner *run, CtState *st, const char *log_name, double *loss, double *top1,
                    double *top5, CtErr *err)
{
    /* the eval graph reads the state the host has now: compiled at the first
     * validation, told of the newer state at the others */
    int opened = run->prog ? run->be->state_from_host(run->exec, err)
                           : backend_open(run, t->be, &t->eval, st, &t->opts, err);
    if (opened)
        return opened;
    size_t nb = loader_epoch_batches(t->val_ld);
    EvalMeter meter = {0};
    int r = t->a.tta > 1 ? t->a.tta : 1;
    int64_t *tta_labels = r > 1 ? malloc(sizeof *tta_labels * (size_t)t->vb) : NULL;
    if (r > 1 && !tta_labels)
        return ct_fail(err, "out of memory");
    double t0 = now();
    report_pass_begin(t->rep, log_name, nb);
    if (loader_start_epoch(t->val_ld, 0, err)) {
        report_pass_end(t->rep);
        free(tta_labels);
        return -1;
    }
    for (size_t i = 0; i < nb; i++) {
        const Batch *bt = NULL;
        CtTensor logits;
        int got = loader_next(t->val_ld, &bt, err);
        if (got == 1) {
            CtTensor in = {{{4, {t->vb, t->img, t->img, t->chans}}, CT_U8}, bt->images};
            int ran = backend_step(run, &in, 1, &logits, err);
            got = ran ? ran : 1;
        }
        if (got != 1) {
            report_pass_end(t->rep);
            free(tta_labels);
            return got < 0 ? got : ct_fail(err, "validation ended after %zu of %zu batches", i, nb);
        }
        int n = bt->n;
        const int64_t *labels = bt->labels;
        if (r > 1) {
            /* train.py's --tta: each r consecutive outputs averaged, scored
             * on the first one's target (the loader makes no extra views) */
            if (n % r) {
                tensor_free(&logits);
                report_pass_end(t->rep);
                free(tta_labels);
                return ct_fail(err, "--tta %d: validation batch %zu has %d images, not a multiple of %d (timm's "
                               "loss fails on it; choose -vb and the validation set to divide)", r, i, n, r);
            }
            float *z = logits.data;
            for (int g = 0; g < n / r; g++) {
                for (int c = 0; c < t->classes; c++) {
                    double acc = 0;
                    for (int k = 0; k < r; k++)
                        acc += z[(size_t)(g * r + k) * (size_t)t->classes + (size_t)c];
                    z[(size_t)g * (size_t)t->classes + (size_t)c] = (float)(acc / r);
                }
                tta_labels[g] = bt->labels[g * r];
            }
            n /= r;
            labels = tta_labels;
        }
        eval_meter_add(&meter, logits.data, t->classes, labels, n);
        tensor_free(&logits);
        report_pass_update(t->rep, i + 1);
    }
    report_pass_end(t->rep);
    free(tta_labels);
    if (train_reduce_meter(t->dist, &meter, err)) /* timm's distributed validate: every rank's share */
        return -1;
    *loss = eval_loss(&meter);
    *top1 = eval_top1(&meter);
    *top5 = eval_top5(&meter);
    report_log(t->rep, "%s: [%zu/%zu]  Time: %.3fs  Loss: %.4f  Acc@1: %.4f  Acc@5: %.4f\n", log_name, nb, nb,
               now() - t0, *loss, *top1, *top5);
    return 0;
}

/* The metric --eval-metric names. */
static double pick_metric(const Trainer *t, double loss, double top1, double top5)
{
    return !strcmp(t->a.eval_metric, "loss") ? loss : !strcmp(t->a.eval_metric, "top5") ? top5 : top1;
}

/* end_epoch without validation (--val-split ''): train.py's summary row of
 * the train loss, which also ranks the checkpoints and steps the schedule. */
static int end_epoch_no_eval(Trainer *t, int epoch, double train_loss, double lr, CtErr *err)
{
    if (t->summary) {
        fprintf(t->summary, "%d,%.6f,%.6g\n", epoch, train_loss, lr * t->lr_log_scale);
        fflush(t->summary);
    }
    sched_step_metric(&t->sched, epoch + 1, train_loss);
    scaler_format(&t->scaler, t->scaler_str, sizeof t->scaler_str);
    sched_format(&t->sched, t->sched_str, sizeof t->sched_str);
    double rank_by = isfinite(train_loss) ? train_loss : NAN;
    if (t->saving && saver_save(t->saving, &t->state, &t->info, epoch, rank_by, err))
        return ct_failctx(err, "saving the checkpoint of epoch %d", epoch);
    if (isfinite(rank_by) && (t->best_epoch < 0 || rank_by < t->best)) {
        t->best = rank_by;
        t->best_epoch = epoch;
    }
    return 0;
}

/* After epoch's training: timm's distribute_bn, then (every --val-interval
 * epochs and after the last) validation (of the EMA
 * too, whose metrics then stand for the epoch), summary.csv, the
 * schedule's step on the metric, and the epoch's checkpoints. 0, -1, or
 * CT_INTERRUPTED from stop_in_validation. */
static int end_epoch(Trainer *t, int epoch, double train_loss, CtErr *err)
{
    double el = 0, t1 = 0, t5 = 0, lr = sched_lr(&t->sched);
    if (state_to_host(t, err))
        return -1;
    if (t->bn_mode >= 0 && (train_sync_bn(t->dist, &t->state, t->bn_mode, err) || state_from_host(t, err)))
        return -1;
    if ((epoch + 1) % t->a.val_interval != 0 && epoch + 1 != t->num_epochs) {
        /* --val-interval: train.py steps the schedule without a metric and goes on */
        report_log(t->rep, "Skipping eval and checkpointing\n");
        sched_step_metric(&t->sched, epoch + 1, NAN);
        return 0;
    }
    if (t->no_eval)
        return end_epoch_no_eval(t, epoch, train_loss, lr, err);
    int vst = validate(t, &t->eval_run, &t->state, "Test", &el, &t1, &t5, err);
    if (vst == CT_INTERRUPTED)
        return stop_in_validation(t, epoch, train_loss, err);
    if (vst)
        return -1;
    if (t->a.model_ema) { /* train.py: the EMA's metrics replace the model's from here on */
        if (!t->ema_state.e)
            state_create(&t->ema_state, &t->eval);
        ema_view(&t->ema_state, &t->state);
        if (validate(t, &t->ema_run, &t->ema_state, "Test (EMA)", &el, &t1, &t5, err))
            return -1;
    }
    if (t->summary) {
        fprintf(t->summary, "%d,%.6f,%.6f,%.4f,%.4f,%.6g\n", epoch, train_loss, el, t1, t5, lr * t->lr_log_scale);
        fflush(t->summary);
    }
    double metric = pick_metric(t, el, t1, t5);
    sched_step_metric(&t->sched, epoch + 1, metric); /* the LR of the next epoch, saved with the checkpoint */
    scaler_format(&t->scaler, t->scaler_str, sizeof t->scaler_str);
    sched_format(&t->sched, t->sched_str, sizeof t->sched_str);
    /* NaN outputs (a diverged model) make the eval loss NaN: whatever
     * top-1 they score by accident of ranking, the epoch is no candidate */
    double rank_by = isfinite(el) ? metric : NAN;
    if (!isfinite(rank_by))
        report_log(t->rep, "Epoch %d: the eval %s is %g; it is not a candidate for model_best\n", epoch,
                   isfinite(el) ? t->a.eval_metric : "loss", isfinite(el) ? metric : el);
    if (t->saving && saver_save(t->saving, &t->state, &t->info, epoch, rank_by, err))
        return ct_failctx(err, "saving the checkpoint of epoch %d", epoch);
    if (isfinite(rank_by) && (t->best_epoch < 0 || (t->decreasing ? rank_by < t->best : rank_by > t->best))) {
        t->best = rank_by;
        t->best_epoch = epoch;
    }
    return 0;
}

int trainer_run(Trainer *t, CtErr *err)
{
    if (t->num_epochs != t->a.epochs)
        report_log(t->rep, "Scheduled epochs: %d (--epochs %d with the schedule's cooldown, warmup prefix or "
                   "cycles)\n", t->num_epochs, t->a.epochs);
    for (int epoch = t->start_epoch; epoch < t->num_epochs; epoch++) {
        double train_loss = NAN;
        int st = train_epoch(t, epoch, epoch == t->start_epoch ? t->first_batch : 0, &train_loss, err);
        t->loss_sum = 0;
        t->loss_count = 0;
        if (st == 0)
            st = end_epoch(t, epoch, train_loss, err);
        if (st)
            return st;
        int stop = stop_agreed(t, err);
        if (stop < 0)
            return -1;
        if (stop && epoch + 1 < t->num_epochs) { /* during validation: the epoch's checkpoint is the place */
            if (t->saving)
                report_log(t->rep, "Interrupted after epoch %d; resume with --resume %s/last.safetensors\n", epoch,
                           t->saver.dir);
            else
                report_log(t->rep, "Interrupted after epoch %d; nothing saved (no --output)\n", epoch);
            return CT_INTERRUPTED;
        }
    }
    if (t->skipped)
        report_log(t->rep, "AMP: %ld steps skipped for a non-finite gradient\n", t->skipped);
    report_log(t->rep, "*** Best metric: %.4f (epoch %d)\n", t->best, t->best_epoch);
    return 0;
}
