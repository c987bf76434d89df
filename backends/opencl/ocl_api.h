/* The OpenCL runtime as the opencl plugin sees it: ONE table of entry points
 * resolved with dlopen/dlsym from the ICD loader (libOpenCL.so.1), so that a
 * machine without OpenCL loads the plugin and reports UNAVAILABLE instead of
 * failing to dlopen it. The plugin never links libOpenCL.
 *
 * Objects that must be released (contexts, queues, buffers, programs,
 * kernels, events) are only ever created and released through the counted
 * helpers below; the counts of live objects are what the leak test reads
 * (tests/backends/opencl_test.c). Thread-safe: the table is immutable after
 * ty_ocl_api_load and the counters are atomic. */
#ifndef TY_BACKENDS_OPENCL_OCL_API_H_
#define TY_BACKENDS_OPENCL_OCL_API_H_

#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <stdatomic.h>
#include <stdint.h>

/* X(return type, name, parameter list): every entry point the plugin uses.
 * All exist in OpenCL 1.2, so every ICD loader has them. */
#define TY_OCL_FUNCTIONS(X)                                                                    \
  X(cl_int, clGetPlatformIDs, (cl_uint, cl_platform_id *, cl_uint *))                          \
  X(cl_int, clGetPlatformInfo, (cl_platform_id, cl_platform_info, size_t, void *, size_t *))   \
  X(cl_int, clGetDeviceIDs, (cl_platform_id, cl_device_type, cl_uint, cl_device_id *,         \
                             cl_uint *))                                                       \
  X(cl_int, clGetDeviceInfo, (cl_device_id, cl_device_info, size_t, void *, size_t *))         \
  X(cl_context, clCreateContext,                                                              \
    (const cl_context_properties *, cl_uint, const cl_device_id *,                             \
     void(CL_CALLBACK *)(const char *, const void *, size_t, void *), void *, cl_int *))       \
  X(cl_int, clReleaseContext, (cl_context))                                                    \
  X(cl_command_queue, clCreateCommandQueue,                                                    \
    (cl_context, cl_device_id, cl_command_queue_properties, cl_int *))                         \
  X(cl_int, clReleaseCommandQueue, (cl_command_queue))                                         \
  X(cl_mem, clCreateBuffer, (cl_context, cl_mem_flags, size_t, void *, cl_int *))              \
  X(cl_int, clReleaseMemObject, (cl_mem))                                                      \
  X(cl_program, clCreateProgramWithSource,                                                     \
    (cl_context, cl_uint, const char **, const size_t *, cl_int *))                            \
  X(cl_program, clCreateProgramWithBinary,                                                     \
    (cl_context, cl_uint, const cl_device_id *, const size_t *, const unsigned char **,        \
     cl_int *, cl_int *))                                                                      \
  X(cl_int, clBuildProgram,                                                                    \
    (cl_program, cl_uint, const cl_device_id *, const char *,                                  \
     void(CL_CALLBACK *)(cl_program, void *), void *))                                         \
  X(cl_int, clGetProgramInfo, (cl_program, cl_program_info, size_t, void *, size_t *))         \
  X(cl_int, clGetProgramBuildInfo,                                                             \
    (cl_program, cl_device_id, cl_program_build_info, size_t, void *, size_t *))               \
  X(cl_int, clReleaseProgram, (cl_program))                                                    \
  X(cl_kernel, clCreateKernel, (cl_program, const char *, cl_int *))                           \
  X(cl_int, clReleaseKernel, (cl_kernel))                                                      \
  X(cl_int, clSetKernelArg, (cl_kernel, cl_uint, size_t, const void *))                        \
  X(cl_int, clEnqueueNDRangeKernel,                                                            \
    (cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *,     \
     cl_uint, const cl_event *, cl_event *))                                                   \
  X(cl_int, clEnqueueReadBuffer,                                                               \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *,     \
     cl_event *))                                                                              \
  X(cl_int, clEnqueueWriteBuffer,                                                              \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint,                 \
     const cl_event *, cl_event *))                                                            \
  X(cl_int, clEnqueueCopyBuffer,                                                               \
    (cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event *,      \
     cl_event *))                                                                              \
  X(cl_int, clEnqueueFillBuffer,                                                               \
    (cl_command_queue, cl_mem, const void *, size_t, size_t, size_t, cl_uint,                  \
     const cl_event *, cl_event *))                                                            \
  X(cl_int, clFinish, (cl_command_queue))                                                      \
  X(cl_int, clFlush, (cl_command_queue))                                                       \
  X(cl_int, clWaitForEvents, (cl_uint, const cl_event *))                                      \
  X(cl_int, clReleaseEvent, (cl_event))

