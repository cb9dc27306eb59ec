#include "train/pretrained.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "runtime/weights_file.h"
#include "train/checkpoint.h"
#include "train/pos_embed.h"

/* A hub config.json is a few KB, or a few hundred with label names. */
#define CONFIG_MAX_BYTES (16 << 20)

static char *read_text(const char *path, CtErr *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ct_fail(err, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = malloc(CONFIG_MAX_BYTES + 1);
    CT_ASSERT(text != NULL);
    size_t n = fread(text, 1, CONFIG_MAX_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > CONFIG_MAX_BYTES) {
        ct_fail(err, "%s: %s", path, bad ? "read error" : "larger than 16 MiB; not a model's config.json");
        free(text);
        return NULL;
    }
    text[n] = 0;
    return text;
}

/* Up to n numbers of a JSON array into out: how many, or -1 when j is not
 * an array of numbers that long. */
static int numbers(const cJSON *j, double *out, int n)
{
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != n)
        return -1;
    int k = 0;
    for (const cJSON *v = j->child; v; v = v->next, k++) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return -1;
        out[k] = v->valuedouble;
    }
    return k;
}

/* A string field into buf (m.cfg's pointer set to it); absent: the
 * registry's stays. */
static int string_field(const cJSON *pc, const char *key, char *buf, size_t n, const char **dst, const char *path,
                        CtErr *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pc, key);
    if (!v)
        return 0;
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= n)
        return ct_fail(err, "%s: pretrained_cfg.%s is not a name", path, key);
    snprintf(buf, n, "%s", v->valuestring);
    *dst = buf;
    return 0;
}

/* config.json's pretrained_cfg over the registry's cfg (the fields ctimm
 * reads; each absent one stays the registry's). */
static int read_config(Pretrained *p, const char *path, CtErr *err)
{
    char *text = read_text(path, err);
    if (!text)
        return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ct_fail(err, "%s is not a JSON object", path);
    }
    int rc = -1;
    ModelCfg *c = &p->m.cfg;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architecture");
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(root, "pretrained_cfg"), *v;
    double d[3];
    if (cJSON_IsString(arch) && strcmp(arch->valuestring, p->m.name)) {
        ct_fail(err, "%s is the config of a %s, not of %s", path, arch->valuestring, p->m.name);
        goto done;
    }
    if (!pc) {
        rc = 0;
        goto done;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(pc, "input_size"))) {
        if (numbers(v, d, 3) != 3 || d[0] != 3 || d[1] != d[2] || d[1] < 1 || d[1] > 4096 || d[1] != floor(d[1])) {
            ct_fail(err, "%s: pretrained_cfg.input_size is not [3, N, N] (ctimm takes square RGB images)", path);
            goto done;
        }
        c->input_size[1] = c->input_size[2] = (int)d[1];
    }
    static const char *const stats[] = {"mean", "std"};
    for (int s = 0; s < 2; s++) {
        if (!(v = cJSON_GetObjectItemCaseSensitive(pc, stats[s])))
            continue;
        if (numbers(v, d, 3) != 3 || (s == 1 && !(d[0] > 0 && d[1] > 0 && d[2] > 0))) {
            ct_fail(err, "%s: pretrained_cfg.%s is not 3 numbers%s", path, stats[s], s ? " above 0" : "");
            goto done;
        }
        memcpy(s ? c->std : c->mean, d, sizeof d);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(pc, "crop_pct"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 10)) {
            ct_fail(err, "%s: pretrained_cfg.crop_pct is not a fraction above 0", path);
            goto done;
        }
        c->crop_pct = v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(pc, "test_input_size")) && !cJSON_IsNull(v)) {
        if (numbers(v, d, 3) != 3 || d[0] != 3 || d[1] != d[2] || d[1] < 1 || d[1] > 4096 || d[1] != floor(d[1])) {
            ct_fail(err, "%s: pretrained_cfg.test_input_size is not [3, N, N] (ctimm takes square RGB images)", path);
            goto done;
        }
        c->test_input_size = (int)d[1];
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(pc, "test_crop_pct")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 10)) {
            ct_fail(err, "%s: pretrained_cfg.test_crop_pct is not a fraction above 0", path);
            goto done;
        }
        c->test_crop_pct = v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(pc, "num_classes"))) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (1 << 20) ||
            v->valuedouble != floor(v->valuedouble)) {
            ct_fail(err, "%s: pretrained_cfg.num_classes is not a class count", path);
            goto done;
        }
        c->num_classes = (int)v->valuedouble;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(pc, "fixed_input_size")))
        c->fixed_input_size = cJSON_IsTrue(v);
    /* a list of classifiers (distilled models' two heads): the registry's names stay */
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(pc, "classifier");
    if (string_field(pc, "interpolation", p->interpolation, sizeof p->interpolation, &c->interpolation, path, err) ||
        string_field(pc, "crop_mode", p->crop_mode, sizeof p->crop_mode, &c->crop_mode, path, err) ||
        (cJSON_IsString(cls) &&
         string_field(pc, "classifier", p->classifier, sizeof p->classifier, &c->classifier, path, err)))
        goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

