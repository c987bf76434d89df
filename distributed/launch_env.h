/* The launch without MPI (issue 36): what torchrun or Slurm's srun put in
 * a rank's environment, read into one struct. Pure: it reads the array it
 * is given (tests pass their own), never prints, never opens a socket.
 *
 * Two forms, either or both:
 *   torchrun: RANK, WORLD_SIZE, LOCAL_RANK
 *   Slurm:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
 * and the rendezvous (rank 0's address) from TRAINYARD_RENDEZVOUS=host:port
 * or else MASTER_ADDR + MASTER_PORT, and the shared secret TRAINYARD_JOB_TOKEN
 * (16 characters or more) that every rank proves it holds. A world of one
 * rank needs neither rendezvous nor token. */
#ifndef TY_DIST_LAUNCH_ENV_H_
#define TY_DIST_LAUNCH_ENV_H_

#include <stdbool.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_LAUNCH_TOKEN_MIN 16

typedef struct ty_launch_env_t {
  int rank, world_size, local_rank;
  const char *form;     /* "torchrun" or "Slurm": the variables it came from */
  char host[256];       /* the rendezvous: rank 0's address */
  int port;
  char token[512];      /* TRAINYARD_JOB_TOKEN; never printed */
} ty_launch_env_t;

/* `envp`: "NAME=VALUE" strings, NULL-terminated (environ). INVALID_ARGUMENT
 * naming the variable and the fix: missing, not a decimal integer,
 * negative, RANK >= WORLD_SIZE, LOCAL_RANK > RANK, a port outside 1-65535,
 * both forms present and disagreeing, the token missing or short. */
ty_status_t ty_launch_env_parse(char *const *envp, ty_launch_env_t *out);

/* Whether `envp` holds a launch of several ranks (--distributed auto):
 * RANK and WORLD_SIZE, or SLURM_PROCID and SLURM_NTASKS > 1. Into `which`
 * (may be NULL) the variable that said so. */
bool ty_launch_env_present(char *const *envp, char *which, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* TY_DIST_LAUNCH_ENV_H_ */
