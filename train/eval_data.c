#include "train/eval_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "passes/pipeline.h"
#include "runtime/data/shapes.h"

int eval_interp_parse(const char *name)
{
    static const char *const names[] = {[CT_INTERP_NEAREST] = "nearest", [CT_INTERP_BILINEAR] = "bilinear",
                                        [CT_INTERP_BICUBIC] = "bicubic"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(name, names[k]))
            return k;
    return -1;
}

int eval_embedded_data(char *root, size_t n, int *img_size, int *made, CtErr *err)
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
    if (shapes_generate(root, &sc, made, err))
        return -1;
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
    int test = o->use_test_size && m->cfg.test_input_size > 0;
    *img = o->n_input_size ? (int)o->input_size[1]
           : o->img_size > 0 ? o->img_size
           : test ? m->cfg.test_input_size : m->cfg.input_size[1];
    *et = eval_transform_default(*img);
    et->crop_pct = o->crop_pct > 0                                ? o->crop_pct
                   : o->use_test_size && m->cfg.test_crop_pct > 0 ? m->cfg.test_crop_pct
                                                                  : m->cfg.crop_pct;
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

int eval_graph(const ModelEntry *m, int batch, int classes, int img, CtDType amp, int channels_last,
               const double *mean, const double *std, Graph *g, CtErr *err)
{
    ModelSpec spec = {.batch_size = batch, .training = 0, .args = {.num_classes = classes, .img_size = img}};
    Pipeline p = {.amp = amp != CT_F32, .amp_dtype = amp, .bn_fold = 1, .channels_last = channels_last,
                  .verify = PIPELINE_VERIFY};
    if (mean)
        p.input = (InputSpec){.u8 = 1, .mean = {mean[0], mean[1], mean[2]}, .std = {std[0], std[1], std[2]}};
    return model_build(m, &spec, g, err) || pipeline_run(&p, g, NULL, err) ? -1 : 0;
}

int eval_amp_dtype(int amp, const char *name)
{
    if (!amp)
        return CT_F32;
    return !strcmp(name, "float16") ? CT_F16 : !strcmp(name, "bfloat16") ? CT_BF16 : -1;
}

