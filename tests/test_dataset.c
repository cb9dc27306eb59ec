/*
 * Datasets: timm's natural order; ImageFolder class numbering and sample
 * order (checked against what timm's reader gives for the same tree), split
 * search and its errors, class maps; the tar fixtures of tests/data/loader
 * (pax, ustar prefix, GNU long names, a tar inside the tar) against timm's
 * ReaderImageInTar listing (tests/data/loader/make_fixtures.py --show),
 * damaged tars; the synthetic dataset; the shapes generator (marker, reuse,
 * refusal, stale temporaries). Scratch files go to a fresh /tmp folder.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/data/dataset.h"
#include "runtime/data/shapes.h"
#include "tests/check.h"

static char tmpdir[64];

static void put(const char *rel, const char *content)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    /* make the parent folders */
    for (char *p = path + strlen(tmpdir) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0777);
            *p = '/';
        }
    FILE *f = fopen(path, "wb");
    CHECKF(f != NULL, "cannot write %s", path);
    if (f) {
        fputs(content, f);
        fclose(f);
    }
}

static void mk(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    mkdir(path, 0777);
}

static void tpath(char *buf, size_t n, const char *rel) { snprintf(buf, n, "%s/%s", tmpdir, rel); }

static void test_natural_order(void)
{
    /* sorted(..., key=timm.utils.misc.natural_key) */
    static const char *const sorted[] = {
        "", "0", "1", "01x", "2", "10", "a", "A1", "a01b", "a2", "a10", "a10a", "a10b", "B", "class2", "Class10",
        "img_9.jpg", "img_10.jpg", "x99999999999999999999999", "x100000000000000000000000",
    };
    int n = (int)(sizeof sorted / sizeof *sorted);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            int c = natural_cmp(sorted[i], sorted[j]);
            int want = i < j ? -1 : i > j;
            /* "A1"/"a01b" and "01x"/"1" are different keys; equal keys only for i == j here */
            CHECKF((c > 0) - (c < 0) == want, "natural_cmp('%s', '%s') = %d, want %d", sorted[i], sorted[j], c, want);
        }
    CHECK(natural_cmp("a01", "a1") == 0);
    CHECK(natural_cmp("ABC", "abc") == 0);
}

static void check_sample(const Dataset *ds, DatasetReader *r, size_t i, const char *name_suffix, int label,
                         const char *content)
{
    char name[1024];
    dataset_sample_name(ds, i, name, sizeof name);
    size_t ln = strlen(name), ls = strlen(name_suffix);
    CHECKF(ln >= ls && !strcmp(name + ln - ls, name_suffix), "sample %zu is %s, want ...%s", i, name, name_suffix);
    CHECKF(dataset_label(ds, i) == label, "sample %zu (%s): label %lld, want %d", i, name,
           (long long)dataset_label(ds, i), label);
    if (content) {
        const uint8_t *d;
        size_t n;
        CtErr err;
        int rc = dataset_read(r, i, &d, &n, &err);
        CHECKF(rc == 0, "%s", err.msg);
        CHECKF(rc == 0 && n == strlen(content) && !memcmp(d, content, n), "sample %zu (%s): wrong bytes", i, name);
    }
}

