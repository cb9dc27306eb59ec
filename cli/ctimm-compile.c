/* ctimm-compile: builds a model's graph, verifies it and prints a summary
 * (and with --dump-ir the whole IR). With --train the graph is the whole
 * training step: forward, loss, backward and optimizer update. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/common.h"
#include "cli/graph_dot.h"
#include "codegen/cuda/roofline.h"
#include "codegen/host_compile.h"
#include "codegen/nvrtc.h"
#include "codegen/render.h"
#include "ir/buf.h"
#include "passes/fuse.h"
#include "passes/pipeline.h"
#include "passes/plan.h"
#include "passes/stats.h"
#include "runtime/backend.h"
#include "runtime/state.h"

static const char *const usage =
    "usage: ctimm-compile --model NAME [--img-size N] [--batch-size N] [--num-classes N] [--train] [--dump-ir]\n"
    "                     [--amp [--amp-dtype float16|bfloat16]] [--channels-last] [--passes none|PASS,...]\n"
    "                     [--dump-ir-after build|PASS] [--dump-kernels c|cuda] [--dot FILE.dot]\n"
    "                     [--compile host|cuda] [--cache-stats] [--no-cache] [--dump-program cpu|ref|cuda] [--sm 90]\n"
    "                     [--roofline h200|h100 [--tf32]]\n"
    "                     [--opt sgd|momentum|adamw|...] [--smoothing 0.1] [--save-weights FILE [--seed N]]\n"
    "                     [--grad-checkpointing] [--memory-budget BYTES] [--keep-activations]\n"
    "       ctimm-compile --list-models [FILTER]\n";

static void print_name(const ModelEntry *m, void *ctx) { printf("%s\n", m->name); }

/* The model's initial weights by timm's init scheme, as a checkpoint that
 * timm's load_state_dict accepts. */
/* The step's peak as the plan knows it before anything runs (what
 * ctimm-bench calls the planned peak): the resident state, the arena where
 * it is fullest (sp: its live values; workspace: the backward's and the
 * optimizer's temporaries and what fragmentation leaves unused) and the
 * inputs and outputs. */
static void print_peak(const Graph *g, const MemPlan *plan, const PlanSplit *sp, int training, CtBuf *out)
{
    const double mib = 1024.0 * 1024.0;
    size_t opt_state = 0;
    for (int k = 0; k < g->nstate; k++) {
        const Value *v = &g->values[g->state[k]];
        if (v->role == CT_ROLE_STATE)
            opt_state += (size_t)shape_numel(&v->type.shape) * ct_dtype_size(v->type.dtype);
    }
    size_t total = plan_peak_bytes(plan);
    buf_printf(out, "memory peak (planned): %.1f MiB: params %.1f, buffers %.1f, ", total / mib,
               plan->param_bytes / mib, (plan->state_bytes - opt_state) / mib);
    if (training)
        buf_printf(out, "optimizer state %.1f, ", opt_state / mib);
    buf_printf(out, "activations %.1f, ", sp->activations / mib);
    if (training)
        buf_printf(out, "gradients %.1f, ", (sp->param_grads + sp->act_grads) / mib);
    buf_printf(out, "workspace %.1f, inputs and outputs %.1f MiB\n", (plan->arena_bytes - sp->activations -
               sp->param_grads - sp->act_grads) / mib, (plan->input_bytes + plan->output_bytes) / mib);
}

static int save_weights(const ModelEntry *m, const Graph *g, const char *path, int seed)
{
    CtState st;
    CtErr err;
    char seed_s[32];
    snprintf(seed_s, sizeof seed_s, "%d", seed);
    const char *keys[] = {"model", "seed", "format"}, *vals[] = {m->name, seed_s, "pt"};
    state_create(&st, g);
    state_init(&st, (uint64_t)seed);
    int rc = state_save(&st, path, keys, vals, 3, &err);
    state_free(&st);
    if (rc) {
        fprintf(stderr, "ctimm-compile: %s\n", err.msg);
        return 1;
    }
    printf("weights: %s\n", path);
    return 0;
}

