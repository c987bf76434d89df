/* Host transfers through Trainyard's MPI shim (distributed/), the path a pipeline
 * stage's state, its activations and the tensor-parallel checkpoint gather
 * take: rank 0 sends BYTES to rank 1 (point to point, in the shim's
 * pieces), then rank 0 broadcasts BYTES to every rank; each timed REPEAT
 * times, GB/s printed by rank 0. The receivers check every byte (exit 1,
 * DATA_LOSS, on a difference), so tests/distributed runs it on a few MiB to take
 * the shim's large-transfer path in CI.
 *
 *   mpirun -np 2 build/bin/mpi_bench [--bytes N] [--repeat R]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distributed/dist.h"
#include "hal/status.h"

static double ty_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A positive decimal count, the whole of `text`. */
static bool ty_bench_count(const char *text, unsigned long long *out) {
  char *end = NULL;
  *out = strtoull(text, &end, 10);
  return text[0] >= '0' && text[0] <= '9' && end && *end == '\0' && *out > 0;
}

/* Whether every byte of buf is `value` (rank 0 fills its buffer with 1s). */
static bool ty_bench_holds(const char *buf, size_t bytes, char value) {
  for (size_t i = 0; i < bytes; ++i) {
    if (buf[i] != value) return false;
  }
  return true;
}

static int ty_bench_fail(ty_status_t s) {
  fprintf(stderr, "mpi_bench: %s\n", ty_status_message(s));
  ty_status_free(s);
  return 1;
}

int main(int argc, char **argv) {
  size_t bytes = (size_t)256 << 20;
  int repeat = 3;
  for (int i = 1; i < argc; i += 2) { /* option, value */
    unsigned long long v = 0;
    const bool valued = i + 1 < argc && ty_bench_count(argv[i + 1], &v);
    if (!strcmp(argv[i], "--bytes") && valued) {
      bytes = (size_t)v;
    } else if (!strcmp(argv[i], "--repeat") && valued && v <= 1000000) {
      repeat = (int)v;
    } else {
      fprintf(stderr, "mpi_bench: bad option '%s'\nusage: mpirun -np N %s [--bytes N >= 1] "
              "[--repeat R >= 1]\n", argv[i], argv[0]);
      return 2;
    }
  }
  ty_dist_t *dist = NULL;
  ty_status_t s = ty_dist_open(TY_DIST_MPI, TY_BENCH_SHIM_DIR, 300.0, &dist);
  if (s) return ty_bench_fail(s);
  const int rank = ty_dist_rank(dist), size = ty_dist_size(dist);
  char *buf = malloc(bytes ? bytes : 1);
  if (!buf || size < 2) {
    fprintf(stderr, "mpi_bench: %s\n", buf ? "needs 2 ranks or more" : "out of memory");
    free(buf);
    ty_dist_close(dist);
    return 1;
  }
  memset(buf, rank + 1, bytes);
  for (int r = 0; r < repeat && !s; ++r) {
    double t0 = ty_now();
    if (rank == 0) {
      ty_dist_send_t *send = NULL;
      s = ty_dist_send_start(dist, 1, 7, buf, bytes, "the bench message", &send);
      if (!s) s = ty_dist_send_wait(dist, send);
    } else if (rank == 1) {
      s = ty_dist_recv(dist, 0, 7, buf, bytes, "the bench message");
    }
    const double p2p = ty_now() - t0;
    if (!s && rank == 1 && !ty_bench_holds(buf, bytes, 1)) {
      s = ty_status_make(TY_CODE_DATA_LOSS, "rank 1 received other bytes than rank 0 sent");
    }
    if (!s) {
      if (rank != 0) memset(buf, rank + 1, bytes);
      t0 = ty_now();
      s = ty_dist_broadcast(dist, 0, buf, bytes, "the bench broadcast");
    }
    const double bc = ty_now() - t0;
    if (!s && !ty_bench_holds(buf, bytes, 1)) {
      s = ty_status_make(TY_CODE_DATA_LOSS, "rank %d's broadcast copy differs from rank 0's",
                         rank);
    }
    if (!s && rank == 0) {
      printf("%zu bytes: send/recv %.3f s (%.2f GB/s), broadcast to %d ranks %.3f s (%.2f GB/s)\n",
             bytes, p2p, (double)bytes / p2p * 1e-9, size, bc, (double)bytes / bc * 1e-9);
    }
  }
  free(buf);
  ty_dist_close(dist);
  return s ? ty_bench_fail(s) : 0;
}
