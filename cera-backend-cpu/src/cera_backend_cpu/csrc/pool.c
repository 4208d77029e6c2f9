/* A persistent thread pool: n-1 worker threads plus the calling thread.
 *
 * Decoding one token of a small model issues a few hundred small jobs, so the cost that
 * matters is handing a job to the workers, not running it. A job is published by bumping
 * a generation counter; workers that finished their last job recently are still spinning
 * on that counter and start within a fraction of a microsecond. A worker that has seen no
 * job for spin_us microseconds goes to sleep on a condition variable, so an idle pool
 * costs nothing (the machine is shared); the next job then pays one futex wake-up.
 *
 * Every task takes its work from a shared counter, so a job is done when its work is,
 * whoever did it. That lets the caller stop waiting for workers that did not turn up:
 * a job offers nth-1 seats (a counter tagged with the job's generation); a worker takes
 * one before it starts, and the caller, once it has run out of work itself, closes the
 * remaining seats and waits only for the workers that sat down. On a machine whose cores
 * are busy with other processes, a worker that the OS has not scheduled (or that sleeps)
 * then costs nothing, instead of stalling every op until it gets a time slice.
 *
 * Sleeping is race-free by the usual handshake: a worker increments n_sleeping under
 * the mutex and re-checks the generation before waiting; the runner bumps the
 * generation and then, if it sees a sleeper, broadcasts under the same mutex. Both
 * sides use sequentially consistent atomics, so one of them always sees the other.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

struct cera_pool {
    int n_threads;
    pthread_t *threads;
    atomic_uint generation;
    _Atomic uint64_t seats; /* (generation << 32) | seats still free in that job */
    atomic_int n_done;      /* workers of the current job that finished it */
    atomic_int n_sleeping;
    atomic_int stop;
    atomic_int spin_us;
    cera_task_fn fn;
    void *arg;
    int nth; /* threads taking part in the current job */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned fork_epoch; /* a fork()ed child has none of the workers: it runs jobs alone */
};

/* Bumped in every child right after fork() (pthread_atfork), so a pool can tell that it
 * was created in a parent process, without a system call per job. */
static atomic_uint fork_epoch;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void in_child(void) { atomic_fetch_add(&fork_epoch, 1); }
static void register_atfork(void) { pthread_atfork(NULL, NULL, in_child); }


static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *worker_main(void *varg) {
    cera_pool *pool = varg; /* a worker's index in a job is the seat it takes */
    /* Not a load of the counter: a job may already have been published before this
     * thread got to run, and it must not be skipped. No job exists before the pool. */
    unsigned seen = 0;
    for (;;) {
        /* spin for a while, then sleep */
        const int64_t deadline = now_ns() + (int64_t)atomic_load_explicit(&pool->spin_us, memory_order_relaxed) * 1000;
        int spins = 0;
        while (atomic_load_explicit(&pool->generation, memory_order_acquire) == seen && !atomic_load(&pool->stop)) {
            cpu_relax();
            if ((++spins & 255) == 0 && now_ns() > deadline) {
                pthread_mutex_lock(&pool->mu);
                atomic_fetch_add(&pool->n_sleeping, 1);
                while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                    pthread_cond_wait(&pool->cv, &pool->mu);
                atomic_fetch_sub(&pool->n_sleeping, 1);
                pthread_mutex_unlock(&pool->mu);
                break;
            }
        }
        if (atomic_load(&pool->stop)) break;
        seen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        /* take a seat in job `seen`, if it is still open; fn, arg and nth were written
         * before the seats were offered and stay until every seated worker is done */
        uint64_t t = atomic_load_explicit(&pool->seats, memory_order_acquire);
        while ((unsigned)(t >> 32) == seen && (uint32_t)t > 0) {
            if (atomic_compare_exchange_weak_explicit(&pool->seats, &t, t - 1, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                pool->fn(pool->arg, pool->nth - (int)(uint32_t)t, pool->nth);
                atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_release);
                break;
            }
        }
    }
    return NULL;
}

cera_pool *cera_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    cera_pool *pool = calloc(1, sizeof(cera_pool));
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    pthread_once(&atfork_once, register_atfork);
    pool->fork_epoch = atomic_load(&fork_epoch);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->seats, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->n_sleeping, 0);
    atomic_init(&pool->stop, 0);
    atomic_init(&pool->spin_us, 200);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    if (n_threads > 1) {
        pool->threads = calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!pool->threads) {
            free(pool);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            if (pthread_create(&pool->threads[i - 1], NULL, worker_main, pool) != 0) {
                pool->n_threads = i; /* run with the threads we got */
                break;
            }
        }
    }
    return pool;
}

void cera_pool_free(cera_pool *pool) {
    if (!pool) return;
    if (atomic_load(&fork_epoch) != pool->fork_epoch) { /* the workers belong to the parent process */
        free(pool->threads);
        free(pool);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->threads[i - 1], NULL);
    free(pool->threads);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool);
}

int cera_pool_threads(const cera_pool *pool) { return pool->n_threads; }

void cera_pool_set_spin_us(cera_pool *pool, int spin_us) { atomic_store(&pool->spin_us, spin_us < 0 ? 0 : spin_us); }

void cera_pool_run(cera_pool *pool, cera_task_fn fn, void *arg, int nth) {
    if (nth > pool->n_threads) nth = pool->n_threads;
    if (nth <= 1 || pool->n_threads <= 1 || atomic_load_explicit(&fork_epoch, memory_order_relaxed) != pool->fork_epoch) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->nth = nth;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    const unsigned gen = atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&pool->seats, ((uint64_t)gen << 32) | (uint32_t)(nth - 1), memory_order_release);
    atomic_store(&pool->generation, gen); /* seq_cst: publishes the job */
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(arg, 0, nth);
    /* the work is done or taken: close the seats, wait for the workers who sat down */
    const uint64_t left = atomic_exchange_explicit(&pool->seats, (uint64_t)gen << 32, memory_order_acq_rel);
    const int seated = nth - 1 - (int)(uint32_t)left;
    int spins = 0;
    while (atomic_load_explicit(&pool->n_done, memory_order_acquire) < seated) {
        cpu_relax();
        if (++spins > 4096) sched_yield(); /* a seated worker was preempted: give it the CPU */
    }
}
