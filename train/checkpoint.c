/*
 * The trainer's checkpoints: last, model_best and checkpoint-<epoch> pairs
 * (weights + training state), saved and resumed as checkpoint.h says.
 */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/weights_file.h"

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

static void pair_path(char *p, size_t n, const char *dir, const char *name, int state)
{
    snprintf(p, n, "%s/%s%s", dir, name, state ? state_ext : weights_ext);
}

/* Copies src to dst (where a hard link is not possible). */
static int copy_file(const char *src, const char *dst, CtErr *err)
{
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    char buf[1 << 16];
    size_t k;
    int rc = 0;
    if (!in || !out)
        rc = ct_fail(err, "cannot copy %s to %s: %s", src, dst, strerror(errno));
    while (!rc && (k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, out) != k)
            rc = ct_fail(err, "cannot write %s: %s", dst, strerror(errno));
    if (in && ferror(in) && !rc)
        rc = ct_fail(err, "cannot read %s", src);
    if (in)
        fclose(in);
    if (out && fclose(out) && !rc)
        rc = ct_fail(err, "cannot write %s: %s", dst, strerror(errno));
    return rc;
}

/* A pair is saved as NAME.state.safetensors.next and NAME.safetensors.next,
 * then renamed into place, the state file first. A kill then leaves either
 * both .next files (the old pair is whole: they are dropped) or the weights'
 * .next alone (the state is in place: the weights follow it), never a pair
 * of two saves; ckpt_settle_pair finishes either case. */
static void next_path(char *p, size_t n, const char *dir, const char *name, int state)
{
    snprintf(p, n, "%s/%s%s.next", dir, name, state ? state_ext : weights_ext);
}

static int exists(const char *p) { return access(p, F_OK) == 0; }

static int commit_pair(const char *dir, const char *name, CtErr *err)
{
    char from[PATH_N + 8], to[PATH_N];
    for (int state = 1; state >= 0; state--) {
        next_path(from, sizeof from, dir, name, state);
        pair_path(to, sizeof to, dir, name, state);
        if (rename(from, to))
            return ct_fail(err, "cannot rename %s to %s: %s", from, to, strerror(errno));
    }
    return 0;
}

