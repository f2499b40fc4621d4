/* The helper threads that share a batch's work with the calling thread: started once per process and
 * kept, since starting a thread costs more than its share of a sampled batch (~20 us against ~60 us for
 * 80 Pong frames). Batch decoding uses them; what else runs on them (compression in the fast add)
 * needs only pool_run. How many threads a batch takes is the caller's choice (mmreplay/frames/
 * threads.py: the batch's size and the cores the process may use). */
#ifndef MMREPLAY_WORK_POOL_H
#define MMREPLAY_WORK_POOL_H

#include <Python.h>

/* The most threads one pool_run uses (the caller included). */
#define POOL_MAX_THREADS 64

/* One task of a job: task runs once for each of its numbers, on any thread, in any order. */
typedef void (*pool_task)(void *context, Py_ssize_t number);

/* Runs task(context, t) for every t in [0, tasks) on the calling thread and up to threads - 1 helpers
 * (fewer when there are fewer tasks), and returns once every one has run; context is touched only by
 * tasks, so it may live on the caller's stack. Tasks are claimed one at a time, so keep each small (a
 * few frames): a helper that starts late, or is preempted, then delays little. Without the memory or
 * the threads for helpers the calling thread runs every task. Call with the GIL released; several
 * threads may call at once (helpers join the newest job). */
void pool_run(Py_ssize_t tasks, int threads, pool_task task, void *context);

/* pool_run in two halves, so that the caller can do other work while helpers start on the job:
 * pool_post hands the tasks to up to threads - 1 helpers and returns at once (NULL when there are none
 * to hand them to); pool_join, given the same tasks, task and context, runs what no helper took and
 * returns once every task has run. Every post must be joined, and context must live until then. With
 * `ahead` (the caller works on before it joins: a frame compressed while its add is checked), every
 * task may go to a helper, but only to one already awake: waking one costs the caller a system call
 * and the helper longer to start than such a job takes (helpers not started yet start, awake). */
typedef struct PoolJob PoolJob;
PoolJob *pool_post(Py_ssize_t tasks, int threads, pool_task task, void *context, int ahead);
#define POOL_AHEAD 1         /* `ahead` as above */
#define POOL_AHEAD_WAKING 2  /* every task to a helper, waking one where none is awake (tests) */
void pool_join(PoolJob *job, Py_ssize_t tasks, pool_task task, void *context);

/* pool_join without waiting long on a task a helper is running: runs what no helper took (with claim),
 * then returns 1 once every task has run within spin_nanoseconds (the job joined, as pool_join), or 0
 * while a helper still runs one, preempted, or, without claim, has not taken it yet (the job stays
 * posted: call pool_try_join or pool_join on it again, and keep context alive until one of them has
 * joined it). */
int pool_try_join(PoolJob *job, Py_ssize_t tasks, pool_task task, void *context, long spin_nanoseconds,
                  int claim);

/* Whether any task of a posted job has been taken (by a helper, or by a join). */
int pool_started(PoolJob *job);

/* Whether the calling thread is one of the pool's helpers (a task may run on one or on its caller). */
int pool_on_helper(void);

/* Wakes up to `helpers` sleeping helpers, which then poll for a job for a while (SPIN_NANOSECONDS): a
 * hint from a caller that will post a job shortly (a sampled batch's decode, after its rows are read),
 * so that helpers asleep between batches (a learner's update takes milliseconds) are awake when it
 * comes, instead of waking only then. Costs an atomic load when none sleeps. */
void pool_wake(int helpers);

#endif
