#include "cli/eval.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/common.h"
#include "cli/train_checkpoint.h"
#include "passes/passes.h"
#include "runtime/data/shapes.h"

void eval_normalise(const Batch *bt, int batch, const double *mean, const double *std, float *x)
{
    int s = bt->img_size;
    size_t plane = (size_t)s * s;
    memset(x, 0, sizeof *x * (size_t)batch * 3 * plane);
    for (int b = 0; b < bt->n; b++)
        for (size_t p = 0; p < plane; p++)
            for (int c = 0; c < 3; c++)
                x[((size_t)b * 3 + c) * plane + p] =
                    (float)((bt->images[((size_t)b * plane + p) * 3 + c] / 255.0 - mean[c]) / std[c]);
}

int eval_interp_parse(const char *name)
{
    static const char *const names[] = {[CT_INTERP_NEAREST] = "nearest", [CT_INTERP_BILINEAR] = "bilinear",
                                        [CT_INTERP_BICUBIC] = "bicubic"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(name, names[k]))
            return k;
    return -1;
}

int eval_before(float a, int ia, float b, int ib)
{
    /* torch.topk's order: NaN above every number, then descending; NaN ties
     * NaN. A NaN logit is then never a hit by accident of `>` being false. */
    if (isnan(a) || isnan(b))
        return isnan(a) && (!isnan(b) || ia < ib);
    return a > b || (a == b && ia < ib);
}

int eval_rank(const float *row, int C, int64_t label)
{
    int above = 0;
    for (int c = 0; c < C; c++)
        above += eval_before(row[c], c, row[label], (int)label);
    return above;
}

EvalBatch eval_meter_add(EvalMeter *m, const float *logits, int C, const int64_t *labels, int n)
{
    double loss = 0, c1 = 0, c5 = 0;
    for (int b = 0; b < n; b++) {
        const float *row = logits + (size_t)b * (size_t)C;
        CT_ASSERT(labels[b] >= 0 && labels[b] < C); /* the callers refuse such data before any batch */
        double mx = row[0], s = 0;
        for (int c = 0; c < C; c++)
            mx = row[c] > mx ? row[c] : mx;
        for (int c = 0; c < C; c++)
            s += exp(row[c] - mx);
        loss += mx + log(s) - row[labels[b]];
        int r = eval_rank(row, C, labels[b]);
        c1 += r < 1;
        c5 += r < 5;
    }
    m->loss_sum += loss;
    m->top1 += c1;
    m->top5 += c5;
    m->seen += (size_t)n;
    return n ? (EvalBatch){loss / n, 100 * c1 / n, 100 * c5 / n} : (EvalBatch){0, 0, 0};
}

double eval_loss(const EvalMeter *m) { return m->seen ? m->loss_sum / (double)m->seen : NAN; }
double eval_top1(const EvalMeter *m) { return m->seen ? 100 * m->top1 / (double)m->seen : NAN; }
double eval_top5(const EvalMeter *m) { return m->seen ? 100 * m->top5 / (double)m->seen : NAN; }

int eval_embedded_data(char *root, size_t n, int *img_size, CtErr *err)
{
    const char *base = getenv("CTIMM_DATA_DIR"), *home = getenv("HOME");
    char dir[900];
    if (base && *base)
        snprintf(dir, sizeof dir, "%s", base);
    else
        snprintf(dir, sizeof dir, "%s/.cache/ctimm/data", home && *home ? home : ".");
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(dir, 0755);
            *p = '/';
        }
    mkdir(dir, 0755);
    snprintf(root, n, "%s/shapes-64", dir);
    ShapesConfig sc = shapes_config_default();
    int made = 0;
    if (shapes_generate(root, &sc, &made, err))
        return -1;
    if (made)
        printf("Generated the embedded shapes dataset in %s\n", root);
    *img_size = sc.img_size;
    return 0;
}