int ckpt_settle_pair(const char *dir, const char *name)
{
    char snext[PATH_N + 300], wnext[PATH_N + 300], w[PATH_N + 300];
    next_path(snext, sizeof snext, dir, name, 1);
    next_path(wnext, sizeof wnext, dir, name, 0);
    if (exists(snext)) {
        unlink(snext);
        unlink(wnext);
        return 1;
    }
    pair_path(w, sizeof w, dir, name, 0);
    return exists(wnext) && rename(wnext, w) == 0;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* The names a Saver gives its pairs: last, model_best, checkpoint-E, recovery-E-B. */
static int saver_name(const char *name, int *epoch, int *batch)
{
    int e, b, used = 0;
    if (!strcmp(name, "last") || !strcmp(name, "model_best"))
        return 1;
    if (sscanf(name, "checkpoint-%d%n", &e, &used) == 1 && !name[used])
        return 2;
    if (sscanf(name, "recovery-%d-%d%n", &e, &b, &used) == 2 && !name[used]) {
        *epoch = e;
        *batch = b;
        return 3;
    }
    return 0;
}

int ckpt_clean_dir(const char *dir, const char *keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int fixed = 0, newest_e = -1, newest_b = -1;
    char p[PATH_N + 600], name[256];
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *f = de->d_name, *t = strstr(f, ".tmp.");
        snprintf(p, sizeof p, "%s/%s", dir, f);
        if (t) { /* st_write's temporary file of a process that is gone */
            char *end;
            long pid = strtol(t + 5, &end, 10);
            if (!*end && end != t + 5 && pid != (long)getpid() && kill((pid_t)pid, 0) && errno == ESRCH)
                fixed += unlink(p) == 0;
        } else if (ends_with(f, ".tmp-link")) { /* the hard links of ctimm before the two-step commit */
            fixed += unlink(p) == 0;
        } else if (ends_with(f, ".next")) {
            size_t n = strlen(f) - 5;
            snprintf(name, sizeof name, "%.*s", (int)n, f);
            n -= ends_with(name, state_ext) ? strlen(state_ext) : ends_with(name, weights_ext) ? strlen(weights_ext) : 0;
            name[n] = 0;
            fixed += ckpt_settle_pair(dir, name);
        }
    }
    rewinddir(d);
    while ((de = readdir(d))) { /* pairs: orphan state halves, and the newest recovery checkpoint */
        int e = -1, b = -1, kind;
        if (!ends_with(de->d_name, state_ext))
            continue;
        snprintf(name, sizeof name, "%.*s", (int)(strlen(de->d_name) - strlen(state_ext)), de->d_name);
        if (!(kind = saver_name(name, &e, &b)))
            continue;
        pair_path(p, sizeof p, dir, name, 0);
        if (!exists(p)) {
            pair_path(p, sizeof p, dir, name, 1);
            fixed += unlink(p) == 0;
        } else if (kind == 3 && (e > newest_e || (e == newest_e && b > newest_b))) {
            newest_e = e;
            newest_b = b;
        }
    }
    rewinddir(d);
    while ((de = readdir(d))) { /* timm keeps one recovery checkpoint: the newest (and the one resumed) */
        int e = -1, b = -1;
        if (!ends_with(de->d_name, state_ext))
            continue;
        snprintf(name, sizeof name, "%.*s", (int)(strlen(de->d_name) - strlen(state_ext)), de->d_name);
        if (saver_name(name, &e, &b) != 3 || (e == newest_e && b == newest_b) || (keep && !strcmp(name, keep)))
            continue;
        for (int state = 0; state < 2; state++) {
            pair_path(p, sizeof p, dir, name, state);
            fixed += unlink(p) == 0;
        }
    }
    closedir(d);
    return fixed;
}

/* Links (or copies) the pair last as `name`, by the same two-step commit. */
static int place_pair(const Saver *sv, const char *name, CtErr *err)
{
    char src[PATH_N], dst[PATH_N + 8];
    for (int state = 1; state >= 0; state--) {
        pair_path(src, sizeof src, sv->dir, "last", state);
        next_path(dst, sizeof dst, sv->dir, name, state);
        unlink(dst);
        if (link(src, dst) && copy_file(src, dst, err)) {
            unlink(dst);
            return -1;
        }
    }
    return commit_pair(sv->dir, name, err);
}

static void remove_pair(const Saver *sv, const char *name)
{
    char p[PATH_N];
    for (int state = 0; state < 2; state++) { /* weights first: a kill leaves an orphan state, which is cleaned */
        pair_path(p, sizeof p, sv->dir, name, state);
        unlink(p);
    }
}

/* Writes the pair `name`: the state file (with the saver's best metric and
 * list, and for a recovery checkpoint the batches done and their loss sum)
 * and the weights, then commits them. */
static int write_pair(const Saver *sv, const CtState *s, const CkptInfo *info, const char *name, int epoch,
                      int batches_done, double metric, double loss_sum, long loss_count, CtErr *err)
{
    char ep[24], nc[24], me[40], be[40], bep[24], hist[64 * 48] = "", bd[24], ls[64], p[PATH_N + 8];
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
    next_path(p, sizeof p, sv->dir, name, 1);
    if (state_save_training(s, p, sk, svv, nk, err))
        return -1;
    next_path(p, sizeof p, sv->dir, name, 0);
    if (state_save(s, p, wk, wv, 4, err)) {
        next_path(p, sizeof p, sv->dir, name, 1);
        unlink(p);
        return -1;
    }
    return commit_pair(sv->dir, name, err);
}

