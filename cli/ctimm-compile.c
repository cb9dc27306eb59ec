/* ctimm-compile: builds a model's graph, verifies it and prints a summary
 * (and with --dump-ir the whole IR). */
#include <stdio.h>
#include <string.h>

#include "cli/common.h"
#include "ir/buf.h"
#include "runtime/state.h"

static const char *const usage =
    "usage: ctimm-compile --model NAME [--img-size N] [--batch-size N] [--num-classes N] [--train] [--dump-ir]\n"
    "                     [--save-weights FILE [--seed N]]\n"
    "       ctimm-compile --list-models [FILTER]\n";

static void print_name(const ModelEntry *m, void *ctx) { printf("%s\n", m->name); }

/* The model's initial weights by timm's init scheme, as a checkpoint that
 * timm's load_state_dict accepts. */
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

int main(int argc, char **argv)
{
    const char *prog = "ctimm-compile", *name = NULL;
    ModelSpec spec = {.batch_size = 1, .args = model_args_default()};
    const char *save = NULL;
    int dump = 0, seed = 0;
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
        } else if (!strcmp(a, "--train")) {
            spec.training = 1;
        } else if (!strcmp(a, "--save-weights")) {
            if (!(save = cli_value(prog, argc, argv, &i)))
                return 2;
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
    Graph g;
    CtErr err;
    if (model_build(m, &spec, &g, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 1;
    }
    CtBuf out = {0};
    char s[96];
    if (dump)
        graph_dump(&g, &out);
    buf_printf(&out, "model: %s (%s)\n", m->name, spec.training ? "train" : "eval");
    buf_printf(&out, "input: %s f32\n", shape_str(&g.values[0].type.shape, s, sizeof s));
    buf_printf(&out, "output: %s\n", shape_str(&g.values[g.outputs[0]].type.shape, s, sizeof s));
    buf_printf(&out, "nodes: %d\n", g.nnodes);
    int nparams = 0;
    for (int k = 0; k < g.nstate; k++)
        nparams += g.values[g.state[k]].role == CT_ROLE_PARAM;
    buf_printf(&out, "param tensors: %d (state_dict entries: %d)\n", nparams, g.nstate);
    buf_printf(&out, "params (M): %.2f (%lld)\n", (double)graph_param_count(&g) / 1e6, (long long)graph_param_count(&g));
    fwrite(out.s, 1, out.len, stdout);
    buf_free(&out);
    int rc = save ? save_weights(m, &g, save, seed) : 0;
    graph_free(&g);
    return rc;
}
