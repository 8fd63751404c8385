/*
 * Private to server/: the fair queue of compile jobs of one priority.
 *
 * Jobs are queued per client (a connection) and clients per user (the
 * peer's uid).  The next job is the oldest job of the client whose turn it
 * is, within the user whose turn it is: start-time fair queueing at both
 * levels.  Every user and every client carries a virtual time, the number
 * of its jobs taken so far; the queue's clock is the virtual time of the
 * last job taken.  A user or client that becomes active starts at the
 * clock, not at zero and not behind those already waiting, so a client
 * with one job is served next even when another has queued hundreds, and
 * a user cannot win turns by opening more connections.  Ties go to the
 * one that has waited longest.  A client (and its user) is remembered
 * while it has items queued or running, so one whose job is running
 * keeps the virtual time it has earned.
 */
#ifndef KS_SERVER_SCHED_H
#define KS_SERVER_SCHED_H

#include <stdint.h>

typedef struct ks_sched_client ks_sched_client_t;
typedef struct ks_sched_user ks_sched_user_t;

/* Embedded in what is queued. */
typedef struct ks_sched_item {
	struct ks_sched_item *prev, *next;
	ks_sched_client_t *client;       /* while queued or running */
	int running;                     /* popped, not finished */
} ks_sched_item_t;

struct ks_sched_client {
	uint64_t id;
	uint64_t vtime;
	int running;                     /* items popped, not finished */
	ks_sched_user_t *user;
	ks_sched_item_t *head, *tail;
	ks_sched_client_t *prev, *next;  /* user->clients, in arrival order */
};

struct ks_sched_user {
	uint32_t uid;
	uint64_t vtime;                  /* at the top level */
	uint64_t clock;                  /* virtual time of its clients */
	ks_sched_client_t *clients;
	ks_sched_user_t *prev, *next;    /* sched->users, in arrival order */
};

typedef struct {
	ks_sched_user_t *users;          /* active users only */
	uint64_t vtime;                  /* clock of the users */
	unsigned count;                  /* items queued */
} ks_sched_t;

void ks_sched_init(ks_sched_t *s);
/* Frees the bookkeeping; the items themselves belong to the caller. */
void ks_sched_close(ks_sched_t *s);
/* Queues IT for client CLIENT of user UID.  KS_E_NOMEM. */
int ks_sched_push(ks_sched_t *s, ks_sched_item_t *it, uint32_t uid,
    uint64_t client);
/* Takes the next item (see above), or NULL when empty; it is running
 * until ks_sched_finish. */
ks_sched_item_t *ks_sched_pop(ks_sched_t *s);
/* Takes the next item, in the same order, among the clients that have
 * nothing running (a lone client: the pool's reserve, pool.h), or NULL
 * when none has one queued. */
ks_sched_item_t *ks_sched_pop_lone(ks_sched_t *s);
/* A popped item has ended. */
void ks_sched_finish(ks_sched_t *s, ks_sched_item_t *it);
/* Takes a queued IT out of the queue. */
void ks_sched_remove(ks_sched_t *s, ks_sched_item_t *it);

#endif
