/* main.c — rap-bench's entry point; the program is bench.c. */
#include "bench.h"

int main(int argc, char **argv) { return rap_bench_main(argc, argv); }