int pretrained_resolve(Pretrained *p, const ModelEntry *m, const char *name, PretrainedSource src, const char *path,
                       CtErr *err)
{
    memset(p, 0, sizeof *p);
    p->m = *m;
    p->source = src;
    const char *given = model_tag(name), *tag = given ? given : m->cfg.tag;
    if (tag && (!*tag || strlen(tag) >= sizeof p->tag))
        return ct_fail(err, "--model %s: the pretrained tag after '.' must be a name like %s.%s", name, m->name,
                       m->cfg.tag ? m->cfg.tag : "in1k");
    if (tag)
        snprintf(p->tag, sizeof p->tag, "%s", tag);
    p->m.cfg.tag = tag ? p->tag : NULL;
    int other_tag = given && (!m->cfg.tag || strcmp(given, m->cfg.tag));
    if (src == PRETRAINED_NONE)
        return other_tag ? ct_fail(err, "--model %s: the tag names pretrained weights, whose data config comes from "
                                   "their config.json: add --pretrained to load them from the Hugging Face cache, or "
                                   "name the model %s", name, m->name)
                         : 0;
    if (src == PRETRAINED_FILE) {
        if (other_tag)
            return ct_fail(err, "--model %s with --pretrained-path: ctimm knows tag %s's data config only from its "
                           "config.json in the Hugging Face cache (--pretrained); name the model %s to use %s's "
                           "default one", name, given, m->name, m->name);
        if (access(path, R_OK))
            return ct_fail(err, "--pretrained-path %s: %s", path, strerror(errno));
        snprintf(p->weights, sizeof p->weights, "%s", path);
        return 0;
    }
    if (!tag)
        return ct_fail(err, "--pretrained: %s has no pretrained weights in timm's registry", m->name);
    snprintf(p->repo, sizeof p->repo, "timm/%s.%s", m->name, p->tag);
    HubFiles h;
    if (hub_find(p->repo, &h, err)) { /* all of it: ct_failctx would cut the download command off */
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        return ct_fail(err, "--pretrained: %s", why);
    }
    snprintf(p->weights, sizeof p->weights, "%s", h.weights);
    snprintf(p->config, sizeof p->config, "%s", h.config);
    if (p->config[0] && read_config(p, p->config, err))
        return ct_failctx(err, "--pretrained");
    if (!p->config[0] && other_tag)
        return ct_fail(err, "--pretrained: %s's snapshot has no config.json, and tag %s's data config is not "
                       "%s's default one; download it again (`huggingface-cli download %s`)", p->repo, p->tag,
                       m->name, p->repo);
    return 0;
}

static void say(Pretrained *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(Pretrained *p, const char *fmt, ...)
{
    CT_ASSERT(p->nlog < PRETRAINED_LOG_LINES);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->log[p->nlog++], sizeof p->log[0], fmt, ap);
    va_end(ap);
}

/* A square grid of n cells: its side, or -1. */
static int square_side(int64_t n)
{
    int64_t s = (int64_t)llround(sqrt((double)n));
    return n > 0 && s * s == n ? (int)s : -1;
}

/* ViT's checkpoint_filter_fn: the file's pos_embed [1, prefix + h*w, D]
 * resampled to the model's grid when the token count or grid differs. The
 * file's grid is the cfg's input size over the file's patch size when that
 * accounts for its tokens (timm's get_pretrained_grid_size), else square. */
