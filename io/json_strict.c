/* SPDX-License-Identifier: MIT */
/* json_strict.c: the strict JSON reader (smattn_io_parse_json): an RFC 8259 check of JSON
 * text before json-c builds it, for what json-c 0.16 lets through even with
 * JSON_TOKENER_STRICT: single-quoted strings, duplicate keys
 * (json-c keeps the last), integers beyond int64 (json-c saturates them to 2^64 - 1 or
 * INT64_MAX), a top level that is not an object, and \u0000 in a string (json-c keeps it,
 * but a C string ends there: RFC 8259 allows it, we refuse it). It checks the grammar only
 * (no tree); UTF-8 is left to json-c's JSON_TOKENER_VALIDATE_UTF8. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/util.h"

/* Deeper than any case.json or golden vector; bounds the recursion. */
#define JSON_MAX_DEPTH 64

typedef struct jkey {
    char *s; /* the key decoded to UTF-8 (escapes resolved), so "\u0061" equals "a" */
    size_t n;
} jkey;

typedef struct jcur {
    const char *t;
    size_t len, pos;
    char *err;
    size_t errlen;
} jcur;

static void skip_ws(jcur *c)
{
    while (c->pos < c->len) {
        char ch = c->t[c->pos];
        if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n')
            return;
        c->pos++;
    }
}

static int fail_at(jcur *c, const char *what)
{
    if (c->pos >= c->len)
        smattn_io_err(c->err, c->errlen, "malformed JSON: unexpected end of text (%s)", what);
    else if (c->t[c->pos] == '\'')
        smattn_io_err(c->err, c->errlen,
                      "malformed JSON at byte %zu: single quotes are not JSON (use \")", c->pos);
    else
        smattn_io_err(c->err, c->errlen, "malformed JSON at byte %zu: %s", c->pos, what);
    return -1;
}

