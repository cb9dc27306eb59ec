/*
 * A graph's content hash: everything its compiled form depends on (nodes,
 * attributes, value types, layouts and roles, outputs), not its names. The
 * backends key their per-graph compiled programs by it.
 */
#ifndef CTIMM_GRAPH_HASH_H
#define CTIMM_GRAPH_HASH_H

#include <xxhash.h>

#include "ir/ir.h"

XXH128_hash_t graph_content_hash(const Graph *g);

#endif