static void test_folder(void)
{
    /* train: classes by leaf folder name, natural order; val: one class */
    put("ds/train/class2/img10.jpg", "class2/img10.jpg");
    put("ds/train/class2/img9.JPG", "class2/img9.JPG");
    put("ds/train/class2/b.png", "class2/b.png");
    put("ds/train/class2/.hidden.jpg", "class2/.hidden.jpg");
    put("ds/train/class2/.jpg", "no extension");
    put("ds/train/class2/notes.txt", "not an image");
    put("ds/train/class10/a.jpeg", "class10/a.jpeg");
    put("ds/train/Class1/z.Jpeg", "Class1/z.Jpeg");
    put("ds/train/class3/nested/n.jpg", "class3/nested/n.jpg");
    mk("ds/train/empty_dir");
    put("ds/val/only/v.jpg", "only/v.jpg");

    char root[256];
    tpath(root, sizeof root, "ds");
    CtErr err;
    Dataset *ds;
    DatasetConfig cfg = {.root = root, .split = "train"};
    int rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc)
        return;
    CHECK(dataset_kind(ds) == CT_DS_FOLDER);
    CHECK(dataset_len(ds) == 7);
    /* timm: {'Class1': 0, 'class2': 1, 'class10': 2, 'nested': 3} */
    CHECK(dataset_num_classes(ds) == 4);
    static const char *const classes[] = {"Class1", "class2", "class10", "nested"};
    for (int c = 0; c < 4 && c < dataset_num_classes(ds); c++)
        CHECKF(!strcmp(dataset_class_name(ds, c), classes[c]), "class %d is %s", c, dataset_class_name(ds, c));
    CHECK(dataset_class_name(ds, 4) == NULL);
    DatasetReader *r;
    CHECK(dataset_reader_open(&r, ds, &err) == 0);
    check_sample(ds, r, 0, "/train/Class1/z.Jpeg", 0, "Class1/z.Jpeg");
    check_sample(ds, r, 1, "/train/class2/.hidden.jpg", 1, "class2/.hidden.jpg");
    check_sample(ds, r, 2, "/train/class2/b.png", 1, "class2/b.png");
    check_sample(ds, r, 3, "/train/class2/img9.JPG", 1, "class2/img9.JPG");
    check_sample(ds, r, 4, "/train/class2/img10.jpg", 1, "class2/img10.jpg");
    check_sample(ds, r, 5, "/train/class3/nested/n.jpg", 3, "class3/nested/n.jpg");
    check_sample(ds, r, 6, "/train/class10/a.jpeg", 2, "class10/a.jpeg");
    /* a file that vanished after indexing is an error naming it, not a crash */
    char gone[512];
    tpath(gone, sizeof gone, "ds/train/class2/b.png");
    unlink(gone);
    const uint8_t *d;
    size_t n;
    rc = dataset_read(r, 2, &d, &n, &err);
    CHECK(rc == -1 && strstr(err.msg, "class2/b.png"));
    put("ds/train/class2/b.png", "class2/b.png");
    rc = dataset_read(r, 99, &d, &n, &err);
    CHECK(rc == -1 && strstr(err.msg, "out of range"));
    dataset_reader_close(r);
    dataset_close(ds);

    /* synonyms: "training" finds train/, "validation" finds val/, "train[:10%]" is train */
    const char *const splits[][2] = {{"training", "/ds/train"}, {"validation", "/ds/val"}, {"eval", "/ds/val"},
                                     {"train[:10%]", "/ds/train"}, {"val", "/ds/val"}};
    for (int i = 0; i < 5; i++) {
        cfg.split = splits[i][0];
        rc = dataset_open(&ds, &cfg, &err);
        CHECKF(rc == 0, "split %s: %s", splits[i][0], err.msg);
        if (rc)
            continue;
        const char *got = dataset_root(ds);
        CHECKF(strlen(got) >= strlen(splits[i][1]) && !strcmp(got + strlen(got) - strlen(splits[i][1]), splits[i][1]),
               "split %s -> %s", splits[i][0], got);
        dataset_close(ds);
    }
    /* a split that is not there while others are: an error naming the root */
    cfg.split = "test";
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, root) && strstr(err.msg, "'test'") && strstr(err.msg, "train, val"),
           "%s", err.msg);
    put("ds2/train/a/x.jpg", "x");
    tpath(root, sizeof root, "ds2");
    cfg.split = "validation";
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, "no 'validation' split") && strstr(err.msg, "validation, val, valid, eval"),
           "%s", err.msg);
    /* a root without split folders is the split itself */
    put("ds3/b/1.jpg", "1");
    put("ds3/a/2.png", "2");
    tpath(root, sizeof root, "ds3");
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK(dataset_len(ds) == 2 && dataset_num_classes(ds) == 2 && !strcmp(dataset_class_name(ds, 0), "a"));
        CHECK(dataset_label(ds, 0) == 0 && dataset_label(ds, 1) == 1);
        dataset_close(ds);
    }

    /* errors: empty folder, missing root, a plain file */
    mk("empty");
    mk("empty/cls");
    put("empty/cls/readme.txt", "x");
    tpath(root, sizeof root, "empty");
    cfg.split = NULL;
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, root) && strstr(err.msg, "no images"), "%s", err.msg);
    tpath(root, sizeof root, "missing");
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, root) && strstr(err.msg, "No such file"), "%s", err.msg);
    tpath(root, sizeof root, "ds3/b/1.jpg");
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, root) && strstr(err.msg, "not a folder or a .tar"), "%s", err.msg);
}

