/* The helper threads that share a batch's work: see work_pool.h.
 *
 * A caller posts its job in pool.current and bumps pool.generation; each helper that sees the bump takes
 * a reference to the posted job and claims tasks from it until none is left. The caller claims tasks
 * too, and returns once every task is done, so a helper that starts late (its core busy with another
 * process) claims nothing and never touches the caller's context after the caller has returned. The
 * job itself lives until its last user drops it. At most threads - 1 helpers join a job.
 *
 * Nothing a helper does on the way into a job takes a lock: with a dozen helpers woken at once, a lock
 * there was a convoy (each helper sleeping in turn on the lock the one before held, the last arriving
 * after the batch was done). The helpers take their reference with one atomic add on pool.current,
 * which holds the job's address and, in its low bits, how many helpers took it that way (split
 * reference counting: whoever takes the job out of pool.current hands that count to the job). Helpers
 * sleep on the generation word itself (a futex on Linux), so a post wakes them all at once, without a
 * mutex they would queue for on waking.
 *
 * What threads write while others read lies on cache lines of its own (the job's task counters, its
 * reference count, the pool's sleeper count), so that claiming a task does not evict the job's
 * description from the other threads' caches. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "work_pool.h"

/* SPIN_NANOSECONDS: how long a helper polls for the next job before it sleeps. A loop of
 * store.sample(32) calls spends ~70-100 us in Python between two decodes; a helper that slept in that
 * gap took as long to wake as it saved (1% faster with a 56 us poll; 25% with this one, on the 2-core
 * development machine: see frames/threads.py). So a helper keeps its core for up to 200 us
 * after each batch. */
#define SPIN_NANOSECONDS 200000
#define DONE_SPIN_NANOSECONDS 100000 /* how long a caller polls for its helpers' last tasks */

#define CACHE_LINE 64

/* pool.current is a job's address with, in the bits its alignment leaves free, the number of helpers
 * that took it through pool.current. A helper adds to that word only when pool.posts (bumped at every
 * post, after the job is in pool.current) has moved since its last add: at most twice while one job is
 * posted (posts reads the value before that job's bump, then its own) and at most once while none is,
 * so the count stays below JOB_ALIGN however often the generation moves (pool_wake moves it alone). */
#define JOB_ALIGN 256
#define TAG_MASK ((uintptr_t)(JOB_ALIGN - 1))
_Static_assert(2 * (POOL_MAX_THREADS - 1) < JOB_ALIGN, "the helpers' count must fit below a job's alignment");

/* The pool's reference to its posted job, counted in the job's users as a number larger than the
 * helpers that can ever hold it: helpers that drop their references before the pool hands over its
 * count never bring users to 0. */
#define POOL_REFERENCE (1L << 24)

typedef struct {
    /* Set before the job is posted, then only read. */
    pool_task task;
    void *context;
    Py_ssize_t tasks;
    pthread_mutex_t lock;
    pthread_cond_t all_done;
    /* Written while the job runs, each on a line of its own. */
    _Alignas(CACHE_LINE) _Atomic Py_ssize_t next_task;
    _Alignas(CACHE_LINE) _Atomic Py_ssize_t tasks_done;
    _Alignas(CACHE_LINE) atomic_long users; /* the caller's 1, the pool's POOL_REFERENCE, the helpers' */
    atomic_int helper_slots;                /* helpers that may still join */
    atomic_int caller_sleeps;               /* the caller waits on all_done: the last task signals it */
} Job;

#define JOB_BYTES ((sizeof(Job) + JOB_ALIGN - 1) & ~(size_t)(JOB_ALIGN - 1))

static struct {
    _Alignas(CACHE_LINE) _Atomic uintptr_t current; /* the newest job | helpers that took it; 0: none */
    _Atomic uint32_t generation;                    /* bumped at every post and wake; helpers sleep on it */
    _Atomic uint32_t posts;                         /* bumped at every post */
    _Alignas(CACHE_LINE) atomic_int sleepers;       /* helpers asleep, or about to be */
    _Alignas(CACHE_LINE) atomic_int helpers;        /* helper threads started */
    _Atomic uint32_t start_generation, start_posts; /* what helpers being started take as seen */
    _Atomic long long last_ahead;                   /* when a job was last posted ahead (ns, monotonic) */
    pthread_mutex_t grow_lock;                      /* held while starting helpers */
#ifndef __linux__
    pthread_mutex_t sleep_lock;
    pthread_cond_t wake;
#endif
} pool = {
    .grow_lock = PTHREAD_MUTEX_INITIALIZER,
#ifndef __linux__
    .sleep_lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
#endif
};

/* Drops `count` of the job's references; the last one frees it. */
static void
job_release(Job *job, long count)
{
    if (atomic_fetch_sub(&job->users, count) == count) {
        pthread_mutex_destroy(&job->lock);
        pthread_cond_destroy(&job->all_done);
        free(job);
    }
}

