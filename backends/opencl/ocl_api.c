/* The ICD loader's entry points, resolved at run time (see ocl_api.h), and
 * the counted create/release helpers behind the leak test. */
#include "ocl_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TY_OCL_DEFAULT_LIBRARY "libOpenCL.so.1"

/* The ICD loader is loaded once per process and never unloaded: the loader
 * and the drivers it loads keep process-lifetime state (vendor lists,
 * worker threads, compiler state) that they free only at exit, so a
 * dlclose would leak that state or unmap code its threads still run. */
static pthread_mutex_t ty_ocl_library_lock = PTHREAD_MUTEX_INITIALIZER;
static void *ty_ocl_library;
static char ty_ocl_library_path[256];

int ty_ocl_api_load(ty_ocl_api_t *api, char *why, size_t why_size) {
  memset(api, 0, sizeof(*api));
  const char *path = getenv("TRAINYARD_OPENCL_LIBRARY");
  if (!path || !*path) path = TY_OCL_DEFAULT_LIBRARY;
  snprintf(api->library_path, sizeof(api->library_path), "%s", path);
  pthread_mutex_lock(&ty_ocl_library_lock);
  void *lib = ty_ocl_library && strcmp(ty_ocl_library_path, path) == 0 ? ty_ocl_library : NULL;
  if (!lib) {
    dlerror();
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      /* A different library asked for later (a test) gets its own handle;
       * the first one stays loaded. */
      if (!ty_ocl_library) {
        ty_ocl_library = lib;
        snprintf(ty_ocl_library_path, sizeof(ty_ocl_library_path), "%s", path);
      }
    }
  }
  pthread_mutex_unlock(&ty_ocl_library_lock);
  if (!lib) {
    const char *e = dlerror();
    snprintf(why, why_size, "cannot load the OpenCL ICD loader %s (%s); install one, e.g. "
             "ocl-icd-libopencl1 and a driver such as pocl-opencl-icd",
             path, e ? e : "unknown error");
    return 1;
  }
  api->library = lib;
