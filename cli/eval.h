/*
 * What ctimm-train's validation and ctimm-validate share: the loader's uint8
 * NHWC batch made into the graph's normalised f32 NCHW input, and timm's
 * accuracy() / CrossEntropyLoss over logits, accumulated per batch.
 */
#ifndef CTIMM_CLI_EVAL_H
#define CTIMM_CLI_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "models/registry.h"
#include "runtime/backend.h"
#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "runtime/data/transforms.h"

/* x[b, c, :, :] = (image[b, :, :, c] / 255 - mean[c]) / std[c] for the
 * batch's n images; rows n..batch-1 (a short last batch) are zeros. */
void eval_normalise(const Batch *bt, int batch, const double *mean, const double *std, float *x);

typedef struct EvalMeter {
    double loss_sum, top1, top5; /* sums over images: loss, hits */
    size_t seen;
} EvalMeter;

typedef struct EvalBatch {
    double loss, top1, top5; /* this batch's mean loss and accuracies (percent) */
} EvalBatch;

/* Adds n rows of logits [n, C] with their labels, ranked by eval_before. */
EvalBatch eval_meter_add(EvalMeter *m, const float *logits, int C, const int64_t *labels, int n);
/* Mean loss, top-1 and top-5 (percent) so far. */
double eval_loss(const EvalMeter *m);
double eval_top1(const EvalMeter *m);
double eval_top5(const EvalMeter *m);

/* The embedded default dataset (runtime/data/shapes.h) under $CTIMM_DATA_DIR,
 * else ~/.cache/ctimm/data, generated on first use: its root (with train/
 * and val/ splits) and image size. */
int eval_embedded_data(char *root, size_t n, int *img_size, CtErr *err);

/* timm's data-config flags of validate.py and inference.py; 0 counts and
 * NULL names mean the model's pretrained cfg. */
typedef struct EvalOpts {
    int img_size, n_input_size, n_mean, n_std;
    double input_size[3], crop_pct, mean[3], std[3];
    const char *interpolation, *crop_mode;
} EvalOpts;

/* resolve_data_config + the eval transform: image size, transform (crop,
 * interpolation, the mean for border fill), and the mean/std to normalise by. */
int eval_config(const ModelEntry *m, const EvalOpts *o, int *img, EvalTransform *et, double mean[3], double std[3],
                CtErr *err);

/* An eval graph as validate.py and inference.py run the model: bn_fold, then
 * autocast (amp CT_F16/CT_BF16; CT_F32: none) and channels-last when asked. */
int eval_graph(const ModelEntry *m, int batch, int classes, int img, CtDType amp, int channels_last, Graph *g,
               CtErr *err);

/* What ctimm-validate and ctimm-infer share: the flags that pick the data
 * and build the model (validate.py's and inference.py's names). */
typedef struct EvalSetup {
    const char *data_dir, *dataset, *split, *class_map, *checkpoint, *device, *amp_dtype;
    int amp, channels_last, batch_size, workers;
    int classes; /* the classifier's outputs; 0: the dataset's class count */
    EvalOpts eo;
} EvalSetup;

/* The flags of EvalSetup as getopt_long entries (codes EVAL_O_*, below any
 * tool's own, and -b, -j), so the tools list and parse them once. */
enum {
    EVAL_O_DATA = 700, EVAL_O_DATASET, EVAL_O_SPLIT, EVAL_O_CKPT, EVAL_O_NC, EVAL_O_IMG, EVAL_O_INPUT, EVAL_O_CROP,
    EVAL_O_CROP_MODE, EVAL_O_MEAN, EVAL_O_STD, EVAL_O_INTERP, EVAL_O_AMP, EVAL_O_AMP_DTYPE, EVAL_O_CL,
    EVAL_O_DEVICE
};
#define EVAL_LONG_OPTIONS                                                                                        \
    {"data-dir", 1, 0, EVAL_O_DATA}, {"dataset", 1, 0, EVAL_O_DATASET}, {"split", 1, 0, EVAL_O_SPLIT},          \
        {"checkpoint", 1, 0, EVAL_O_CKPT}, {"pretrained-path", 1, 0, EVAL_O_CKPT},                              \
        {"num-classes", 1, 0, EVAL_O_NC}, {"img-size", 1, 0, EVAL_O_IMG}, {"input-size", 1, 0, EVAL_O_INPUT},   \
        {"crop-pct", 1, 0, EVAL_O_CROP}, {"crop-mode", 1, 0, EVAL_O_CROP_MODE}, {"mean", 1, 0, EVAL_O_MEAN},     \
        {"std", 1, 0, EVAL_O_STD}, {"interpolation", 1, 0, EVAL_O_INTERP}, {"batch-size", 1, 0, 'b'},          \
        {"workers", 1, 0, 'j'}, {"amp", 0, 0, EVAL_O_AMP}, {"amp-dtype", 1, 0, EVAL_O_AMP_DTYPE},               \
        {"channels-last", 0, 0, EVAL_O_CL}, {"device", 1, 0, EVAL_O_DEVICE}

/* timm's defaults: split "validation", cpu, float16 for --amp, batch 256. */
EvalSetup eval_setup_default(int workers);
/* Option c (with getopt's optarg, optind) when it is one of
 * EVAL_LONG_OPTIONS: 1, and *bad set when its value is bad (a message was
 * printed); 0 when it is not one of them. */
int eval_option(const char *prog, int c, int argc, char **argv, EvalSetup *u, int *bad);

/* An open evaluation: the split's loader (timm's eval transform), the eval
 * graph on its backend with the checkpoint's weights, and the next batch. */
typedef struct EvalSession {
    const ModelEntry *m;
    const CtBackend *be;
    Dataset *ds;
    Loader *ld;
    Graph g;
    CtState st;
    EvalTransform et;
    double mean[3], std[3];
    int img, classes, batch;
    CtDType amp;
    const char *interp;
    float *x;
    size_t nbatches, next;
} EvalSession;

/* Opens everything (the embedded shapes set's val split when no folder is
 * given) and starts the pass; on failure nothing stays open. */
int eval_open(EvalSession *s, const char *prog, const ModelEntry *m, const EvalSetup *u, CtErr *err);
/* The next batch through the model (cli_run): 1 with *bt and *logits (the
 * caller frees the tensor), 0 after the last, -1 on error, CT_INTERRUPTED
 * when the tool's stop flag was raised. */
int eval_next(EvalSession *s, const Batch **bt, CtTensor *logits, CtErr *err);
void eval_close(EvalSession *s);

/* "float16"/"bfloat16" under --amp -> CT_F16/CT_BF16; CT_F32 without; -1 if unknown. */
int eval_amp_dtype(int amp, const char *name);

/* "bilinear", "bicubic", "nearest" -> CtInterp; -1 for anything else. */
int eval_interp_parse(const char *name);

/* Whether logit a of class ia comes before logit b of class ib in torch.topk's
 * order on CPU: larger first, equal ones by the smaller index, NaN above
 * every number (and NaNs among themselves by index). */
int eval_before(float a, int ia, float b, int ib);
/* The rank of `label` among logits row[0..C) (0 = the arg max). */
int eval_rank(const float *row, int C, int64_t label);

#endif