/* For a word taken out of pool.current: the pool's reference to its job dropped, and the references
 * helpers took through the word handed to the job (they drop them one by one). */
static void
pool_reference_drop(uintptr_t word)
{
    Job *job = (Job *)(word & ~TAG_MASK);
    if (job != NULL) {
        job_release(job, POOL_REFERENCE - (long)(word & TAG_MASK));
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
        if (atomic_fetch_add(&job->tasks_done, 1) + 1 == job->tasks && atomic_load(&job->caller_sleeps)) {
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
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
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

static int
new_job_posted(const void *seen_generation)
{
    return atomic_load(&pool.generation) != *(const uint32_t *)seen_generation;
}

static int
job_done(const void *job)
{
    return atomic_load(&((Job *)job)->tasks_done) == ((const Job *)job)->tasks;
}

/* Returns once the generation differs from `seen`: polling for a while, then asleep. A helper counts
 * itself in sleepers before its last look at the generation, and a poster bumps the generation before
 * it looks at sleepers (both sequentially consistent), so one of them sees the other: no post is
 * missed by a helper going to sleep. */
static void
wait_for_post(uint32_t seen)
{
    if (spin_until(new_job_posted, &seen, SPIN_NANOSECONDS)) {
        return;
    }
    atomic_fetch_add(&pool.sleepers, 1);
#ifdef __linux__
    while (atomic_load(&pool.generation) == seen) {
        /* returns at once if the word no longer holds `seen`, so a bump just before is not missed */
        syscall(SYS_futex, (void *)&pool.generation, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
    }
#else
    pthread_mutex_lock(&pool.sleep_lock);
    while (atomic_load(&pool.generation) == seen) {
        pthread_cond_wait(&pool.wake, &pool.sleep_lock);
    }
    pthread_mutex_unlock(&pool.sleep_lock);
#endif
    atomic_fetch_sub(&pool.sleepers, 1);
}

/* After a bump of the generation: wakes up to `count` sleeping helpers (the polling ones see it). */
static void
wake_helpers(int count)
{
    if (atomic_load(&pool.sleepers) == 0) {
        return;
    }
#ifdef __linux__
    syscall(SYS_futex, (void *)&pool.generation, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
#else
    (void)count;
    pthread_mutex_lock(&pool.sleep_lock);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.sleep_lock);
#endif
}

/* A helper; it starts from the generation and posts pool_grow read before the post it was started for,
 * so that it joins that job (a helper that reads a later pair misses that job: the caller runs it). */
static _Thread_local int on_helper = 0;

int
pool_on_helper(void)
{
    return on_helper;
}

static void *
pool_helper(void *unused)
{
    (void)unused;
    on_helper = 1;
#ifdef __linux__
    pthread_setname_np(pthread_self(), "mmreplay-pool"); /* in top -H, perf, /proc/<pid>/task/<tid>/comm */
#endif
    uint32_t seen = atomic_load(&pool.start_generation);
    uint32_t taken = atomic_load(&pool.start_posts); /* posts when this helper last took pool.current */
    for (;;) {
        wait_for_post(seen);
        seen = atomic_load(&pool.generation);
        uint32_t posts = atomic_load(&pool.posts);
        if (posts == taken) {
            continue; /* woken without a new job (pool_wake): poll for the one on its way */
        }
        taken = posts;
        uintptr_t word = atomic_fetch_add(&pool.current, 1); /* a reference to the newest job, if any */
        Job *job = (Job *)(word & ~TAG_MASK);
        if (job != NULL) {
            if (atomic_fetch_sub(&job->helper_slots, 1) > 0) {
                job_work(job);
            }
            job_release(job, 1);
        }
    }
    return NULL;
}

/* A forked child has none of its parent's threads: it starts its own helpers when it needs them. */
static void
pool_after_fork_in_child(void)
{
    pthread_mutex_init(&pool.grow_lock, NULL);
#ifndef __linux__
    pthread_mutex_init(&pool.sleep_lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
#endif
    atomic_store(&pool.current, 0); /* the parent's job: leaked in the child, never freed twice */
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.helpers, 0);
}

/* Starts helpers until there are `wanted`; returns how many there are. */
static int
pool_grow(int wanted)
{
    int helpers = atomic_load(&pool.helpers);
    if (helpers >= wanted) {
        return helpers;
    }
    static int fork_handler_set = 0;
    pthread_mutex_lock(&pool.grow_lock);
    if (!fork_handler_set) {
        fork_handler_set = pthread_atfork(NULL, NULL, pool_after_fork_in_child) == 0;
    }
    pthread_attr_t attr;
    /* without the fork handler a forked child would wait on helpers it lacks: none are started */
    if (fork_handler_set && pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        atomic_store(&pool.start_generation, atomic_load(&pool.generation));
        atomic_store(&pool.start_posts, atomic_load(&pool.posts));
        while (atomic_load(&pool.helpers) < wanted) {
            pthread_t id;
            if (pthread_create(&id, &attr, pool_helper, NULL) != 0) {
                break; /* fewer helpers: the caller runs their share */
            }
            atomic_fetch_add(&pool.helpers, 1);
        }
        pthread_attr_destroy(&attr);
    }
    helpers = atomic_load(&pool.helpers);
    pthread_mutex_unlock(&pool.grow_lock);
    return helpers;
}

void
pool_wake(int helpers)
{
    if (helpers > 0 && atomic_load(&pool.sleepers) > 0) {
        atomic_fetch_add(&pool.generation, 1);
        wake_helpers(helpers);
    }
}

PoolJob *
pool_post(Py_ssize_t tasks, int threads, pool_task task, void *context, int ahead)
{
    /* A helper without a task only costs; posted ahead, every task may go to a helper, as the caller
     * takes none before it joins. */
    Py_ssize_t most = ahead ? tasks + 1 : tasks;
    if (threads > most) {
        threads = (int)most;
    }
    if (threads > POOL_MAX_THREADS) {
        threads = POOL_MAX_THREADS;
    }
    int helpers = atomic_load(&pool.helpers);
    if (ahead == POOL_AHEAD) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long at = now.tv_sec * 1000000000LL + now.tv_nsec;
        long long since = at - atomic_exchange(&pool.last_ahead, at);
        if (helpers > 0 && atomic_load(&pool.sleepers) >= helpers) {
            /* Every helper sleeps: the caller runs the tasks at join (none yet: they start awake). Posts
             * closer together than helpers poll wake one for the next (a loop of adds); posts further
             * apart wake none, whose wake-up would cost more than the job. */
            if (since < SPIN_NANOSECONDS) {
                pool_wake(1);
            }
            return NULL;
        }
    }
    Job *job = threads > 1 && pool_grow(threads - 1) > 0 ? aligned_alloc(JOB_ALIGN, JOB_BYTES) : NULL;
    if (job == NULL) {
        return NULL;
    }
    job->task = task;
    job->context = context;
    job->tasks = tasks;
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->all_done, NULL);
    atomic_init(&job->next_task, 0);
    atomic_init(&job->tasks_done, 0);
    atomic_init(&job->users, 1 + POOL_REFERENCE);
    atomic_init(&job->helper_slots, threads - 1);
    atomic_init(&job->caller_sleeps, 0);

    uintptr_t previous = atomic_exchange(&pool.current, (uintptr_t)job);
    atomic_fetch_add(&pool.posts, 1);
    atomic_fetch_add(&pool.generation, 1);
    if (ahead != POOL_AHEAD) {
        wake_helpers(ahead ? 1 : threads - 1);
    }
    pool_reference_drop(previous); /* a job another thread posted: its helpers keep their references */
    return (PoolJob *)job;
}

/* A job whose every task has run: out of the pool (unless a newer one replaced it: its poster then
 * dropped the pool's reference to this one), and the caller's reference dropped. */
static void
job_finish(Job *job)
{
    uintptr_t word = atomic_load(&pool.current);
    while ((word & ~TAG_MASK) == (uintptr_t)job) {
        if (atomic_compare_exchange_weak(&pool.current, &word, 0)) {
            pool_reference_drop(word);
            break;
        }
    }
    job_release(job, 1);
}

void
pool_join(PoolJob *posted, Py_ssize_t tasks, pool_task task, void *context)
{
    Job *job = (Job *)posted;
    if (job == NULL) {
        for (Py_ssize_t number = 0; number < tasks; number++) {
            task(context, number);
        }
        return;
    }
    job_work(job);
    /* The helpers are finishing their last tasks (a few us) unless one was preempted: wait for them
     * awake. Sleeping on the condition variable here and being woken cost ~15% of a sampled batch. */
    if (!spin_until(job_done, job, DONE_SPIN_NANOSECONDS)) {
        atomic_store(&job->caller_sleeps, 1);
        pthread_mutex_lock(&job->lock);
        while (atomic_load(&job->tasks_done) < job->tasks) {
            pthread_cond_wait(&job->all_done, &job->lock);
        }
        pthread_mutex_unlock(&job->lock);
    }
    job_finish(job);
}

int
pool_started(PoolJob *posted)
{
    return posted != NULL && atomic_load(&((Job *)posted)->next_task) > 0;
}

int
pool_try_join(PoolJob *posted, Py_ssize_t tasks, pool_task task, void *context, long spin_nanoseconds, int claim)
{
    Job *job = (Job *)posted;
    if (job == NULL && claim) {
        pool_join(NULL, tasks, task, context);
        return 1;
    }
    if (job == NULL) {
        return 0;
    }
    if (claim) {
        job_work(job); /* what no helper took yet */
    }
    if (!spin_until(job_done, job, spin_nanoseconds)) {
        return 0;
    }
    job_finish(job);
    return 1;
}

void
pool_run(Py_ssize_t tasks, int threads, pool_task task, void *context)
{
    pool_join(pool_post(tasks, threads, task, context, 0), tasks, task, context);
}