/* timm's optimizer names (optim_defaults) with train.py's defaults on top:
 * momentum 0.9, weight decay 2e-5 (0.05 for AdamW). */
static int optim_from_name(const char *name, const ModelEntry *m, OptimSpec *o)
{
    if (optim_defaults(name, o))
        return -1;
    o->weight_decay = o->kind == CT_OPT_ADAMW ? 0.05 : 2e-5;
    o->max_lr = 0.1; /* train.py's --lr-base: corrected weight decay's kernels */
    o->no_weight_decay = m->no_weight_decay;
    return 0;
}

/* What ctimm-compile does with the fused graph besides counting. */
typedef struct FuseOut {
    const char *dump_after, *dump_kernels, *dot, *compile, *title;
    int sm, cache_stats, no_cache;
} FuseOut;

/* --compile: the graph's elementwise kernels as translation units
 * (codegen/units.h) compiled in parallel through the kernel cache: host C
 * by cc, or CUDA C by NVRTC for sm_<sm>. The cache counts units. */
static int compile_kernels(const Graph *g, const FusePlan *fp, const FuseOut *o, CtBuf *out, CtErr *err)
{
    int cuda = !strcmp(o->compile, "cuda"), nk = fp->kernels_after, rc = -1;
    KirKernel *k = calloc((size_t)nk + 1, sizeof *k);
    KernelUnits units;
    KernelCache cache;
    CT_ASSERT(k != NULL);
    for (int l = 0; l < nk; l++)
        if (kir_lowerable(fp, l) && kir_lower(g, fp, l, (KirOptions){KIR_F32, 1}, &k[l], err))
            goto free_kernels;
    units_make(k, nk, UNIT_LOOPS, cuda, &units);
    if (cache_open(&cache, &(CacheOptions){.no_cache = o->no_cache, .memory_fallback = 1}, err))
        goto free_units;
    if (!cuda) {
        HostCompiler hc;
        HostModule *mods = calloc((size_t)units.n + 1, sizeof *mods);
        CT_ASSERT(mods != NULL);
        int have_cc = host_compiler_init(&hc, err) == 0;
        hc.stop = cli_catch_interrupts(); /* Ctrl-C ends cc too, and removes its files */
        if (have_cc && host_compile_units(&hc, &cache, &units, mods, err) == 0) {
            buf_printf(out, "compiled: %d host kernels, %d distinct (%s) in %d translation unit%s\n", units.nkernels,
                       units.ndistinct, hc.version, units.n, units.n == 1 ? "" : "s");
            for (int j = 0; j < units.n; j++)
                host_module_close(&mods[j]);
            rc = 0;
        }
        free(mods);
    } else {
#ifdef CTIMM_HAVE_NVRTC
        NvrtcCompiler nc;
        NvrtcImage *imgs = calloc((size_t)units.n + 1, sizeof *imgs);
        CT_ASSERT(imgs != NULL);
        if (nvrtc_init(&nc, err) == 0 && nvrtc_compile_units(&nc, &cache, &units, o->sm, imgs, err) == 0) {
            size_t bytes = 0;
            for (int j = 0; j < units.n; j++)
                bytes += imgs[j].size;
            /* every unit has the same kind: the architecture is picked by sm alone */
            buf_printf(out,
                       "compiled: %d CUDA kernels, %d distinct, for sm_%d (%s, %zu bytes, NVRTC %s) in %d translation "
                       "unit%s\n",
                       units.nkernels, units.ndistinct, o->sm, imgs[0].is_ptx ? "PTX" : "cubin", bytes, nc.version,
                       units.n, units.n == 1 ? "" : "s");
            rc = 0;
        }
        free(imgs);
#else
        ct_fail(err, "--compile cuda: this build has no NVRTC (the CUDA toolkit was not found at configure time)");
#endif
    }
    int warned = 0;
    cache_warn_disk(&cache, &warned, stderr);
    if (rc == 0 && o->cache_stats) {
        CacheStats st = cache_stats(&cache);
        buf_printf(out, "kernel cache: %s: %llu compiled, %llu from memory, %llu from disk, %llu corrupt entries "
                        "replaced (one entry per translation unit)\n",
                   cache.dir ? cache.dir : cache.no_cache ? "(--no-cache)" : "(in memory)",
                   (unsigned long long)st.compiles,
                   (unsigned long long)st.mem_hits, (unsigned long long)st.disk_hits, (unsigned long long)st.corrupt);
    }
    cache_close(&cache);
free_units:
    units_free(&units);
free_kernels:
    for (int l = 0; l < nk; l++)
        kir_free(&k[l]);
    free(k);
    return rc;
}

