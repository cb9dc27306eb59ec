/*
 * ctimm-train: timm's train.py on compiled graphs. This file is its command
 * line: train.py's flags (and -c/--config's YAML, cli/train_config.h) into
 * the trainer's arguments, the ranks of a data-parallel run joined (or
 * started, --nproc-per-node), stdout and the progress bar wired to the
 * trainer's report, and Ctrl-C to its stop flag. The run itself, from the
 * data to the checkpoints, is the library's trainer (train/trainer.h). A
 * timm flag it does not implement is refused by name, never silently
 * ignored. Most of the file is the option table and its switch: one entry
 * and one case per train.py flag.
 *
 * With no data folder it trains on the embedded default: a generated
 * 10-class JPEG ImageFolder of drawn shapes (runtime/data/shapes.h).
 *
 * Data-parallel (timm's DDP): under an MPI launcher, or started as N ranks
 * by --nproc-per-node N (cli/train_launch.h), each rank trains on its
 * shard, rank 0 alone logs and writes, and a run failing on one rank ends
 * them all.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/common.h"
#include "cli/progress.h"
#include "cli/train_config.h"
#include "cli/train_launch.h"
#include "runtime/cuda/backend_cuda.h"
#include "runtime/dist.h"
#include "train/trainer.h"

static const char *prog = "ctimm-train"; /* "ctimm-train (rank R)" on ranks other than 0 */

/* -c FILE: the words made from it, and the argv they sit in. The
 * arguments' strings point into them, so they live until config_free. */
typedef struct ConfigWords {
    char **words, **argv;
} ConfigWords;

static const char *const usage =
    "usage: ctimm-train [DATA_DIR] [--data-dir DIR] [--dataset folder|tar|shapes|wds/NAME] [--train-split train]\n"
    "                   [--val-split validation] [--model test_resnet] [--num-classes N] [--img-size N]\n"
    "                   [-b 32] [-vb N] [--epochs 5] [--lr LR] [--lr-base 0.1]\n"
    "                   [--lr-base-size 256] [--momentum 0.9] [--weight-decay 2e-5] [--opt-eps EPS]\n"
    "                   [--opt-betas B1 B2] [--opt sgd|momentum|sgdw|sgdc|adam|adamw|adamwlegacy|adamc|nadam|\n"
    "                   nadamlegacy|nadamw|nadamc|radam|adamax|adopt|adoptw|adoptc|lamb|lambc|lambw|lambcw|\n"
    "                   lambcd|lars|larc|nlars|nlarc|rmsprop|rmsproptf|rmsproptfc|adabelief|adagrad|lion|lionc|\n"
    "                   madgrad|madgradw|adan|adanw|laprop|lapropc|sgdp|adamp|adafactor|adafactorbv|\n"
    "                   adafactorbvc|muon|cadamw|cadamc|cnadamw|cnadamc|cadopt|cadoptw|cadoptc|clion|clionc|\n"
    "                   csgdw|csgdc|crmsproptf|cadan|cadanw|claprop]\n"
    "                   [--opt-kwargs K=V ...]\n"
    "                   [--sched cosine|tanh|step|multistep|plateau|poly|none] [--sched-on-updates]\n"
    "                   [--warmup-epochs 0] [--warmup-lr 1e-5] [--warmup-prefix] [--min-lr 0]\n"
    "                   [--decay-epochs 90] [--decay-milestones 90 180 270] [--decay-rate 0.1]\n"
    "                   [--patience-epochs 10] [--cooldown-epochs 0] [--lr-noise PCT [PCT]]\n"
    "                   [--lr-noise-pct 0.67] [--lr-noise-std 1] [--lr-cycle-mul 1] [--lr-cycle-decay 0.5]\n"
    "                   [--lr-cycle-limit 1] [--lr-k-decay 1]\n"
    "                   [--smoothing 0.1] [--drop 0] [--drop-path P] [--channels-last] [--seed 42] [-j 2]\n"
    "                   [--grad-checkpointing] [--memory-budget BYTES] [--keep-activations]\n"
    "                   [--log-interval 50] [--device auto|cpu|cuda|ref] [--output DIR] [--resume CKPT]\n"
    "                   [--no-resume-opt] [--initial-checkpoint CKPT] [--checkpoint-hist 10]\n"
    "                   [--pretrained] [--pretrained-path FILE] [--in-chans 1|3|4] [--head-init-scale S]\n"
    "                   [--head-init-bias B]\n"
    "                   [--eval-metric top1|top5|loss] [-c|--config FILE.yaml]\n"
    "                   [--clip-grad V] [--clip-mode norm|value|agc] [--model-ema] [--model-ema-decay 0.9998]\n"
    "                   [--model-ema-warmup] [--layer-decay D] [--layer-decay-min-scale 0]\n"
    "                   [--layer-decay-no-opt-scale S] [--grad-accum-steps 1] [--gp POOL] [--model-kwargs K=V ...]\n"
    "                   [--mixup 0] [--cutmix 0] [--cutmix-minmax MIN MAX] [--mixup-prob 1]\n"
    "                   [--mixup-switch-prob 0.5] [--mixup-mode batch|pair|elem] [--mixup-off-epoch 0]\n"
    "                   [--reprob 0] [--remode pixel|rand|const] [--recount 1] [--resplit]\n"
    "                   [--aug-splits 0] [--jsd-loss] [--split-bn] [--bn-momentum M] [--bn-eps E]\n"
    "                   [--amp] [--amp-dtype float16|bfloat16] [--bce-loss] [--bce-target-thresh T]\n"
    "                   [--bce-sum] [--bce-pos-weight W] [--recovery-interval N] [--start-epoch N]\n"
    "                   [--nproc-per-node N] [--bucket-cap-mb 25] [--dist-bn reduce|broadcast|none]\n"
    "                   [--sync-bn] [--dist-check-params] [--dist-timeout 1800] [--list-flags]\n"
    "                   [--train-num-samples N] [--val-num-samples N] [--input-img-mode RGB|L|RGBA]\n"
    "                   [--input-key K] [--target-key K] [--val-interval 1] [--tta 0]\n"
    "With no DATA_DIR it trains on the embedded shapes dataset (generated once under\n"
    "$CTIMM_DATA_DIR, else ~/.cache/ctimm/data). Data-parallel: --nproc-per-node N, or\n"
    "mpirun -np N ctimm-train ... (tools/distributed_train.sh N ...).\n"
    "--pretrained loads timm's weights of --model (resnet50: its default tag, resnet50.a1_in1k; or name\n"
    "the tag) from the Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub),\n"
    "never from the network: `huggingface-cli download timm/resnet50.a1_in1k` fetches them. Another\n"
    "--num-classes gets a new classifier, another --img-size a resampled ViT position embedding, --in-chans 1\n"
    "(gray 'L' images) a first conv summed over RGB, --in-chans 4 (RGBA images: --input-img-mode RGBA) one\n"
    "with RGB's repeated and scaled, as timm's adapt_input_conv.\n"
    "--pretrained-path FILE loads a weights file instead (with a new classifier always, as train.py).\n";

