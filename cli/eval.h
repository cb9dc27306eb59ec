/*
 * What ctimm-validate and ctimm-infer share: validate.py's and
 * inference.py's data and model flags, and the session that opens the
 * split and the model from them and runs it batch by batch (under the
 * tools' stop flag and --device fallback, cli/common.h). The data config,
 * the normalised input and the eval graph are the library's
 * (train/eval_data.h), and so are --pretrained's weights and data config
 * (train/pretrained.h).
 */
#ifndef CTIMM_CLI_EVAL_H
#define CTIMM_CLI_EVAL_H

#include <stddef.h>

#include "models/registry.h"
#include "runtime/backend.h"
#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "train/eval_data.h"
#include "train/pretrained.h"

/* What ctimm-validate and ctimm-infer share: the flags that pick the data
 * and build the model (validate.py's and inference.py's names). */
typedef struct EvalSetup {
    const char *data_dir, *dataset, *split, *class_map, *checkpoint, *device, *amp_dtype;
    int amp, channels_last, batch_size, workers;
    int classes; /* --num-classes; 0: the checkpoint's classifier, else the model's default */
    int ema;     /* a PyTorch checkpoint's model EMA when it has one (timm's load_checkpoint use_ema) */
    int pretrained; /* timm's weights from the Hugging Face cache (then --checkpoint's over them) */
    EvalOpts eo;
    ModelArgs kw; /* --gp's and --model-kwargs' options and img_size (cli_model_options) */
} EvalSetup;

/* The flags of EvalSetup as getopt_long entries (codes EVAL_O_*, below any
 * tool's own, and -b, -j), so the tools list and parse them once. */
enum {
    EVAL_O_DATA = 700, EVAL_O_DATASET, EVAL_O_SPLIT, EVAL_O_CKPT, EVAL_O_NC, EVAL_O_IMG, EVAL_O_INPUT, EVAL_O_CROP,
    EVAL_O_CROP_MODE, EVAL_O_MEAN, EVAL_O_STD, EVAL_O_INTERP, EVAL_O_AMP, EVAL_O_AMP_DTYPE, EVAL_O_CL,
    EVAL_O_DEVICE, EVAL_O_PRETRAINED, EVAL_O_IN_CHANS
};
#define EVAL_LONG_OPTIONS                                                                                        \
    {"data-dir", 1, 0, EVAL_O_DATA}, {"dataset", 1, 0, EVAL_O_DATASET}, {"split", 1, 0, EVAL_O_SPLIT},          \
        {"checkpoint", 1, 0, EVAL_O_CKPT}, {"pretrained-path", 1, 0, EVAL_O_CKPT},                              \
        {"num-classes", 1, 0, EVAL_O_NC}, {"img-size", 1, 0, EVAL_O_IMG}, {"input-size", 1, 0, EVAL_O_INPUT},   \
        {"crop-pct", 1, 0, EVAL_O_CROP}, {"crop-mode", 1, 0, EVAL_O_CROP_MODE}, {"mean", 1, 0, EVAL_O_MEAN},     \
        {"std", 1, 0, EVAL_O_STD}, {"interpolation", 1, 0, EVAL_O_INTERP}, {"batch-size", 1, 0, 'b'},          \
        {"workers", 1, 0, 'j'}, {"amp", 0, 0, EVAL_O_AMP}, {"amp-dtype", 1, 0, EVAL_O_AMP_DTYPE},               \
        {"channels-last", 0, 0, EVAL_O_CL}, {"device", 1, 0, EVAL_O_DEVICE},                                   \
        {"pretrained", 0, 0, EVAL_O_PRETRAINED}, {"in-chans", 1, 0, EVAL_O_IN_CHANS}

/* timm's defaults: split "validation", cpu, float16 for --amp, batch 256. */
EvalSetup eval_setup_default(int workers);
/* Option c (with getopt's optarg, optind) when it is one of
 * EVAL_LONG_OPTIONS: 1, and *bad set when its value is bad (a message was
 * printed); 0 when it is not one of them. */
int eval_option(const char *prog, int c, int argc, char **argv, EvalSetup *u, int *bad);

/* An open evaluation: the split's loader (timm's eval transform), the eval
 * graph on its backend with the checkpoint's weights, and the next batch. */
typedef struct EvalSession {
    const ModelEntry *m; /* &pre.m: the model with its pretrained weights' cfg */
    Pretrained pre;
    const CtBackend *be;
    Dataset *ds;
    Loader *ld;
    Graph g;
    CtState st;
    CtRunner run; /* g compiled and prepared over st, at the first batch */
    EvalTransform et;
    double mean[4], std[4];
    int img, chans, classes, batch;
    char classes_from[128]; /* where classes came from, for the tools' log line */
    CtDType amp;
    const char *interp;
    size_t nbatches, next;
} EvalSession;

/* Opens everything for the model named `model` (timm's name: "arch" or
 * "arch.tag"; the embedded shapes set's val split when no folder is given)
 * and starts the pass; on failure nothing stays open. */
int eval_open(EvalSession *s, const char *prog, const char *model, const EvalSetup *u, CtErr *err);
/* The next batch through the model (cli_run): 1 with *bt and *logits (the
 * caller frees the tensor), 0 after the last, -1 on error, CT_INTERRUPTED
 * when the tool's stop flag was raised. */
int eval_next(EvalSession *s, const Batch **bt, CtTensor *logits, CtErr *err);
void eval_close(EvalSession *s);

#endif