int eval_config(const ModelEntry *m, const EvalOpts *o, int *img, EvalTransform *et, double mean[3], double std[3],
                CtErr *err)
{
    if (o->n_input_size && (o->n_input_size != 3 || o->input_size[0] != 3 || o->input_size[1] != o->input_size[2]))
        return ct_fail(err, "--input-size takes 3 H W with H == W (square inputs only)");
    if ((o->n_mean && o->n_mean != 1 && o->n_mean != 3) || (o->n_std && o->n_std != 1 && o->n_std != 3))
        return ct_fail(err, "--mean and --std take 1 or 3 values");
    *img = o->n_input_size ? (int)o->input_size[1] : o->img_size > 0 ? o->img_size : m->cfg.input_size[1];
    *et = eval_transform_default(*img);
    et->crop_pct = o->crop_pct > 0 ? o->crop_pct : m->cfg.crop_pct;
    const char *interp = o->interpolation ? o->interpolation : m->cfg.interpolation;
    int ip = eval_interp_parse(interp);
    if (ip < 0)
        return ct_fail(err, "--interpolation %s is not one of bilinear, bicubic, nearest", interp);
    et->interp = (CtInterp)ip;
    const char *cm = o->crop_mode ? o->crop_mode : m->cfg.crop_mode ? m->cfg.crop_mode : "center";
    if (!strcmp(cm, "squash"))
        et->crop_mode = CT_CROP_SQUASH;
    else if (!strcmp(cm, "border"))
        et->crop_mode = CT_CROP_BORDER;
    else if (strcmp(cm, "center"))
        return ct_fail(err, "--crop-mode %s is not one of center, squash, border", cm);
    for (int c = 0; c < 3; c++) { /* one value stands for all three channels, as in timm */
        mean[c] = et->mean[c] = o->n_mean ? o->mean[o->n_mean == 3 ? c : 0] : m->cfg.mean[c];
        std[c] = o->n_std ? o->std[o->n_std == 3 ? c : 0] : m->cfg.std[c];
    }
    return 0;
}

int eval_graph(const ModelEntry *m, int batch, int classes, int img, CtDType amp, int channels_last, Graph *g,
               CtErr *err)
{
    ModelSpec spec = {.batch_size = batch, .training = 0, .args = {.num_classes = classes, .img_size = img}};
    if (model_build(m, &spec, g, err))
        return -1;
    for (int k = 0; k < 3; k++) {
        if ((k == 1 && amp == CT_F32) || (k == 2 && !channels_last))
            continue;
        Graph next;
        int rc = k == 0 ? bn_fold(g, &next, err) : k == 1 ? amp_cast(g, amp, &next, err)
                                                          : layout_channels_last(g, &next, err);
        graph_free(g);
        if (rc)
            return -1;
        *g = next;
    }
    return 0;
}

int eval_amp_dtype(int amp, const char *name)
{
    if (!amp)
        return CT_F32;
    return !strcmp(name, "float16") ? CT_F16 : !strcmp(name, "bfloat16") ? CT_BF16 : -1;
}

int eval_open(EvalSession *s, const char *prog, const ModelEntry *m, const EvalSetup *u, CtErr *err)
{
    memset(s, 0, sizeof *s);
    s->m = m;
    s->batch = u->batch_size;
    if (!(s->be = cli_backend(prog, u->device, err)))
        return -1;
    int amp = eval_amp_dtype(u->amp, u->amp_dtype);
    if (amp < 0)
        return ct_fail(err, "--amp-dtype %s is not one of float16, bfloat16", u->amp_dtype);
    s->amp = (CtDType)amp;
    char root[1000];
    const char *split = u->split;
    EvalOpts eo = u->eo;
    DatasetConfig dc = {.kind = CT_DS_AUTO, .root = root, .class_map = u->class_map};
    if (u->dataset && !strcmp(u->dataset, "tar"))
        dc.kind = CT_DS_TAR;
    else if (u->dataset && !strcmp(u->dataset, "folder"))
        dc.kind = CT_DS_FOLDER;
    else if (u->dataset && strcmp(u->dataset, "shapes"))
        return ct_fail(err, "--dataset %s is not one of folder, tar, shapes", u->dataset);
    if (u->data_dir) {
        snprintf(root, sizeof root, "%s", u->data_dir);
    } else if (u->dataset && strcmp(u->dataset, "shapes")) {
        return ct_fail(err, "--dataset %s needs a data folder (DATA_DIR or --data-dir)", u->dataset);
    } else { /* the embedded set's val split, at its own size unless asked */
        int size;
        if (eval_embedded_data(root, sizeof root, &size, err))
            return -1;
        split = "val";
        if (eo.img_size <= 0 && !eo.n_input_size)
            eo.img_size = size;
    }
    dc.split = split;
    if (eval_config(m, &eo, &s->img, &s->et, s->mean, s->std, err))
        return -1;
    s->interp = eo.interpolation ? eo.interpolation : m->cfg.interpolation;
    if (dataset_open(&s->ds, &dc, err))
        return -1;
    s->classes = u->classes > 0 ? u->classes : dataset_num_classes(s->ds);
    LoaderConfig lc = {.batch_size = u->batch_size, .num_workers = u->workers, .eval = &s->et, .world_size = 1};
    if (loader_create(&s->ld, s->ds, &lc, err) ||
        eval_graph(m, u->batch_size, s->classes, s->img, s->amp, u->channels_last, &s->g, err) ||
        backend_check(s->be, &s->g, err))
        goto fail;
    state_create(&s->st, &s->g);
    state_init(&s->st, 0);
    if (u->checkpoint && ckpt_load_weights(u->checkpoint, &s->st, err)) {
        ct_failctx(err, "--checkpoint");
        goto fail;
    }
    s->x = malloc(sizeof *s->x * (size_t)u->batch_size * 3 * (size_t)s->img * (size_t)s->img);
    CT_ASSERT(s->x != NULL);
    s->nbatches = loader_epoch_batches(s->ld);
    if (loader_start_epoch(s->ld, 0, err))
        goto fail;
    return 0;
fail:
    eval_close(s);
    return -1;
}