#define TY_OCL_RESOLVE(ret, name, params)                                                \
  {                                                                                      \
    void *sym = dlsym(lib, #name);                                                       \
    if (!sym) {                                                                          \
      snprintf(why, why_size, "the OpenCL ICD loader %s lacks %s (not OpenCL 1.2)", path, \
               #name);                                                                   \
      return 1;                                                                          \
    }                                                                                    \
    memcpy(&api->name, &sym, sizeof(sym));                                               \
  }
  TY_OCL_FUNCTIONS(TY_OCL_RESOLVE)
#undef TY_OCL_RESOLVE
  return 0;
}

void ty_ocl_api_unload(ty_ocl_api_t *api) {
  api->library = NULL; /* stays loaded: see ty_ocl_library */
}

const char *ty_ocl_error_name(cl_int err) {
  switch (err) {
#define TY_CASE(code) \
  case code:          \
    return #code;
    TY_CASE(CL_SUCCESS)
    TY_CASE(CL_DEVICE_NOT_FOUND)
    TY_CASE(CL_DEVICE_NOT_AVAILABLE)
    TY_CASE(CL_COMPILER_NOT_AVAILABLE)
    TY_CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    TY_CASE(CL_OUT_OF_RESOURCES)
    TY_CASE(CL_OUT_OF_HOST_MEMORY)
    TY_CASE(CL_PROFILING_INFO_NOT_AVAILABLE)
    TY_CASE(CL_MEM_COPY_OVERLAP)
    TY_CASE(CL_BUILD_PROGRAM_FAILURE)
    TY_CASE(CL_MAP_FAILURE)
    TY_CASE(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    TY_CASE(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    TY_CASE(CL_COMPILE_PROGRAM_FAILURE)
    TY_CASE(CL_LINKER_NOT_AVAILABLE)
    TY_CASE(CL_LINK_PROGRAM_FAILURE)
    TY_CASE(CL_INVALID_VALUE)
    TY_CASE(CL_INVALID_DEVICE_TYPE)
    TY_CASE(CL_INVALID_PLATFORM)
    TY_CASE(CL_INVALID_DEVICE)
    TY_CASE(CL_INVALID_CONTEXT)
    TY_CASE(CL_INVALID_QUEUE_PROPERTIES)
    TY_CASE(CL_INVALID_COMMAND_QUEUE)
    TY_CASE(CL_INVALID_HOST_PTR)
    TY_CASE(CL_INVALID_MEM_OBJECT)
    TY_CASE(CL_INVALID_BINARY)
    TY_CASE(CL_INVALID_BUILD_OPTIONS)
    TY_CASE(CL_INVALID_PROGRAM)
    TY_CASE(CL_INVALID_PROGRAM_EXECUTABLE)
    TY_CASE(CL_INVALID_KERNEL_NAME)
    TY_CASE(CL_INVALID_KERNEL_DEFINITION)
    TY_CASE(CL_INVALID_KERNEL)
    TY_CASE(CL_INVALID_ARG_INDEX)
    TY_CASE(CL_INVALID_ARG_VALUE)
    TY_CASE(CL_INVALID_ARG_SIZE)
    TY_CASE(CL_INVALID_KERNEL_ARGS)
    TY_CASE(CL_INVALID_WORK_DIMENSION)
    TY_CASE(CL_INVALID_WORK_GROUP_SIZE)
    TY_CASE(CL_INVALID_WORK_ITEM_SIZE)
    TY_CASE(CL_INVALID_GLOBAL_OFFSET)
    TY_CASE(CL_INVALID_EVENT_WAIT_LIST)
    TY_CASE(CL_INVALID_EVENT)
    TY_CASE(CL_INVALID_OPERATION)
    TY_CASE(CL_INVALID_BUFFER_SIZE)
    TY_CASE(CL_INVALID_GLOBAL_WORK_SIZE)
#undef TY_CASE
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL error";
  }
}

static void ty_ocl_count(ty_ocl_api_t *api, ty_ocl_object_t kind, int delta) {
  atomic_fetch_add(&api->live[kind], delta);
  if (delta > 0) atomic_fetch_add(&api->created[kind], delta);
}

cl_context ty_ocl_context_create(ty_ocl_api_t *api, cl_device_id device, cl_int *err) {
  cl_context c = api->clCreateContext(NULL, 1, &device, NULL, NULL, err);
  if (c) ty_ocl_count(api, TY_OCL_OBJ_CONTEXT, 1);
  return c;
}

void ty_ocl_context_release(ty_ocl_api_t *api, cl_context context) {
  if (!context) return;
  api->clReleaseContext(context);
  ty_ocl_count(api, TY_OCL_OBJ_CONTEXT, -1);
}

cl_command_queue ty_ocl_queue_create(ty_ocl_api_t *api, cl_context context,
                                     cl_device_id device, cl_int *err) {
  /* In order: every command sees the results of the ones before it, so a
   * step needs no events between its kernels. */
  cl_command_queue q = api->clCreateCommandQueue(context, device, 0, err);
  if (q) ty_ocl_count(api, TY_OCL_OBJ_QUEUE, 1);
  return q;
}

void ty_ocl_queue_release(ty_ocl_api_t *api, cl_command_queue queue) {
  if (!queue) return;
  api->clReleaseCommandQueue(queue);
  ty_ocl_count(api, TY_OCL_OBJ_QUEUE, -1);
}

cl_mem ty_ocl_mem_create(ty_ocl_api_t *api, cl_context context, size_t size, cl_int *err) {
  cl_mem m = api->clCreateBuffer(context, CL_MEM_READ_WRITE, size, NULL, err);
  if (m) ty_ocl_count(api, TY_OCL_OBJ_MEM, 1);
  return m;
}

void ty_ocl_mem_release(ty_ocl_api_t *api, cl_mem mem) {
  if (!mem) return;
  api->clReleaseMemObject(mem);
  ty_ocl_count(api, TY_OCL_OBJ_MEM, -1);
}

cl_program ty_ocl_program_from_source(ty_ocl_api_t *api, cl_context context, const char *text,
                                      size_t length, cl_int *err) {
  cl_program p = api->clCreateProgramWithSource(context, 1, &text, &length, err);
  if (p) ty_ocl_count(api, TY_OCL_OBJ_PROGRAM, 1);
  return p;
}

cl_program ty_ocl_program_from_binary(ty_ocl_api_t *api, cl_context context,
                                      cl_device_id device, const unsigned char *binary,
                                      size_t size, cl_int *err) {
  cl_int status = CL_SUCCESS;
  cl_program p =
      api->clCreateProgramWithBinary(context, 1, &device, &size, &binary, &status, err);
  if (p && status != CL_SUCCESS) {
    api->clReleaseProgram(p);
    *err = status;
    return NULL;
  }
  if (p) ty_ocl_count(api, TY_OCL_OBJ_PROGRAM, 1);
  return p;
}

void ty_ocl_program_release(ty_ocl_api_t *api, cl_program program) {
  if (!program) return;
  api->clReleaseProgram(program);
  ty_ocl_count(api, TY_OCL_OBJ_PROGRAM, -1);
}

cl_kernel ty_ocl_kernel_create(ty_ocl_api_t *api, cl_program program, const char *name,
                               cl_int *err) {
  cl_kernel k = api->clCreateKernel(program, name, err);
  if (k) ty_ocl_count(api, TY_OCL_OBJ_KERNEL, 1);
  return k;
}

void ty_ocl_kernel_release(ty_ocl_api_t *api, cl_kernel kernel) {
  if (!kernel) return;
  api->clReleaseKernel(kernel);
  ty_ocl_count(api, TY_OCL_OBJ_KERNEL, -1);
}

void ty_ocl_event_created(ty_ocl_api_t *api) { ty_ocl_count(api, TY_OCL_OBJ_EVENT, 1); }

void ty_ocl_event_release(ty_ocl_api_t *api, cl_event event) {
  if (!event) return;
  api->clReleaseEvent(event);
  ty_ocl_count(api, TY_OCL_OBJ_EVENT, -1);
}