/* Scheduler flags, long only. */
enum {
    OPT_SCHED_ON_UPDATES = 2000, OPT_DECAY_EPOCHS, OPT_DECAY_MILESTONES, OPT_DECAY_RATE, OPT_PATIENCE,
    OPT_COOLDOWN, OPT_WARMUP_PREFIX, OPT_NOISE, OPT_NOISE_PCT, OPT_NOISE_STD, OPT_CYCLE_MUL, OPT_CYCLE_DECAY,
    OPT_CYCLE_LIMIT, OPT_K_DECAY
};

/* Mixup, random erasing and config flags, long only. */
enum {
    OPT_MIXUP = 3000, OPT_CUTMIX, OPT_CUTMIX_MINMAX, OPT_MIXUP_PROB, OPT_MIXUP_SWITCH_PROB, OPT_MIXUP_MODE,
    OPT_MIXUP_OFF_EPOCH, OPT_REPROB, OPT_REMODE, OPT_RECOUNT, OPT_CONFIG
};

/* Data, augmentation and output flags, long only. */
enum {
    OPT_CLASS_MAP = 5000, OPT_INPUT_SIZE, OPT_CROP_PCT, OPT_MEAN, OPT_STD, OPT_INTERPOLATION, OPT_TRAIN_INTERP,
    OPT_NO_AUG, OPT_SCALE, OPT_RATIO, OPT_HFLIP, OPT_VFLIP, OPT_COLOR_JITTER, OPT_AA, OPT_EXPERIMENT,
    OPT_EPOCH_REPEATS, OPT_LR_BASE_SCALE, OPT_COLOR_JITTER_PROB, OPT_GRAYSCALE_PROB, OPT_GAUSSIAN_BLUR_PROB,
    OPT_TRAIN_CROP_MODE, OPT_AUG_REPEATS
};

/* AMP, BCE, recovery and start-epoch flags, long only. */
enum {
    OPT_AMP = 6000, OPT_AMP_DTYPE, OPT_BCE_LOSS, OPT_BCE_THRESH, OPT_RECOVERY, OPT_START_EPOCH, OPT_BCE_SUM,
    OPT_BCE_POS_WEIGHT, OPT_AUG_SPLITS, OPT_JSD_LOSS, OPT_SPLIT_BN, OPT_RESPLIT, OPT_BN_MOMENTUM, OPT_BN_EPS
};

/* Pretrained weights flags, long only. */
enum { OPT_PRETRAINED = 8000, OPT_PRETRAINED_PATH, OPT_IN_CHANS, OPT_LIST_FLAGS, OPT_HEAD_INIT_SCALE,
       OPT_HEAD_INIT_BIAS };

/* The flags taken with no effect (train_py_no_effect), each its own value:
 * the config loader reads options sharing one as aliases. */
enum { OPT_NO_EFFECT = 8100, OPT_NO_EFFECT_END = 8200 };

/* Dataset flags (issue 27's data part), long only. */
enum { OPT_TRAIN_NUM_SAMPLES = 9100, OPT_VAL_NUM_SAMPLES, OPT_INPUT_IMG_MODE, OPT_VAL_INTERVAL, OPT_TTA,
       OPT_INPUT_KEY, OPT_TARGET_KEY };

/* Data-parallel flags, long only. */
enum { OPT_NPROC = 7000, OPT_BUCKET_CAP, OPT_DIST_BN, OPT_DIST_CHECK, OPT_SYNC_BN, OPT_DIST_TIMEOUT };

/* Gradient clipping and model EMA flags, long only. */
enum { OPT_CLIP_GRAD = 4000, OPT_CLIP_MODE, OPT_MODEL_EMA, OPT_MODEL_EMA_DECAY, OPT_MODEL_EMA_WARMUP };

/* Layer-wise lr decay flags, long only. */
enum { OPT_LAYER_DECAY = 9000, OPT_LAYER_DECAY_MIN, OPT_LAYER_DECAY_NO_OPT, OPT_GRAD_ACCUM, OPT_MODEL_KWARGS, OPT_GP,
       OPT_OPT_KWARGS, OPT_GRAD_CKPT, OPT_MEMORY_BUDGET, OPT_KEEP_ACTS };

static int parse_list(const char *opt, const char *arg, char **argv, int argc, double *out, int max, int *n)
{
    return cli_number_list(prog, opt, arg, argc, argv, out, max, n);
}

static int parse_double(const char *opt, const char *v, double *out) { return cli_double(prog, opt, v, out); }

/* The options that take a list (argparse nargs): a config's YAML list of
 * one becomes a word of comma-joined numbers. */
static const char *const list_flags[] = {"opt-betas", "lr-noise", "decay-milestones", "cutmix-minmax", "input-size",
                                         "mean", "std", "scale", "ratio", NULL};

/* -c/--config FILE: the words of train.py's YAML (cli/train_config.h) go
 * before the command line's own, so the command line wins. */
