/* The launch environment parser (distributed/launch_env.h, issue 36): both forms,
 * the rendezvous and the token read, and every refusal naming its
 * variable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/test_util.h"
#include "distributed/launch_env.h"

#define TOKEN "TRAINYARD_JOB_TOKEN=0123456789abcdef"

static ty_status_t parse(ty_launch_env_t *out, char **envp) {
  return ty_launch_env_parse(envp, out);
}

static void test_torchrun(void **state) {
  (void)state;
  char *env[] = {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "MASTER_ADDR=10.0.0.1",
                 "MASTER_PORT=29500", TOKEN, "OTHER=x", NULL};
  ty_launch_env_t e;
  TY_EXPECT_OK(parse(&e, env));
  assert_int_equal(e.rank, 3);
  assert_int_equal(e.world_size, 4);
  assert_int_equal(e.local_rank, 1);
  assert_string_equal(e.form, "torchrun");
  assert_string_equal(e.host, "10.0.0.1");
  assert_int_equal(e.port, 29500);
  assert_string_equal(e.token, "0123456789abcdef");
}

static void test_slurm(void **state) {
  (void)state;
  char *env[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                 "TRAINYARD_RENDEZVOUS=node1:1234", TOKEN, NULL};
  ty_launch_env_t e;
  TY_EXPECT_OK(parse(&e, env));
  assert_int_equal(e.rank, 1);
  assert_int_equal(e.world_size, 2);
  assert_string_equal(e.form, "Slurm");
  assert_string_equal(e.host, "node1");
  assert_int_equal(e.port, 1234);
  char *v6[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                "TRAINYARD_RENDEZVOUS=[fd00::1]:80", TOKEN, NULL};
  TY_EXPECT_OK(parse(&e, v6));
  assert_string_equal(e.host, "fd00::1");
  /* both forms, agreeing; MASTER_* and TRAINYARD_RENDEZVOUS agreeing */
  char *both[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "SLURM_PROCID=1",
                  "SLURM_NTASKS=2", "SLURM_LOCALID=1", "MASTER_ADDR=h", "MASTER_PORT=5",
                  "TRAINYARD_RENDEZVOUS=h:5", TOKEN, NULL};
  TY_EXPECT_OK(parse(&e, both));
  assert_string_equal(e.form, "torchrun");
  /* TRAINYARD_RENDEZVOUS wins (under torchrun MASTER_PORT is its store's) */
  char *over[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h", "MASTER_PORT=5",
                  "TRAINYARD_RENDEZVOUS=g:6", TOKEN, NULL};
  TY_EXPECT_OK(parse(&e, over));
  assert_string_equal(e.host, "g");
  assert_int_equal(e.port, 6);
}

static void test_one_rank_needs_nothing_more(void **state) {
  (void)state;
  char *env[] = {"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", NULL};
  ty_launch_env_t e;
  TY_EXPECT_OK(parse(&e, env));
  assert_int_equal(e.world_size, 1);
  assert_string_equal(e.host, "");
}

/* One refusal: INVALID_ARGUMENT whose message holds `text`. */
static void refused(char **env, const char *text) {
  ty_launch_env_t e;
  TY_EXPECT_STATUS(parse(&e, env), TY_CODE_INVALID_ARGUMENT, text);
}

