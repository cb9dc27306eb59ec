#include "cli/eval.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/common.h"
#include "runtime/safetensors.h"
#include "train/checkpoint.h"

/* validate.py's create_model(num_classes=args.num_classes, checkpoint_path=...):
 * the classifier is the checkpoint's (ck, when there is one), not the
 * folder's, so a 1000-class file scores a small labelled folder. */
static void pick_classes(EvalSession *s, const ModelEntry *m, const EvalSetup *u, const StFile *ck)
{
    if (u->classes > 0) {
        s->classes = u->classes;
        snprintf(s->classes_from, sizeof s->classes_from, "from --num-classes");
        return;
    }
    s->classes = m->cfg.num_classes;
    snprintf(s->classes_from, sizeof s->classes_from, "%s",
             s->pre.config[0] ? "the pretrained weights' config.json" : "the model's default");
    if (!ck)
        return;
    char name[80];
    snprintf(name, sizeof name, "%s.weight", m->cfg.classifier);
    const StTensor *t = st_find(ck, name);
    /* another model's file keeps the default: loading it names what is missing */
    if (t && t->ndim == 2 && t->shape[0] > 0 && t->shape[0] <= 1 << 20) {
        s->classes = (int)t->shape[0];
        snprintf(s->classes_from, sizeof s->classes_from, "from the checkpoint's %s", name);
    }
}

int eval_open(EvalSession *s, const char *prog, const char *model, const EvalSetup *u, CtErr *err)
{
    memset(s, 0, sizeof *s);
    const ModelEntry *m = model_find(model);
    if (!m)
        return ct_fail(err, "unknown model '%s' (ctimm-compile --list-models lists them)", model);
    if (pretrained_resolve(&s->pre, m, model, u->pretrained ? PRETRAINED_HUB : PRETRAINED_NONE, NULL, err))
        return -1;
    s->m = m = &s->pre.m;
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
    else if (u->dataset && !strncasecmp(u->dataset, "wds/", 4)) /* timm's reader prefix; the name is unused */
        dc.kind = CT_DS_WDS;
    else if (u->dataset && strcmp(u->dataset, "shapes"))
        return ct_fail(err, "--dataset %s is not one of folder, tar, shapes, wds/NAME", u->dataset);
    if (u->data_dir) {
        snprintf(root, sizeof root, "%s", u->data_dir);
    } else if (u->dataset && strcmp(u->dataset, "shapes")) {
        return ct_fail(err, "--dataset %s needs a data folder (DATA_DIR or --data-dir)", u->dataset);
    } else { /* the embedded set's val split, at its own size unless asked */
        int size, made;
        if (eval_embedded_data(root, sizeof root, &size, &made, err))
            return -1;
        if (made)
            printf("Generated the embedded shapes dataset in %s\n", root);
        split = "val";
        if (eo.img_size <= 0 && !eo.n_input_size)
            eo.img_size = size;
    }
    dc.split = split;
    if (eval_config(m, &eo, &s->img, &s->chans, &s->et, s->mean, s->std, err))
        return -1;
    s->interp = eo.interpolation ? eo.interpolation : m->cfg.interpolation;
    if (model_kwargs_check(m, &u->kw, s->img, err) || dataset_open(&s->ds, &dc, err))
        return -1;
    StFile ck; /* read once: its classifier's size builds the model, then its tensors load */
    if (u->checkpoint && ckpt_read_weights(u->checkpoint, u->ema, &ck, err)) {
        ct_failctx(err, "--checkpoint");
        goto fail;
    }
    pick_classes(s, m, u, u->checkpoint ? &ck : NULL);
    LoaderConfig lc = {.batch_size = u->batch_size, .num_workers = u->workers, .eval = &s->et, .world_size = 1};
    int rc = loader_create(&s->ld, s->ds, &lc, err) ||
             eval_graph(m, &u->kw.opt, u->batch_size, s->classes, s->img, s->chans, s->amp, u->channels_last, s->mean,
                        s->std, &s->g, err) ||
             backend_check(s->be, &s->g, err);
    if (!rc) {
        state_create(&s->st, &s->g);
        state_init(&s->st, 0);
        if (u->pretrained && !(rc = pretrained_load(&s->pre, &s->st, s->classes, err)))
            for (int k = 0; k < s->pre.nlog; k++)
                printf("%s\n", s->pre.log[k]);
        if (!rc && u->checkpoint && state_load(&s->st, &ck, "", err))
            rc = ct_failctx(err, "--checkpoint: %s", u->checkpoint);
    }
    if (u->checkpoint)
        st_free(&ck);
    if (rc)
        goto fail;
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
    CtTensor in = {{{4, {s->batch, s->img, s->img, s->chans}}, CT_U8}, (*bt)->images};
    /* compiled at the first batch, after the caller's last change to the state (--use-ema) */
    int rc = s->run.prog ? 0 : cli_open(&s->run, s->be, &s->g, &s->st, err);
    if (rc == 0)
        rc = cli_step(&s->run, &in, 1, logits, err);
    return rc ? rc : 1;
}

void eval_close(EvalSession *s)
{
    backend_close(&s->run);
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
    case EVAL_O_MEAN: *bad = cli_number_list(prog, "mean", optarg, argc, argv, eo->mean, 4, &eo->n_mean); break;
    case EVAL_O_STD: *bad = cli_number_list(prog, "std", optarg, argc, argv, eo->std, 4, &eo->n_std); break;
    case EVAL_O_INTERP: eo->interpolation = optarg; break;
    case 'b': *bad = cli_int(prog, "--batch-size", optarg, 1, 1 << 16, &u->batch_size); break;
    case 'j': *bad = cli_int(prog, "--workers", optarg, 1, 256, &u->workers); break;
    case EVAL_O_AMP: u->amp = 1; break;
    case EVAL_O_AMP_DTYPE: u->amp_dtype = optarg; break;
    case EVAL_O_CL: u->channels_last = 1; break;
    case EVAL_O_DEVICE: u->device = optarg; break;
    case EVAL_O_PRETRAINED: u->pretrained = 1; break;
    case EVAL_O_IN_CHANS: *bad = cli_int(prog, "--in-chans", optarg, 1, 1 << 16, &eo->in_chans); break;
    default: return 0;
    }
    return 1;
}