static int load_config(const char *path, const struct option *longs, int *argc, char ***argv, ConfigWords *cw)
{
    static const char *const map_flags[] = {"model-kwargs", "opt-kwargs", NULL};
    const TrainConfigSpec spec = {longs, list_flags, train_py_unimplemented, map_flags};
    CtErr err;
    int n;
    if (!(cw->words = train_config_read(path, &spec, &n, &err))) {
        fprintf(stderr, "%s: --config %s: %s\n", prog, path, err.msg);
        return -1;
    }
    char **w = calloc((size_t)*argc + (size_t)n + 1, sizeof *w);
    CT_ASSERT(w != NULL);
    w[0] = (*argv)[0];
    memcpy(w + 1, cw->words, (size_t)n * sizeof *w);
    memcpy(w + 1 + n, *argv + 1, (size_t)(*argc - 1) * sizeof *w);
    *argc += n;
    *argv = cw->argv = w;
    return 0;
}

static const TrainPyArg *find_arg(const TrainPyArg *t, const char *flag)
{
    for (; t->flag; t++)
        if (!strcmp(t->flag, flag))
            return t;
    return NULL;
}

static void print_help(void)
{
    fputs(usage, stdout);
    printf("Taken with no effect (train.py's flags for what ctimm does not have):\n");
    for (const TrainPyArg *u = train_py_no_effect; u->flag; u++)
        printf("  --%s: %s\n", u->flag, u->why);
    printf("Refused (train.py's flags ctimm-train does not implement; -c accepts them at train.py's default):\n");
    for (const TrainPyArg *u = train_py_unimplemented; u->flag; u++)
        printf("  --%s: %s\n", u->flag, u->why);
}

/* --list-flags: every long option, tab, what ctimm-train does with it
 * (tools/readme_train_flags.sh makes README's table of train.py's from it). */
static void list_flags_of(const struct option *longs)
{
    for (const struct option *o = longs; o->name; o++) {
        const TrainPyArg *n = find_arg(train_py_no_effect, o->name);
        printf(n ? "--%s\tno effect: %s\n" : "--%s\taccepted\n", o->name, n ? n->why : "");
    }
    for (const TrainPyArg *u = train_py_unimplemented; u->flag; u++)
        printf("--%s\trefused: %s\n", u->flag, u->why);
}

