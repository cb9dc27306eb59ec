/*
 * train.py's arguments that ctimm-train does not implement, with train.py's
 * defaults: those of timm at aa4b5850 (read by tools/make_args_yaml.py), then
 * those earlier versions had, each with why it is refused. An args.yaml
 * holds every argument of the train.py that wrote it, so -c accepts each of
 * these at its default and refuses any other value by name
 * (cli/train_config.h); on the command line they are refused by name too,
 * and --help lists them. test_train_config loads tests/data/timm_args.yaml,
 * train.py's own defaults, against this table; CTest train_py_flags checks
 * that every train.py flag is an option of ctimm-train or here.
 *
 * Then the flags ctimm-train takes and ignores, each with why: what they
 * choose does not exist in ctimm, and the run is the same without them.
 */
#include <stddef.h>

#include "cli/train_config.h"

const TrainPyArg train_py_unimplemented[] = {
    {"dataset-download", "false", "ctimm reads local folders, tar files and WebDataset shards; it downloads none"},
    {"dataset-trust-remote-code", "false", "Hugging Face datasets only; ctimm has no such reader"},
    {"fast-norm", "false", "selects PyTorch's fused/low-precision norm kernels; ctimm compiles its own"},
    {"model-dtype", "null", "the whole model in float16/bfloat16 without AMP; ctimm keeps float32 weights (use --amp)"},
    {"no-ddp-bb", "false", "ctimm's data parallel broadcasts no buffers (BN statistics follow --dist-bn)"},
    {"local_rank", "0", "torch.distributed.launch's; ctimm-train starts its ranks itself (--nproc-per-node)"},
    {"device-modules", "null", "PyTorch device extension modules; ctimm's devices are cpu and cuda"},
    {"drop-block", "null", "DropBlock is in none of ctimm's models"},
    {"model-ema-force-cpu", "false", "the EMA is updated inside the compiled step, beside the weights"},
    {"worker-seeding", "all", "seeds PyTorch's loader workers; ctimm's draws come from its own counter RNG"},
    {"save-images", "false", "not built yet"},
    {"log-wandb", "false", "ctimm has no Weights & Biases client; it writes summary.csv (ctimm-plot draws it)"},
    {"wandb-project", "null", "ctimm has no Weights & Biases client"},
    {"wandb-tags", "[]", "ctimm has no Weights & Biases client"},
    {"wandb-resume-id", "''", "ctimm has no Weights & Biases client"},
    {"train-img-sizes", "null", "variable-resolution training is not built yet"},
    {"train-batch-sizes", "null", "variable-resolution training is not built yet"},
    {"train-size-probs", "null", "variable-resolution training is not built yet"},
    {"train-size-schedule", "constant", "variable-resolution training is not built yet"},
    {"train-size-schedule-spread", "0.65", "variable-resolution training is not built yet"},
    {"train-size-random-mix", "0.1", "variable-resolution training is not built yet"},
    {"train-batches-per-epoch", "null", "variable-resolution training is not built yet"},
    {"train-steps-per-epoch", "null", "variable-resolution training is not built yet"},
    {"variable-batch-loss-scale", "none", "variable-resolution training is not built yet"},
    {"naflex-loader", "false", "the NaFlex variable sequence-length loader is not built yet"},
    {"naflex-train-seq-lens", "[128, 256, 576, 784, 1024]",
     "the NaFlex variable sequence-length loader is not built yet"},
    {"naflex-max-seq-len", "576", "the NaFlex variable sequence-length loader is not built yet"},
    {"naflex-patch-sizes", "null", "the NaFlex variable sequence-length loader is not built yet"},
    {"naflex-patch-size-probs", "null", "the NaFlex variable sequence-length loader is not built yet"},
    {"naflex-loss-scale", "linear", "the NaFlex variable sequence-length loader is not built yet"},
    {"naflex-patchify-channels-first", "false", "the NaFlex variable sequence-length loader is not built yet"},
    {"kd-model-name", "null", "knowledge distillation from a teacher model is not built yet"},
    {"kd-distill-type", "logit", "knowledge distillation from a teacher model is not built yet"},
    {"kd-loss-type", "kl", "knowledge distillation from a teacher model is not built yet"},
    {"distill-loss-weight", "null", "knowledge distillation from a teacher model is not built yet"},
    {"task-loss-weight", "null", "knowledge distillation from a teacher model is not built yet"},
    {"kd-temperature", "4.0", "knowledge distillation from a teacher model is not built yet"},
    {"kd-student-feature-dim", "null", "knowledge distillation from a teacher model is not built yet"},
    {"kd-teacher-feature-dim", "null", "knowledge distillation from a teacher model is not built yet"},
    {"kd-token-distill-type", "soft", "knowledge distillation from a teacher model is not built yet"},
    /* Those of earlier train.py versions: the args.yaml files they wrote hold them. */
    {"amp-impl", "native", "an earlier train.py's, accepted in its args.yaml at its default"},
    {"apex-amp", "false", "an earlier train.py's, accepted in its args.yaml at its default"},
    {"native-amp", "false", "an earlier train.py's, accepted in its args.yaml at its default"},
    {"aot-autograd", "false", "an earlier train.py's, accepted in its args.yaml at its default"},
    {"bn-tf", "false", "an earlier train.py's, accepted in its args.yaml at its default"},
    {"jsd", "false", "an earlier train.py's, accepted in its args.yaml at its default"},
    {"mixup-elem", "false", "an earlier train.py's, accepted in its args.yaml at its default"},
    {"validation-batch-size-multiplier", "1", "an earlier train.py's, accepted in its args.yaml at its default"},
    {"num-gpu", "1", "an earlier train.py's, accepted in its args.yaml at its default"},
    {"initial-batch-size", "0", "an earlier train.py's, accepted in its args.yaml at its default"},
    {NULL, NULL, NULL},
};

const TrainPyArg train_py_no_effect[] = {
    {"torchcompile", "null", "ctimm always compiles the whole training step"},
    {"torchcompile-mode", "null", "ctimm always compiles the whole training step"},
    {"fuser", "''", "ctimm always compiles the whole training step"},
    {"torchscript", "false", "ctimm always compiles the whole training step"},
    {"pin-mem", "false", "ctimm's loader fills the step's input buffers itself"},
    {"no-prefetcher", "false", "ctimm's loader fills the step's input buffers itself"},
    {"use-multi-epochs-loader", "false", "ctimm's loader workers live for the whole run"},
    {"synchronize-step", "false", "ctimm's steps end synchronised"},
    {"drop-connect", "null", "deprecated in train.py, which passes it nowhere (use --drop-path)"},
    {NULL, NULL, NULL},
};