/* Live-object kinds counted by the helpers. */
typedef enum ty_ocl_object_e {
  TY_OCL_OBJ_CONTEXT = 0,
  TY_OCL_OBJ_QUEUE = 1,
  TY_OCL_OBJ_MEM = 2,
  TY_OCL_OBJ_PROGRAM = 3,
  TY_OCL_OBJ_KERNEL = 4,
  TY_OCL_OBJ_EVENT = 5,
  TY_OCL_OBJ_COUNT_ = 6,
} ty_ocl_object_t;

typedef struct ty_ocl_api_t {
  void *library; /* dlopen handle */
  char library_path[256];
#define TY_OCL_DECLARE(ret, name, params) ret(CL_API_CALL *name) params;
  TY_OCL_FUNCTIONS(TY_OCL_DECLARE)
#undef TY_OCL_DECLARE
  atomic_llong live[TY_OCL_OBJ_COUNT_];
  atomic_llong created[TY_OCL_OBJ_COUNT_];
} ty_ocl_api_t;

/* Loads the ICD loader (once per process; it is never unloaded):
 * $TRAINYARD_OPENCL_LIBRARY when set (a path or a
 * soname; also the test hook for a machine without OpenCL), else
 * libOpenCL.so.1. On failure returns nonzero and writes why (dlerror, or
 * the missing symbol) into `why`. */
int ty_ocl_api_load(ty_ocl_api_t *api, char *why, size_t why_size);
void ty_ocl_api_unload(ty_ocl_api_t *api);

/* The CL_* name of an error code ("CL_OUT_OF_RESOURCES"), or "CL error". */
const char *ty_ocl_error_name(cl_int err);

/* Counted creation and release; each create returns NULL with *err set on
 * failure, exactly like the entry point it wraps. Release of NULL is a
 * no-op. */
cl_context ty_ocl_context_create(ty_ocl_api_t *api, cl_device_id device, cl_int *err);
void ty_ocl_context_release(ty_ocl_api_t *api, cl_context context);
cl_command_queue ty_ocl_queue_create(ty_ocl_api_t *api, cl_context context,
                                     cl_device_id device, cl_int *err);
void ty_ocl_queue_release(ty_ocl_api_t *api, cl_command_queue queue);
cl_mem ty_ocl_mem_create(ty_ocl_api_t *api, cl_context context, size_t size, cl_int *err);
void ty_ocl_mem_release(ty_ocl_api_t *api, cl_mem mem);
cl_program ty_ocl_program_from_source(ty_ocl_api_t *api, cl_context context, const char *text,
                                      size_t length, cl_int *err);
cl_program ty_ocl_program_from_binary(ty_ocl_api_t *api, cl_context context,
                                      cl_device_id device, const unsigned char *binary,
                                      size_t size, cl_int *err);
void ty_ocl_program_release(ty_ocl_api_t *api, cl_program program);
cl_kernel ty_ocl_kernel_create(ty_ocl_api_t *api, cl_program program, const char *name,
                               cl_int *err);
void ty_ocl_kernel_release(ty_ocl_api_t *api, cl_kernel kernel);
/* Counts an event an enqueue returned (call after a successful enqueue that
 * was given an event out-pointer). */
void ty_ocl_event_created(ty_ocl_api_t *api);
void ty_ocl_event_release(ty_ocl_api_t *api, cl_event event);

#endif /* TY_BACKENDS_OPENCL_OCL_API_H_ */