/* 0: go on; 1: done (--help); -1: bad arguments (a message was printed). */
static int parse_args(int argc, char **argv, TrainArgs *a, ConfigWords *cw)
{
    static const struct option longs[] = {
        {"data-dir", 1, 0, 'D'}, {"dataset", 1, 0, 'S'}, {"train-split", 1, 0, 'T'}, {"val-split", 1, 0, 'V'},
        {"model", 1, 0, 'm'}, {"num-classes", 1, 0, 'n'}, {"img-size", 1, 0, 'i'}, {"batch-size", 1, 0, 'b'},
        {"validation-batch-size", 1, 0, 'v'}, {"epochs", 1, 0, 'e'}, {"opt", 1, 0, 'o'}, {"lr", 1, 0, 'l'},
        {"lr-base", 1, 0, 'L'}, {"lr-base-size", 1, 0, 'Z'}, {"momentum", 1, 0, 'M'},
        {"weight-decay", 1, 0, 'w'}, {"opt-eps", 1, 0, 'E'}, {"opt-betas", 1, 0, 'B'}, {"sched", 1, 0, 's'}, {"warmup-epochs", 1, 0, 'W'},
        {"warmup-lr", 1, 0, 'R'}, {"min-lr", 1, 0, 'N'}, {"smoothing", 1, 0, 'x'}, {"drop", 1, 0, 'd'},
        {"drop-path", 1, 0, 'p'}, {"channels-last", 0, 0, 'c'}, {"seed", 1, 0, 'r'}, {"workers", 1, 0, 'j'},
        {"log-interval", 1, 0, 'I'}, {"device", 1, 0, 'G'}, {"output", 1, 0, 'O'}, {"help", 0, 0, 'h'},
        {"resume", 1, 0, 'U'}, {"no-resume-opt", 0, 0, 'P'}, {"initial-checkpoint", 1, 0, 'C'},
        {"checkpoint-hist", 1, 0, 'H'}, {"eval-metric", 1, 0, 'K'},
        {"sched-on-updates", 0, 0, OPT_SCHED_ON_UPDATES}, {"decay-epochs", 1, 0, OPT_DECAY_EPOCHS},
        {"decay-milestones", 1, 0, OPT_DECAY_MILESTONES}, {"decay-rate", 1, 0, OPT_DECAY_RATE},
        {"dr", 1, 0, OPT_DECAY_RATE}, {"patience-epochs", 1, 0, OPT_PATIENCE},
        {"cooldown-epochs", 1, 0, OPT_COOLDOWN}, {"warmup-prefix", 0, 0, OPT_WARMUP_PREFIX},
        {"lr-noise", 1, 0, OPT_NOISE}, {"lr-noise-pct", 1, 0, OPT_NOISE_PCT}, {"lr-noise-std", 1, 0, OPT_NOISE_STD},
        {"lr-cycle-mul", 1, 0, OPT_CYCLE_MUL}, {"lr-cycle-decay", 1, 0, OPT_CYCLE_DECAY},
        {"lr-cycle-limit", 1, 0, OPT_CYCLE_LIMIT}, {"lr-k-decay", 1, 0, OPT_K_DECAY},
        {"clip-grad", 1, 0, OPT_CLIP_GRAD}, {"clip-mode", 1, 0, OPT_CLIP_MODE}, {"model-ema", 0, 0, OPT_MODEL_EMA},
        {"model-ema-decay", 1, 0, OPT_MODEL_EMA_DECAY}, {"model-ema-warmup", 0, 0, OPT_MODEL_EMA_WARMUP},
        {"layer-decay", 1, 0, OPT_LAYER_DECAY}, {"layer-decay-min-scale", 1, 0, OPT_LAYER_DECAY_MIN},
        {"layer-decay-no-opt-scale", 1, 0, OPT_LAYER_DECAY_NO_OPT}, {"grad-accum-steps", 1, 0, OPT_GRAD_ACCUM},
        {"grad-checkpointing", 0, 0, OPT_GRAD_CKPT}, {"memory-budget", 1, 0, OPT_MEMORY_BUDGET},
        {"keep-activations", 0, 0, OPT_KEEP_ACTS},
        {"model-kwargs", 1, 0, OPT_MODEL_KWARGS}, {"gp", 1, 0, OPT_GP},
        {"opt-kwargs", 1, 0, OPT_OPT_KWARGS},
        {"mixup", 1, 0, OPT_MIXUP}, {"cutmix", 1, 0, OPT_CUTMIX}, {"cutmix-minmax", 1, 0, OPT_CUTMIX_MINMAX},
        {"mixup-prob", 1, 0, OPT_MIXUP_PROB}, {"mixup-switch-prob", 1, 0, OPT_MIXUP_SWITCH_PROB},
        {"mixup-mode", 1, 0, OPT_MIXUP_MODE}, {"mixup-off-epoch", 1, 0, OPT_MIXUP_OFF_EPOCH},
        {"reprob", 1, 0, OPT_REPROB}, {"remode", 1, 0, OPT_REMODE}, {"recount", 1, 0, OPT_RECOUNT},
        {"config", 1, 0, OPT_CONFIG},
        {"class-map", 1, 0, OPT_CLASS_MAP}, {"input-size", 1, 0, OPT_INPUT_SIZE}, {"crop-pct", 1, 0, OPT_CROP_PCT},
        {"mean", 1, 0, OPT_MEAN}, {"std", 1, 0, OPT_STD}, {"interpolation", 1, 0, OPT_INTERPOLATION},
        {"train-interpolation", 1, 0, OPT_TRAIN_INTERP}, {"no-aug", 0, 0, OPT_NO_AUG}, {"scale", 1, 0, OPT_SCALE},
        {"ratio", 1, 0, OPT_RATIO}, {"hflip", 1, 0, OPT_HFLIP}, {"vflip", 1, 0, OPT_VFLIP},
        {"color-jitter", 1, 0, OPT_COLOR_JITTER}, {"color-jitter-prob", 1, 0, OPT_COLOR_JITTER_PROB},
        {"grayscale-prob", 1, 0, OPT_GRAYSCALE_PROB}, {"gaussian-blur-prob", 1, 0, OPT_GAUSSIAN_BLUR_PROB},
        {"aa", 1, 0, OPT_AA}, {"train-crop-mode", 1, 0, OPT_TRAIN_CROP_MODE},
        {"aug-repeats", 1, 0, OPT_AUG_REPEATS}, {"experiment", 1, 0, OPT_EXPERIMENT},
        {"epoch-repeats", 1, 0, OPT_EPOCH_REPEATS}, {"lr-base-scale", 1, 0, OPT_LR_BASE_SCALE},
        {"amp", 0, 0, OPT_AMP}, {"amp-dtype", 1, 0, OPT_AMP_DTYPE}, {"bce-loss", 0, 0, OPT_BCE_LOSS},
        {"bce-target-thresh", 1, 0, OPT_BCE_THRESH}, {"bce-sum", 0, 0, OPT_BCE_SUM},
        {"bce-pos-weight", 1, 0, OPT_BCE_POS_WEIGHT}, {"aug-splits", 1, 0, OPT_AUG_SPLITS},
        {"jsd-loss", 0, 0, OPT_JSD_LOSS}, {"split-bn", 0, 0, OPT_SPLIT_BN}, {"resplit", 0, 0, OPT_RESPLIT},
        {"bn-momentum", 1, 0, OPT_BN_MOMENTUM}, {"bn-eps", 1, 0, OPT_BN_EPS}, {"recovery-interval", 1, 0, OPT_RECOVERY},
        {"start-epoch", 1, 0, OPT_START_EPOCH}, {"nproc-per-node", 1, 0, OPT_NPROC},
        {"bucket-cap-mb", 1, 0, OPT_BUCKET_CAP}, {"dist-bn", 1, 0, OPT_DIST_BN},
        {"dist-check-params", 0, 0, OPT_DIST_CHECK}, {"sync-bn", 0, 0, OPT_SYNC_BN},
        {"dist-timeout", 1, 0, OPT_DIST_TIMEOUT}, {"pretrained", 0, 0, OPT_PRETRAINED},
        {"pretrained-path", 1, 0, OPT_PRETRAINED_PATH}, {"in-chans", 1, 0, OPT_IN_CHANS},
        {"torchcompile", 2, 0, OPT_NO_EFFECT}, {"torchcompile-mode", 1, 0, OPT_NO_EFFECT + 1},
        {"fuser", 1, 0, OPT_NO_EFFECT + 2}, {"torchscript", 0, 0, OPT_NO_EFFECT + 3},
        {"pin-mem", 0, 0, OPT_NO_EFFECT + 4}, {"no-prefetcher", 0, 0, OPT_NO_EFFECT + 5},
        {"use-multi-epochs-loader", 0, 0, OPT_NO_EFFECT + 6}, {"synchronize-step", 0, 0, OPT_NO_EFFECT + 7},
        {"drop-connect", 1, 0, OPT_NO_EFFECT + 8},
        {"list-flags", 0, 0, OPT_LIST_FLAGS}, {"head-init-scale", 1, 0, OPT_HEAD_INIT_SCALE},
        {"head-init-bias", 1, 0, OPT_HEAD_INIT_BIAS},
        {"train-num-samples", 1, 0, OPT_TRAIN_NUM_SAMPLES}, {"val-num-samples", 1, 0, OPT_VAL_NUM_SAMPLES},
        {"input-img-mode", 1, 0, OPT_INPUT_IMG_MODE}, {"val-interval", 1, 0, OPT_VAL_INTERVAL},
        {"tta", 1, 0, OPT_TTA}, {"input-key", 1, 0, OPT_INPUT_KEY}, {"target-key", 1, 0, OPT_TARGET_KEY},
        {0, 0, 0, 0}};
    *a = train_args_default();
    /* -vb is timm's short form: getopt_long_only would take it, but then
     * every long option could be abbreviated; rewrite just this one. */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-vb"))
            argv[i] = "--validation-batch-size";
        else if (!strcmp(argv[i], "-c")) /* timm's -c FILE */
            argv[i] = "--config";
    for (int i = 1; i < argc; i++)
        for (const TrainPyArg *u = train_py_unimplemented; u->flag; u++)
            if (!strncmp(argv[i], "--", 2) && !strncmp(argv[i] + 2, u->flag, strlen(u->flag)) &&
                (argv[i][2 + strlen(u->flag)] == '\0' || argv[i][2 + strlen(u->flag)] == '=')) {
                fprintf(stderr, "%s: --%s (timm's train.py flag) is not implemented in ctimm-train: %s\n", prog,
                        u->flag, u->why);
                return -1;
            }
    for (int i = 1; i < argc; i++) /* the config's words go first: the command line overrides them */
        if (!strncmp(argv[i], "--config", 8) && (argv[i][8] == '=' || (!argv[i][8] && i + 1 < argc))) {
            if (load_config(argv[i][8] ? argv[i] + 9 : argv[i + 1], longs, &argc, &argv, cw))
                return -1;
            break;
        }
    opterr = 0;
    int c, idx;
    while ((c = getopt_long(argc, argv, ":b:j:h", longs, &idx)) != -1) {
        double d;
        int bad = 0;
        if (c >= OPT_NO_EFFECT && c < OPT_NO_EFFECT_END) {
            if (!optarg || *optarg) /* '' is train.py's "not given" (args.yaml's fuser: '') */
                printf("%s: --%s: no effect: %s\n", prog, longs[idx].name,
                       find_arg(train_py_no_effect, longs[idx].name)->why);
            continue;
        }
        switch (c) {
        case 'D': a->data_dir = optarg; break;
        case 'S': a->dataset = optarg; break;
        case 'T': a->train_split = optarg; break;
        case 'V': a->val_split = optarg; break;
        case 'm': a->model = optarg; break;
        case 'o': a->opt = optarg; break;
        case 's': a->sched = optarg; break;
        case 'G': a->device = optarg; break;
        case 'O': a->output = optarg; break;
        case 'c': a->channels_last = 1; break;
        case 'U': a->resume = optarg; break;
        case 'P': a->no_resume_opt = 1; break;
        case 'C': a->initial_checkpoint = optarg; break;
        case OPT_GP: a->gp = optarg; break;
        case 'K': a->eval_metric = optarg; break;
        case 'H': bad = cli_int(prog, "--checkpoint-hist", optarg, 1, 64, &a->checkpoint_hist); break;
        case 'n': bad = cli_int(prog, "--num-classes", optarg, 1, 1 << 20, &a->num_classes); break;
        case 'i': bad = cli_int(prog, "--img-size", optarg, 8, 4096, &a->img_size); break;
        case 'b': bad = cli_int(prog, "--batch-size", optarg, 1, 1 << 16, &a->batch_size); break;
        case 'v': bad = cli_int(prog, "--validation-batch-size", optarg, 1, 1 << 16, &a->val_batch_size); break;
        case 'e': bad = cli_int(prog, "--epochs", optarg, 1, 100000, &a->epochs); break;
        case 'j': bad = cli_int(prog, "--workers", optarg, 1, 256, &a->workers); break;
        case 'I': bad = cli_int(prog, "--log-interval", optarg, 1, 1 << 30, &a->log_interval); break;
        case 'r': bad = cli_int(prog, "--seed", optarg, 0, 1 << 30, &a->seed); break;
        case 'l':
            if (!(bad = parse_double("lr", optarg, &a->lr)) && a->lr < 0) { /* a negative one would mean "not given" */
                fprintf(stderr, "%s: --lr %s: must be >= 0\n", prog, optarg);
                bad = 1;
            }
            break;
        case 'L': bad = parse_double("lr-base", optarg, &a->lr_base); break;
        case 'Z': bad = parse_double("lr-base-size", optarg, &a->lr_base_size); break;
        case 'M': bad = parse_double("momentum", optarg, &a->momentum); break;
        case 'w': bad = parse_double("weight-decay", optarg, &a->weight_decay); break;
        case 'E':
            if (!(bad = parse_double("opt-eps", optarg, &a->opt_eps)) && a->opt_eps < 0) {
                fprintf(stderr, "%s: --opt-eps %s: must be >= 0\n", prog, optarg);
                bad = 1;
            }
            break;
        case 'B': bad = parse_list("opt-betas", optarg, argv, argc, a->opt_betas, 2, &a->n_betas); break;
        case 'W': bad = parse_double("warmup-epochs", optarg, &a->warmup_epochs); break;
        case 'R': bad = parse_double("warmup-lr", optarg, &a->warmup_lr); break;
        case 'N': bad = parse_double("min-lr", optarg, &a->min_lr); break;
        case 'x': bad = parse_double("smoothing", optarg, &d) || (a->smoothing = d, d < 0 || d >= 1); break;
        case 'd': bad = parse_double("drop", optarg, &d) || (a->drop = d, d < 0 || d >= 1); break;
        case 'p': bad = parse_double("drop-path", optarg, &d) || (a->drop_path = d, d < 0 || d >= 1); break;
        case OPT_SCHED_ON_UPDATES: a->sch.on_updates = 1; break;
        case OPT_WARMUP_PREFIX: a->sch.warmup_prefix = 1; break;
        case OPT_DECAY_EPOCHS: bad = parse_double("decay-epochs", optarg, &a->sch.decay_epochs); break;
        case OPT_DECAY_RATE: bad = parse_double("decay-rate", optarg, &a->sch.decay_rate); break;
        case OPT_NOISE_PCT: bad = parse_double("lr-noise-pct", optarg, &a->sch.noise_pct); break;
        case OPT_NOISE_STD: bad = parse_double("lr-noise-std", optarg, &a->sch.noise_std); break;
        case OPT_CYCLE_MUL: bad = parse_double("lr-cycle-mul", optarg, &a->sch.cycle_mul); break;
        case OPT_CYCLE_DECAY: bad = parse_double("lr-cycle-decay", optarg, &a->sch.cycle_decay); break;
        case OPT_K_DECAY: bad = parse_double("lr-k-decay", optarg, &a->sch.k_decay); break;
        case OPT_CLIP_GRAD:
            if (!(bad = parse_double("clip-grad", optarg, &a->clip_grad)) && a->clip_grad < 0) {
                fprintf(stderr, "%s: --clip-grad must not be negative\n", prog);
                bad = 1;
            }
            break;
        case OPT_CLIP_MODE: a->clip_mode = optarg; break;
        case OPT_LAYER_DECAY:
            if (!(bad = parse_double("layer-decay", optarg, &a->layer_decay)) && a->layer_decay < 0) {
                fprintf(stderr, "%s: --layer-decay must not be negative\n", prog);
                bad = 1;
            }
            break;
        case OPT_LAYER_DECAY_MIN: bad = parse_double("layer-decay-min-scale", optarg, &a->layer_decay_min_scale); break;
        case OPT_LAYER_DECAY_NO_OPT:
            bad = parse_double("layer-decay-no-opt-scale", optarg, &a->layer_decay_no_opt_scale);
            break;
        case OPT_MODEL_EMA: a->model_ema = 1; break;
        case OPT_MODEL_EMA_WARMUP: a->model_ema_warmup = 1; break;
        case OPT_MODEL_EMA_DECAY:
            if (!(bad = parse_double("model-ema-decay", optarg, &a->model_ema_decay)) &&
                (a->model_ema_decay < 0 || a->model_ema_decay > 1)) {
                fprintf(stderr, "%s: --model-ema-decay must be in [0, 1]\n", prog);
                bad = 1;
            }
            break;
        case OPT_PATIENCE: bad = cli_int(prog, "--patience-epochs", optarg, 0, 1 << 20, &a->sch.patience_epochs); break;
        case OPT_COOLDOWN: bad = cli_int(prog, "--cooldown-epochs", optarg, 0, 1 << 20, &a->sch.cooldown_epochs); break;
        case OPT_CYCLE_LIMIT: bad = cli_int(prog, "--lr-cycle-limit", optarg, 0, 1 << 20, &a->sch.cycle_limit); break;
        case OPT_NOISE: bad = parse_list("lr-noise", optarg, argv, argc, a->sch.noise, 2, &a->sch.n_noise); break;
        case OPT_DECAY_MILESTONES: {
            double m[SCHED_MAX_MILESTONES];
            bad = parse_list("decay-milestones", optarg, argv, argc, m, SCHED_MAX_MILESTONES, &a->sch.n_milestones);
            for (int k = 0; !bad && k < a->sch.n_milestones; k++)
                if (m[k] != (int)m[k]) {
                    fprintf(stderr, "%s: --decay-milestones expects whole numbers\n", prog);
                    bad = 1;
                } else {
                    a->sch.decay_milestones[k] = (int)m[k];
                }
            break;
        }
        case OPT_MIXUP: bad = parse_double("mixup", optarg, &a->mixup); break;
        case OPT_CUTMIX: bad = parse_double("cutmix", optarg, &a->cutmix); break;
        case OPT_CUTMIX_MINMAX:
            bad = parse_list("cutmix-minmax", optarg, argv, argc, a->cutmix_minmax, 2, &a->n_minmax);
            break;
        case OPT_MIXUP_PROB: bad = parse_double("mixup-prob", optarg, &a->mixup_prob); break;
        case OPT_MIXUP_SWITCH_PROB: bad = parse_double("mixup-switch-prob", optarg, &a->mixup_switch_prob); break;
        case OPT_MIXUP_MODE: a->mixup_mode = optarg; break;
        case OPT_MIXUP_OFF_EPOCH:
            bad = cli_int(prog, "--mixup-off-epoch", optarg, 0, 1 << 20, &a->mixup_off_epoch);
            break;
        case OPT_REPROB: bad = parse_double("reprob", optarg, &a->reprob); break;
        case OPT_REMODE: a->remode = optarg; break;
        case OPT_RECOUNT: bad = cli_int(prog, "--recount", optarg, 1, 1000, &a->recount); break;
        case OPT_CONFIG: a->config = optarg; break;
        case OPT_CLASS_MAP: a->class_map = optarg; break;
        case OPT_INTERPOLATION: a->interpolation = optarg; break;
        case OPT_TRAIN_INTERP: a->train_interpolation = optarg; break;
        case OPT_AA: a->aa = optarg; break;
        case OPT_TRAIN_CROP_MODE: a->train_crop_mode = optarg; break;
        case OPT_AUG_REPEATS: bad = parse_double("aug-repeats", optarg, &a->aug_repeats); break;
        case OPT_EXPERIMENT: a->experiment = optarg; break;
        case OPT_LR_BASE_SCALE: a->lr_base_scale = optarg; break;
        case OPT_NO_AUG: a->no_aug = 1; break;
        case OPT_INPUT_SIZE: bad = parse_list("input-size", optarg, argv, argc, a->input_size, 3, &a->n_input_size); break;
        case OPT_MEAN: bad = parse_list("mean", optarg, argv, argc, a->mean, 4, &a->n_mean); break;
        case OPT_STD: bad = parse_list("std", optarg, argv, argc, a->std, 4, &a->n_std); break;
        case OPT_SCALE: bad = parse_list("scale", optarg, argv, argc, a->scale, 2, &a->n_scale); break;
        case OPT_RATIO: bad = parse_list("ratio", optarg, argv, argc, a->ratio, 2, &a->n_ratio); break;
        case OPT_CROP_PCT:
            if (!(bad = parse_double("crop-pct", optarg, &a->crop_pct)) && !(a->crop_pct > 0)) {
                fprintf(stderr, "%s: --crop-pct %s: must be > 0\n", prog, optarg);
                bad = 1;
            }
            break;
        case OPT_HFLIP: bad = parse_double("hflip", optarg, &a->hflip); break;
        case OPT_VFLIP: bad = parse_double("vflip", optarg, &a->vflip); break;
        case OPT_COLOR_JITTER: bad = parse_double("color-jitter", optarg, &a->color_jitter); break;
        case OPT_COLOR_JITTER_PROB: bad = parse_double("color-jitter-prob", optarg, &a->color_jitter_prob); break;
        case OPT_GRAYSCALE_PROB: bad = parse_double("grayscale-prob", optarg, &a->grayscale_prob); break;
        case OPT_GAUSSIAN_BLUR_PROB: bad = parse_double("gaussian-blur-prob", optarg, &a->gaussian_blur_prob); break;
        case OPT_EPOCH_REPEATS: bad = parse_double("epoch-repeats", optarg, &a->epoch_repeats); break;
        case OPT_AMP: a->amp = 1; break;
        case OPT_AMP_DTYPE: a->amp_dtype = optarg; break;
        case OPT_BCE_LOSS: a->bce_loss = 1; break;
        case OPT_BCE_THRESH:
            if (!(bad = parse_double("bce-target-thresh", optarg, &a->bce_target_thresh)) &&
                !(a->bce_target_thresh >= 0 && a->bce_target_thresh < 1)) {
                fprintf(stderr, "%s: --bce-target-thresh must be in [0, 1)\n", prog);
                bad = 1;
            }
            break;
        case OPT_BCE_SUM: a->bce_sum = 1; break;
        case OPT_AUG_SPLITS: bad = cli_int(prog, "--aug-splits", optarg, 0, 1 << 10, &a->aug_splits); break;
        case OPT_JSD_LOSS: a->jsd_loss = 1; break;
        case OPT_SPLIT_BN: a->split_bn = 1; break;
        case OPT_RESPLIT: a->resplit = 1; break;
        case OPT_BN_MOMENTUM:
            if (!(bad = parse_double("bn-momentum", optarg, &a->bn_momentum)) && !(a->bn_momentum > 0)) {
                fprintf(stderr, "%s: --bn-momentum %s: must be in (0, 1]\n", prog, optarg);
                bad = 1;
            }
            break;
        case OPT_BN_EPS:
            if (!(bad = parse_double("bn-eps", optarg, &a->bn_eps)) && !(a->bn_eps > 0)) {
                fprintf(stderr, "%s: --bn-eps %s: must be > 0\n", prog, optarg);
                bad = 1;
            }
            break;
        case OPT_BCE_POS_WEIGHT: /* 0 would drop every positive term; the op reads 0 as "none" */
            if (!(bad = parse_double("bce-pos-weight", optarg, &a->bce_pos_weight)) && !(a->bce_pos_weight > 0)) {
                fprintf(stderr, "%s: --bce-pos-weight %s: must be > 0\n", prog, optarg);
                bad = 1;
            }
            break;
        case OPT_RECOVERY: bad = cli_int(prog, "--recovery-interval", optarg, 0, 1 << 30, &a->recovery_interval); break;
        case OPT_START_EPOCH: bad = cli_int(prog, "--start-epoch", optarg, 0, 1 << 20, &a->start_epoch); break;
        case OPT_NPROC: bad = cli_int(prog, "--nproc-per-node", optarg, 1, 4096, &a->nproc_per_node); break;
        case OPT_BUCKET_CAP:
            if (!(bad = parse_double("bucket-cap-mb", optarg, &a->bucket_cap_mb)) && !(a->bucket_cap_mb > 0)) {
                fprintf(stderr, "%s: --bucket-cap-mb must be above 0\n", prog);
                bad = 1;
            }
            break;
        case OPT_DIST_TIMEOUT:
            if (!(bad = parse_double("dist-timeout", optarg, &a->dist_timeout)) && !(a->dist_timeout > 0)) {
                fprintf(stderr, "%s: --dist-timeout must be above 0 seconds\n", prog);
                bad = 1;
            }
            break;
        case OPT_DIST_BN: a->dist_bn = optarg; break;
        case OPT_DIST_CHECK: a->dist_check_params = 1; break;
        case OPT_SYNC_BN: a->sync_bn = 1; break;
        case OPT_PRETRAINED: a->pretrained = 1; break;
        case OPT_LIST_FLAGS: list_flags_of(longs); return 1;
        case OPT_HEAD_INIT_SCALE:
            bad = parse_double("head-init-scale", optarg, &a->head_init_scale);
            a->has_head_init_scale = 1;
            break;
        case OPT_HEAD_INIT_BIAS:
            bad = parse_double("head-init-bias", optarg, &a->head_init_bias);
            a->has_head_init_bias = 1;
            break;
        case OPT_PRETRAINED_PATH: a->pretrained_path = optarg; break;
        case OPT_IN_CHANS: bad = cli_int(prog, "--in-chans", optarg, 1, 1 << 16, &a->in_chans); break;
        case OPT_TRAIN_NUM_SAMPLES:
            bad = cli_int(prog, "--train-num-samples", optarg, 1, INT_MAX, &a->train_num_samples);
            break;
        case OPT_VAL_NUM_SAMPLES: bad = cli_int(prog, "--val-num-samples", optarg, 1, INT_MAX, &a->val_num_samples); break;
        case OPT_INPUT_IMG_MODE: a->input_img_mode = optarg; break;
        case OPT_VAL_INTERVAL: bad = cli_int(prog, "--val-interval", optarg, 1, INT_MAX, &a->val_interval); break;
        case OPT_TTA: bad = cli_int(prog, "--tta", optarg, 0, 1 << 16, &a->tta); break;
        case OPT_INPUT_KEY: a->input_key = optarg; break;
        case OPT_TARGET_KEY: a->target_key = optarg; break;
        case OPT_MODEL_KWARGS:
            bad = cli_model_kwargs(prog, optarg, argc, argv, a->model_kwargs, &a->n_model_kwargs);
            break;
        case OPT_OPT_KWARGS:
            bad = cli_kwargs(prog, "--opt-kwargs", CT_MAX_OPT_KWARGS, optarg, argc, argv, a->opt_kwargs,
                             &a->n_opt_kwargs);
            break;
        case OPT_GRAD_CKPT: a->grad_checkpointing = 1; break;
        case OPT_KEEP_ACTS: a->keep_activations = 1; break;
        case OPT_MEMORY_BUDGET: bad = cli_bytes(prog, "memory-budget", optarg, &a->memory_budget); break;
        case OPT_GRAD_ACCUM: /* train.py: max(1, N) */
            if (!(bad = cli_int(prog, "--grad-accum-steps", optarg, -(1 << 30), 1 << 20, &a->grad_accum_steps)) &&
                a->grad_accum_steps < 1)
                a->grad_accum_steps = 1;
            break;
        case 'h': print_help(); return 1;
        case ':': fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[optind - 1]); return -1;
        default: fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind - 1]); return -1;
        }
        if (bad) {
            if (c == 'x' || c == 'd' || c == 'p')
                fprintf(stderr, "%s: --%s must be in [0, 1)\n", prog, longs[idx].name);
            return -1;
        }
    }
    /* train.py's '' means not given for these: their default, read as false */
    const char **unset_if_empty[] = {&a->data_dir, &a->dataset, &a->class_map, &a->interpolation, &a->lr_base_scale,
                                     &a->experiment, &a->output, &a->resume, &a->initial_checkpoint,
                                     &a->pretrained_path, &a->input_img_mode, &a->input_key, &a->target_key};
    for (size_t i = 0; i < sizeof unset_if_empty / sizeof *unset_if_empty; i++)
        if (*unset_if_empty[i] && !**unset_if_empty[i])
            *unset_if_empty[i] = NULL;
    CtErr err;
    if (train_args_check(a, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return -1;
    }
    return cli_positional(prog, argc, argv, &a->data_dir);
}