static int adapt_pos_embed(Pretrained *p, const CtState *s, StFile *f, CtErr *err)
{
    int i = state_find(s, "pos_embed");
    StTensor *t = NULL;
    for (int k = 0; k < f->ntensors; k++)
        if (!strcmp(f->tensors[k].name, "pos_embed"))
            t = &f->tensors[k];
    if (i < 0 || !t)
        return 0;
    const CtShape *want = &s->e[i].type.shape;
    if (t->ndim != 3 || t->shape[0] != 1 || t->shape[2] != want->d[2] || t->dtype != CT_F32 ||
        s->e[i].type.dtype != CT_F32)
        return 0; /* not resampled: the load names the mismatch */
    int prefix = state_find(s, "cls_token") >= 0; /* ctimm's ViTs: the class token alone */
    int new_side = square_side(want->d[1] - prefix);
    CT_ASSERT(new_side > 0); /* ctimm builds square grids */
    int64_t old_tokens = t->shape[1] - prefix;
    int old_h = -1, old_w = -1;
    const StTensor *patch = st_find(f, "patch_embed.proj.weight");
    if (patch && patch->ndim == 4 && patch->shape[2] > 0 && patch->shape[3] > 0) {
        old_h = p->m.cfg.input_size[1] / (int)patch->shape[2];
        old_w = p->m.cfg.input_size[2] / (int)patch->shape[3];
    }
    if ((int64_t)old_h * old_w != old_tokens)
        old_h = old_w = square_side(old_tokens);
    if (old_h < 0)
        return ct_fail(err, "pos_embed has %lld grid tokens in the file, which no square grid nor the %dx%d input "
                       "size makes", (long long)old_tokens, p->m.cfg.input_size[1], p->m.cfg.input_size[2]);
    if (old_h == new_side && old_w == new_side)
        return 0;
    int dim = (int)t->shape[2];
    size_t nbytes = sizeof(float) * (size_t)want->d[1] * (size_t)dim;
    float *out = malloc(nbytes);
    CT_ASSERT(out != NULL);
    pos_embed_resample(t->data, prefix, old_h, old_w, new_side, new_side, dim, out);
    free(t->data);
    t->data = out;
    t->nbytes = nbytes;
    t->shape[1] = want->d[1];
    say(p, "Resized position embedding: (%d, %d) to (%d, %d).", old_h, old_w, new_side, new_side);
    return 0;
}

/* The odd side of a square table of n offsets (n = side^2), or -1. */
static int odd_square_side(int64_t n)
{
    int s = square_side(n);
    return s > 0 && s % 2 ? s : -1;
}

/* The checkpoint_filter_fns of BEiT, Swin and MaxViT: each
 * relative_position_bias_table of the file moved to the model's window
 * when the two differ (a model built for another image size): flat
 * [(2w-1)^2 + extra, heads] (BEiT's 3 class-token rows, else none) or TF's
 * [heads, 2h-1, 2w-1]. Tables it cannot place are left for the load to
 * name. */
static void adapt_rel_pos_tables(Pretrained *p, const CtState *s, StFile *f)
{
    static const char leaf[] = "relative_position_bias_table";
    int n = 0, from = 0, to = 0;
    for (int i = 0; i < s->n; i++) {
        const StateEntry *e = &s->e[i];
        size_t len = strlen(e->name);
        if (e->role != CT_ROLE_PARAM || len < sizeof leaf - 1 || strcmp(e->name + len - (sizeof leaf - 1), leaf))
            continue;
        StTensor *t = NULL;
        for (int k = 0; k < f->ntensors; k++)
            if (!strcmp(f->tensors[k].name, e->name))
                t = &f->tensors[k];
        const CtShape *want = &e->type.shape;
        CtShape have = t ? shape_make(t->ndim, t->shape) : (CtShape){0};
        if (!t || t->dtype != CT_F32 || e->type.dtype != CT_F32 || shape_equal(&have, want) || have.ndim != want->ndim)
            continue;
        int flat = want->ndim == 2, heads = (int)(flat ? want->d[1] : want->d[0]), extra = 0;
        int sh, sw, dh, dw;
        if (flat) {
            if (have.d[1] != heads)
                continue;
            extra = odd_square_side(want->d[0]) > 0 ? 0 : 3;
            sh = sw = odd_square_side(have.d[0] - extra);
            dh = dw = odd_square_side(want->d[0] - extra);
        } else {
            if (want->ndim != 3 || have.d[0] != heads)
                continue;
            sh = (int)have.d[1], sw = (int)have.d[2], dh = (int)want->d[1], dw = (int)want->d[2];
        }
        if (sh < 0 || dh < 0)
            continue;
        size_t nbytes = sizeof(float) * (size_t)shape_numel(want);
        float *out = malloc(nbytes);
        CT_ASSERT(out != NULL);
        rel_pos_table_resize(t->data, sh, sw, heads, flat, extra, dh, dw, out);
        free(t->data);
        t->data = out;
        t->nbytes = nbytes;
        memcpy(t->shape, want->d, sizeof(int64_t) * (size_t)want->ndim);
        n++, from = sh, to = dh;
    }
    if (n)
        say(p, "Resized %d relative position bias tables: %dx%d offsets to %dx%d.", n, from, from, to, to);
}

/* f's tensor `name` (to adapt in place), or NULL. */
static StTensor *file_tensor(StFile *f, const char *name)
{
    for (int k = 0; k < f->ntensors; k++)
        if (!strcmp(f->tensors[k].name, name))
            return &f->tensors[k];
    return NULL;
}

/* timm's adapt_input_conv of w [O, base, JK] into out [O, chans, JK]: for
 * one channel the sum over base (from 0, in channel order, in float: torch's
 * sum), else the base channels repeated and cut to chans, times the float
 * base / chans (torch's in-place multiply by a Python float). */