int eval_next(EvalSession *s, const Batch **bt, CtTensor *logits, CtErr *err)
{
    if (s->next == s->nbatches)
        return 0;
    *bt = NULL;
    if (loader_next(s->ld, bt, err) != 1)
        return *bt || err->msg[0] ? -1 : ct_fail(err, "the split ended after %zu of %zu batches", s->next, s->nbatches);
    s->next++;
    eval_normalise(*bt, s->batch, s->mean, s->std, s->x);
    CtTensor in = {{{4, {s->batch, 3, s->img, s->img}}, CT_F32}, s->x};
    int rc = cli_run(s->be, &s->g, &s->st, &in, 1, logits, err);
    return rc ? rc : 1;
}

void eval_close(EvalSession *s)
{
    free(s->x);
    if (s->st.e)
        state_free(&s->st);
    graph_free(&s->g);
    loader_destroy(s->ld);
    dataset_close(s->ds);
    memset(s, 0, sizeof *s);
}

EvalSetup eval_setup_default(int workers)
{
    return (EvalSetup){.split = "validation", .device = "cpu", .amp_dtype = "float16", .batch_size = 256,
                       .workers = workers, .eo = {.crop_pct = -1}};
}

int eval_option(const char *prog, int c, int argc, char **argv, EvalSetup *u, int *bad)
{
    EvalOpts *eo = &u->eo;
    switch (c) {
    case EVAL_O_DATA: u->data_dir = optarg; break;
    case EVAL_O_DATASET: u->dataset = optarg; break;
    case EVAL_O_SPLIT: u->split = optarg; break;
    case EVAL_O_CKPT: u->checkpoint = optarg; break;
    case EVAL_O_NC: *bad = cli_int(prog, "--num-classes", optarg, 1, 1 << 20, &u->classes); break;
    case EVAL_O_IMG: *bad = cli_int(prog, "--img-size", optarg, 8, 4096, &eo->img_size); break;
    case EVAL_O_INPUT:
        *bad = cli_number_list(prog, "input-size", optarg, argc, argv, eo->input_size, 3, &eo->n_input_size);
        break;
    case EVAL_O_CROP:
        if (!(*bad = cli_double(prog, "crop-pct", optarg, &eo->crop_pct)) && !(eo->crop_pct > 0)) {
            fprintf(stderr, "%s: --crop-pct must be positive, got '%s'\n", prog, optarg);
            *bad = 1;
        }
        break;
    case EVAL_O_CROP_MODE: eo->crop_mode = optarg; break;
    case EVAL_O_MEAN: *bad = cli_number_list(prog, "mean", optarg, argc, argv, eo->mean, 3, &eo->n_mean); break;
    case EVAL_O_STD: *bad = cli_number_list(prog, "std", optarg, argc, argv, eo->std, 3, &eo->n_std); break;
    case EVAL_O_INTERP: eo->interpolation = optarg; break;
    case 'b': *bad = cli_int(prog, "--batch-size", optarg, 1, 1 << 16, &u->batch_size); break;
    case 'j': *bad = cli_int(prog, "--workers", optarg, 1, 256, &u->workers); break;
    case EVAL_O_AMP: u->amp = 1; break;
    case EVAL_O_AMP_DTYPE: u->amp_dtype = optarg; break;
    case EVAL_O_CL: u->channels_last = 1; break;
    case EVAL_O_DEVICE: u->device = optarg; break;
    default: return 0;
    }
    return 1;
}