/* The trainer's report on stdout: log lines, and a progress bar under
 * them on a terminal. */
typedef struct Console {
    Progress bar;
    int tty;     /* progress_begin's: -1 decides by isatty */
    int in_pass; /* a bar is up: lines go above it */
} Console;

static void console_log(void *ctx, const char *line)
{
    Console *c = ctx;
    if (c->in_pass)
        progress_log(&c->bar, "%s", line);
    else
        fputs(line, stdout);
}

static void console_begin(void *ctx, const char *label, size_t total)
{
    Console *c = ctx;
    progress_begin(&c->bar, label, total, c->tty);
    c->in_pass = 1;
}

static void console_update(void *ctx, size_t done) { progress_update(&((Console *)ctx)->bar, done); }

static void console_end(void *ctx)
{
    Console *c = ctx;
    progress_end(&c->bar);
    c->in_pass = 0;
}

/* The run: everything after the arguments. 0, or the exit status. */
static int train(const TrainArgs *a, CtDist *dist)
{
    CtErr err = {{0}};
    const ModelEntry *m = cli_model(prog, a->model);
    if (!m)
        return 2;
    const CtBackend *be = cli_backend(prog, a->device, &err);
    if (!be) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    if (a->nproc_per_node && dist_launched() && a->nproc_per_node != dist_world_size(dist)) {
        fprintf(stderr, "%s: --nproc-per-node %d, but the launcher started %d ranks\n", prog, a->nproc_per_node,
                dist_world_size(dist));
        return 2;
    }
    /* mpirun gives every rank a pty, not the user's: no bar there */
    Console console = {.tty = dist_world_size(dist) > 1 ? 0 : -1};
    TrainReport rep = {&console, console_log, console_begin, console_update, console_end};
    Trainer t;
    if (trainer_open(&t, a, m, be, dist, cli_program_options(), &rep, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 1;
    }
    cli_catch_interrupts(); /* from here Ctrl-C stops the run after its step, with a recovery checkpoint */
    int rc = trainer_run(&t, &err);
    if (rc == -1)
        fprintf(stderr, "%s: %s\n", prog, err.msg);
    trainer_close(&t);
    return rc == CT_INTERRUPTED ? 130 : rc ? 1 : 0;
}

static void config_free(ConfigWords *cw)
{
    train_config_free(cw->words);
    free(cw->argv);
}

/* Joins the ranks (a world of one when not launched as several), trains,
 * and leaves: together after a run every rank finished or stopped at the
 * same step; else at once, ending the other ranks (they may be waiting for
 * this one), with this rank's message out first. */
static int run_ranks(int argc, char **argv, const TrainArgs *a)
{
    CtErr err = {{0}};
    CtDist *dist;
    if (a->nproc_per_node > 1 && !dist_launched()) {
        train_launch(argc, argv, a->nproc_per_node, &err);
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    if (dist_init(&dist, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        if (dist)
            dist_abort(dist, 2);
        return 2;
    }
    if (dist_set_timeout(dist, a->dist_timeout, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        dist_abort(dist, 2);
    }
    /* A rank killed mid-collective leaves its sockets closed, and Open MPI's
     * TCP transport writes to them with writev: SIGPIPE's default action
     * would end this rank at once, silently, before the watchdog or a failed
     * collective could say why. Ignored, the write fails with EPIPE and the
     * rank ends with its line. Host compiles give their children the
     * default back. */
    if (dist_world_size(dist) > 1)
        signal(SIGPIPE, SIG_IGN);
    static char rank_prog[64];
    if (dist_rank(dist) > 0) { /* timm: the primary rank alone logs */
        snprintf(rank_prog, sizeof rank_prog, "ctimm-train (rank %d)", dist_rank(dist));
        prog = rank_prog;
        if (!freopen("/dev/null", "w", stdout))
            fprintf(stderr, "%s: cannot quiet this rank's log: %s\n", prog, strerror(errno));
    } else if (dist_world_size(dist) > 1) {
        setvbuf(stdout, NULL, _IOLBF, 0); /* the launcher's pipe: lines as they come */
    }
    int rc = train(a, dist);
    if (rc != 0 && rc != 130 && dist_world_size(dist) > 1)
        dist_abort(dist, rc);
    dist_finish(dist);
    return rc;
}

int main(int argc, char **argv)
{
    TrainArgs a;
    ConfigWords cw = {0};
    cli_init_signals(prog);
    int parsed = parse_args(argc, argv, &a, &cw);
    if (!parsed && !strcmp(a.device, "auto")) { /* the default: the GPU where one can run, else the cpu backend */
        char why[512];
        a.device = cuda_backend_usable(why, sizeof why) ? "cuda" : "cpu";
    }
    int rc = parsed ? (parsed > 0 ? 0 : 2) : run_ranks(argc, argv, &a);
    config_free(&cw);
    return rc;
}
