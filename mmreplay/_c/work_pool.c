/* The helper threads that share a batch's work: see work_pool.h.
 *
 * A caller posts its job and bumps generation; each helper that wakes takes a reference to the posted
 * job and claims tasks from it until none is left. The caller claims tasks too, and returns once every
 * task is done, so a helper that starts late (its core busy with another process) claims nothing and
 * never touches the caller's context after the caller has returned. The job itself lives until its
 * last user drops it. At most threads - 1 helpers join a job. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "work_pool.h"

/* SPIN_NANOSECONDS: how long a helper polls for the next job before it sleeps. A loop of
 * store.sample(32) calls spends ~70-100 us in Python between two decodes; a helper that slept in that
 * gap took as long to wake as it saved (1% faster with a 56 us poll; 25% with this one, on the 2-core
 * development machine: see lz4_codec._SPLIT_MIN_BYTES). So a helper keeps its core for up to 200 us
 * after each batch. */
#define SPIN_NANOSECONDS 200000
#define DONE_SPIN_NANOSECONDS 100000 /* how long a caller polls for its helpers' last tasks */

typedef struct {
    pool_task task;
    void *context;
    Py_ssize_t tasks;
    _Atomic Py_ssize_t next_task, tasks_done;
    atomic_int users, helper_slots;
    pthread_mutex_t lock;
    pthread_cond_t all_done;
} Job;

static void
job_release(Job *job)
{
    if (atomic_fetch_sub(&job->users, 1) == 1) {
        pthread_mutex_destroy(&job->lock);
        pthread_cond_destroy(&job->all_done);
        free(job);
    }
}

static void
job_work(Job *job)
{
    for (;;) {
        Py_ssize_t number = atomic_fetch_add(&job->next_task, 1);
        if (number >= job->tasks) {
            return;
        }
        job->task(job->context, number);
        if (atomic_fetch_add(&job->tasks_done, 1) + 1 == job->tasks) {
            pthread_mutex_lock(&job->lock);
            pthread_cond_broadcast(&job->all_done);
            pthread_mutex_unlock(&job->lock);
        }
    }
}

/* Polls done(arg) for up to `nanoseconds`; returns whether it became true. */
static int
spin_until(int (*done)(const void *), const void *arg, long nanoseconds)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (unsigned spin = 1; !done(arg); spin++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (spin % 64 == 0) { /* the clock costs more than a poll: read it now and then */
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) > nanoseconds) {
                return done(arg);
            }
        }
    }
    return 1;
}

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    Job *job; /* the newest job (a reference), or NULL */
    _Atomic unsigned long generation;
    int helpers;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0};

static int
new_job_posted(const void *seen_generation)
{
    return atomic_load(&pool.generation) != *(const unsigned long *)seen_generation;
}

static int
job_done(const void *job)
{
    return atomic_load(&((Job *)job)->tasks_done) == ((const Job *)job)->tasks;
}

static void *
pool_helper(void *unused)
{
    (void)unused;
    unsigned long seen = atomic_load(&pool.generation);
    for (;;) {
        spin_until(new_job_posted, &seen, SPIN_NANOSECONDS);
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.generation) == seen) {
            pthread_cond_wait(&pool.wake, &pool.lock);
        }
        seen = atomic_load(&pool.generation);
        Job *job = pool.job;
        if (job != NULL) {
            atomic_fetch_add(&job->users, 1);
        }
        pthread_mutex_unlock(&pool.lock);
        if (job != NULL) {
            if (atomic_fetch_sub(&job->helper_slots, 1) > 0) {
                job_work(job);
            }
            job_release(job);
        }
    }
    return NULL;
}

/* A forked child has none of its parent's threads: it starts its own helpers when it needs them. */
static void
pool_after_fork_in_child(void)
{
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pool.job = NULL; /* the parent's reference: leaked in the child, never freed twice */
    pool.helpers = 0;
}

/* Starts helpers until there are `wanted` (under pool.lock); returns how many there are. */
static int
pool_grow(int wanted)
{
    static int fork_handler_set = 0;
    if (!fork_handler_set) {
        fork_handler_set = pthread_atfork(NULL, NULL, pool_after_fork_in_child) == 0;
        if (!fork_handler_set) {
            return pool.helpers; /* without the handler a forked child would wait on helpers it lacks */
        }
    }
    pthread_attr_t attr;
    if (pool.helpers >= wanted || pthread_attr_init(&attr) != 0) {
        return pool.helpers;
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (pool.helpers < wanted) {
        pthread_t id;
        if (pthread_create(&id, &attr, pool_helper, NULL) != 0) {
            break; /* fewer helpers: the caller runs their share */
        }
        pool.helpers++;
    }
    pthread_attr_destroy(&attr);
    return pool.helpers;
}

void
pool_run(Py_ssize_t tasks, int threads, pool_task task, void *context)
{
    if (threads > tasks) {
        threads = (int)tasks; /* a helper without a task only costs */
    }
    Job *job = threads > 1 ? malloc(sizeof(Job)) : NULL;
    if (job == NULL) {
        for (Py_ssize_t number = 0; number < tasks; number++) {
            task(context, number);
        }
        return;
    }
    job->task = task;
    job->context = context;
    job->tasks = tasks;
    atomic_init(&job->next_task, 0);
    atomic_init(&job->tasks_done, 0);
    atomic_init(&job->users, 2); /* the caller's reference and the pool's */
    atomic_init(&job->helper_slots, threads - 1);
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->all_done, NULL);

    pthread_mutex_lock(&pool.lock);
    pool_grow(threads - 1);
    Job *previous = pool.job;
    pool.job = job;
    atomic_fetch_add(&pool.generation, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    if (previous != NULL) {
        job_release(previous);
    }

    job_work(job);
    /* The helper is finishing its last task (a few us) unless it was preempted: wait for it awake.
     * Sleeping on the condition variable here and being woken cost ~15% of a sampled batch's time. */
    if (!spin_until(job_done, job, DONE_SPIN_NANOSECONDS)) {
        pthread_mutex_lock(&job->lock);
        while (atomic_load(&job->tasks_done) < job->tasks) {
            pthread_cond_wait(&job->all_done, &job->lock);
        }
        pthread_mutex_unlock(&job->lock);
    }

    /* Take the job back from the pool, unless a newer one replaced it (which released it then). */
    pthread_mutex_lock(&pool.lock);
    int posted = pool.job == job;
    if (posted) {
        pool.job = NULL;
    }
    pthread_mutex_unlock(&pool.lock);
    if (posted) {
        job_release(job);
    }
    job_release(job);
}