int saver_save_recovery(Saver *sv, const CtState *s, const CkptInfo *info, int epoch, int batch, double loss_sum,
                        long loss_count, CtErr *err)
{
    char name[64];
    snprintf(name, sizeof name, "recovery-%d-%d", epoch, batch);
    if (write_pair(sv, s, info, name, epoch, batch + 1, NAN, loss_sum, loss_count, err))
        return -1;
    if (sv->recovery[0] && strcmp(sv->recovery, name)) /* timm keeps the newest recovery checkpoint only */
        remove_pair(sv, sv->recovery);
    snprintf(sv->recovery, sizeof sv->recovery, "%s", name);
    return 0;
}

int saver_save(Saver *sv, const CtState *s, const CkptInfo *info, int epoch, double metric, CtErr *err)
{
    /* timm's rule: keep this epoch if the list has room or it beats the worst
     * kept one; the worst then goes. The list stays sorted best first, ties
     * in the order they came (Python's stable sort). */
    int finite = isfinite(metric); /* a NaN ranks nowhere: never kept, never the best */
    int keep = finite && (sv->nfiles < sv->max_hist || saver_better(sv, metric, sv->files[sv->nfiles - 1].metric));
    int dropped = -1, best = finite && (sv->best_epoch < 0 || saver_better(sv, metric, sv->best));
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
    char name[32];
    if (dropped >= 0) {
        snprintf(name, sizeof name, "checkpoint-%d", dropped);
        remove_pair(sv, name);
    }
    snprintf(name, sizeof name, "checkpoint-%d", epoch);
    if (place_pair(sv, name, err))
        return -1;
    return best ? place_pair(sv, "model_best", err) : 0;
}

/* ckpt_settle_pair on the pair whose path without extension is path[0..n). */
static void settle(const char *path, size_t n)
{
    char dir[PATH_N], name[PATH_N];
    snprintf(dir, sizeof dir, "%.*s", (int)n, path);
    char *slash = strrchr(dir, '/');
    memcpy(name, slash ? slash + 1 : dir, strlen(slash ? slash + 1 : dir) + 1);
    if (slash)
        slash[slash == dir] = 0;
    else
        snprintf(dir, sizeof dir, ".");
    ckpt_settle_pair(dir, name);
}

int ckpt_read_weights(const char *path, int use_ema, StFile *f, CtErr *err)
{
    size_t n = strlen(path);
    if (ends_with(path, weights_ext) && !ends_with(path, state_ext))
        settle(path, n - strlen(weights_ext));
    return weights_read(path, use_ema, f, NULL, err);
}

int ckpt_load_weights(const char *path, CtState *s, CtErr *err)
{
    StFile f;
    if (ckpt_read_weights(path, 1, &f, err))
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

int ckpt_resume(const char *path, CtState *s, const char *model, int optim, Resumed *out, CtErr *err)
{
    char wpath[PATH_N], spath[PATH_N];
    size_t n = strlen(path), ns = strlen(state_ext), nw = strlen(weights_ext);
    if (weights_is_torch(path)) /* a programmer's error: resume_torch reads those */
        return ct_fail(err, "--resume %s: a PyTorch checkpoint, not ctimm-train's", path);
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
    settle(path, n);
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
    out->opt_lr = NAN;
    if (meta_int(&w, wpath, "ctimm.epoch", &we, err) || meta_int(&st, spath, "ctimm.epoch", &se, err))
        goto done;
    if (we != se) { /* files copied together by hand: the saver's commit never leaves such a pair */
        ct_fail(err, "--resume %s: the weights are of epoch %d but %s is of epoch %d; resume from a "
                "checkpoint-<epoch> file instead", wpath, we, spath, se);
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
    out->scaler = scaler_default();
    out->has_scaler = sc && scaler_parse(&out->scaler, sc) == 0;
    out->epoch = we;
    rc = 0;
done:
    st_free(&w);
    st_free(&st);
    return rc;
}
