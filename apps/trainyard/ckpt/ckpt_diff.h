/* `trainyard ckpt diff A B`: two checkpoints compared tensor by tensor
 * (ckpt_diff.c; the figures in tensor_diff.h). */
#ifndef TY_APPS_TRAINYARD_CKPT_CKPT_DIFF_H_
#define TY_APPS_TRAINYARD_CKPT_CKPT_DIFF_H_

/* argv[0] is "diff". Prints the report on stdout and errors on stderr;
 * returns 0 when every tensor agrees within the tolerance, 1 when some
 * differs or is on one side only, 2 for bad input or usage. */
int ty_cmd_ckpt_diff(int argc, char **argv);

#endif /* TY_APPS_TRAINYARD_CKPT_CKPT_DIFF_H_ */
