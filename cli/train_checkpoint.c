/*
 * ctimm-train's checkpoints: last, model_best and checkpoint-<epoch> pairs
 * (weights + training state), saved and resumed as train_checkpoint.h says.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "cli/train_checkpoint.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { PATH_N = 1200 };

static const char weights_ext[] = ".safetensors", state_ext[] = ".state.safetensors";

void saver_init(Saver *sv, const char *dir, int max_hist, int decreasing)
{
    memset(sv, 0, sizeof *sv);
    snprintf(sv->dir, sizeof sv->dir, "%s", dir);
    sv->max_hist = max_hist;
    sv->decreasing = decreasing;
    sv->files = calloc((size_t)max_hist + 1, sizeof *sv->files);
    CT_ASSERT(sv->files != NULL);
    sv->best_epoch = -1;
}

void saver_free(Saver *sv)
{
    free(sv->files);
    sv->files = NULL;
}

int saver_better(const Saver *sv, double a, double b) { return sv->decreasing ? a < b : a > b; }

void saver_restore(Saver *sv, const Resumed *r)
{
    sv->best = r->best;
    sv->best_epoch = r->best_epoch;
    sv->nfiles = 0;
    for (int i = 0; i < r->nhist && sv->nfiles < sv->max_hist; i++)
        sv->files[sv->nfiles++] = r->hist[i];
}

static void pair_path(char *p, size_t n, const char *dir, const char *name, int state)
{
    snprintf(p, n, "%s/%s%s", dir, name, state ? state_ext : weights_ext);
}

/* Copies src to tmp (where a hard link is not possible). */
static int copy_file(const char *src, const char *tmp, CtErr *err)
{
    FILE *in = fopen(src, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
    char buf[1 << 16];
    size_t k;
    int rc = 0;
    if (!in || !out)
        rc = ct_fail(err, "cannot copy %s to %s: %s", src, tmp, strerror(errno));
    while (!rc && (k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, out) != k)
            rc = ct_fail(err, "cannot write %s: %s", tmp, strerror(errno));
    if (in && ferror(in) && !rc)
        rc = ct_fail(err, "cannot read %s", src);
    if (in)
        fclose(in);
    if (out && fclose(out) && !rc)
        rc = ct_fail(err, "cannot write %s: %s", tmp, strerror(errno));
    return rc;
}

/* Puts src's contents at dst atomically: a hard link (or a copy) under a
 * temporary name, renamed over dst. */
static int place(const char *src, const char *dst, CtErr *err)
{
    char tmp[PATH_N + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp-link", dst);
    unlink(tmp);
    if (link(src, tmp) && copy_file(src, tmp, err)) {
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, dst)) {
        int e = errno;
        unlink(tmp);
        return ct_fail(err, "cannot rename %s to %s: %s", tmp, dst, strerror(e));
    }
    return 0;
}

/* Links the pair last -> name: the state file first, the weights last. */
static int place_pair(const Saver *sv, const char *name, CtErr *err)
{
    char src[PATH_N], dst[PATH_N];
    for (int state = 1; state >= 0; state--) {
        pair_path(src, sizeof src, sv->dir, "last", state);
        pair_path(dst, sizeof dst, sv->dir, name, state);
        if (place(src, dst, err))
            return -1;
    }
    return 0;
}

static void remove_pair(const Saver *sv, int epoch)
{
    char name[32], p[PATH_N];
    snprintf(name, sizeof name, "checkpoint-%d", epoch);
    for (int state = 0; state < 2; state++) {
        pair_path(p, sizeof p, sv->dir, name, state);
        unlink(p);
    }
}

/* Writes the pair `name`: the state file (with the saver's best metric and
 * list, and for a recovery checkpoint the batches done and their loss sum),
 * then the weights. */
static int write_pair(const Saver *sv, const CtState *s, const CkptInfo *info, const char *name, int epoch,
                      int batches_done, double metric, double loss_sum, long loss_count, CtErr *err)
{
    char ep[24], nc[24], me[40], be[40], bep[24], hist[64 * 48] = "", bd[24], ls[64], p[PATH_N];
    snprintf(ep, sizeof ep, "%d", epoch);
    snprintf(nc, sizeof nc, "%d", info->num_classes);
    snprintf(me, sizeof me, "%.17g", metric);
    snprintf(be, sizeof be, "%.17g", sv->best);
    snprintf(bep, sizeof bep, "%d", sv->best_epoch);
    snprintf(bd, sizeof bd, "%d", batches_done);
    snprintf(ls, sizeof ls, "%.17g,%ld", loss_sum, loss_count);
    for (int i = 0; i < sv->nfiles && i < 64; i++)
        snprintf(hist + strlen(hist), sizeof hist - strlen(hist), "%s%d:%.17g", i ? "," : "", sv->files[i].epoch,
                 sv->files[i].metric);
    const char *sk[13] = {"ctimm.epoch", "ctimm.model", "ctimm.num_classes", "ctimm.eval_metric", "ctimm.metric",
                          "ctimm.best_metric", "ctimm.best_epoch", "ctimm.checkpoints", "ctimm.args"};
    const char *svv[13] = {ep, info->model, nc, info->eval_metric, me, be, bep, hist, info->args_json};
    int nk = 9;
    if (info->amp_scaler) {
        sk[nk] = "ctimm.amp_scaler";
        svv[nk++] = info->amp_scaler;
    }
    if (info->sched) {
        sk[nk] = "ctimm.sched";
        svv[nk++] = info->sched;
    }
    if (batches_done >= 0) {
        sk[nk] = "ctimm.batches_done";
        svv[nk++] = bd;
        sk[nk] = "ctimm.loss_sum";
        svv[nk++] = ls;
    }
    const char *wk[] = {"format", "ctimm.epoch", "ctimm.model", "ctimm.num_classes"};
    const char *wv[] = {"pt", ep, info->model, nc};
    pair_path(p, sizeof p, sv->dir, name, 1);
    if (state_save_training(s, p, sk, svv, nk, err))
        return -1;
    pair_path(p, sizeof p, sv->dir, name, 0);
    return state_save(s, p, wk, wv, 4, err);
}

int saver_save_recovery(Saver *sv, const CtState *s, const CkptInfo *info, int epoch, int batch, double loss_sum,
                        long loss_count, CtErr *err)
{
    char name[64];
    snprintf(name, sizeof name, "recovery-%d-%d", epoch, batch);
    if (write_pair(sv, s, info, name, epoch, batch + 1, NAN, loss_sum, loss_count, err))
        return -1;
    if (sv->recovery[0] && strcmp(sv->recovery, name)) { /* timm keeps the newest recovery checkpoint only */
        char p[PATH_N];
        for (int state = 0; state < 2; state++) {
            pair_path(p, sizeof p, sv->dir, sv->recovery, state);
            unlink(p);
        }
    }
    snprintf(sv->recovery, sizeof sv->recovery, "%s", name);
    return 0;
}

int saver_save(Saver *sv, const CtState *s, const CkptInfo *info, int epoch, double metric, CtErr *err)
{
    /* timm's rule: keep this epoch if the list has room or it beats the worst
     * kept one; the worst then goes. The list stays sorted best first, ties
     * in the order they came (Python's stable sort). */
    int keep = sv->nfiles < sv->max_hist || saver_better(sv, metric, sv->files[sv->nfiles - 1].metric);
    int dropped = -1, best = sv->best_epoch < 0 || saver_better(sv, metric, sv->best);
    if (keep) {
        if (sv->nfiles >= sv->max_hist)
            dropped = sv->files[--sv->nfiles].epoch;
        int at = sv->nfiles;
        while (at > 0 && saver_better(sv, metric, sv->files[at - 1].metric))
            at--;
        memmove(&sv->files[at + 1], &sv->files[at], sizeof *sv->files * (size_t)(sv->nfiles - at));
        sv->files[at] = (CkptEntry){epoch, metric};
        sv->nfiles++;
        if (best) {
            sv->best = metric;
            sv->best_epoch = epoch;
        }
    }
    if (write_pair(sv, s, info, "last", epoch, -1, metric, 0, 0, err))
        return -1;
    if (!keep)
        return 0;
    if (dropped >= 0)
        remove_pair(sv, dropped);
    char name[32];
    snprintf(name, sizeof name, "checkpoint-%d", epoch);
    if (place_pair(sv, name, err))
        return -1;
    return best ? place_pair(sv, "model_best", err) : 0;
}

int ckpt_load_weights(const char *path, CtState *s, CtErr *err)
{
    StFile f;
    if (st_read(path, &f, err))
        return -1;
    int rc = state_load(s, &f, "", err);
    st_free(&f);
    return rc ? ct_failctx(err, "%s", path) : 0;
}

static int meta_int(const StFile *f, const char *path, const char *key, int *out, CtErr *err)
{
    const char *v = st_meta(f, key);
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || x < INT_MIN || x > INT_MAX)
        return ct_fail(err, "%s: metadata '%s' is missing or not a whole number; not a ctimm-train checkpoint", path,
                       key);
    *out = (int)x;
    return 0;
}

