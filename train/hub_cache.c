#include "train/hub_cache.h"

#include <dirent.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* An environment variable set to something (huggingface_hub takes an
 * empty one as given, which makes a cache in the working folder: no one
 * means that). */
static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static const char *home(void)
{
    const char *h = env("HOME");
    if (h)
        return h;
    const struct passwd *pw = getpwuid(getuid());
    return pw && pw->pw_dir ? pw->pw_dir : "/";
}

/* path with a leading ~ as Python's os.path.expanduser reads it, + suffix. */
static void expand(char *out, size_t n, const char *path, const char *suffix)
{
    if (path[0] == '~' && (path[1] == '/' || !path[1]))
        snprintf(out, n, "%s%s%s", home(), path + 1, suffix);
    else
        snprintf(out, n, "%s%s", path, suffix);
}

/* huggingface_hub's constants.HF_HUB_CACHE. */
static void cache_dir(HubFiles *h)
{
    const char *v;
    if ((v = env("HF_HUB_CACHE"))) {
        h->cache_from = "$HF_HUB_CACHE";
        expand(h->cache, sizeof h->cache, v, "");
    } else if ((v = env("HUGGINGFACE_HUB_CACHE"))) {
        h->cache_from = "$HUGGINGFACE_HUB_CACHE";
        expand(h->cache, sizeof h->cache, v, "");
    } else if ((v = env("HF_HOME"))) {
        h->cache_from = "$HF_HOME/hub";
        expand(h->cache, sizeof h->cache, v, "/hub");
    } else if ((v = env("XDG_CACHE_HOME"))) {
        h->cache_from = "$XDG_CACHE_HOME/huggingface/hub";
        expand(h->cache, sizeof h->cache, v, "/huggingface/hub");
    } else {
        h->cache_from = "the default: $HF_HUB_CACHE or $HF_HOME set another";
        expand(h->cache, sizeof h->cache, "~/.cache/huggingface/hub", "");
    }
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A regular file, through the snapshot's links into blobs/. */
static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* refs/main's revision (its first line), or "" when there is no refs/main. */
static void main_ref(const char *repo_dir, char *rev, size_t n)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/refs/main", repo_dir);
    rev[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (!fgets(rev, (int)n, f))
        rev[0] = 0;
    fclose(f);
    rev[strcspn(rev, "\r\n \t")] = 0;
}

/* The newest folder under snapshots/ (the only one, mostly): 0, or -1
 * when there is none. */
static int newest_snapshot(const char *snaps, char *rev, size_t n)
{
    DIR *d = opendir(snaps);
    if (!d)
        return -1;
    struct dirent *e;
    time_t best = 0;
    rev[0] = 0;
    while ((e = readdir(d))) {
        char path[1600];
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", snaps, e->d_name);
        if (stat(path, &st) || !S_ISDIR(st.st_mode))
            continue;
        if (!rev[0] || st.st_mtime > best || (st.st_mtime == best && strcmp(e->d_name, rev) > 0)) {
            best = st.st_mtime;
            snprintf(rev, n, "%s", e->d_name);
        }
    }
    closedir(d);
    return rev[0] ? 0 : -1;
}

static int not_cached(const HubFiles *h, const char *repo, const char *what, CtErr *err)
{
    return ct_fail(err, "%s is not in the Hugging Face cache %s (%s%s): %s. ctimm never downloads: "
                   "`huggingface-cli download %s` puts it there", repo, h->cache,
                   h->cache_from[0] == '$' ? "from " : "", h->cache_from, what, repo);
}

int hub_find(const char *repo, HubFiles *out, CtErr *err)
{
    memset(out, 0, sizeof *out);
    cache_dir(out);
    const char *slash = strchr(repo, '/');
    CT_ASSERT(slash != NULL && strlen(repo) < 200);
    char dir[1280], snaps[1300], rev[256], snap[1560], what[1640];
    /* huggingface_hub's repo_folder_name: "models--" + the id with '/' as "--" */
    snprintf(dir, sizeof dir, "%s/models--%.*s--%s", out->cache, (int)(slash - repo), repo, slash + 1);
    snprintf(snaps, sizeof snaps, "%s/snapshots", dir);
    if (!is_dir(dir)) {
        snprintf(what, sizeof what, "it has no %s", dir + strlen(out->cache) + 1);
        return not_cached(out, repo, what, err);
    }
    main_ref(dir, rev, sizeof rev);
    if (rev[0]) {
        snprintf(snap, sizeof snap, "%s/%s", snaps, rev);
        if (!is_dir(snap))
            return ct_fail(err, "%s in the Hugging Face cache is broken: refs/main names revision %s but %s is "
                           "missing; download it again (`huggingface-cli download %s`)", repo, rev, snap, repo);
    } else if (newest_snapshot(snaps, rev, sizeof rev)) {
        snprintf(what, sizeof what, "no snapshot under its %s", snaps + strlen(out->cache) + 1);
        return not_cached(out, repo, what, err);
    } else {
        snprintf(snap, sizeof snap, "%s/%s", snaps, rev);
    }
    static const char *const names[] = {"model.safetensors", "pytorch_model.bin"};
    for (int k = 0; k < 2 && !out->weights[0]; k++) {
        snprintf(out->weights, sizeof out->weights, "%s/%s", snap, names[k]);
        if (!is_file(out->weights))
            out->weights[0] = 0;
    }
    if (!out->weights[0]) {
        snprintf(what, sizeof what, "no model.safetensors (nor pytorch_model.bin) in its %s",
                 snap + strlen(out->cache) + 1);
        return not_cached(out, repo, what, err);
    }
    snprintf(out->config, sizeof out->config, "%s/config.json", snap);
    if (!is_file(out->config))
        out->config[0] = 0;
    return 0;
}
