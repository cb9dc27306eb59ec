#include "cli/state_dict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "runtime/weights_file.h"

static const char *strip_module(const char *name) { return strncmp(name, "module.", 7) ? name : name + 7; }

int state_dict_read(const char *path, int use_ema, StateDict *sd, CtErr *err)
{
    memset(sd, 0, sizeof *sd);
    int torch = weights_is_torch(path); /* its names come cleaned, its EMA with its weights */
    if (weights_read(path, use_ema, &sd->weights, &sd->from_ema, err))
        return -1;
    int n = sd->weights.ntensors;
    sd->t = calloc((size_t)(n ? n : 1), sizeof *sd->t);
    CT_ASSERT(sd->t != NULL);
    sd->n = n;
    for (int i = 0; i < n; i++) {
        sd->t[i] = sd->weights.tensors[i];
        sd->t[i].name = torch ? sd->t[i].name : (char *)strip_module(sd->t[i].name);
    }
    char spath[1200];
    size_t len = strlen(path), k = strlen(".safetensors");
    if (torch || !use_ema || len < k || strcmp(path + len - k, ".safetensors"))
        return 0;
    snprintf(spath, sizeof spath, "%.*s.state.safetensors", (int)(len - k), path);
    if (access(spath, F_OK))
        return 0;
    if (st_read(spath, &sd->state, err)) {
        state_dict_free(sd);
        return -1;
    }
    int found = 0;
    for (int i = 0; i < n; i++) {
        char name[600];
        snprintf(name, sizeof name, "ema.%s", sd->t[i].name);
        found += st_find(&sd->state, name) != NULL;
    }
    if (found == 0)
        return 0;
    if (found < n) {
        state_dict_free(sd);
        return ct_fail(err, "%s has a model EMA for %d of the %d tensors; use --no-use-ema", spath, found, n);
    }
    for (int i = 0; i < n; i++) {
        char name[600];
        snprintf(name, sizeof name, "ema.%s", sd->t[i].name);
        const StTensor *e = st_find(&sd->state, name);
        if (e->dtype != sd->t[i].dtype || e->ndim != sd->t[i].ndim ||
            memcmp(e->shape, sd->t[i].shape, sizeof(int64_t) * (size_t)e->ndim)) {
            ct_fail(err, "%s: '%s' does not match the weights' '%s'", spath, name, sd->t[i].name);
            state_dict_free(sd);
            return -1;
        }
        sd->t[i] = *e;
        sd->t[i].name = e->name + 4;
    }
    sd->from_ema = 1;
    return 0;
}

void state_dict_free(StateDict *sd)
{
    st_free(&sd->weights);
    st_free(&sd->state);
    free(sd->t);
    memset(sd, 0, sizeof *sd);
}

void state_dict_hash(const StTensor *t, int n, char out[33])
{
    XXH3_state_t *h = XXH3_createState();
    CT_ASSERT(h != NULL);
    XXH3_128bits_reset(h);
    for (int i = 0; i < n; i++) {
        int32_t head[2] = {(int32_t)t[i].dtype, t[i].ndim};
        XXH3_128bits_update(h, t[i].name, strlen(t[i].name) + 1);
        XXH3_128bits_update(h, head, sizeof head);
        XXH3_128bits_update(h, t[i].shape, sizeof(int64_t) * (size_t)t[i].ndim);
        XXH3_128bits_update(h, t[i].data, t[i].nbytes);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h));
    XXH3_freeState(h);
    for (int k = 0; k < 16; k++)
        snprintf(out + 2 * k, 3, "%02x", c.digest[k]);
}
