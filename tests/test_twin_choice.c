/* A depthwise step's two ways, timed once and kept (runtime/cuda/
 * twin_choice.h), with a fake timer: the faster way wins, the library's
 * kernels on a tie; the winner and both times come back from memory and,
 * in a later process's cache (compiles forbidden), from disk, with no
 * timing; another key (device) is timed again; a timer's failure is
 * returned and nothing is kept; an entry of another size under the key is
 * refused; CTIMM_DWCONV's three values read, another refused naming it.
 * Works in a mkdtemp directory under /tmp, removed at the end. */
#include "runtime/cuda/twin_choice.h"

#include <stdlib.h>
#include <string.h>

#include "tests/check.h"

typedef struct Timer {
    float ms[2];
    int calls[2];
    int fail;
} Timer;

static int fake_time(void *ctx, int way, float *ms, CtErr *err)
{
    Timer *t = ctx;
    t->calls[way]++;
    if (t->fail)
        return ct_fail(err, "fake timer: launch failed");
    *ms = t->ms[way];
    return 0;
}

static int three_bytes(void *ctx, const CacheKeyParts *p, void **blob, size_t *n, CtErr *err)
{
    (void)ctx, (void)p, (void)err;
    *blob = malloc(3);
    memcpy(*blob, "abc", 3);
    *n = 3;
    return 0;
}

static CacheKeyParts parts(const char *device)
{
    return (CacheKeyParts){.source = "fwd nhwc bf16 k 96 c 1 r 7 s 7 | ct_dw_conv_bf16:401408",
                           .target = device, .compiler = "ctimm library kernels or cudnn twin",
                           .compiler_version = "cudnn 91000 library 0123456789abcdef", .options = "runs=5"};
}

int main(void)
{
    char root[] = "/tmp/ctimm-test-twin-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    KernelCache c;
    CtErr err;
    TwinChoice got;
    CacheKeyParts h200 = parts("sm_90 NVIDIA H200"), h100 = parts("sm_90 NVIDIA H100");
    CHECK(cache_open(&c, &(CacheOptions){.dir = root, .first_wins = 1}, &err) == 0);

    Timer t = {.ms = {2.0f, 1.5f}};
    CHECK(twin_choose(&c, &h200, fake_time, &t, &got, &err) == 0);
    CHECKF(got.twin == 1 && got.ms[0] == 2.0f && got.ms[1] == 1.5f && t.calls[0] == 1 && t.calls[1] == 1,
           "twin %d (%g, %g ms), timed %d and %d times", got.twin, got.ms[0], got.ms[1], t.calls[0], t.calls[1]);
    t.ms[1] = 9.0f;
    CHECK(twin_choose(&c, &h200, fake_time, &t, &got, &err) == 0);
    CHECKF(got.twin == 1 && t.calls[0] == 1 && t.calls[1] == 1, "the kept choice timed again");

    t = (Timer){.ms = {1.0f, 1.0f}};
    CHECK(twin_choose(&c, &h100, fake_time, &t, &got, &err) == 0);
    CHECKF(got.twin == 0 && t.calls[0] == 1 && t.calls[1] == 1, "a tie: twin %d", got.twin);

    t = (Timer){.fail = 1};
    CacheKeyParts other = parts("sm_100 NVIDIA B200");
    CHECKF(twin_choose(&c, &other, fake_time, &t, &got, &err) != 0 && strstr(err.msg, "fake timer: launch failed") &&
               strstr(err.msg, "choosing among ctimm library kernels or cudnn twin's candidates") &&
               !strstr(err.msg, "compiling"),
           "a failed timing reads: %s", err.msg);
    t = (Timer){.ms = {1.0f, 3.0f}};
    CHECK(twin_choose(&c, &other, fake_time, &t, &got, &err) == 0);
    CHECKF(got.twin == 0 && t.calls[0] == 1, "after a failed timing: twin %d, library timed %d times", got.twin,
           t.calls[0]);
    cache_close(&c);

    /* a later process: the disk's entries, nothing timed */
    CHECK(cache_open(&c, &(CacheOptions){.dir = root, .first_wins = 1, .forbid_compile = 1}, &err) == 0);
    t = (Timer){.ms = {0.5f, 0.5f}};
    CHECK(twin_choose(&c, &h200, fake_time, &t, &got, &err) == 0);
    CHECKF(got.twin == 1 && got.ms[0] == 2.0f && got.ms[1] == 1.5f && !t.calls[0] && !t.calls[1],
           "from disk: twin %d (%g, %g ms), timed %d times", got.twin, got.ms[0], got.ms[1], t.calls[0] + t.calls[1]);
    CHECK(twin_choose(&c, &h100, fake_time, &t, &got, &err) == 0 && got.twin == 0);
    cache_close(&c);

    TwinMode mode_of;
    CtErr bad;
    setenv("CTIMM_DWCONV", "cuDNN", 1);
    CHECKF(twin_mode(&mode_of, &bad) != 0 && strstr(bad.msg, "CTIMM_DWCONV=cuDNN: use auto, lib or cudnn"),
           "CTIMM_DWCONV=cuDNN accepted");
    setenv("CTIMM_DWCONV", "lib", 1);
    CHECK(twin_mode(&mode_of, &bad) == 0 && mode_of == TWIN_LIB);
    setenv("CTIMM_DWCONV", "cudnn", 1);
    CHECK(twin_mode(&mode_of, &bad) == 0 && mode_of == TWIN_CUDNN);
    unsetenv("CTIMM_DWCONV");
    CHECK(twin_mode(&mode_of, &bad) == 0 && mode_of == TWIN_AUTO);

    CacheKeyParts odd = parts("sm_80 NVIDIA A100");
    const void *blob;
    size_t n;
    CHECK(cache_open(&c, &(CacheOptions){.dir = root, .first_wins = 1}, &err) == 0);
    CHECK(cache_get(&c, &odd, three_bytes, NULL, &blob, &n, &err) == 0);
    CHECKF(twin_choose(&c, &odd, fake_time, &t, &got, &err) != 0 && strstr(err.msg, "has 3 bytes, not 12"),
           "an entry of 3 bytes read as a choice: %s", err.msg);
    cache_close(&c);
    test_rm_tree(root);
    return check_done("test_twin_choice");
}
