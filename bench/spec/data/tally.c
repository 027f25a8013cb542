/* tally.c — counts words with an open-addressing hash table, with a small self-test. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct slot {
    char *word; /* NULL: the slot is empty */
    long count;
};

struct tally {
    struct slot *slots;
    size_t cap;  /* a power of two */
    size_t used; /* slots holding a word */
};

/* FNV-1a over the bytes of s. */
static size_t hash_word(const char *s)
{
    size_t h = 2166136261u;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 16777619u;
    }
    return h;
}

/* Creates an empty table with room for cap words before it grows; NULL when out of memory. */
struct tally *tally_new(size_t cap)
{
    struct tally *t = malloc(sizeof *t);
    if (!t)
        return NULL;
    t->cap = 16;
    while (t->cap < cap * 2)
        t->cap *= 2;
    t->slots = calloc(t->cap, sizeof *t->slots);
    if (!t->slots) {
        free(t);
        return NULL;
    }
    t->used = 0;
    return t;
}

/* Frees the table and every word it holds; NULL is a no-op. */
void tally_free(struct tally *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->cap; i++)
        free(t->slots[i].word);
    free(t->slots);
    free(t);
}

/* The slot that holds word, or the empty slot where it would go. */
static struct slot *tally_find(struct tally *t, const char *word)
{
    size_t i = hash_word(word) & (t->cap - 1);
    while (t->slots[i].word && strcmp(t->slots[i].word, word) != 0)
        i = (i + 1) & (t->cap - 1);
    return &t->slots[i];
}

/* Doubles the table; 0 on success, -1 when out of memory (the table is unchanged). */
static int tally_grow(struct tally *t)
{
    struct tally bigger = {calloc(t->cap * 2, sizeof *t->slots), t->cap * 2, t->used};
    if (!bigger.slots)
        return -1;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].word)
            *tally_find(&bigger, t->slots[i].word) = t->slots[i];
    free(t->slots);
    *t = bigger;
    return 0;
}

/* Adds n to word's count (a copy of word is kept); 0 on success, -1 when out of memory. */
int tally_add(struct tally *t, const char *word, long n)
{
    if ((t->used + 1) * 4 > t->cap * 3 && tally_grow(t) != 0)
        return -1;
    struct slot *s = tally_find(t, word);
    if (!s->word) {
        s->word = strdup(word);
        if (!s->word)
            return -1;
        t->used++;
    }
    s->count += n;
    return 0;
}

/* The count of word (0 when it was never added). */
long tally_get(struct tally *t, const char *word)
{
    struct slot *s = tally_find(t, word);
    return s->word ? s->count : 0;
}

/* Adds every word of text (runs of letters, lowercased); 0 on success, -1 on error. */
int tally_text(struct tally *t, const char *text)
{
    char word[64];
    size_t n = 0;
    for (const char *p = text;; p++) {
        if (isalpha((unsigned char)*p)) {
            if (n + 1 < sizeof word)
                word[n++] = (char)tolower((unsigned char)*p);
            continue;
        }
        if (n > 0) {
            word[n] = '\0';
            if (tally_add(t, word, 1) != 0)
                return -1;
            n = 0;
        }
        if (!*p)
            return 0;
    }
}

/* Prints every word whose count is at least min, in table order. */
void tally_print(const struct tally *t, long min)
{
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].word && t->slots[i].count >= min)
            printf("%-12s %ld\n", t->slots[i].word, t->slots[i].count);
}

int main(void)
{
    struct tally *t = tally_new(4);
    if (!t)
        return 1;
    const char *text = "The cat sat on the mat. The mat was red, and the cat was not.";
    if (tally_text(t, text) != 0) {
        tally_free(t);
        return 1;
    }
    int ok = tally_get(t, "the") == 4 && tally_get(t, "cat") == 2 &&
             tally_get(t, "mat") == 2 && tally_get(t, "dog") == 0;
    tally_print(t, 2);
    printf("%s (%zu words in %zu slots)\n", ok ? "ok" : "FAILED", t->used, t->cap);
    tally_free(t);
    return ok ? 0 : 1;
}
