/* tool_compile.c: the tools' parallel kernel compile (tool_compile.h). */
#include "tool_compile.h"

#include <pthread.h>
#include <unistd.h>

#define QF_TOOL_MAX_WORKERS 256

typedef struct qf_tool_pool {
    const qf_tool_job *jobs;
    int n, next, done, arch;
    qf_tool_job_done cb;
    void *ud;
    pthread_mutex_t mu;
} qf_tool_pool;

static void *qf_tool_worker(void *arg) {
    qf_tool_pool *p = arg;
    qf_ctx_t *ctx = NULL;
    if (qf_ctx_init_host(&ctx, p->arch) != QF_OK) {
        fprintf(stderr, "qfuse: %s\n", qf_last_error());
        return NULL; /* its jobs stay undone; the caller reports them */
    }
    for (;;) {
        pthread_mutex_lock(&p->mu);
        const int i = p->next < p->n ? p->next++ : -1;
        pthread_mutex_unlock(&p->mu);
        if (i < 0)
            break;
        qf_loaded_kernel lk;
        const qf_status s = qf_ctx_kernel(ctx, p->jobs[i].k, &p->jobs[i].inst, &lk);
        pthread_mutex_lock(&p->mu);
        p->done++;
        p->cb(p->ud, &p->jobs[i], p->done, p->n, s, qf_ctx_last_kernel(ctx));
        pthread_mutex_unlock(&p->mu);
    }
    qf_ctx_free(ctx);
    return NULL;
}

int qf_tool_compile(const qf_tool_job *jobs, int n, int arch, int workers, qf_tool_job_done done,
                    void *ud) {
    qf_tool_pool p = {.jobs = jobs, .n = n, .arch = arch, .cb = done, .ud = ud};
    pthread_t th[QF_TOOL_MAX_WORKERS];
    int started = 0;
    workers = workers < n ? workers : n;
    workers = workers < QF_TOOL_MAX_WORKERS ? workers : QF_TOOL_MAX_WORKERS;
    pthread_mutex_init(&p.mu, NULL);
    while (started < workers && pthread_create(&th[started], NULL, qf_tool_worker, &p) == 0)
        started++;
    if (started == 0 && n > 0)
        qf_tool_worker(&p); /* no thread could start: do the work here */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p.mu);
    return n - p.done;
}

int qf_tool_cpus(int cap) {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : cpus > cap ? cap : (int)cpus;
}
