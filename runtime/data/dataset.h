/*
 * Datasets: an ordered list of (sample, label) where a sample is the encoded
 * bytes of one image (JPEG or PNG), read on demand. The kinds follow timm's
 * create_dataset with a folder or .tar root:
 *
 *  - folder: ImageFolder (timm reader_image_folder.py). Files with extension
 *    .jpg, .jpeg or .png (any case) anywhere under root; a file's class is
 *    the name of the folder holding it (leaf name only, so a/x/1.jpg and
 *    b/x/2.jpg are both class "x"; files directly in root are class "").
 *    Classes are numbered in natural order (timm's natural_key: lower case,
 *    digit runs compared as numbers, so "class2" < "class10"), samples are
 *    sorted by the natural order of their paths.
 *  - tar: a .tar file of such a folder, indexed once (ustar, GNU and pax
 *    headers) and read by offset, never unpacked (timm reader_image_in_tar.py).
 *    A member that is itself a .tar is indexed too, one level deep, its name
 *    without .tar being the folder of its members (ImageNet's train tar of
 *    per-class tars). Samples are sorted by member path.
 *  - wds: WebDataset shards in a folder (timm reader_wds.py): split is the
 *    name of a split of root/_info.json (or info.json; no synonyms), or a
 *    shard pattern such as "train-{000000..000009}.tar|N" (brace-expanded;
 *    N samples). Each shard's members are grouped by key (the name up to
 *    the first dot of its base name) into samples of an image (the first
 *    present of input_key's extensions, default jpg, png, webp) and a label:
 *    the .cls number, or the .json field target_key names, else the split's
 *    alt_label (below 0: the sample is left out, as timm's _decode drops it). Key groups without an image or label are left
 *    out as timm's pipeline skips them. Samples stay in shard order (the
 *    loader makes wds epochs by shard: runtime/data/wds.h); classes are
 *    numbered labels "0".."max". All shards are indexed at open (headers and
 *    label members only). A class map must be a .pkl dict of label numbers
 *    to indices (timm's remap_target; a label it lacks is an error, as
 *    timm's KeyError); a .txt matches no numeric label.
 *  - synthetic: `len` shapes images (runtime/data/shapes.h) of img_size,
 *    JPEG-encoded per read, label = index % classes; for tests and benchmarks.
 *
 * Split search (timm dataset_factory._search_split): with a split name, a
 * folder root/<split> is used when present, else the first present of the
 * synonyms (train, training) or (val, valid, validation, eval, evaluation).
 * Unlike timm, which falls back to root itself, a root holding some split
 * folders but not the one asked for is an error; a root with no split
 * folders at all is used as it is.
 *
 * A class map (timm class_map.py) is a .txt of one class name per line,
 * the line number being its index, or a .pkl of a pickled dict of class
 * names to indices (several names may share one; the class count is the
 * largest index + 1); samples of classes not listed are left out. A relative path is tried as given, then under the root that split
 * search chose (as timm does).
 *
 * Datasets are immutable once opened and may be shared by threads; reading
 * goes through a DatasetReader, one per thread.
 */
#ifndef CTIMM_DATASET_H
#define CTIMM_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"

typedef enum CtDatasetKind {
    CT_DS_AUTO,      /* a .tar file: tar; a folder: folder */
    CT_DS_FOLDER,
    CT_DS_TAR,
    CT_DS_SYNTHETIC,
    CT_DS_WDS,       /* WebDataset shards (train.py's --dataset wds/NAME) */
} CtDatasetKind;

typedef struct DatasetConfig {
    CtDatasetKind kind;
    const char *root;      /* folder or .tar file */
    const char *split;     /* "train", "validation", ...; NULL or "": no split search */
    const char *class_map; /* NULL or "": classes from the folder names */
    size_t num_samples;    /* wds: the split's sample count; 0: the info's or the pattern's "|N" */
    /* train.py's --input-key: folder, the ';'-separated file extensions (with their dot, any case of the
     * file's) that are images (timm's find_images_and_targets types); wds, the member extensions of the
     * image in order of preference (default jpg;png;webp). NULL: the default. Not for tar. */
    const char *input_key;
    /* --target-key, wds only: the .json field (or '/' path) holding the label, over the split's alt_label */
    const char *target_key;
    /* synthetic only */
    size_t synthetic_len;
    int synthetic_classes;
    int synthetic_img_size;
    uint64_t synthetic_seed;
} DatasetConfig;

typedef struct Dataset Dataset;
typedef struct DatasetReader DatasetReader;

int dataset_open(Dataset **out, const DatasetConfig *cfg, CtErr *err);
void dataset_close(Dataset *ds);

size_t dataset_len(const Dataset *ds);
CtDatasetKind dataset_kind(const Dataset *ds);
/* The folder or tar actually read (after split search). */
const char *dataset_root(const Dataset *ds);
int dataset_num_classes(const Dataset *ds);
/* Name of class c (NULL when c is out of range). */
const char *dataset_class_name(const Dataset *ds, int c);
int64_t dataset_label(const Dataset *ds, size_t i);
/* A readable name of sample i for messages: the file's path, or
 * "archive.tar:member", or "synthetic:i". Written to buf (truncated). */
void dataset_sample_name(const Dataset *ds, size_t i, char *buf, size_t n);

/* wds only (else -1): the shards, where each one's samples start
 * ([nshards + 1]) and the split's sample count (0 when unknown). */
int dataset_wds_shards(const Dataset *ds, size_t *nshards, const size_t **shard_first, size_t *num_samples);

/* A reader keeps per-thread state (a buffer, an encoder) and is used by one
 * thread at a time. */
int dataset_reader_open(DatasetReader **out, const Dataset *ds, CtErr *err);
void dataset_reader_close(DatasetReader *r);
/* Reads sample i; *data stays valid until the reader's next read. A file
 * that vanished or cannot be read is an error naming it (not fatal: the
 * loader skips it). */
int dataset_read(DatasetReader *r, size_t i, const uint8_t **data, size_t *n, CtErr *err);

/* timm's natural_key order: < 0, 0, > 0. Exposed for tests. */
int natural_cmp(const char *a, const char *b);

#endif