static int hex4(const char *p, unsigned *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = p[k];
        unsigned d = ch >= '0' && ch <= '9'   ? (unsigned)(ch - '0')
                     : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
                     : ch >= 'A' && ch <= 'F' ? (unsigned)(ch - 'A' + 10)
                                              : 16u;
        if (d == 16)
            return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at c->pos (on its opening quote). With key != NULL, its decoded bytes go to a
 * malloc'd key->s (never longer than the literal). */
static int string(jcur *c, jkey *key)
{
    size_t start = ++c->pos, n = 0;
    char *o = NULL;
    if (key) {
        /* escapes only shorten a key, so the literal's own length bounds it: find the
         * closing quote first (an unterminated key is reported by the loop below); sizing
         * by the rest of the text made memory grow with the square of the file */
        size_t end = start;
        while (end < c->len && c->t[end] != '"')
            end += c->t[end] == '\\' ? 2 : 1;
        o = malloc((end < c->len ? end : c->len) - start + 1);
        if (!o) {
            smattn_io_err(c->err, c->errlen, "out of memory");
            return -1;
        }
    }
    while (c->pos < c->len) {
        unsigned char ch = (unsigned char)c->t[c->pos];
        if (ch == '"') {
            c->pos++;
            if (key) {
                key->s = o;
                key->n = n;
            }
            return 0;
        }
        if (ch < 0x20) {
            free(o);
            return fail_at(c, "a control character in a string (escape it)");
        }
        if (ch != '\\') {
            if (o)
                o[n++] = (char)ch;
            c->pos++;
            continue;
        }
        if (c->pos + 1 >= c->len)
            break;
        char e = c->t[c->pos + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (simple && e) {
            static const char out[] = "\"\\/\b\f\n\r\t";
            if (o)
                o[n++] = out[simple - "\"\\/bfnrt"];
            c->pos += 2;
            continue;
        }
        unsigned cp;
        if (e != 'u' || c->pos + 6 > c->len || hex4(c->t + c->pos + 2, &cp)) {
            c->pos++;
            free(o);
            return fail_at(c, "a bad escape in a string");
        }
        if (cp == 0) {
            /* json-c keeps the string, but every C string ends there: a key "a\u0000x"
             * would be read as "a" (passing the duplicate check against "a\u0000y") and a
             * value as its prefix */
            free(o);
            return fail_at(c, "\\u0000 in a string (a NUL is not allowed in keys or values)");
        }
        c->pos += 6;
        unsigned lo;
        if (cp >= 0xd800 && cp < 0xdc00 && c->pos + 6 <= c->len && c->t[c->pos] == '\\' &&
            c->t[c->pos + 1] == 'u' && hex4(c->t + c->pos + 2, &lo) == 0 && lo >= 0xdc00 &&
            lo < 0xe000) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            c->pos += 6;
        }
        if (o)
            n += put_utf8(o + n, cp); /* 6 or 12 literal bytes give at most 4 */
    }
    free(o);
    return fail_at(c, "an unterminated string");
}

/* A number; an integer (no fraction, no exponent) must fit in int64. */
static int number(jcur *c)
{
    size_t start = c->pos;
    const char *t = c->t;
    int neg = 0;
    if (c->pos < c->len && t[c->pos] == '-')
        c->pos++, neg = 1;
    if (c->pos >= c->len || t[c->pos] < '0' || t[c->pos] > '9')
        return fail_at(c, "a malformed number");
    size_t ds = c->pos;
    if (t[c->pos] == '0') {
        c->pos++;
        if (c->pos < c->len && t[c->pos] >= '0' && t[c->pos] <= '9')
            return fail_at(c, "a number with a leading zero");
    } else
        while (c->pos < c->len && t[c->pos] >= '0' && t[c->pos] <= '9')
            c->pos++;
    size_t de = c->pos;
    int integer = 1;
    if (c->pos < c->len && t[c->pos] == '.') {
        c->pos++;
        integer = 0;
        if (c->pos >= c->len || t[c->pos] < '0' || t[c->pos] > '9')
            return fail_at(c, "a malformed number (digits must follow '.')");
        while (c->pos < c->len && t[c->pos] >= '0' && t[c->pos] <= '9')
            c->pos++;
    }
    if (c->pos < c->len && (t[c->pos] == 'e' || t[c->pos] == 'E')) {
        c->pos++;
        integer = 0;
        if (c->pos < c->len && (t[c->pos] == '+' || t[c->pos] == '-'))
            c->pos++;
        if (c->pos >= c->len || t[c->pos] < '0' || t[c->pos] > '9')
            return fail_at(c, "a malformed number (digits must follow the exponent)");
        while (c->pos < c->len && t[c->pos] >= '0' && t[c->pos] <= '9')
            c->pos++;
    }
    if (!integer)
        return 0;
    /* |value| <= 2^63 - 1, or 2^63 when negative, compared digit by digit */
    static const char lim[] = "9223372036854775807";
    size_t nd = de - ds;
    int cmp = nd < 19 ? -1 : nd > 19 ? 1 : memcmp(t + ds, lim, 19);
    if (cmp > 0 && neg && nd == 19 && memcmp(t + ds, "9223372036854775808", 19) == 0)
        cmp = 0;
    if (cmp <= 0)
        return 0;
    smattn_io_err(c->err, c->errlen,
                  "integer at byte %zu is out of range (JSON integers must fit in int64): %.*s%s",
                  start, (int)(de - start > 24 ? 24 : de - start), t + start,
                  de - start > 24 ? "..." : "");
    return -1;
}

static int key_cmp(const void *a, const void *b)
{
    const jkey *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return memcmp(x->s, y->s, x->n);
}

/* Sort the keys of one object and report the first repeated one. */
static int no_duplicates(jcur *c, jkey *keys, size_t n)
{
    qsort(keys, n, sizeof *keys, key_cmp);
    for (size_t k = 1; k < n; k++)
        if (key_cmp(&keys[k - 1], &keys[k]) == 0) {
            char shown[65]; /* printable ASCII only: the message stays one line */
            size_t m = 0;
            for (size_t j = 0; j < keys[k].n && m < sizeof shown - 1; j++, m++) {
                unsigned char ch = (unsigned char)keys[k].s[j];
                shown[m] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
            }
            shown[m] = 0;
            smattn_io_err(c->err, c->errlen, "duplicate key \"%s\" (each key may appear once)",
                          shown);
            return -1;
        }
    return 0;
}

static int value(jcur *c, int depth);

static int object(jcur *c, int depth)
{
    c->pos++; /* '{' */
    jkey *keys = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    skip_ws(c);
    if (c->pos < c->len && c->t[c->pos] == '}') {
        c->pos++;
        return 0;
    }
    for (;;) {
        skip_ws(c);
        if (c->pos >= c->len || c->t[c->pos] != '"') {
            fail_at(c, "expected a key in double quotes");
            break;
        }
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 8;
            jkey *nk = realloc(keys, ncap * sizeof *nk);
            if (!nk) {
                smattn_io_err(c->err, c->errlen, "out of memory");
                break;
            }
            keys = nk, cap = ncap;
        }
        if (string(c, &keys[n]))
            break;
        n++;
        skip_ws(c);
        if (c->pos >= c->len || c->t[c->pos] != ':') {
            fail_at(c, "expected ':' after a key");
            break;
        }
        c->pos++;
        if (value(c, depth + 1))
            break;
        skip_ws(c);
        if (c->pos < c->len && c->t[c->pos] == ',') {
            c->pos++;
            continue;
        }
        if (c->pos < c->len && c->t[c->pos] == '}') {
            c->pos++;
            rc = no_duplicates(c, keys, n);
        } else
            fail_at(c, "expected ',' or '}' in an object");
        break;
    }
    for (size_t k = 0; k < n; k++)
        free(keys[k].s);
    free(keys);
    return rc;
}

