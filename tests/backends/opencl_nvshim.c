/* A stand-in for the OpenCL ICD loader (loaded by the opencl plugin through
 * TRAINYARD_OPENCL_LIBRARY) that forwards every entry point to the real
 * libOpenCL.so.1 and adds, on top of the CPU driver the suite runs on
 * (PoCL), the ways NVIDIA's driver fails that bit us on an H100 (issue 12):
 *
 * - A clEnqueueFillBuffer whose range ends past 2^31 bytes faults the
 *   device on NVIDIA (error -9999 at the next wait; inducer/pyopencl#395).
 *   The shim faults on any driver fill OR copy ending past a limit the test
 *   sets (PoCL's buffers stop at 1 GiB here, so 2^31 itself is out of
 *   reach); copies are included because a driver-side copy has the same
 *   unknown internal indexing.
 * - After a fault, clWaitForEvents returns -9999 at once, while a
 *   non-blocking read already queued may still land later: the shim holds
 *   such reads and lets them land at the next clFinish or queue release,
 *   which is when a driver that returned early would finally write. A read
 *   into the caller's stack that lands after the caller returned is the
 *   stack smash train_bench died of.
 * - A kernel launch can be made to fault (an out-of-bounds kernel).
 *
 * It also counts every non-blocking read whose host memory is on the
 * calling thread's stack: such a read is only safe if the wait after it
 * succeeds, which a faulting device does not promise.
 *
 * Faults are per command queue: a fresh queue (device reopened) works.
 * The test drives the shim through ty_nvshim_configure / ty_nvshim_stats. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TY_NVSHIM_EXPORT __attribute__((visibility("default")))
#define TY_NVSHIM_FAULT (-9999) /* NVIDIA's "illegal read or write to a buffer" */
#define TY_NVSHIM_MAX_QUEUES 16
#define TY_NVSHIM_MAX_HELD 16

typedef struct ty_nvshim_stats_t {
  uint64_t faults;             /* device faults emulated */
  uint64_t driver_fills;       /* clEnqueueFillBuffer calls */
  uint64_t driver_copies;      /* clEnqueueCopyBuffer calls */
  uint64_t stack_reads;        /* non-blocking reads into the caller's stack */
  uint64_t late_reads;         /* held reads that landed after the wait failed */
  uint64_t largest_fill_end;   /* largest offset + size of a driver fill or copy */
} ty_nvshim_stats_t;

typedef struct {
  cl_command_queue queue;
  int faulted;
  cl_event held[TY_NVSHIM_MAX_HELD]; /* user events gating held reads */
  int held_count;
} ty_nvshim_queue_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void *g_real;
static uint64_t g_fill_limit = (uint64_t)1 << 31;
static int64_t g_fault_at_launch = -1; /* 0-based index of the launch to fault */
static int64_t g_launches;
static ty_nvshim_stats_t g_stats;
static ty_nvshim_queue_t g_queues[TY_NVSHIM_MAX_QUEUES];

/* The real entry points. */
#define TY_NVSHIM_REAL(name) ((__typeof__(&name))ty_nvshim_sym(#name))

