/* The helper threads that share one call's work: see work_pool.h.
 *
 * One mutex guards the pool: a call posts its job under it and wakes the helpers; each helper, and the
 * caller, claims tasks with an atomic counter until none is left, and the last task to finish wakes the
 * caller. The pool belongs to the process that made it: a forked child (whose helpers do not exist) finds
 * another pid and makes a pool of its own, never touching the parent's mutex, which a helper may have
 * held at the fork. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "pool/work_pool.h"

typedef struct {
    pool_task task;
    void *context;
    Py_ssize_t tasks;
    _Atomic Py_ssize_t next;
    int helpers; /* how many helpers may join: threads - 1 */
} Job;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, finished;
    pid_t pid;
    int started;        /* helper threads running */
    int busy;           /* a call is using the helpers */
    unsigned long jobs; /* bumped at every post: a helper joins each job once */
    Job *job;           /* the posted job, or NULL */
    int joined, left;   /* helpers that joined the posted job, and those of them done with it */
} Pool;

static Pool *pool = NULL;                                        /* this process's */
static pthread_mutex_t pool_creation = PTHREAD_MUTEX_INITIALIZER; /* only ever taken briefly */

/* Claims and runs the job's tasks until none is left. */
static void
run_tasks(Job *job)
{
    for (Py_ssize_t t = atomic_fetch_add(&job->next, 1); t < job->tasks; t = atomic_fetch_add(&job->next, 1)) {
        job->task(job->context, t);
    }
}

static void *
helper_main(void *argument)
{
    Pool *p = argument;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->job == NULL || p->jobs == seen || p->joined >= p->job->helpers) {
            if (p->job != NULL) {
                seen = p->jobs; /* a job this helper may not join: wait for the next */
            }
            pthread_cond_wait(&p->wake, &p->lock);
        }
        seen = p->jobs;
        Job *job = p->job;
        p->joined++;
        pthread_mutex_unlock(&p->lock);
        run_tasks(job);
        pthread_mutex_lock(&p->lock);
        p->left++; /* the job is not touched again: the caller may return once every helper has left */
        pthread_cond_signal(&p->finished);
    }
    return NULL;
}

/* This process's pool, made on first use (or first use after a fork); NULL when memory ran out. */
static Pool *
current_pool(void)
{
    pid_t pid = getpid();
    pthread_mutex_lock(&pool_creation);
    if (pool == NULL || pool->pid != pid) { /* a forked child leaves the parent's pool untouched */
        Pool *made = calloc(1, sizeof(Pool));
        if (made != NULL && (pthread_mutex_init(&made->lock, NULL) != 0 || pthread_cond_init(&made->wake, NULL) != 0
                             || pthread_cond_init(&made->finished, NULL) != 0)) {
            free(made);
            made = NULL;
        }
        if (made != NULL) {
            made->pid = pid;
            pool = made;
        }
    }
    Pool *result = pool != NULL && pool->pid == pid ? pool : NULL;
    pthread_mutex_unlock(&pool_creation);
    return result;
}

/* Starts helpers until there are `wanted` (under p->lock); how many there are. */
static int
start_helpers(Pool *p, int wanted)
{
    while (p->started < wanted) {
        pthread_t thread;
        pthread_attr_t attributes;
        if (pthread_attr_init(&attributes) != 0) {
            break;
        }
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attributes, 256 * 1024);
        int failed = pthread_create(&thread, &attributes, helper_main, p);
        pthread_attr_destroy(&attributes);
        if (failed) {
            break;
        }
#ifdef __linux__
        pthread_setname_np(thread, "mmreplay-pool");
#endif
        p->started++;
    }
    return p->started;
}

void
pool_run(Py_ssize_t tasks, int threads, pool_task task, void *context)
{
    Pool *p = threads > 1 && tasks > 1 ? current_pool() : NULL;
    if (p != NULL) {
        pthread_mutex_lock(&p->lock);
        int helpers = threads - 1 < tasks - 1 ? threads - 1 : (int)(tasks - 1);
        if (p->busy || start_helpers(p, helpers > POOL_MAX_THREADS - 1 ? POOL_MAX_THREADS - 1 : helpers) == 0) {
            pthread_mutex_unlock(&p->lock);
            p = NULL;
        }
        else {
            Job job = {.task = task, .context = context, .tasks = tasks, .helpers = helpers};
            atomic_init(&job.next, 0);
            p->busy = 1, p->job = &job, p->joined = 0, p->left = 0, p->jobs++;
            pthread_cond_broadcast(&p->wake);
            pthread_mutex_unlock(&p->lock);
            run_tasks(&job);
            pthread_mutex_lock(&p->lock);
            while (p->left < p->joined) { /* each task claimed is done once its claimer has left */
                pthread_cond_wait(&p->finished, &p->lock);
            }
            p->job = NULL, p->busy = 0; /* under the lock: no helper joins the job after the check above */
            pthread_mutex_unlock(&p->lock);
            return;
        }
    }
    for (Py_ssize_t t = 0; t < tasks; t++) {
        task(context, t);
    }
}