static int array(jcur *c, int depth)
{
    c->pos++; /* '[' */
    skip_ws(c);
    if (c->pos < c->len && c->t[c->pos] == ']') {
        c->pos++;
        return 0;
    }
    for (;;) {
        if (value(c, depth + 1))
            return -1;
        skip_ws(c);
        if (c->pos < c->len && c->t[c->pos] == ',') {
            c->pos++;
            skip_ws(c);
            if (c->pos < c->len && c->t[c->pos] == ']')
                return fail_at(c, "a trailing comma before ']'");
            continue;
        }
        if (c->pos < c->len && c->t[c->pos] == ']') {
            c->pos++;
            return 0;
        }
        return fail_at(c, "expected ',' or ']' in an array");
    }
}

static int literal(jcur *c, const char *w)
{
    size_t n = strlen(w);
    if (c->len - c->pos < n || memcmp(c->t + c->pos, w, n) != 0)
        return fail_at(c, "expected a value");
    c->pos += n;
    return 0;
}

static int value(jcur *c, int depth)
{
    if (depth > JSON_MAX_DEPTH)
        return fail_at(c, "nested too deeply");
    skip_ws(c);
    if (c->pos >= c->len)
        return fail_at(c, "expected a value");
    switch (c->t[c->pos]) {
    case '{': return object(c, depth);
    case '[': return array(c, depth);
    case '"': return string(c, NULL);
    case 't': return literal(c, "true");
    case 'f': return literal(c, "false");
    case 'n': return literal(c, "null");
    case '-': return number(c);
    default:
        if (c->t[c->pos] >= '0' && c->t[c->pos] <= '9')
            return number(c);
        return fail_at(c, c->t[c->pos] == ']' || c->t[c->pos] == '}'
                              ? "expected a value, not a closing bracket"
                              : "expected a value");
    }
}

int smattn_io_json_check(const char *text, size_t len, char *err, size_t errlen)
{
    jcur c = {text, len, 0, err, errlen};
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) {
        smattn_io_err(err, errlen, "malformed JSON: a byte-order mark is not allowed (RFC 8259)");
        return -1;
    }
    skip_ws(&c);
    if (c.pos >= len) {
        smattn_io_err(err, errlen, "malformed JSON: empty");
        return -1;
    }
    if (text[c.pos] != '{') {
        /* still say what is wrong with text that is not JSON at all */
        if (value(&c, 0))
            return -1;
        smattn_io_err(err, errlen, "the top level must be a JSON object");
        return -1;
    }
    if (value(&c, 0))
        return -1;
    skip_ws(&c);
    if (c.pos < len) {
        smattn_io_err(err, errlen, "malformed JSON: trailing text at byte %zu", c.pos);
        return -1;
    }
    return 0;
}

json_object *smattn_io_parse_json(const char *text, size_t len, char *err, size_t errlen)
{
    if (len > INT_MAX / 2) {
        smattn_io_err(err, errlen, "JSON text too large (%zu bytes)", len);
        return NULL;
    }
    if (len && memchr(text, '\0', len)) {
        smattn_io_err(err, errlen, "malformed JSON: contains a NUL byte");
        return NULL;
    }
    if (smattn_io_json_check(text, len, err, errlen))
        return NULL;
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        smattn_io_err(err, errlen, "out of memory");
        return NULL;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *obj = json_tokener_parse_ex(tok, len ? text : "", (int)len);
    enum json_tokener_error e = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    if (!obj && (e == json_tokener_continue || (e == json_tokener_success && end < len)))
        smattn_io_err(err, errlen, "malformed JSON: unexpected end of text");
    else if (!obj && e != json_tokener_success)
        smattn_io_err(err, errlen, "malformed JSON at byte %zu: %s", end,
                      json_tokener_error_desc(e));
    else if (!obj)
        smattn_io_err(err, errlen, "malformed JSON: empty, or null at the top level");
    else {
        while (end < len && strchr(" \t\r\n", text[end]))
            end++;
        if (end < len) {
            smattn_io_err(err, errlen, "malformed JSON: trailing text at byte %zu", end);
            json_object_put(obj);
            obj = NULL;
        }
    }
    json_tokener_free(tok);
    return obj;
}