static void *ty_nvshim_sym(const char *name) {
  pthread_mutex_lock(&g_lock);
  if (!g_real) {
    const char *path = getenv("TY_NVSHIM_LIBRARY");
    g_real = dlopen(path && *path ? path : "libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  }
  void *sym = g_real ? dlsym(g_real, name) : NULL;
  pthread_mutex_unlock(&g_lock);
  if (!sym) {
    fprintf(stderr, "opencl_nvshim: cannot resolve %s in the real ICD loader\n", name);
    abort(); /* a test fixture: nothing sensible to return */
  }
  return sym;
}

/* The queue's record (created on first sight); call with g_lock held. */
static ty_nvshim_queue_t *ty_nvshim_queue(cl_command_queue q) {
  ty_nvshim_queue_t *free_slot = NULL;
  for (int i = 0; i < TY_NVSHIM_MAX_QUEUES; ++i) {
    if (g_queues[i].queue == q) return &g_queues[i];
    if (!g_queues[i].queue && !free_slot) free_slot = &g_queues[i];
  }
  if (!free_slot) abort();
  memset(free_slot, 0, sizeof(*free_slot));
  free_slot->queue = q;
  return free_slot;
}

static int ty_nvshim_faulted(cl_command_queue q) {
  pthread_mutex_lock(&g_lock);
  int f = ty_nvshim_queue(q)->faulted;
  pthread_mutex_unlock(&g_lock);
  return f;
}

static void ty_nvshim_fault(cl_command_queue q) {
  pthread_mutex_lock(&g_lock);
  ty_nvshim_queue(q)->faulted = 1;
  g_stats.faults++;
  pthread_mutex_unlock(&g_lock);
}

/* Lets the held reads of `q` land (the driver finally writes them). */
static void ty_nvshim_release_held(cl_command_queue q) {
  cl_event held[TY_NVSHIM_MAX_HELD];
  int n;
  pthread_mutex_lock(&g_lock);
  ty_nvshim_queue_t *r = ty_nvshim_queue(q);
  n = r->held_count;
  memcpy(held, r->held, sizeof(held));
  r->held_count = 0;
  g_stats.late_reads += (uint64_t)n;
  pthread_mutex_unlock(&g_lock);
  for (int i = 0; i < n; ++i) {
    TY_NVSHIM_REAL(clSetUserEventStatus)(held[i], CL_COMPLETE);
    TY_NVSHIM_REAL(clReleaseEvent)(held[i]);
  }
}

/* Whether [p, p + n) lies on the calling thread's stack. */
static int ty_nvshim_on_stack(const void *p) {
  pthread_attr_t attr;
  void *base = NULL;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
  pthread_attr_getstack(&attr, &base, &size);
  pthread_attr_destroy(&attr);
  return (const char *)p >= (const char *)base && (const char *)p < (const char *)base + size;
}

TY_NVSHIM_EXPORT void ty_nvshim_configure(uint64_t fill_limit, int64_t fault_at_launch);
TY_NVSHIM_EXPORT void ty_nvshim_configure(uint64_t fill_limit, int64_t fault_at_launch) {
  pthread_mutex_lock(&g_lock);
  g_fill_limit = fill_limit;
  g_fault_at_launch = fault_at_launch;
  g_launches = 0;
  memset(&g_stats, 0, sizeof(g_stats));
  pthread_mutex_unlock(&g_lock);
}

TY_NVSHIM_EXPORT void ty_nvshim_stats(ty_nvshim_stats_t *out);
TY_NVSHIM_EXPORT void ty_nvshim_stats(ty_nvshim_stats_t *out) {
  pthread_mutex_lock(&g_lock);
  *out = g_stats;
  pthread_mutex_unlock(&g_lock);
}

/* ---- pure forwarders ---- */

#define TY_NVSHIM_FORWARD(ret, name, params, args) \
  TY_NVSHIM_EXPORT ret CL_API_CALL name params { return TY_NVSHIM_REAL(name) args; }

TY_NVSHIM_FORWARD(cl_int, clGetPlatformIDs, (cl_uint n, cl_platform_id *p, cl_uint *c),
                  (n, p, c))
TY_NVSHIM_FORWARD(cl_int, clGetPlatformInfo,
                  (cl_platform_id p, cl_platform_info w, size_t s, void *v, size_t *r),
                  (p, w, s, v, r))
TY_NVSHIM_FORWARD(cl_int, clGetDeviceIDs,
                  (cl_platform_id p, cl_device_type t, cl_uint n, cl_device_id *d, cl_uint *c),
                  (p, t, n, d, c))
TY_NVSHIM_FORWARD(cl_int, clGetDeviceInfo,
                  (cl_device_id d, cl_device_info w, size_t s, void *v, size_t *r),
                  (d, w, s, v, r))
TY_NVSHIM_FORWARD(cl_context, clCreateContext,
                  (const cl_context_properties *p, cl_uint n, const cl_device_id *d,
                   void(CL_CALLBACK *f)(const char *, const void *, size_t, void *), void *u,
                   cl_int *e),
                  (p, n, d, f, u, e))
TY_NVSHIM_FORWARD(cl_int, clReleaseContext, (cl_context c), (c))
TY_NVSHIM_FORWARD(cl_command_queue, clCreateCommandQueue,
                  (cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *e),
                  (c, d, p, e))
TY_NVSHIM_FORWARD(cl_mem, clCreateBuffer,
                  (cl_context c, cl_mem_flags f, size_t s, void *h, cl_int *e), (c, f, s, h, e))
TY_NVSHIM_FORWARD(cl_int, clReleaseMemObject, (cl_mem m), (m))
TY_NVSHIM_FORWARD(cl_program, clCreateProgramWithSource,
                  (cl_context c, cl_uint n, const char **s, const size_t *l, cl_int *e),
                  (c, n, s, l, e))
TY_NVSHIM_FORWARD(cl_program, clCreateProgramWithBinary,
                  (cl_context c, cl_uint n, const cl_device_id *d, const size_t *l,
                   const unsigned char **b, cl_int *st, cl_int *e),
                  (c, n, d, l, b, st, e))
TY_NVSHIM_FORWARD(cl_int, clBuildProgram,
                  (cl_program p, cl_uint n, const cl_device_id *d, const char *o,
                   void(CL_CALLBACK *f)(cl_program, void *), void *u),
                  (p, n, d, o, f, u))
TY_NVSHIM_FORWARD(cl_int, clGetProgramInfo,
                  (cl_program p, cl_program_info w, size_t s, void *v, size_t *r),
                  (p, w, s, v, r))
TY_NVSHIM_FORWARD(cl_int, clGetProgramBuildInfo,
                  (cl_program p, cl_device_id d, cl_program_build_info w, size_t s, void *v,
                   size_t *r),
                  (p, d, w, s, v, r))
TY_NVSHIM_FORWARD(cl_int, clReleaseProgram, (cl_program p), (p))
TY_NVSHIM_FORWARD(cl_kernel, clCreateKernel, (cl_program p, const char *n, cl_int *e),
                  (p, n, e))
TY_NVSHIM_FORWARD(cl_int, clReleaseKernel, (cl_kernel k), (k))
TY_NVSHIM_FORWARD(cl_int, clSetKernelArg, (cl_kernel k, cl_uint i, size_t s, const void *v),
                  (k, i, s, v))
TY_NVSHIM_FORWARD(cl_int, clEnqueueWriteBuffer,
                  (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t s, const void *p,
                   cl_uint n, const cl_event *w, cl_event *e),
                  (q, m, b, o, s, p, n, w, e))
TY_NVSHIM_FORWARD(cl_int, clFlush, (cl_command_queue q), (q))
TY_NVSHIM_FORWARD(cl_int, clReleaseEvent, (cl_event e), (e))

/* ---- the emulated failures ---- */

static int ty_nvshim_range_faults(cl_command_queue q, size_t offset, size_t size) {
  pthread_mutex_lock(&g_lock);
  uint64_t end = (uint64_t)offset + size;
  if (end > g_stats.largest_fill_end) g_stats.largest_fill_end = end;
  int fault = end > g_fill_limit;
  pthread_mutex_unlock(&g_lock);
  if (fault) ty_nvshim_fault(q);
  return fault;
}

TY_NVSHIM_EXPORT cl_int CL_API_CALL clEnqueueFillBuffer(cl_command_queue q, cl_mem m,
                                                        const void *pattern, size_t pattern_size,
                                                        size_t offset, size_t size, cl_uint n,
                                                        const cl_event *w, cl_event *e) {
  pthread_mutex_lock(&g_lock);
  g_stats.driver_fills++;
  pthread_mutex_unlock(&g_lock);
  /* NVIDIA returns success and fails at the next wait. */
  if (ty_nvshim_range_faults(q, offset, size) || ty_nvshim_faulted(q)) return CL_SUCCESS;
  return TY_NVSHIM_REAL(clEnqueueFillBuffer)(q, m, pattern, pattern_size, offset, size, n, w, e);
}

TY_NVSHIM_EXPORT cl_int CL_API_CALL clEnqueueCopyBuffer(cl_command_queue q, cl_mem src,
                                                        cl_mem dst, size_t src_offset,
                                                        size_t dst_offset, size_t size,
                                                        cl_uint n, const cl_event *w,
                                                        cl_event *e) {
  pthread_mutex_lock(&g_lock);
  g_stats.driver_copies++;
  pthread_mutex_unlock(&g_lock);
  size_t far = src_offset > dst_offset ? src_offset : dst_offset;
  if (ty_nvshim_range_faults(q, far, size) || ty_nvshim_faulted(q)) return CL_SUCCESS;
  return TY_NVSHIM_REAL(clEnqueueCopyBuffer)(q, src, dst, src_offset, dst_offset, size, n, w, e);
}

TY_NVSHIM_EXPORT cl_int CL_API_CALL clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k,
                                                           cl_uint dims, const size_t *offset,
                                                           const size_t *global,
                                                           const size_t *local, cl_uint n,
                                                           const cl_event *w, cl_event *e) {
  pthread_mutex_lock(&g_lock);
  int fault = g_launches++ == g_fault_at_launch;
  pthread_mutex_unlock(&g_lock);
  if (fault) ty_nvshim_fault(q);
  if (ty_nvshim_faulted(q)) return CL_SUCCESS; /* a dead context runs nothing */
  return TY_NVSHIM_REAL(clEnqueueNDRangeKernel)(q, k, dims, offset, global, local, n, w, e);
}

TY_NVSHIM_EXPORT cl_int CL_API_CALL clEnqueueReadBuffer(cl_command_queue q, cl_mem m,
                                                        cl_bool blocking, size_t offset,
                                                        size_t size, void *p, cl_uint n,
                                                        const cl_event *w, cl_event *e) {
  if (!blocking && ty_nvshim_on_stack(p)) {
    pthread_mutex_lock(&g_lock);
    g_stats.stack_reads++;
    pthread_mutex_unlock(&g_lock);
  }
  if (!ty_nvshim_faulted(q)) {
    return TY_NVSHIM_REAL(clEnqueueReadBuffer)(q, m, blocking, offset, size, p, n, w, e);
  }
  if (blocking) return TY_NVSHIM_FAULT;
  /* Held behind a user event until the queue is finished or released. */
  cl_context context = NULL;
  TY_NVSHIM_REAL(clGetCommandQueueInfo)(q, CL_QUEUE_CONTEXT, sizeof(context), &context, NULL);
  cl_int err = CL_SUCCESS;
  cl_event gate = TY_NVSHIM_REAL(clCreateUserEvent)(context, &err);
  if (!gate) return err;
  cl_event waits[8];
  if (n + 1 > 8) abort();
  for (cl_uint i = 0; i < n; ++i) waits[i] = w[i];
  waits[n] = gate;
  err = TY_NVSHIM_REAL(clEnqueueReadBuffer)(q, m, CL_FALSE, offset, size, p, n + 1, waits, e);
  pthread_mutex_lock(&g_lock);
  ty_nvshim_queue_t *r = ty_nvshim_queue(q);
  if (r->held_count == TY_NVSHIM_MAX_HELD) abort();
  r->held[r->held_count++] = gate;
  pthread_mutex_unlock(&g_lock);
  return err;
}

/* The queue of an event (the shim's waits only ever see reads of one). */
static cl_command_queue ty_nvshim_event_queue(cl_event e) {
  cl_command_queue q = NULL;
  TY_NVSHIM_REAL(clGetEventInfo)(e, CL_EVENT_COMMAND_QUEUE, sizeof(q), &q, NULL);
  return q;
}

TY_NVSHIM_EXPORT cl_int CL_API_CALL clWaitForEvents(cl_uint n, const cl_event *events) {
  for (cl_uint i = 0; i < n; ++i) {
    cl_command_queue q = ty_nvshim_event_queue(events[i]);
    if (q && ty_nvshim_faulted(q)) return TY_NVSHIM_FAULT; /* at once, reads still pending */
  }
  return TY_NVSHIM_REAL(clWaitForEvents)(n, events);
}

TY_NVSHIM_EXPORT cl_int CL_API_CALL clFinish(cl_command_queue q) {
  ty_nvshim_release_held(q);
  cl_int err = TY_NVSHIM_REAL(clFinish)(q);
  return ty_nvshim_faulted(q) ? TY_NVSHIM_FAULT : err;
}

TY_NVSHIM_EXPORT cl_int CL_API_CALL clReleaseCommandQueue(cl_command_queue q) {
  ty_nvshim_release_held(q);
  TY_NVSHIM_REAL(clFinish)(q);
  pthread_mutex_lock(&g_lock);
  memset(ty_nvshim_queue(q), 0, sizeof(ty_nvshim_queue_t));
  pthread_mutex_unlock(&g_lock);
  return TY_NVSHIM_REAL(clReleaseCommandQueue)(q);
}
