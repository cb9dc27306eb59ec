/*
 * The data side of a pass over a split, as train.py, validate.py and
 * inference.py set it up: timm's resolve_data_config and eval transform,
 * the embedded default dataset, and the eval graph validate.py runs, which
 * takes the loader's uint8 NHWC batch and normalises it itself.
 */
#ifndef CTIMM_TRAIN_EVAL_DATA_H
#define CTIMM_TRAIN_EVAL_DATA_H

#include <stddef.h>

#include "ir/ir.h"
#include "models/registry.h"
#include "runtime/data/loader.h"
#include "runtime/data/transforms.h"

/* The embedded default dataset (runtime/data/shapes.h) under $CTIMM_DATA_DIR,
 * else ~/.cache/ctimm/data, generated on first use: its root (with train/
 * and val/ splits) and image size; *made says whether it was generated now. */
int eval_embedded_data(char *root, size_t n, int *img_size, int *made, CtErr *err);

/* timm's data-config flags of validate.py and inference.py; 0 counts and
 * NULL names mean the model's pretrained cfg. */
typedef struct EvalOpts {
    int in_chans; /* --in-chans; 0: not given (--input-size's channels, else 3) */
    int img_size, n_input_size, n_mean, n_std;
    int use_test_size; /* validate.py's default (no --use-train-size): the cfg's test_input_size and test_crop_pct */
    double input_size[3], crop_pct, mean[4], std[4];
    const char *interpolation, *crop_mode;
    const char *input_img_mode; /* validate.py's --input-img-mode; NULL: by the channels (data_img_mode) */
} EvalOpts;

/* train.py's, validate.py's and inference.py's in_chans: --in-chans
 * (in_chans > 0), else --input-size's first value (n_input_size > 0), else
 * 3. Counts other than 1, 3 and 4 are refused, as no image mode makes them,
 * and so is an --input-size of other channels than --in-chans (timm would
 * feed the model those). */
int data_in_chans(int in_chans, int n_input_size, const double *input_size, int *out, CtErr *err);

/* train.py's and validate.py's input_img_mode: `given` (--input-img-mode),
 * else 'RGB' for 3 channels and 'L' for any other count; refused unless its
 * images have the model's `chans` channels (timm fails at the first batch). */
int data_img_mode(const char *given, int chans, CtImgMode *mode, CtErr *err);

/* resolve_data_config's mean or std (flag "mean" or "std") for `chans`
 * channels as the normalisation takes it: the flag's n values (one for
 * every channel, or one a channel: timm asserts the count), else the cfg's
 * three, which for another channel count timm's PrefetchLoader averages
 * (adapt_to_chs). out[c] for c < chans; for one channel all four hold it. */
int data_norm_stat(const char *flag, const double *given, int n, const double cfg[3], int chans, double out[4],
                   CtErr *err);

/* resolve_data_config + the eval transform: image size, channels (1 makes
 * the transform gray), transform (crop, interpolation, the mean for border
 * fill), and the mean/std to normalise by. */
int eval_config(const ModelEntry *m, const EvalOpts *o, int *img, int *chans, EvalTransform *et, double mean[4],
                double std[4], CtErr *err);

/* An eval graph as validate.py and inference.py run the model, by the pass
 * pipeline: the model with options opt (--gp, --model-kwargs; NULL: its
 * own), the uint8 input of `chans` channels normalised by mean/std (NULL:
 * the f32 NCHW input timm's benchmark.py feeds), bn_fold, then autocast (amp
 * CT_F16/CT_BF16; CT_F32: none) and channels-last when asked. */
int eval_graph(const ModelEntry *m, const ModelOptions *opt, int batch, int classes, int img, int chans, CtDType amp,
               int channels_last, const double *mean, const double *std, Graph *g, CtErr *err);

/* "float16"/"bfloat16" under --amp -> CT_F16/CT_BF16; CT_F32 without; -1 if unknown. */
int eval_amp_dtype(int amp, const char *name);

/* "bilinear", "bicubic", "nearest" -> CtInterp; -1 for anything else. */
int eval_interp_parse(const char *name);

#endif
