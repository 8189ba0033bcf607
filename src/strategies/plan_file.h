/* plan_file.h — what a plan file may hold: the bounds rap-trace plan (tools/trace_plan.c) writes
 * within and the Planned strategy's reader (planned_load.c) checks.
 *
 * One list for both sides, so that the planner refuses, with a sentence, every trace whose plan
 * the reader would refuse, and the reader takes every plan the planner writes. The header needs
 * nothing but <stdint.h>: tools/ include it without the library's internals.
 */
#ifndef RAP_PLAN_FILE_H
#define RAP_PLAN_FILE_H

#include <stdint.h>

#define RAPI_PLAN_MAX_STREAMS 255u            /* streams of a domain */
#define RAPI_PLAN_MAX_ENTRIES (1u << 26)      /* entries of a domain */
#define RAPI_PLAN_MAX_ALIGNMENT (1ull << 30)  /* the alignment of places, a power of two */
#define RAPI_PLAN_MAX_ARENA (UINT64_MAX / 4)  /* bytes of an arena; a placed entry fits in it */
#define RAPI_PLAN_MAX_LINE 4096u              /* bytes of one line, its newline included */
#define RAPI_PLAN_MAX_NAME 1024u              /* bytes of a domain's name (its line has room) */
#define RAPI_PLAN_MAX_FILE (1ull << 34)       /* bytes of a whole file: 16 GiB */
#define RAPI_PLAN_ENTRY_LINE 128u             /* an entry line is shorter: six numbers of 64 bits */

#endif /* RAP_PLAN_FILE_H */
