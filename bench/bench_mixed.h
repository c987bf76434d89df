/* Benchmarks measure one backend: a mixed run (`URI?fallback=URI2`, which
 * runs some nodes on another device and copies values between them through
 * the host) would put another device's speed and the copies into its
 * figures, so every benchmark refuses one. */
#ifndef TY_BENCH_BENCH_MIXED_H_
#define TY_BENCH_BENCH_MIXED_H_

#include <stdbool.h>
#include <stdio.h>

#include "hal/device_uri.h"

/* True (after printing why to stderr) when `uri` asks for a mixed run. */
static inline bool ty_bench_refuses_mixed(const char *program, const char *uri) {
  bool mixed = ty_device_uri_has_option(uri, "fallback");
  if (mixed) {
    fprintf(stderr,
            "%s: '%s' asks for a mixed run (fallback=): benchmarks refuse mixed runs, whose "
            "figures would include another device and the copies between them\n",
            program, uri);
  }
  return mixed;
}

#endif /* TY_BENCH_BENCH_MIXED_H_ */
