/* trace_stacks.h — rap-trace stacks: the user's allocations grouped by the stack that made them. */
#ifndef RAP_TRACE_STACKS_H
#define RAP_TRACE_STACKS_H

#include "trace_read.h"

/* The top groups (allocator NULL: every allocator's) by peak live bytes, printed; 0, or 1 with a
 * sentence on standard error. */
int trace_stacks(const trace *t, const char *allocator, size_t top);

#endif