static void parse_history(const char *v, Resumed *r)
{
    while (v && *v && r->nhist < 64) {
        char *end;
        long e = strtol(v, &end, 10);
        if (*end != ':')
            return;
        double m = strtod(end + 1, &end);
        r->hist[r->nhist++] = (CkptEntry){(int)e, m};
        if (*end != ',')
            return;
        v = end + 1;
    }
}

int ckpt_resume(const char *path, CtState *s, const char *model, int optim, Resumed *out, CtErr *err)
{
    char wpath[PATH_N], spath[PATH_N];
    size_t n = strlen(path), ns = strlen(state_ext), nw = strlen(weights_ext);
    if (n >= ns && !strcmp(path + n - ns, state_ext))
        n -= ns; /* given the state file: its weights file is beside it */
    else if (n >= nw && !strcmp(path + n - nw, weights_ext))
        n -= nw;
    else
        return ct_fail(err, "--resume %s: expected a checkpoint's weights file, NAME.safetensors", path);
    if (n + ns >= PATH_N)
        return ct_fail(err, "--resume %s: the path is too long", path);
    snprintf(wpath, sizeof wpath, "%.*s%s", (int)n, path, weights_ext);
    snprintf(spath, sizeof spath, "%.*s%s", (int)n, path, state_ext);
    if (access(spath, F_OK))
        return ct_fail(err, "--resume %s: its training state %s is missing (%s)", wpath, spath, strerror(errno));
    StFile w, st;
    if (st_read(wpath, &w, err))
        return ct_failctx(err, "--resume");
    if (st_read(spath, &st, err)) {
        st_free(&w);
        return ct_failctx(err, "--resume");
    }
    int we, se, rc = -1;
    const char *m = st_meta(&st, "ctimm.model");
    memset(out, 0, sizeof *out);
    if (meta_int(&w, wpath, "ctimm.epoch", &we, err) || meta_int(&st, spath, "ctimm.epoch", &se, err) ||
        meta_int(&st, spath, "ctimm.best_epoch", &out->best_epoch, err))
        goto done;
    if (we != se) {
        ct_fail(err, "--resume %s: the weights are of epoch %d but %s is of epoch %d (an interrupted save?); "
                "resume from a checkpoint-<epoch> file instead", wpath, we, spath, se);
        goto done;
    }
    if (m && strcmp(m, model)) {
        ct_fail(err, "--resume %s: a checkpoint of %s, not of --model %s", wpath, m, model);
        goto done;
    }
    if (state_load(s, &w, "", err)) {
        ct_failctx(err, "--resume %s", wpath);
        goto done;
    }
    if (state_load_training(s, &st, optim, &out->ema_missing, err)) {
        ct_failctx(err, "--resume %s%s", spath, optim ? " (--no-resume-opt restores the weights only)" : "");
        goto done;
    }
    const char *bd = st_meta(&st, "ctimm.batches_done"), *ls = st_meta(&st, "ctimm.loss_sum");
    const char *sc = st_meta(&st, "ctimm.amp_scaler"), *sch = st_meta(&st, "ctimm.sched");
    snprintf(out->sched, sizeof out->sched, "%s", sch ? sch : "");
    out->batches_done = -1;
    if (bd && meta_int(&st, spath, "ctimm.batches_done", &out->batches_done, err))
        goto done;
    if (bd && (!ls || sscanf(ls, "%lf,%ld", &out->loss_sum, &out->loss_count) != 2)) {
        ct_fail(err, "%s: metadata 'ctimm.loss_sum' is missing or malformed", spath);
        goto done;
    }
    out->has_scaler = sc && sscanf(sc, "%lf,%d", &out->scale, &out->growth_tracker) == 2;
    const char *b = st_meta(&st, "ctimm.best_metric");
    const char *em = st_meta(&st, "ctimm.eval_metric");
    snprintf(out->eval_metric, sizeof out->eval_metric, "%s", em ? em : "");
    out->epoch = we;
    out->best = b ? strtod(b, NULL) : 0;
    parse_history(st_meta(&st, "ctimm.checkpoints"), out);
    char dir[PATH_N];
    snprintf(dir, sizeof dir, "%s", wpath);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    char *real = realpath(dir, NULL);
    snprintf(out->dir, sizeof out->dir, "%s", real ? real : dir);
    free(real);
    rc = 0;
done:
    st_free(&w);
    st_free(&st);
    return rc;
}
