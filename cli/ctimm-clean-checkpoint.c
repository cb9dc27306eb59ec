/*
 * ctimm-clean-checkpoint: timm's clean_checkpoint.py. Keeps only a
 * checkpoint's state_dict (ctimm-train's, or a PyTorch file's such as timm's
 * train.py's .pth.tar; the model EMA by default when the run had one,
 * --no-use-ema for the weights; a "module." prefix dropped; --clean-aux-bn
 * drops SplitBN's aux_bn tensors) and writes it as a minimal timm-loadable
 * safetensors file named <output or input base>-<first 8 hex digits of its
 * XXH3-128>.safetensors (--no-hash: without the hash), the full hash in its
 * metadata. The output is written under a temporary name and renamed; an
 * existing output (or the input itself) is never overwritten.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/state_dict.h"

static const char *const prog = "ctimm-clean-checkpoint";

static const char *const usage =
    "usage: ctimm-clean-checkpoint --checkpoint CKPT [--output PATH] [--no-use-ema] [--no-hash]\n"
    "                              [--clean-aux-bn]\n";

int main(int argc, char **argv)
{
    static const struct option longs[] = {{"checkpoint", 1, 0, 'c'}, {"output", 1, 0, 'o'},
                                          {"no-use-ema", 0, 0, 'E'}, {"no-hash", 0, 0, 'H'},
                                          {"clean-aux-bn", 0, 0, 'A'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *ckpt = NULL, *output = NULL;
    int use_ema = 1, no_hash = 0, aux = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        switch (c) {
        case 'c': ckpt = optarg; break;
        case 'o': output = optarg; break;
        case 'E': use_ema = 0; break;
        case 'H': no_hash = 1; break;
        case 'A': aux = 1; break;
        case 'h': fputs(usage, stdout); return 0;
        case ':': fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, argv[optind - 1]); return 2;
        default: fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind - 1]); return 2;
        }
    }
    if (!ckpt || optind < argc) {
        fprintf(stderr, "%s: %s\n", prog, ckpt ? "unexpected argument" : "--checkpoint is required (see --help)");
        return 2;
    }
    if (output && access(output, F_OK) == 0) {
        fprintf(stderr, "%s: the output %s already exists; give another --output\n", prog, output);
        return 1;
    }
    StateDict sd;
    CtErr err;
    if (state_dict_read(ckpt, use_ema, &sd, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 1;
    }
    printf("=> Loaded state_dict from '%s'%s\n", ckpt, sd.from_ema ? " (model EMA weights)" : "");
    int n = 0;
    for (int i = 0; i < sd.n; i++)
        if (!(aux && strstr(sd.t[i].name, "aux_bn")))
            sd.t[n++] = sd.t[i];
    char hash[33], base[1200], path[1300];
    state_dict_hash(sd.t, n, hash);
    /* timm: the output's folder and base name (else the input's base name, here) and extension */
    const char *src = output ? output : ckpt, *slash = strrchr(src, '/');
    const char *name = output ? src : slash ? slash + 1 : src;
    snprintf(base, sizeof base, "%s", name);
    char *dot = strrchr(base, '.'), *bslash = strrchr(base, '/');
    const char *ext = ".safetensors";
    if (dot && (!bslash || dot > bslash))
        *dot = 0;
    if (no_hash)
        snprintf(path, sizeof path, "%s%s", base, ext);
    else
        snprintf(path, sizeof path, "%s-%.8s%s", base, hash, ext);
    int rc = 1;
    char *real_in = realpath(ckpt, NULL), *real_out = realpath(path, NULL);
    if (access(path, F_OK) == 0 || (real_in && real_out && !strcmp(real_in, real_out))) {
        fprintf(stderr, "%s: the output %s already exists; give another --output\n", prog, path);
    } else {
        const char *mk[] = {"format", "ctimm.xxh3_128"}, *mv[] = {"pt", hash};
        if (st_write(path, sd.t, n, mk, mv, 2, &err))
            fprintf(stderr, "%s: %s\n", prog, err.msg);
        else {
            printf("=> Saved state_dict to '%s', XXH3-128: %s\n", path, hash);
            rc = 0;
        }
    }
    free(real_in);
    free(real_out);
    state_dict_free(&sd);
    return rc;
}