/* Writes --dot FILE: the graph with its fused kernels as clusters. */
static int write_dot(const Graph *g, const FusePlan *fp, const FuseOut *o, CtErr *err)
{
    CtBuf b = {0};
    graph_dot(g, fp, o->title, &b);
    FILE *f = fopen(o->dot, "w");
    int ok = f && fwrite(b.s, 1, b.len, f) == b.len;
    if (f && fclose(f))
        ok = 0;
    buf_free(&b);
    return ok ? 0 : ct_fail(err, "--dot %s: cannot write the file", o->dot);
}

/* The fusion analysis on the final graph: the kernel counts for the
 * summary, with --dump-ir-after fuse the graph and its steps, with
 * --dump-kernels the generated source of its elementwise kernels, --dot the
 * picture, --compile the kernels themselves. */
static int report_fusion(const Graph *g, const FuseOut *o, CtBuf *out, int *before, int *after, CtErr *err)
{
    const char *dump_after = o->dump_after, *dump_kernels = o->dump_kernels;
    FusePlan fp;
    int nk;
    if (fuse_plan(g, &fp, err))
        return -1;
    if (dump_after && !strcmp(dump_after, "fuse")) {
        graph_dump(g, out);
        fuse_dump(g, &fp, out);
    }
    if ((dump_kernels && render_graph(g, &fp, !strcmp(dump_kernels, "cuda"), out, &nk, err)) ||
        (o->dot && write_dot(g, &fp, o, err)) || (o->compile && compile_kernels(g, &fp, o, out, err))) {
        fuse_free(&fp);
        return -1;
    }
    *before = fp.kernels_before;
    *after = fp.kernels_after;
    fuse_free(&fp);
    return 0;
}

