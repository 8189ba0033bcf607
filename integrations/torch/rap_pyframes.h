/* rap_pyframes.h — the Python frames of an allocation, for the trace (rap_pyframes.cpp). */
#ifndef RAP_PYFRAMES_H
#define RAP_PYFRAMES_H

#include <stdbool.h>
#include <stddef.h>

enum { RAP_TORCH_PYTHON_STACK_MAX = 32 };

int  pyframes_set_depth(int depth);   /* 0 to 32 frames (0: none); RAP_ERR_INVALID otherwise */
int  pyframes_depth(void);            /* the depth set, else RAP_TRACE_PYTHON_STACK's (read once) */
/* The calling thread's innermost Python frames into buf, "FILE:LINE FUNCTION" lines, when a trace
 * is open and frames are asked for; false (buf untouched or empty) otherwise. */
bool pyframes_gather(char *buf, size_t cap);

#endif /* RAP_PYFRAMES_H */
