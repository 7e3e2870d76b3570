/* tool_compile.h: the tools' parallel kernel compile (qfuse-cache warm, qfuse-demo without a
 * GPU): every job looked up exactly as an op does on first use (qf_ctx_kernel: disk cache, else
 * NVRTC and a store), by several workers. */
#ifndef QF_TOOL_COMPILE_H
#define QF_TOOL_COMPILE_H

#include "ctx.h"

/* One kernel variant to compile. */
typedef struct qf_tool_job {
    const qf_kernel_entry *k;
    qf_kernel_instance inst;
} qf_tool_job;

/* Called once per finished job, under the engine's lock (calls never overlap): done of total
 * jobs are finished, s is the lookup's status (qf_last_error() holds its message on this
 * thread) and info the lookup (source, key, time, on_disk). */
typedef void (*qf_tool_job_done)(void *ud, const qf_tool_job *job, int done, int total,
                                 qf_status s, const qf_kernel_info *info);

/* Runs jobs[0..n) for compute capability arch on min(workers, n) threads, each with its own
 * device-less context (a context compiles under its table lock). Returns the number of jobs
 * left undone (a worker whose context could not be made says why on stderr); every other job
 * has been reported to done. */
int qf_tool_compile(const qf_tool_job *jobs, int n, int arch, int workers, qf_tool_job_done done,
                    void *ud);

/* The number of online CPUs, at least 1 and at most cap: the default worker count. */
int qf_tool_cpus(int cap);

#endif /* QF_TOOL_COMPILE_H */
