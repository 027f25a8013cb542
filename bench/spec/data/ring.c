/* ring.c — a fixed-capacity ring buffer of ints, with a small self-test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ring {
    int *buf;
    int cap;
    int head; /* next slot to read */
    int len;  /* items held */
};

/* Creates a ring of cap slots; NULL when out of memory. */
struct ring *ring_new(int cap)
{
    struct ring *r = malloc(sizeof *r);
    if (!r)
        return NULL;
    r->buf = calloc((size_t)cap, sizeof *r->buf);
    if (!r->buf) {
        free(r);
        return NULL;
    }
    r->cap = cap;
    r->head = 0;
    r->len = 0;
    return r;
}

/* Frees the ring and its slots; NULL is a no-op. */
void ring_free(struct ring *r)
{
    if (!r)
        return;
    free(r->buf);
    free(r);
}

/* 1 when the ring holds nothing. */
int ring_empty(const struct ring *r)
{
    return r->len == 0;
}

/* 1 when every slot is taken. */
int ring_full(const struct ring *r)
{
    return r->len == r->cap;
}

/* Appends v at the tail. Returns 0, or -1 when the ring is full. */
int ring_push(struct ring *r, int v)
{
    if (ring_full(r))
        return -1;
    int tail = (r->head + r->len) % r->cap;
    r->buf[tail] = v;
    r->len++;
    return 0;
}

/* Removes the head into *v. Returns 0, or 0 with *v untouched when the ring is empty. */
int ring_pop(struct ring *r, int *v)
{
    if (ring_empty(r))
        return 0;
    *v = r->buf[r->head];
    r->head = (r->head + 1) % r->cap;
    r->len--;
    return 1;
}

/* The item i places after the head (0 = the head) into *v. Returns 0, or -1 when i is
 * outside the ring. */
int ring_peek(const struct ring *r, int i, int *v)
{
    if (i < 0 || i >= r->len)
        return -1;
    *v = r->buf[(r->head + i) % r->cap];
    return 0;
}

/* Drops every item. */
void ring_clear(struct ring *r)
{
    r->head = 0;
    r->len = 0;
}

/* Sum of the items held. */
long ring_sum(const struct ring *r)
{
    long s = 0;
    for (int i = 0; i < r->len; i++)
        s += r->buf[(r->head + i) % r->cap];
    return s;
}

/* Largest item into *v. Returns 0, or -1 when the ring is empty. */
int ring_max(const struct ring *r, int *v)
{
    if (ring_empty(r))
        return -1;
    int m = r->buf[r->head];
    for (int i = 1; i < r->len; i++) {
        int x = r->buf[(r->head + i) % r->cap];
        if (x > m)
            m = x;
    }
    *v = m;
    return 0;
}

/* Prints the items from head to tail on one line. */
void ring_print(const struct ring *r, FILE *f)
{
    fputc('[', f);
    for (int i = 0; i < r->len; i++)
        fprintf(f, i ? ", %d" : "%d", r->buf[(r->head + i) % r->cap]);
    fputs("]\n", f);
}

int main(void)
{
    struct ring *r = ring_new(4);
    if (!r) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (int i = 1; i <= 5; i++)
        if (ring_push(r, i * 10))
            printf("push %d: full\n", i * 10);
    ring_print(r, stdout);
    int v = 0;
    while (ring_pop(r, &v))
        printf("pop %d\n", v);
    ring_push(r, 7);
    ring_push(r, 3);
    ring_push(r, 9);
    if (ring_max(r, &v) == 0)
        printf("max %d, sum %ld\n", v, ring_sum(r));
    if (ring_peek(r, 1, &v) == 0)
        printf("second %d\n", v);
    ring_clear(r);
    printf("empty after clear: %d\n", ring_empty(r));
    ring_free(r);
    return 0;
}