static void test_class_map(void)
{
    char root[256];
    tpath(root, sizeof root, "ds");
    put("ds/train/map.txt", "class10\r\n  class2 \nunused\n"); /* under the split root, as timm looks */
    CtErr err;
    Dataset *ds;
    DatasetConfig cfg = {.root = root, .split = "train", .class_map = "map.txt"}; /* relative: found under root */
    int rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK(dataset_num_classes(ds) == 3);
        CHECK(!strcmp(dataset_class_name(ds, 0), "class10") && !strcmp(dataset_class_name(ds, 1), "class2"));
        CHECK(dataset_len(ds) == 5); /* Class1 and nested are left out */
        DatasetReader *r;
        CHECK(dataset_reader_open(&r, ds, &err) == 0);
        check_sample(ds, r, 0, "/train/class2/.hidden.jpg", 1, NULL);
        check_sample(ds, r, 4, "/train/class10/a.jpeg", 0, NULL);
        dataset_reader_close(r);
        dataset_close(ds);
    }
    /* pickle.dumps({'class2': 5, 'class10': 0}, protocol=4): timm's ImageFolder labels class2 5, class10 0 */
    static const char pkl[] = "\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x06\x63\x6c\x61\x73\x73"
                              "\x32\x94\x4b\x05\x8c\x07\x63\x6c\x61\x73\x73\x31\x30\x94\x4b\x00\x75\x2e";
    char path[512];
    tpath(path, sizeof path, "ds/train/map.pkl");
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(pkl, 1, sizeof pkl - 1, f) == sizeof pkl - 1);
    if (f)
        fclose(f);
    cfg.class_map = "map.pkl";
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK(dataset_num_classes(ds) == 6);
        CHECK(!strcmp(dataset_class_name(ds, 5), "class2") && !strcmp(dataset_class_name(ds, 0), "class10") &&
              !strcmp(dataset_class_name(ds, 3), ""));
        CHECK(dataset_len(ds) == 5);
        DatasetReader *r;
        CHECK(dataset_reader_open(&r, ds, &err) == 0);
        check_sample(ds, r, 0, "/train/class2/.hidden.jpg", 5, NULL);
        check_sample(ds, r, 4, "/train/class10/a.jpeg", 0, NULL);
        dataset_reader_close(r);
        dataset_close(ds);
    }
    /* pickle.dumps({'class2': 'x'}, protocol=4): not an index */
    static const char bad_pkl[] = "\x80\x04\x95\x11\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x8c\x06\x63\x6c\x61\x73"
                                  "\x73\x32\x94\x8c\x01\x78\x94\x73\x2e";
    f = fopen(path, "wb");
    CHECK(f && fwrite(bad_pkl, 1, sizeof bad_pkl - 1, f) == sizeof bad_pkl - 1);
    if (f)
        fclose(f);
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, "'class2' maps to a str, not a class index"), "%s", err.msg);
    put("ds/map.json", "{}");
    cfg.class_map = "map.json";
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, "map.json") && strstr(err.msg, ".pkl"), "%s", err.msg);
    cfg.class_map = "nope.txt";
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, "nope.txt") && strstr(err.msg, "not found"), "%s", err.msg);
    put("ds/train/none.txt", "zebra\n");
    cfg.class_map = "none.txt";
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, "none.txt"), "%s", err.msg);
    put("ds/train/twice.txt", "class10\nclass2\nclass10 \n"); /* one class named twice */
    cfg.class_map = "twice.txt";
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, "'class10' is on lines 1 and 3"), "%s", err.msg);
    /* --input-key: timm's ReaderImageFolder(input_key='.jpeg;.txt') lists Class1/z.Jpeg,
     * class2/notes.txt, class10/a.jpeg, then the class maps directly in train (class '', index 0) */
    cfg = (DatasetConfig){.root = root, .split = "train", .input_key = ".jpeg;.txt"};
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc == 0) {
        DatasetReader *r;
        CHECK(dataset_reader_open(&r, ds, &err) == 0);
        CHECK(dataset_len(ds) == 6 && dataset_num_classes(ds) == 4);
        check_sample(ds, r, 0, "/train/Class1/z.Jpeg", 1, NULL);
        check_sample(ds, r, 1, "/train/class2/notes.txt", 2, NULL);
        check_sample(ds, r, 2, "/train/class10/a.jpeg", 3, NULL);
        check_sample(ds, r, 3, "/train/map.txt", 0, NULL);
        dataset_reader_close(r);
        dataset_close(ds);
    }
    /* timm's folder reader takes no target key, its tar reader no input key either */
    cfg.target_key = "y";
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, "--target-key is for wds datasets"), "%s", err.msg);
}

