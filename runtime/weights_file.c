#include "runtime/weights_file.h"

#include <stdio.h>

#include "runtime/torch_file.h"

int weights_is_torch(const char *path)
{
    unsigned char head[16];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return torch_file_sniff(head, n);
}

int weights_read(const char *path, int use_ema, StFile *out, int *from_ema, CtErr *err)
{
    if (weights_is_torch(path))
        return torch_read(path, use_ema, out, from_ema, err);
    if (from_ema)
        *from_ema = 0;
    return st_read(path, out, err);
}
