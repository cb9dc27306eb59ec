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

int data_in_chans(int in_chans, int n_input_size, const double *input_size, int *out, CtErr *err)
{
    int from_size = n_input_size > 0 ? (int)input_size[0] : 0;
    *out = in_chans > 0 ? in_chans : from_size > 0 ? from_size : 3;
    if (*out != 1 && *out != 3 && *out != 4)
        return ct_fail(err, "%s %d: timm's data pipeline makes 'L' (1-channel), RGB or RGBA (4-channel) images, "
                       "which a %d-channel model refuses; give 1, 3 or 4", in_chans > 0 ? "--in-chans" : "--input-size",
                       *out, *out);
    if (n_input_size > 0 && input_size[0] != *out)
        return ct_fail(err, "--input-size %g %g %g with --in-chans %d: the images would have another channel count "
                       "than the model", input_size[0], input_size[1], input_size[2], *out);
    return 0;
}

int data_img_mode(const char *given, int chans, CtImgMode *mode, CtErr *err)
{
    if (given && img_mode_parse(given, mode, err))
        return -1;
    if (!given)
        *mode = chans == 3 ? CT_IMG_RGB : CT_IMG_L;
    int made = img_mode_channels(*mode);
    if (made == chans)
        return 0;
    if (!given)
        return ct_fail(err, "--in-chans %d: timm's data pipeline makes 'L' (1-channel) images for any count but 3 "
                       "unless --input-img-mode says otherwise; give --input-img-mode RGBA", chans);
    return ct_fail(err, "--input-img-mode %s makes %d-channel images, but the model takes %d (--in-chans)", given, made,
                   chans);
}

int data_norm_stat(const char *flag, const double *given, int n, const double cfg[3], int chans, double out[4],
                   CtErr *err)
{
    if (n && n != 1 && n != chans) /* timm's resolve_data_config asserts it */
        return ct_fail(err, "--%s takes 1%s value%s for %d-channel images, got %d", flag,
                       chans == 1 ? "" : chans == 3 ? " or 3" : " or 4", chans == 1 ? "" : "s", chans, n);
    for (int c = 0; c < 4; c++)
        out[c] = n ? given[n == 1 ? 0 : c] : cfg[c < 3 ? c : 0];
    if (chans != 3 && !n) /* numpy's mean of the three: summed in order, then divided */
        out[0] = out[1] = out[2] = out[3] = (cfg[0] + cfg[1] + cfg[2]) / 3;
    return 0;
}

int eval_config(const ModelEntry *m, const EvalOpts *o, int *img, int *chans, EvalTransform *et, double mean[4],
                double std[4], CtErr *err)
{
    CtImgMode mode;
    if (data_in_chans(o->in_chans, o->n_input_size, o->input_size, chans, err) ||
        data_img_mode(o->input_img_mode, *chans, &mode, err))
        return -1;
    if (o->n_input_size && (o->n_input_size != 3 || o->input_size[1] != o->input_size[2]))
        return ct_fail(err, "--input-size takes C H W with H == W (square inputs only)");
    int test = o->use_test_size && m->cfg.test_input_size > 0;
    *img = o->n_input_size ? (int)o->input_size[1]
           : o->img_size > 0 ? o->img_size
           : test ? m->cfg.test_input_size : m->cfg.input_size[1];
    *et = eval_transform_default(*img);
    et->mode = mode;
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
    if (eval_transform_check(et, err))
        return ct_failctx(err, "--crop-mode %s with --in-chans %d", cm, *chans);
    if (data_norm_stat("mean", o->mean, o->n_mean, m->cfg.mean, *chans, mean, err) ||
        data_norm_stat("std", o->std, o->n_std, m->cfg.std, *chans, std, err))
        return -1;
    memcpy(et->mean, mean, sizeof et->mean); /* the first three: 'border' mode's fill, never with 4 channels */
    return 0;
}

int eval_graph(const ModelEntry *m, const ModelOptions *opt, int batch, int classes, int img, int chans, CtDType amp,
               int channels_last, const double *mean, const double *std, Graph *g, CtErr *err)
{
    ModelSpec spec = {.batch_size = batch, .training = 0,
                      .args = {.num_classes = classes, .img_size = img, .in_chans = chans}};
    if (opt)
        spec.args.opt = *opt;
    Pipeline p = {.amp = amp != CT_F32, .amp_dtype = amp, .bn_fold = 1, .channels_last = channels_last,
                  .verify = PIPELINE_VERIFY};
    if (mean)
        p.input = (InputSpec){.u8 = 1, .mean = {mean[0], mean[1], mean[2], mean[3]},
                              .std = {std[0], std[1], std[2], std[3]}};
    return model_build(m, &spec, g, err) || pipeline_run(&p, g, NULL, err) ? -1 : 0;
}

int eval_amp_dtype(int amp, const char *name)
{
    if (!amp)
        return CT_F32;
    return !strcmp(name, "float16") ? CT_F16 : !strcmp(name, "bfloat16") ? CT_BF16 : -1;
}

