/* Reading bytes in pieces (pieces.h). */
#include "base/pieces.h"

#include <string.h>

size_t pieces_find(const pieces_t *p, size_t at)
{
    size_t lo = 0, hi = p->n; /* the last piece starting at or before `at` */

    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->v[mid].at <= at)
            lo = mid;
        else
            hi = mid;
    }
    /* empty pieces start where the next one does: step past them */
    while (lo + 1 < p->n && at >= p->v[lo].at + p->v[lo].len)
        lo++;
    return lo;
}

bool pieces_span(const pieces_t *p, size_t at, size_t len, const uint8_t **ret)
{
    const pieces_part_t *pc;

    static const _Alignas(8) uint8_t none[8];

    if (len == 0) { /* nothing to read, but a pointer aligned for any element */
        *ret = none;
        return true;
    }
    pc = &p->v[pieces_find(p, at)];
    if (at + len > pc->at + pc->len)
        return false;
    *ret = pc->data + (at - pc->at);
    return true;
}

void pieces_read(const pieces_t *p, size_t at, void *dst, size_t len)
{
    uint8_t *d = dst;
    size_t k;

    if (len == 0)
        return;
    for (k = pieces_find(p, at); len > 0; k++) {
        const pieces_part_t *pc = &p->v[k];
        size_t off = at - pc->at, take = pc->len - off < len ? pc->len - off : len;
        memcpy(d, pc->data + off, take);
        d += take;
        at += take;
        len -= take;
    }
}

void pieces_walk_init(pieces_walk_t *w, const pieces_t *p, size_t at, size_t elem, size_t count)
{
    w->p = p;
    w->pos = at;
    w->end = at + elem * count;
    w->elem = elem;
    w->k = count > 0 ? pieces_find(p, at) : 0;
}

bool pieces_walk_next(pieces_walk_t *w, const void **ret_data, size_t *ret_count)
{
    const pieces_part_t *pc;
    size_t off, whole;

    if (w->pos >= w->end)
        return false;
    while (w->pos >= w->p->v[w->k].at + w->p->v[w->k].len)
        w->k++;
    pc = &w->p->v[w->k];
    off = w->pos - pc->at;
    whole = (pc->len - off) / w->elem;
    if (whole > (w->end - w->pos) / w->elem)
        whole = (w->end - w->pos) / w->elem;
    if (whole > 0) {
        *ret_data = pc->data + off;
        *ret_count = whole;
        w->pos += whole * w->elem;
        return true;
    }
    pieces_read(w->p, w->pos, w->one, w->elem); /* cut by the piece's end */
    w->pos += w->elem;
    *ret_data = w->one;
    *ret_count = 1;
    return true;
}