static void test_refusals(void **state) {
  (void)state;
  char *none[] = {"PATH=/bin", NULL};
  refused(none, "RANK is not set: --distributed env needs RANK, WORLD_SIZE and LOCAL_RANK");
  char *no_size[] = {"RANK=0", "LOCAL_RANK=0", NULL};
  refused(no_size, "WORLD_SIZE is not set: set it to the number of ranks");
  char *no_local[] = {"RANK=0", "WORLD_SIZE=2", NULL};
  refused(no_local, "LOCAL_RANK is not set: set it to this rank's index");
  char *no_rank[] = {"WORLD_SIZE=2", "LOCAL_RANK=0", NULL};
  refused(no_rank, "RANK is not set: set it to this rank's number, 0 to WORLD_SIZE - 1");
  char *text[] = {"RANK=one", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL};
  refused(text, "RANK='one' is not an integer");
  char *huge[] = {"RANK=0", "WORLD_SIZE=99999999999", "LOCAL_RANK=0", NULL};
  refused(huge, "WORLD_SIZE='99999999999' is not an integer");
  char *neg[] = {"RANK=-1", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL};
  refused(neg, "RANK=-1: must be 0 or more");
  char *zero[] = {"RANK=0", "WORLD_SIZE=0", "LOCAL_RANK=0", NULL};
  refused(zero, "WORLD_SIZE=0: must be 1 or more");
  char *past[] = {"RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL};
  refused(past, "RANK=2 is not a rank of a job of WORLD_SIZE=2 ranks: ranks are 0 to 1");
  char *local[] = {"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", NULL};
  refused(local, "LOCAL_RANK=2 is more than RANK=1");
  char *slurm_past[] = {"SLURM_PROCID=4", "SLURM_NTASKS=4", "SLURM_LOCALID=0", NULL};
  refused(slurm_past, "SLURM_PROCID=4 is not a rank of a job of SLURM_NTASKS=4 ranks");
  char *disagree[] = {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=0", "SLURM_PROCID=0",
                      "SLURM_NTASKS=2", "SLURM_LOCALID=0", NULL};
  refused(disagree, "RANK=1 and SLURM_PROCID=0 disagree");
  char *disagree_size[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "SLURM_PROCID=0",
                           "SLURM_NTASKS=3", "SLURM_LOCALID=0", NULL};
  refused(disagree_size, "WORLD_SIZE=2 and SLURM_NTASKS=3 disagree");
  /* the rendezvous */
  char *no_rdzv[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", TOKEN, NULL};
  refused(no_rdzv, "no rendezvous: set MASTER_ADDR and MASTER_PORT");
  char *no_port[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h", TOKEN, NULL};
  refused(no_port, "MASTER_PORT is not set");
  char *no_addr[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_PORT=5", TOKEN, NULL};
  refused(no_addr, "MASTER_ADDR is not set");
  char *port0[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h", "MASTER_PORT=0",
                   TOKEN, NULL};
  refused(port0, "MASTER_PORT=0: a TCP port is 1 to 65535");
  char *port_big[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h",
                      "MASTER_PORT=65536", TOKEN, NULL};
  refused(port_big, "MASTER_PORT=65536: a TCP port is 1 to 65535");
  char *port_text[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h",
                       "MASTER_PORT=http", TOKEN, NULL};
  refused(port_text, "MASTER_PORT='http' is not an integer");
  char *rdzv_bad[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                      "TRAINYARD_RENDEZVOUS=node1", TOKEN, NULL};
  refused(rdzv_bad, "TRAINYARD_RENDEZVOUS='node1' is not host:port");
  char *rdzv_port[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                       "TRAINYARD_RENDEZVOUS=node1:99999", TOKEN, NULL};
  refused(rdzv_port, "TRAINYARD_RENDEZVOUS's port=99999: a TCP port is 1 to 65535");
  /* the token */
  char *no_token[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h",
                      "MASTER_PORT=5", NULL};
  refused(no_token, "TRAINYARD_JOB_TOKEN is not set: every rank of the job needs the same");
  char *short_token[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h",
                         "MASTER_PORT=5", "TRAINYARD_JOB_TOKEN=secret-123", NULL};
  refused(short_token, "TRAINYARD_JOB_TOKEN has 10 characters: it needs 16");
  /* never printed */
  ty_launch_env_t e;
  ty_status_t s = parse(&e, short_token);
  assert_non_null(s);
  assert_null(strstr(ty_status_message(s), "secret-123"));
  ty_status_free(s);
}

static void test_present(void **state) {
  (void)state;
  char which[32];
  char *torchrun[] = {"RANK=0", "WORLD_SIZE=1", NULL};
  assert_true(ty_launch_env_present(torchrun, which, sizeof(which)));
  assert_string_equal(which, "RANK");
  char *slurm1[] = {"SLURM_PROCID=0", "SLURM_NTASKS=1", NULL}; /* an sbatch shell */
  assert_false(ty_launch_env_present(slurm1, which, sizeof(which)));
  assert_string_equal(which, "");
  char *slurm2[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", NULL};
  assert_true(ty_launch_env_present(slurm2, NULL, 0));
  char *rank_only[] = {"RANK=0", NULL};
  assert_false(ty_launch_env_present(rank_only, NULL, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_torchrun),
      cmocka_unit_test(test_slurm),
      cmocka_unit_test(test_one_rank_needs_nothing_more),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_present),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