typedef struct Want {
    const char *name;
    int label;
    size_t size;
} Want;

static void check_tar(const char *file, const char *const *classes, int nclasses, const Want *want, int n)
{
    const char *data = getenv("CTIMM_TEST_DATA");
    char path[512];
    snprintf(path, sizeof path, "%s/loader/%s", data ? data : "tests/data", file);
    CtErr err;
    Dataset *ds;
    DatasetConfig cfg = {.root = path, .split = "train"}; /* split search does not apply to a tar */
    int rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc)
        return;
    CHECK(dataset_kind(ds) == CT_DS_TAR);
    CHECKF((int)dataset_len(ds) == n, "%s: %zu samples, want %d", file, dataset_len(ds), n);
    CHECKF(dataset_num_classes(ds) == nclasses, "%s: %d classes", file, dataset_num_classes(ds));
    for (int c = 0; c < nclasses && c < dataset_num_classes(ds); c++)
        CHECKF(!strcmp(dataset_class_name(ds, c), classes[c]), "%s: class %d is '%s', want '%s'", file, c,
               dataset_class_name(ds, c), classes[c]);
    DatasetReader *r;
    CHECK(dataset_reader_open(&r, ds, &err) == 0);
    for (int i = 0; i < n && i < (int)dataset_len(ds); i++) {
        check_sample(ds, r, (size_t)i, want[i].name, want[i].label, NULL);
        const uint8_t *d;
        size_t len;
        rc = dataset_read(r, (size_t)i, &d, &len, &err);
        CHECKF(rc == 0 && len == want[i].size, "%s #%d: %zu bytes, want %zu", file, i, len, want[i].size);
        /* text members hold their own path (the part after any "inner.tar:") */
        const char *member = strrchr(want[i].name, ':');
        member = member ? member + 1 : want[i].name;
        if (rc == 0 && strcmp(file, "photos.tar"))
            CHECKF(len == strlen(member) && !memcmp(d, member, len), "%s #%d: wrong bytes", file, i);
    }
    dataset_reader_close(r);
    dataset_close(ds);
}

