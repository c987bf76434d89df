/* The Trainyard TCP transport (distributed/tcp_world.c, issue 36) on 3 ranks
 * started by tests/distributed/run_env.py with torchrun's variables: two ranks
 * sending each other 8 MiB at once (no deadlock), a message of another
 * size refused, the all-reduce's fixed summation order (rank 0 + rank 1,
 * then + rank 2, whatever the arrival order), every rank's host known,
 * and a peer whose connection ends named at once, long before the
 * deadline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "distributed/dist.h"
#include "rank_check.h"

static ty_dist_t *g_dist;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Ranks 0 and 1 send each other `bytes` at once, then receive. */
static void test_exchange(size_t bytes) {
  if (g_rank > 1) return;
  const int peer = 1 - g_rank;
  unsigned char *out = malloc(bytes ? bytes : 1), *in = malloc(bytes ? bytes : 1);
  CHECK(out && in, "out of memory");
  for (size_t i = 0; i < bytes; ++i) out[i] = (unsigned char)(i * 7 + (size_t)g_rank);
  ty_dist_send_t *send = NULL;
  ty_status_t s = ty_dist_send_start(g_dist, peer, 3, out, bytes, "the exchange", &send);
  CHECK(!s, "send_start: %s", ty_status_message(s));
  s = ty_dist_recv(g_dist, peer, 3, in, bytes, "the exchange");
  CHECK(!s, "recv of %zu bytes: %s", bytes, ty_status_message(s));
  s = ty_dist_send_wait(g_dist, send);
  CHECK(!s, "send_wait: %s", ty_status_message(s));
  for (size_t i = 0; i < bytes; ++i) {
    CHECK(in[i] == (unsigned char)(i * 7 + (size_t)peer), "byte %zu of %zu differs", i, bytes);
  }
  free(out);
  free(in);
}

static void test_size_refused(void) {
  if (g_rank > 1) return;
  double v[2] = {1, 2};
  if (g_rank == 0) {
    ty_dist_send_t *send = NULL;
    ty_status_t s = ty_dist_send_start(g_dist, 1, 4, v, 8, "eight bytes", &send);
    CHECK(!s, "send_start: %s", ty_status_message(s));
    s = ty_dist_send_wait(g_dist, send);
    CHECK(!s, "send_wait: %s", ty_status_message(s));
  } else {
    ty_status_t s = ty_dist_recv(g_dist, 0, 4, v, 16, "sixteen bytes");
    CHECK(s, "a message of 8 bytes taken for 16");
    CHECK(strstr(ty_status_message(s), "rank 0 sent 8 bytes (tag 4) where 16 were expected"),
          "%s", ty_status_message(s));
    ty_status_free(s);
  }
}

/* f32: (1e8 + 1) - 1e8 is 0 (1e8 + 1 rounds to 1e8); any other order
 * gives 1. Rank 2 arrives first (ranks 0 and 1 sleep), so an order by
 * arrival would differ. */
static void test_sum_order(void) {
  const float mine[3] = {1e8f, 1.0f, -1e8f};
  float v = mine[g_rank];
  if (g_rank < 2) usleep(200 * 1000);
  ty_status_t s = ty_dist_all_reduce_sum(g_dist, TY_DTYPE_F32, &v, 1, "the order sum");
  CHECK(!s, "all-reduce: %s", ty_status_message(s));
  CHECK(v == 0.0f, "the sum is %g, not (1e8 + 1) - 1e8 = 0 in f32 (rank order)", (double)v);
  int64_t i = g_rank + 1, m = g_rank;
  s = ty_dist_all_reduce_sum(g_dist, TY_DTYPE_I64, &i, 1, "the i64 sum");
  CHECK(!s && i == 6, "i64 sum %lld", (long long)i);
  ty_dist_group_t *world = NULL;
  s = ty_dist_group(g_dist, "world", &world);
  if (!s) s = ty_dist_group_all_reduce(world, TY_DIST_REDUCE_MAX, TY_DTYPE_I64, &m, 1, "max");
  CHECK(!s && m == 2, "i64 max %lld", (long long)m);
  char buf[5] = "";
  if (g_rank == 2) memcpy(buf, "root", 5);
  s = ty_dist_broadcast(g_dist, 2, buf, 5, "the broadcast from rank 2");
  CHECK(!s && !strcmp(buf, "root"), "broadcast: %s", s ? ty_status_message(s) : buf);
}

static void test_hosts(void) {
  for (int r = 0; r < 3; ++r) {
    const char *h = ty_dist_rank_host(g_dist, r);
    CHECK(strstr(h, "(127.0.0.1)"), "rank %d's host '%s'", r, h);
  }
  CHECK(!strcmp(ty_dist_rank_host(g_dist, 3), ""), "a rank past the world has a host");
  CHECK(strstr(ty_dist_library(g_dist), "Trainyard TCP transport (rendezvous 127.0.0.1:"),
        "library %s", ty_dist_library(g_dist));
}

/* Rank 2 leaves without a word; rank 0, waiting for its message under a
 * 30 s deadline, is told at once, with its host. */
static void test_closed_peer(void) {
  if (g_rank == 2) _exit(0);
  if (g_rank != 0) return;
  double t0 = now();
  char b[8];
  ty_status_t s = ty_dist_recv(g_dist, 2, 9, b, sizeof(b), "a message rank 2 never sends");
  CHECK(s, "a message from a rank that left");
  CHECK(strstr(ty_status_message(s), "rank 2 (host ") &&
            strstr(ty_status_message(s), ", 127.0.0.1) closed its connection"),
        "%s", ty_status_message(s));
  CHECK(now() - t0 < 10, "took %.1f s (the deadline is 30 s)", now() - t0);
  ty_status_free(s);
}

int main(void) {
  ty_status_t s = ty_dist_open(TY_DIST_ENV, NULL, 30.0, &g_dist);
  CHECK(!s, "open: %s", s ? ty_status_message(s) : "");
  g_rank = ty_dist_rank(g_dist);
  CHECK(ty_dist_size(g_dist) == 3, "needs 3 ranks, has %d", ty_dist_size(g_dist));
  test_hosts();
  test_exchange(0);
  test_exchange(1);
  test_exchange((size_t)8 << 20);
  test_size_refused();
  test_sum_order();
  test_closed_peer();
  if (g_rank == 0) printf("tcp_transport_test: all checks passed\n");
  ty_dist_close(g_dist);
  return 0;
}