int main(int argc, char **argv)
{
    const char *prog = "ctimm-compile", *name = NULL;
    cli_init_signals(prog);
    ModelSpec spec = {.batch_size = 1, .args = model_args_default()};
    const char *save = NULL, *opt = "sgd";
    double smoothing = 0.1;
    const char *passes = NULL, *dump_after = NULL, *dump_kernels = NULL, *dump_program = NULL, *roofline = NULL;
    int tf32 = 0;
    FuseOut fo = {.sm = 90};
    int dump = 0, seed = 0, channels_last = 0, amp = 0, ckpt = 0, keep_acts = 0;
    size_t budget = 0;
    CtDType amp_dtype = CT_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--list-models")) {
            const char *filter = i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : NULL;
            model_list(filter, print_name, NULL);
            return 0;
        } else if (!strcmp(a, "--dump-ir")) {
            dump = 1;
        } else if (!strcmp(a, "--passes") || !strcmp(a, "--dump-ir-after")) {
            if (!(v = cli_value(prog, argc, argv, &i)))
                return 2;
            *(a[2] == 'p' ? &passes : &dump_after) = v;
        } else if (!strcmp(a, "--dump-kernels")) {
            if (!(dump_kernels = cli_value(prog, argc, argv, &i)))
                return 2;
            if (strcmp(dump_kernels, "c") && strcmp(dump_kernels, "cuda")) {
                fprintf(stderr, "%s: --dump-kernels is c or cuda, got '%s'\n", prog, dump_kernels);
                return 2;
            }
        } else if (!strcmp(a, "--dump-program")) {
            if (!(dump_program = cli_value(prog, argc, argv, &i)))
                return 2;
            if (strcmp(dump_program, "cpu") && strcmp(dump_program, "ref") && strcmp(dump_program, "cuda")) {
                fprintf(stderr, "%s: --dump-program is cpu, ref or cuda, got '%s'\n", prog, dump_program);
                return 2;
            }
        } else if (!strcmp(a, "--roofline")) {
            if (!(roofline = cli_value(prog, argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--tf32")) {
            tf32 = 1;
        } else if (!strcmp(a, "--dot")) {
            if (!(fo.dot = cli_value(prog, argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--compile")) {
            if (!(fo.compile = cli_value(prog, argc, argv, &i)))
                return 2;
            if (strcmp(fo.compile, "host") && strcmp(fo.compile, "cuda")) {
                fprintf(stderr, "%s: --compile is host or cuda, got '%s'\n", prog, fo.compile);
                return 2;
            }
        } else if (!strcmp(a, "--sm")) {
            if (!(v = cli_value(prog, argc, argv, &i)) || cli_int(prog, a, v, 50, 200, &fo.sm))
                return 2;
        } else if (!strcmp(a, "--cache-stats")) {
            fo.cache_stats = 1;
        } else if (!strcmp(a, "--no-cache")) {
            fo.no_cache = 1;
        } else if (!strcmp(a, "--channels-last")) {
            channels_last = 1;
        } else if (!strcmp(a, "--amp")) {
            amp = 1;
        } else if (!strcmp(a, "--amp-dtype")) {
            if (!(v = cli_value(prog, argc, argv, &i)))
                return 2;
            if (strcmp(v, "float16") && strcmp(v, "bfloat16")) {
                fprintf(stderr, "%s: --amp-dtype is float16 or bfloat16, got '%s'\n", prog, v);
                return 2;
            }
            amp_dtype = v[0] == 'f' ? CT_F16 : CT_BF16;
        } else if (!strcmp(a, "--train")) {
            spec.training = 1;
        } else if (!strcmp(a, "--grad-checkpointing")) {
            ckpt = 1;
        } else if (!strcmp(a, "--keep-activations")) {
            keep_acts = 1;
        } else if (!strcmp(a, "--memory-budget")) {
            if (!(v = cli_value(prog, argc, argv, &i)) || cli_bytes(prog, a + 2, v, &budget))
                return 2;
        } else if (!strcmp(a, "--save-weights")) {
            if (!(save = cli_value(prog, argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--opt")) {
            if (!(opt = cli_value(prog, argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--smoothing")) {
            char *end;
            if (!(v = cli_value(prog, argc, argv, &i)) || (smoothing = strtod(v, &end), *end) ||
                !(smoothing >= 0 && smoothing < 1)) {
                fprintf(stderr, "%s: --smoothing expects a number in [0, 1)\n", prog);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            if (!(v = cli_value(prog, argc, argv, &i)) || cli_int(prog, a, v, 0, 1 << 30, &seed))
                return 2;
        } else if (!strcmp(a, "--model")) {
            if (!(name = cli_value(prog, argc, argv, &i)))
                return 2;
        } else if (!strcmp(a, "--img-size") || !strcmp(a, "--batch-size") || !strcmp(a, "--num-classes")) {
            int *dst = a[2] == 'i' ? &spec.args.img_size : a[2] == 'b' ? &spec.batch_size : &spec.args.num_classes;
            if (!(v = cli_value(prog, argc, argv, &i)) || cli_int(prog, a, v, a[2] == 'n' ? 0 : 1, 1 << 20, dst))
                return 2;
        } else {
            fprintf(stderr, "%s: unknown option '%s'\n%s", prog, a, usage);
            return 2;
        }
    }
    if (!name) {
        fprintf(stderr, "%s: --model NAME is required\n%s", prog, usage);
        return 2;
    }
    const ModelEntry *m = cli_model(prog, name);
    if (!m)
        return 2;
    OptimSpec os;
    if (optim_from_name(opt, m, &os)) {
        fprintf(stderr, "%s: unknown optimizer '%s' (%s)\n", prog, opt, optim_names);
        return 2;
    }
    CtBuf out = {0};
    Graph g;
    CtErr err;
    /* bn_fold runs by default on eval graphs, layout with --channels-last;
     * a --passes list replaces the default; `--passes input` shows the
     * uint8 input the trainer and validator feed, normalised by the model's
     * mean/std */
    InputSpec in = {.mean = {m->cfg.mean[0], m->cfg.mean[1], m->cfg.mean[2]},
                    .std = {m->cfg.std[0], m->cfg.std[1], m->cfg.std[2]}};
    Pipeline p = {.input = in, .training = spec.training, .loss = {CT_LOSS_CROSS_ENTROPY, smoothing, -1, 0}, .opt = os, .amp = amp,
                  .amp_dtype = amp_dtype, .bn_fold = !passes, .channels_last = channels_last, .passes = passes,
                  .dump_after = dump_after, .dump = &out, .verify = PIPELINE_VERIFY};
    const char *units[8];
    if ((ckpt || budget) && !spec.training) {
        fprintf(stderr, "%s: --grad-checkpointing and --memory-budget recompute a training step's activations: add "
                        "--train\n", prog);
        return 2;
    }
    if (ckpt && (p.remat.nunits = model_ckpt_units(m, units, 8, &err)) < 0) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 2;
    }
    p.remat.units = units;
    p.remat.budget = budget;
    p.remat.cheap = spec.training && !keep_acts && (!passes || pipeline_named(&p, "remat")); /* as bn_fold */
    PipelineResult res;
    if (model_build(m, &spec, &g, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 1;
    }
    if (pipeline_check(&p, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        graph_free(&g);
        return 2;
    }
    char s[96];
    /* timm's MACs and activations are of the model as built: count before
     * passes fold ops away (bn_fold removes BN's). */
    GraphStats stats;
    int have_stats = !spec.training && graph_stats(&g, &(StatsOptions){.count_attention = 1}, &stats, &err) == 0;
    if (pipeline_run(&p, &g, &res, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        buf_free(&out);
        return 1;
    }
    TrainStep ts = res.ts;
    if (dump)
        graph_dump(&g, &out);
    int fuse = !passes || pipeline_named(&p, "fuse") || (dump_after && !strcmp(dump_after, "fuse")) || dump_kernels ||
               fo.dot || fo.compile;
    int kernels_before = 0, kernels_after = 0;
    fo.dump_after = dump_after;
    fo.dump_kernels = dump_kernels;
    fo.title = m->name;
    if (fuse && report_fusion(&g, &fo, &out, &kernels_before, &kernels_after, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        buf_free(&out);
        train_step_free(&ts);
        graph_free(&g);
        return cli_interrupted() ? 130 : 2;
    }
    buf_printf(&out, "model: %s (%s)\n", m->name, spec.training ? "train" : "eval");
    buf_printf(&out, "input: %s f32\n", shape_str(&g.values[0].type.shape, s, sizeof s));
    buf_printf(&out, "output: %s\n", shape_str(&g.values[g.outputs[0]].type.shape, s, sizeof s));
    buf_printf(&out, "nodes: %d\n", g.nnodes);
    if (spec.training)
        buf_printf(&out, "training step: loss %%%d, %d gradients, optimizer %s\n", ts.loss, ts.nparams, opt);
    int count[CT_ROLE_CONST + 1] = {0};
    for (int k = 0; k < g.nstate; k++)
        count[g.values[g.state[k]].role]++;
    buf_printf(&out, "param tensors: %d (state_dict entries: %d)\n", count[CT_ROLE_PARAM],
               count[CT_ROLE_PARAM] + count[CT_ROLE_BUFFER]);
    if (count[CT_ROLE_STATE])
        buf_printf(&out, "optimizer state tensors: %d\n", count[CT_ROLE_STATE]);
    buf_printf(&out, "params (M): %.2f (%lld)\n", (double)graph_param_count(&g) / 1e6, (long long)graph_param_count(&g));
    if (have_stats)
        buf_printf(&out, "GMACs: %.2f, activations (M): %.2f (per image, fvcore's counts as in timm's benchmark.py)\n",
                   (double)stats.macs / spec.batch_size / 1e9, (double)stats.activations / spec.batch_size / 1e6);
    if (pipeline_named(&p, "remat") || p.remat.nunits || p.remat.budget || p.remat.cheap)
        buf_printf(&out, "remat: %d activations recomputed in the backward by %d nodes, %.2f GMACs more; planned "
                         "peak %.1f -> %.1f MiB\n",
                   res.remat.values, res.remat.nodes, res.remat.extra_macs / 1e9, res.remat.peak_before / 1048576.0,
                   res.remat.peak_after / 1048576.0);
    MemPlan plan;
    if (plan_memory(&g, &plan, &err) == 0) {
        const double mib = 1024.0 * 1024.0;
        buf_printf(&out, "memory plan: arena %.1f MiB peak (%.1f MiB if nothing were reused), params %.1f MiB, "
                         "buffers + optimizer state %.1f MiB, inputs %.1f MiB, outputs %.1f MiB\n",
                   plan.arena_bytes / mib, plan.naive_bytes / mib, plan.param_bytes / mib, plan.state_bytes / mib,
                   plan.input_bytes / mib, plan.output_bytes / mib);
        /* ts's value ids are autodiff's, which the layout pass renumbers: the
         * loss is output 1, the param gradients what the unscale nodes make */
        char *is_pgrad = calloc((size_t)g.nvalues, 1);
        CT_ASSERT(is_pgrad != NULL);
        for (int i = 0; spec.training && i < g.nnodes; i++)
            if (g.nodes[i].scope && !strcmp(g.nodes[i].scope, "unscale"))
                is_pgrad[g.nodes[i].out[0]] = 1;
        PlanSplit sp;
        plan_split(&g, &plan, spec.training ? g.values[g.outputs[1]].producer : g.nnodes, is_pgrad, &sp);
        buf_printf(&out, "memory at its fullest (node %d, %s): %.1f MiB live: activations %.1f, ", sp.node,
                   g.nnodes ? g.nodes[sp.node].scope ? g.nodes[sp.node].scope : op_def(g.nodes[sp.node].op)->name
                            : "-", sp.live / mib, sp.activations / mib);
        if (spec.training)
            buf_printf(&out, "param gradients %.1f, activation gradients %.1f, ", sp.param_grads / mib,
                       sp.act_grads / mib);
        buf_printf(&out, "temporaries %.1f MiB\n", sp.temps / mib);
        print_peak(&g, &plan, &sp, spec.training, &out);
        free(is_pgrad);
        plan_free(&plan);
    }
    if (fuse)
        buf_printf(&out, "kernels: %d before fusion (one per node), %d after\n", kernels_before, kernels_after);
    if (dump_program) { /* the Program a backend would run: compiled as ctimm-train compiles it, cuda for --sm */
        CtProgram *pr;
        ProgramOptions po = *cli_program_options();
        po.cuda_cc = fo.sm;
        cli_catch_interrupts();
        int crc = program_compile(&g, backend_find(dump_program)->target, &po, &pr, &err);
        if (crc) {
            fprintf(stderr, "%s: --dump-program %s: %s\n", prog, dump_program, err.msg);
            buf_free(&out);
            train_step_free(&ts);
            graph_free(&g);
            return crc == CT_INTERRUPTED ? 130 : 1;
        }
        program_dump(pr, &out);
        program_free(pr);
    }
    if (roofline) { /* the cuda launch plan's floor on that device, step by step */
        RooflineDevice dev;
        LaunchPlan lp;
        if (roofline_device(roofline, &dev, &err) || launch_plan(&g, PROGRAM_CUDA_SMS, &lp, &err)) {
            fprintf(stderr, "%s: --roofline %s: %s\n", prog, roofline, err.msg);
            buf_free(&out);
            train_step_free(&ts);
            graph_free(&g);
            return 1;
        }
        roofline_report(&lp, &g, &dev, tf32, &out);
        launch_plan_free(&lp);
    }
    fwrite(out.s, 1, out.len, stdout);
    buf_free(&out);
    int rc = save ? save_weights(m, &g, save, seed) : 0;
    train_step_free(&ts);
    graph_free(&g);
    return rc;
}