static void test_tar(void)
{
    /* timm's ReaderImageInTar on the same files (make_fixtures.py --show) */
    static const char *const tree_classes[] = {"", "Class1", "class2", "class10", "inner", "nested", "sub"};
    char long_l[200], long_p[200], long_g[200];
    snprintf(long_l, sizeof long_l, "class10/%.*s.png", 120,
             "llllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllllll"
             "llllllllllllllllllll");
    snprintf(long_p, sizeof long_p, "inner.tar:%.*s/class2/%.*s.jpg", 90,
             "pppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp", 60,
             "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq");
    snprintf(long_g, sizeof long_g, "a/%.*s.jpg", 150,
             "gggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggggg"
             "gggggggggggggggggggggggggggggggggggggggggggggggggg");
    const Want tree[] = {
        {":./Class1/z.Png", 1, 14},       {":class2/.hidden.jpg", 2, 18}, {":class2/img9.JPG", 2, 15},
        {":class2/img10.jpg", 2, 16},     {":class3/nested/n.jpg", 5, 19}, {":class10/a.jpeg", 3, 14},
        {long_l, 3, 132},                 {long_p, 2, 162},               {":inner.tar:sub/y.png", 6, 9},
        {":top.jpg", 0, 7},               {":inner.tar:x.jpg", 4, 5},
    };
    check_tar("tree.tar", tree_classes, 7, tree, 11);
    static const char *const gnu_classes[] = {"a", "b"};
    const Want gnu[] = {{":a/2.jpg", 0, 7}, {long_g, 0, 156}, {":b/1.jpg", 1, 7}};
    check_tar("gnu.tar", gnu_classes, 2, gnu, 3);
    static const char *const photo_classes[] = {"cat", "dog"};
    const Want photos[] = {{"cat/0.jpg", 0, 700}, {"cat/1bad.jpg", 0, 100}, {"cat/2.jpg", 0, 689},
                           {"cat/4.jpg", 0, 675}, {"dog/1.jpg", 1, 691},    {"dog/3.png", 1, 145},
                           {"dog/5.jpg", 1, 685}};
    check_tar("photos.tar", photo_classes, 2, photos, 7);
    /* timm's ReaderImageInTar takes no input_key (a TypeError) */
    char path[1024];
    snprintf(path, sizeof path, "%s/loader/photos.tar", test_data_dir());
    DatasetConfig cfg = {.root = path, .input_key = ".jpg"};
    Dataset *ds;
    CtErr err;
    CHECK(dataset_open(&ds, &cfg, &err) == -1 && strstr(err.msg, "--input-key is for folder and wds datasets"));
}

/* Copies the fixture, lets `damage` change it, and expects dataset_open to fail with `want` in the message. */
static void check_bad_tar(const char *what, long cut, long flip_at, const char *want)
{
    const char *data = getenv("CTIMM_TEST_DATA");
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/loader/tree.tar", data ? data : "tests/data");
    tpath(dst, sizeof dst, "bad.tar");
    FILE *f = fopen(src, "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    static unsigned char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (cut >= 0 && (size_t)cut < n)
        n = (size_t)cut;
    if (flip_at >= 0)
        buf[flip_at] ^= 0x5a;
    f = fopen(dst, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    CtErr err;
    Dataset *ds;
    DatasetConfig cfg = {.root = dst};
    int rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == -1 && strstr(err.msg, dst) && strstr(err.msg, want), "%s: %s", what, rc ? err.msg : "opened");
    if (rc == 0)
        dataset_close(ds);
}

static void test_bad_tars(void)
{
    check_bad_tar("header checksum", -1, 1536 + 10, "corrupt tar header at offset 1536");
    check_bad_tar("first header", -1, 0, "not a tar archive");
    check_bad_tar("truncated in a member", 1024 + 3, -1, "runs past the end");
    check_bad_tar("truncated in a header", 1536 + 100, -1, "truncated header at offset 1536");
    check_bad_tar("empty", 0, -1, "empty");
    check_bad_tar("inner tar header", -1, 12800 + 512 + 512 + 20, "inner.tar: corrupt tar header");
}

static void test_synthetic(void)
{
    CtErr err;
    Dataset *ds;
    DatasetConfig cfg = {.kind = CT_DS_SYNTHETIC, .synthetic_len = 25, .synthetic_classes = 12,
                         .synthetic_img_size = 48, .synthetic_seed = 7};
    int rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc)
        return;
    CHECK(dataset_len(ds) == 25 && dataset_num_classes(ds) == 12);
    CHECK(dataset_label(ds, 13) == 1 && !strcmp(dataset_class_name(ds, 11), "square_1"));
    DatasetReader *r1, *r2;
    CHECK(dataset_reader_open(&r1, ds, &err) == 0 && dataset_reader_open(&r2, ds, &err) == 0);
    const uint8_t *a, *b;
    size_t na, nb;
    CHECK(dataset_read(r1, 5, &a, &na, &err) == 0 && dataset_read(r2, 5, &b, &nb, &err) == 0);
    CHECK(na == nb && na > 200 && a[0] == 0xFF && a[1] == 0xD8 && !memcmp(a, b, na));
    CHECK(dataset_read(r2, 6, &b, &nb, &err) == 0 && (na != nb || memcmp(a, b, na)));
    dataset_reader_close(r1);
    dataset_reader_close(r2);
    dataset_close(ds);
    cfg.synthetic_classes = 0;
    CHECK(dataset_open(&ds, &cfg, &err) == -1 && strstr(err.msg, "synthetic"));
}

