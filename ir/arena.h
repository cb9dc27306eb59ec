/* A bump allocator for IR objects that live as long as their graph:
 * names and scope strings. Freed all at once. */
#ifndef CTIMM_ARENA_H
#define CTIMM_ARENA_H

#include <stddef.h>

typedef struct CtArenaBlock CtArenaBlock;

typedef struct CtArena {
    CtArenaBlock *head;
} CtArena;

void *arena_alloc(CtArena *a, size_t n);
char *arena_strdup(CtArena *a, const char *s);
char *arena_printf(CtArena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(CtArena *a);

#endif