static void adapt_conv_weight(const float *w, int64_t O, int base, int64_t chans, int64_t JK, float *out)
{
    float scale = (float)((double)base / (double)chans);
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < chans; c++)
            for (int64_t k = 0; k < JK; k++) {
                const float *src = w + o * base * JK + k;
                float v = 0;
                if (chans == 1)
                    for (int b = 0; b < base; b++)
                        v += src[b * JK];
                else
                    v = src[(c % base) * JK] * scale;
                out[(o * chans + c) * JK + k] = v;
            }
}

/* load_pretrained's first_conv rule: the file's stem weight [O, 3, J, K],
 * of the cfg's input channels, made the model's [O, C, J, K]
 * (adapt_conv_weight). A weight the model's shape already has loads as it
 * is (timm warns of that when C is not the cfg's); another mismatch is left
 * to the load to name. */
static void adapt_input_conv(Pretrained *p, const CtState *s, StFile *f)
{
    char name[96];
    snprintf(name, sizeof name, "%s.weight", p->m.cfg.first_conv);
    int i = state_find(s, name), base = p->m.cfg.input_size[0];
    StTensor *t = file_tensor(f, name);
    if (i < 0 || !t || s->e[i].type.shape.ndim != 4)
        return;
    const CtShape *want = &s->e[i].type.shape;
    int64_t chans = want->d[1];
    CtShape have = shape_make(t->ndim, t->shape);
    if (shape_equal(&have, want)) {
        if (chans != base)
            say(p, "Pretrained %s weights already match the model, but input_size declares %d source channels and "
                "the model has %lld. Loading unchanged.", p->m.cfg.first_conv, base, (long long)chans);
        return;
    }
    if (have.ndim != 4 || have.d[1] != base || have.d[0] != want->d[0] || have.d[2] != want->d[2] ||
        have.d[3] != want->d[3] || t->dtype != CT_F32 || s->e[i].type.dtype != CT_F32)
        return;
    size_t n = (size_t)shape_numel(want);
    float *out = malloc(sizeof *out * n);
    CT_ASSERT(out != NULL);
    adapt_conv_weight(t->data, want->d[0], base, chans, want->d[2] * want->d[3], out);
    free(t->data);
    t->data = out;
    t->nbytes = sizeof *out * n;
    t->shape[1] = chans;
    say(p, "Converted input conv %s pretrained weights from %d to %lld channel(s)", p->m.cfg.first_conv, base,
        (long long)chans);
}

int pretrained_load(Pretrained *p, CtState *s, int classes, CtErr *err)
{
    CT_ASSERT(p->source != PRETRAINED_NONE);
    p->nlog = 0;
    StFile f;
    if (p->source == PRETRAINED_HUB) {
        say(p, "Loading pretrained weights from Hugging Face hub (%s): %s", p->repo, p->weights);
        if (weights_read(p->weights, 0, &f, NULL, err))
            return ct_failctx(err, "--pretrained");
    } else {
        say(p, "Loading pretrained weights from file (%s)", p->weights);
        if (ckpt_read_weights(p->weights, 1, &f, err))
            return ct_failctx(err, "--pretrained-path");
    }
    /* a distilled model's two heads (timm's classifier tuple) are re-initialised together */
    char head[4][80], heads[340];
    const char *keep[5] = {NULL};
    int nhead = p->m.cfg.classifier_dist ? 4 : 2;
    for (int i = 0; i < nhead; i++)
        snprintf(head[i], sizeof head[i], "%s.%s", i < 2 ? p->m.cfg.classifier : p->m.cfg.classifier_dist,
                 i % 2 ? "bias" : "weight");
    snprintf(heads, sizeof heads, nhead == 4 ? "%s, %s, %s, %s" : "%s, %s", head[0], head[1], head[2], head[3]);
    if (p->source == PRETRAINED_FILE || classes != p->m.cfg.num_classes) {
        for (int i = 0; i < nhead; i++)
            keep[i] = head[i];
        if (p->source == PRETRAINED_FILE)
            say(p, "Re-initialised the classifier (%s) for %d classes, as train.py's --pretrained-path always "
                "does", heads, classes);
        else
            say(p, "Re-initialised the classifier (%s) for %d classes: the pretrained weights are for %d", heads,
                classes, p->m.cfg.num_classes);
    }
    int rc = adapt_pos_embed(p, s, &f, err);
    if (!rc) {
        adapt_rel_pos_tables(p, s, &f);
        adapt_input_conv(p, s, &f);
        rc = state_load_keeping(s, &f, keep, err);
    }
    st_free(&f);
    return rc ? ct_failctx(err, "%s", p->weights) : 0;
}