static int count_jpegs(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.jpg' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

static void test_shapes(void)
{
    char root[256];
    tpath(root, sizeof root, "shapes");
    ShapesConfig c = {.img_size = 24, .train_per_class = 3, .val_per_class = 1, .quality = 90, .seed = 3};
    CtErr err;
    int gen = -1;
    int rc = shapes_generate(root, &c, &gen, &err);
    CHECKF(rc == 0 && gen == 1, "%s", err.msg);
    CHECK(count_jpegs(root) == 40);
    rc = shapes_generate(root, &c, &gen, &err);
    CHECKF(rc == 0 && gen == 0, "second run must keep the set: %s", err.msg);
    Dataset *ds;
    DatasetConfig cfg = {.root = root, .split = "train"};
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK(dataset_len(ds) == 30 && dataset_num_classes(ds) == 10);
        CHECK(!strcmp(dataset_class_name(ds, 0), "checker") && !strcmp(dataset_class_name(ds, 9), "triangle"));
        dataset_close(ds);
    }
    cfg.split = "validation";
    rc = dataset_open(&ds, &cfg, &err);
    CHECKF(rc == 0 && dataset_len(ds) == 10, "%s", err.msg);
    if (rc == 0)
        dataset_close(ds);
    /* another config replaces the set */
    c.train_per_class = 2;
    rc = shapes_generate(root, &c, &gen, &err);
    CHECKF(rc == 0 && gen == 1 && count_jpegs(root) == 30, "%s", err.msg);
    /* a folder that is not a shapes set is refused, and left alone */
    char other[256];
    tpath(other, sizeof other, "ds3");
    rc = shapes_generate(other, &c, &gen, &err);
    CHECKF(rc == -1 && strstr(err.msg, other) && strstr(err.msg, "not a ctimm shapes dataset"), "%s", err.msg);
    CHECK(count_jpegs(other) == 1);
    /* a temporary folder of a run that died is removed; an interrupted set (no marker) is not at root */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    char stale[300];
    snprintf(stale, sizeof stale, "%s/fresh.partial.%ld", tmpdir, (long)child);
    mkdir(stale, 0777);
    snprintf(stale, sizeof stale, "fresh.partial.%ld/train", (long)child);
    mk(stale);
    tpath(root, sizeof root, "fresh");
    rc = shapes_generate(root, &c, &gen, &err);
    CHECKF(rc == 0 && gen == 1, "%s", err.msg);
    snprintf(stale, sizeof stale, "%s/fresh.partial.%ld", tmpdir, (long)child);
    struct stat st;
    CHECKF(stat(stale, &st) != 0, "stale %s left behind", stale);
    /* same seed and size: the same pixels, whatever was generated before */
    uint8_t a[24 * 24 * 3], b[24 * 24 * 3];
    CtRng r1 = rng_for(1, 2, 3), r2 = rng_for(1, 2, 3);
    shapes_draw(4, 24, &r1, a);
    shapes_draw(4, 24, &r2, b);
    CHECK(!memcmp(a, b, sizeof a));
    c.quality = 0;
    CHECK(shapes_generate(root, &c, &gen, &err) == -1 && strstr(err.msg, "quality"));
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ctimm_test_dataset_%ld", (long)getpid());
    if (mkdir(tmpdir, 0777) != 0) {
        fprintf(stderr, "cannot create %s: %s\n", tmpdir, strerror(errno));
        return 1;
    }
    test_natural_order();
    test_folder();
    test_class_map();
    test_tar();
    test_bad_tars();
    test_synthetic();
    test_shapes();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'.*", tmpdir, tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_done("test_dataset");
}
