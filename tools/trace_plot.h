/* trace_plot.h — a trace's memory timeline as SVG or as a self-contained HTML page. */
#ifndef RAP_TRACE_PLOT_H
#define RAP_TRACE_PLOT_H

#include "trace_read.h"

typedef struct plot_opts {
  const char *out;         /* FILE.svg or FILE.html */
  const char *allocator;   /* whose user calls make the live figures; NULL: every allocator's */
  const char *title;
} plot_opts;

int trace_plot(const trace *t, const plot_opts *o);   /* 0, or 1 with a sentence on stderr */

#endif
